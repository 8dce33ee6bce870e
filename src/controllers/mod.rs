//! The agent's control loops as library functions the binary wires up and tests can call:
//! provisioning (pending pods → NodeClaims), the NodeClaim lifecycle (launch, registration,
//! initialization, liveness, termination), garbage collection of orphaned instances, and
//! NodePool status.
//!
//! [`start`] returns the running loops so a provider's own loops (`aws`: the interruption
//! queue, EC2NodeClass status) run beside them over the same reflector stores.
//!
//! Every loop reads cluster state from reflector stores and writes through the API server; none
//! keeps state that a restart would lose, so a restarted agent picks up where it left off.

#[cfg(feature = "aws")]
pub mod aws;
pub mod conditions;
pub mod garbage_collection;
#[cfg(feature = "gcp")]
pub mod gcp;
#[cfg(feature = "aws")]
pub mod interruption;
pub mod lifecycle;
#[cfg(any(feature = "aws", feature = "gcp"))]
pub mod nodeclass_status;
pub mod nodepool_status;
pub mod pod_cache;
pub mod pod_events;
pub mod provisioning;

use crate::apis::{NodeClaim, NodePool};
use crate::cloud::CloudProvider;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use pod_cache::CachedPod;
use std::sync::Arc;
use std::time::Duration;

/// The field manager (and event reporter) name the agent writes with.
pub const FIELD_MANAGER: &str = "karpenter-agent";

/// Why a control loop iteration failed. Every variant is retried; none stops the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action} failed")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// A cloud call failed.
    #[error("{action} failed")]
    Cloud {
        action: String,
        #[source]
        source: crate::cloud::CloudError,
    },
    /// An object the loop needs is malformed.
    #[error("{object} is invalid: {reason}")]
    Invalid { object: String, reason: String },
    /// A watch has not caught up with the API server yet.
    #[error("the {0} watch is behind the API server")]
    NotSynced(&'static str),
}

impl Error {
    pub(crate) fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Self::Kube { action, source }
    }

    pub(crate) fn cloud(
        action: impl Into<String>,
    ) -> impl FnOnce(crate::cloud::CloudError) -> Self {
        let action = action.into();
        move |source| Self::Cloud { action, source }
    }

    /// Whether the failure was an optimistic-concurrency conflict (HTTP 409).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube { source: kube::Error::Api(status), .. } if status.code == 409)
    }

    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Kube { .. } => "kube",
            Self::Cloud { source, .. } => source.kind(),
            Self::Invalid { .. } => "invalid",
            Self::NotSynced(_) => "not_synced",
        }
    }
}

/// Whether an API error means the object does not exist.
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Timings of the control loops; upstream's defaults unless said otherwise.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Provisioning waits this long after the last new pending pod before it schedules.
    pub batch_idle: Duration,
    /// ...but never longer than this after the first one.
    pub batch_max: Duration,
    /// Close a batch before the idle window once the controllers behind its pods have created
    /// all of them and the kube-scheduler has judged each (see `provisioning::BurstComplete`).
    pub batch_close_when_complete: bool,
    /// A launched instance that has not registered a Node by then is deleted.
    pub registration_ttl: Duration,
    /// How often orphaned instances are looked for.
    pub garbage_collection_interval: Duration,
    /// An instance younger than this is never garbage-collected (its claim may not be written yet).
    pub garbage_collection_grace: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            batch_idle: Duration::from_secs(1),
            batch_max: Duration::from_secs(10),
            batch_close_when_complete: true,
            registration_ttl: Duration::from_secs(15 * 60),
            garbage_collection_interval: Duration::from_secs(30),
            garbage_collection_grace: Duration::from_secs(30),
        }
    }
}

/// What every loop shares: the API client, the provider, the cluster as the reflectors see it.
pub struct Context<P> {
    pub client: Client,
    pub provider: Arc<P>,
    pub claims: Store<NodeClaim>,
    pub nodes: Store<Node>,
    pub pools: Store<NodePool>,
    pub pods: Store<CachedPod>,
    pub recorder: Recorder,
    pub settings: Settings,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// NodeClaims the lifecycle loop wrote whose new version the watch has not delivered yet.
    pub own_writes: OwnWrites,
}

impl<P: CloudProvider> Context<P> {
    /// A context over the given stores.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        provider: Arc<P>,
        claims: Store<NodeClaim>,
        nodes: Store<Node>,
        pools: Store<NodePool>,
        pods: Store<CachedPod>,
        settings: Settings,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            client,
            provider,
            claims,
            nodes,
            pools,
            pods,
            recorder,
            settings,
            metrics,
            own_writes: OwnWrites::default(),
        }
    }

    /// The Node whose providerID is `provider_id`, if the reflector has seen one.
    pub fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<Node>> {
        self.nodes
            .state()
            .into_iter()
            .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
    }
}

