//! The control loops' timings, feature gates and identity, passed to [`super::start`] by the
//! binary (which reads them from its flags and environment) or a test.

use std::time::Duration;

/// Timings of the control loops; upstream's defaults unless said otherwise.
#[derive(Clone, Debug)]
pub struct Settings {
    /// This replica's pod name (the binary reads `POD_NAME`, set from the downward API): the
    /// reporting instance of the agent's Events. `None` outside a pod.
    pub pod_name: Option<String>,
    /// Provisioning waits this long after the last new pending pod before it schedules.
    pub batch_idle: Duration,
    /// ...but never longer than this after the first one.
    pub batch_max: Duration,
    /// Close a batch before the idle window once the controllers behind its pods have created
    /// all of them and the kube-scheduler has judged each (see `provisioning::BurstComplete`).
    pub batch_close_when_complete: bool,
    /// A claim whose instance has not launched by then (its launch keeps failing for a reason
    /// other than capacity) is deleted and its pods planned again (upstream: 5 minutes).
    pub launch_ttl: Duration,
    /// A launched instance that has not registered a Node by then is deleted (upstream: 15
    /// minutes).
    pub registration_ttl: Duration,
    /// How often orphaned instances are looked for.
    pub garbage_collection_interval: Duration,
    /// An instance younger than this is never garbage-collected (its claim may not be written yet).
    pub garbage_collection_grace: Duration,
    /// How often the disruption controller looks for nodes to give back (upstream: 10 s).
    pub disruption_poll: Duration,
    /// How long a consolidation decision waits before it is checked again and carried out
    /// (upstream: 15 s).
    pub disruption_validation: Duration,
    /// How long replacements have to become Initialized before a disruption is rolled back.
    pub disruption_replacement_timeout: Duration,
    /// Upstream's `SpotToSpotConsolidation` feature gate: whether a spot node may be replaced by
    /// a cheaper spot node (off by default, as upstream).
    pub spot_to_spot_consolidation: bool,
    /// Upstream's `NodeRepair` feature gate: whether nodes the cloud's repair policies call
    /// unhealthy are replaced (off by default, as upstream).
    pub node_repair: bool,
    /// Upstream's `StaticCapacity` feature gate: whether static NodePools (`replicas`) are kept
    /// at their count (off by default, as upstream; a static pool then launches nothing).
    pub static_capacity: bool,
    /// How often static NodePools are brought to their count.
    pub static_capacity_poll: Duration,
    /// A loop's pass that has not returned after this long (plus what the pass waits for on
    /// purpose, such as disruption's replacements) is stuck: `/healthz` fails and the kubelet
    /// restarts the agent.
    pub stuck_pass_after: Duration,
    /// Whether another agent may have been creating NodeClaims until a moment before this one
    /// started, so that its last creates may still land (it held the Lease this one took over
    /// without a release). Then provisioning's rounds check the NodeClaim watch against a quorum
    /// list of the API server's claims for a while (`provisioning::round::CONFIRM_WINDOW`);
    /// otherwise only the first round does. On by default: a caller that cannot tell is safe.
    pub predecessor_may_be_writing: bool,
    /// With leader election, the fence this replica's Kubernetes writes go through
    /// (`client::fence`): the cloud's creates and deletes go through it too, so a leader that
    /// was frozen past its lease neither launches nor deletes an instance once it runs again.
    pub write_fence: Option<crate::client::Fence>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            pod_name: None,
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            batch_close_when_complete: true,
            launch_ttl: Duration::from_secs(5 * 60),
            registration_ttl: Duration::from_secs(15 * 60),
            garbage_collection_interval: Duration::from_secs(30),
            garbage_collection_grace: Duration::from_secs(30),
            disruption_poll: Duration::from_secs(10),
            disruption_validation: Duration::from_secs(15),
            disruption_replacement_timeout: Duration::from_secs(10 * 60),
            spot_to_spot_consolidation: false,
            node_repair: false,
            static_capacity: false,
            static_capacity_poll: Duration::from_secs(5),
            stuck_pass_after: Duration::from_secs(5 * 60),
            predecessor_may_be_writing: true,
            write_fence: None,
        }
    }
}
