//! The agent's control loops, as library functions the binary wires up and tests can call.
//! Every loop reads the cluster from the shared [`crate::state::Stores`] and writes through the
//! API server; none keeps state that a restart would lose, so a restarted agent picks up where
//! it left off. [`start`] (in `start.rs`) starts the watches and then every loop, one line each.
//!
//! | loop | what it does |
//! |---|---|
//! | [`provisioning`] | pending pods → NodeClaims: batch, schedule, create |
//! | [`lifecycle`] | a NodeClaim's life: launch, registration, initialization, liveness, termination |
//! | [`disruption`] | which nodes to give back (consolidation, drift, expiry, repair), within budgets |
//! | [`nodeclaim_disruption`] | the Drifted, Expired and Consolidatable conditions on claims |
//! | [`garbage_collection`] | instances no claim names, claims whose instance is gone |
//! | [`static_capacity`] | static NodePools (`replicas`) kept at their count |
//! | [`nodepool_status`] | each NodePool's resources and conditions |
//! | [`pod_events`], [`pod_metrics`] | what pods hear of provisioning, and `karpenter_pods_state` |
//! | [`aws`], [`interruption`] | EC2: EC2NodeClass status, the interruption queue |
//! | [`gcp`], [`csr_approval`] | GCP: GCENodeClass status, kubelet certificate requests |
//! | [`nodeclass_status`] | a node class's status, as its provider resolves it |
//! | [`leader_election`] | the Lease that lets one replica of several act |
//!
//! Shared by the loops: [`Context`], [`Settings`], [`Health`] (the probes), [`Notices`],
//! [`OwnWrites`], [`RecentLaunches`], [`backoff`], [`conditions`], and [`Error`].

#[cfg(feature = "aws")]
pub mod aws;
pub mod backoff;
mod claim_metrics;
pub mod conditions;
pub(crate) mod csr_approval;
pub mod disruption;
pub(crate) mod garbage_collection;
#[cfg(feature = "gcp")]
pub mod gcp;
pub mod health;
#[cfg(feature = "aws")]
pub mod interruption;
pub mod leader_election;
pub mod lifecycle;
pub mod nodeclaim_disruption;
#[cfg(any(feature = "aws", feature = "gcp"))]
pub mod nodeclass_status;
pub(crate) mod nodepool_status;
pub(crate) mod pod_events;
pub(crate) mod pod_metrics;
pub(crate) mod pool_health;
pub mod provisioning;
pub mod static_capacity;

mod context;
mod error;
mod notices;
mod own_writes;
mod recent_launches;
mod settings;
mod start;
#[cfg(test)]
pub(crate) mod testing;

pub use context::Context;
pub use error::Error;
pub(crate) use error::is_not_found;
pub use health::Health;
pub(crate) use notices::Notices;
pub(crate) use own_writes::OwnWrites;
pub(crate) use recent_launches::RecentLaunches;
pub use settings::Settings;
pub use start::{ProviderLoops, Running, run, start, start_with};

/// The control loops' names, as upstream names its controllers: the `controller` label of
/// the cloud-provider metrics, and what `/healthz` says of a loop that stopped or is stuck.
pub mod names {
    pub const PROVISIONER: &str = "provisioner";
    pub const DISRUPTION: &str = "disruption";
    pub const GARBAGE_COLLECTION: &str = "nodeclaim.garbagecollection";
    pub const LIFECYCLE: &str = "nodeclaim.lifecycle";
    pub const NODECLAIM_DISRUPTION: &str = "nodeclaim.disruption";
    pub const POD_EVENTS: &str = "nodeclaim.podevents";
    pub const POD_METRICS: &str = "metrics.pod";
    pub const STATIC_CAPACITY: &str = "static.provisioning";
    pub const NODEPOOL_STATUS: &str = "nodepool.status";
    pub const NODE_CLASS_STATUS: &str = "nodeclass.status";
    pub const INTERRUPTION: &str = "interruption";
    pub const CSR_APPROVAL: &str = "certificatesigningrequest.approval";
}

/// The field manager (and event reporter) name the agent writes with.
pub const FIELD_MANAGER: &str = "karpenter-agent";