/// The resourceVersion of each NodeClaim as it was read just before this agent wrote to it.
///
/// A Node or Pod event can reconcile a claim again before the watch has delivered the claim's
/// own update, and reconciling that stale copy would repeat the write (under load, several
/// times per claim). While the cache still shows the version read before a write, the claim
/// waits for the watch instead; an entry expires so a write that changed nothing (and so made
/// no new version) cannot stall a claim.
#[derive(Default)]
pub struct OwnWrites(
    std::sync::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
);

/// How long a write may go unobserved before the claim is reconciled from the cache anyway.
const OWN_WRITE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

impl OwnWrites {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (String, std::time::Instant)>>
    {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a write made to `claim` as it was read.
    pub fn wrote(&self, claim: &NodeClaim) {
        if let (Some(name), Some(version)) =
            (&claim.metadata.name, &claim.metadata.resource_version)
        {
            let mut writes = self.lock();
            // Expired entries go here too: a deleted claim is never looked up again.
            writes.retain(|_, (_, at)| at.elapsed() < OWN_WRITE_PATIENCE);
            writes.insert(name.clone(), (version.clone(), std::time::Instant::now()));
        }
    }

    /// Whether `claim` is the copy from before this agent's last write to it.
    pub fn is_stale(&self, claim: &NodeClaim) -> bool {
        let Some(name) = &claim.metadata.name else {
            return false;
        };
        let mut writes = self.lock();
        match writes.get(name) {
            Some((version, at))
                if claim.metadata.resource_version.as_ref() == Some(version)
                    && at.elapsed() < OWN_WRITE_PATIENCE =>
            {
                true
            }
            Some(_) => {
                writes.remove(name);
                false
            }
            None => false,
        }
    }
}

/// The annotation `kubectl apply` keeps a full copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops the image list and volume bookkeeping from a cached Node.
fn trim_node(node: &mut Node) {
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
    }
}

/// Starts every control loop over `client` and `provider` and runs them until one of them
/// stops (the lifecycle controller stops on SIGTERM/SIGINT). Dropping the future stops them all.
pub async fn run<P: CloudProvider + 'static>(
    client: Client,
    provider: Arc<P>,
    settings: Settings,
    metrics: Arc<crate::metrics::Metrics>,
) -> Result<(), Error> {
    start(client, provider, settings, metrics)
        .await
        .wait()
        .await;
    Ok(())
}

/// The running loops: the shared [`Context`] (so a provider's own loops, such as the AWS
/// interruption queue, read the same reflector stores instead of caching the cluster twice)
/// and the tasks. Dropping it stops every loop.
pub struct Running<P> {
    pub ctx: Arc<Context<P>>,
    lifecycle: Option<tokio::task::JoinHandle<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl<P> Running<P> {
    /// Runs `task` beside the controllers, stopped with them.
    pub fn spawn(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(task));
    }

    /// Waits until the lifecycle controller ends (on SIGTERM/SIGINT), then stops the rest.
    pub async fn wait(mut self) {
        if let Some(lifecycle) = self.lifecycle.take() {
            let _ = lifecycle.await;
        }
    }
}

impl<P> Drop for Running<P> {
    fn drop(&mut self) {
        for task in self.lifecycle.iter().chain(&self.tasks) {
            task.abort();
        }
    }
}

/// Starts the reflectors and every control loop, once the reflectors have listed the cluster.
pub async fn start<P: CloudProvider + 'static>(
    client: Client,
    provider: Arc<P>,
    settings: Settings,
    metrics: Arc<crate::metrics::Metrics>,
) -> Running<P> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    use kube::{Api, ResourceExt};

    let (pending, wake) = provisioning::PendingPods::new();
    let recent = Arc::new(provisioning::RecentClaims::default());
    let pod_events = Arc::new(pod_events::PodEvents::default());

    let (claims, claims_writer) = reflector::store::<NodeClaim>();
    let (nodes, nodes_writer) = reflector::store::<Node>();
    let (pools, pools_writer) = reflector::store::<NodePool>();
    let (pods, pods_writer) = reflector::store::<CachedPod>();

    // Each reflector runs as its own task; managed fields are dropped to keep memory down.
    fn spawn_reflector<K>(
        api: Api<K>,
        writer: reflector::store::Writer<K>,
        trim: impl Fn(&mut K) + Send + Sync + 'static,
        on_event: impl Fn(&watcher::Event<K>) + Send + Sync + 'static,
    ) -> tokio::task::JoinHandle<()>
    where
        K: kube::Resource
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    {
        tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .modify(move |object: &mut K| {
                    object.managed_fields_mut().clear();
                    trim(object);
                });
            reflector::reflector(writer, stream)
                .for_each(|event| {
                    match &event {
                        Ok(event) => on_event(event),
                        Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
                    }
                    futures::future::ready(())
                })
                .await;
        })
    }

    let tracker = pending.clone();
    // The lifecycle controller reconciles the claims these watches name (see lifecycle::run).
    let (lifecycle_triggers, lifecycle_queue) = tokio::sync::mpsc::unbounded_channel();
    let reflectors = [
        spawn_reflector(
            Api::<NodeClaim>::all(client.clone()),
            claims_writer,
            |_| {},
            {
                let recent = recent.clone();
                let pending = pending.clone();
                let lifecycle_triggers = lifecycle_triggers.clone();
                move |event| match event {
                    watcher::Event::Apply(claim) | watcher::Event::InitApply(claim) => {
                        recent.seen(claim);
                        let _ = lifecycle_triggers
                            .send(kube::runtime::reflector::ObjectRef::from_obj(claim));
                    }
                    watcher::Event::Delete(claim) => {
                        recent.seen(claim);
                        // Pods planned onto a claim that is gone (its launch failed for capacity or
                        // a node class that is not ready, its node never registered, a user deleted
                        // it) are still pending under the same UID, so no pod event will wake the
                        // batcher. The store already lacks the claim when this runs, so the round
                        // that follows plans them afresh.
                        pending.nudge();
                    }
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
            },
        ),
        spawn_reflector(Api::<Node>::all(client.clone()), nodes_writer, trim_node, {
            let claims = claims.clone();
            move |event| match event {
                watcher::Event::Apply(node) | watcher::Event::Delete(node) => {
                    for claim in lifecycle::claims_of_node(&claims, node) {
                        let _ = lifecycle_triggers.send(claim);
                    }
                }
                watcher::Event::InitApply(_) | watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }),
        spawn_reflector(
            Api::<NodePool>::all(client.clone()),
            pools_writer,
            |_| {},
            |_| {},
        ),
        spawn_reflector(
            Api::<CachedPod>::all(client.clone()),
            pods_writer,
            {
                let shared = pod_cache::SharedSpecs::default();
                move |pod: &mut CachedPod| shared.share(pod)
            },
            {
                let pod_events = pod_events.clone();
                move |event| match event {
                    watcher::Event::Apply(pod) => {
                        tracker.observe(pod);
                        pod_events.observe(pod, false);
                    }
                    watcher::Event::InitApply(pod) => {
                        tracker.observe(pod);
                        pod_events.observe(pod, true);
                    }
                    watcher::Event::Delete(pod) => {
                        tracker.forget(pod);
                        pod_events.forget(pod);
                    }
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
            },
        ),
    ];
    let ready = async {
        claims.wait_until_ready().await?;
        nodes.wait_until_ready().await?;
        pools.wait_until_ready().await?;
        pods.wait_until_ready().await
    };
    if let Err(e) = ready.await {
        tracing::warn!(error = %e, "reflectors stopped before they were ready");
    }
    tracing::info!(
        provider = provider.name(),
        nodeclaims = claims.state().len(),
        nodes = nodes.state().len(),
        nodepools = pools.state().len(),
        pods = pods.state().len(),
        "cluster state loaded"
    );
    // Pods that were already pending before we started still need a round.
    pending.nudge();

    let ctx = Arc::new(Context::new(
        client, provider, claims, nodes, pools, pods, settings, metrics,
    ));
    // The lifecycle controller ends on a shutdown signal; everything else goes with it.
    let lifecycle = tokio::spawn(lifecycle::run(ctx.clone(), lifecycle_queue));
    let mut tasks = Vec::from(reflectors);
    tasks.push(tokio::spawn(provisioning::run(
        ctx.clone(),
        pending,
        recent,
        wake,
    )));
    tasks.push(tokio::spawn(garbage_collection::run(ctx.clone())));
    tasks.push(tokio::spawn(nodepool_status::run(ctx.clone())));
    tasks.push(tokio::spawn(pod_events::run(ctx.clone(), pod_events)));
    Running {
        ctx,
        lifecycle: Some(lifecycle),
        tasks,
    }
}
