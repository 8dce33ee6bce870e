//! The agent's control loops as library functions the binary wires up and tests can call:
//! provisioning (pending pods → NodeClaims), the NodeClaim lifecycle (launch, registration,
//! initialization, liveness, termination), disruption (consolidation, drift), garbage collection of orphaned instances, and
//! NodePool status.
//!
//! [`start`] returns the running loops so a provider's own loops (`aws`: the interruption
//! queue, EC2NodeClass status) run beside them over the same reflector stores.
//!
//! Every loop reads cluster state from reflector stores and writes through the API server; none
//! keeps state that a restart would lose, so a restarted agent picks up where it left off.

#[cfg(feature = "aws")]
pub mod aws;
pub mod backoff;
mod claim_metrics;
pub mod conditions;
pub mod csr_approval;
pub mod disruption;
pub mod garbage_collection;
#[cfg(feature = "gcp")]
pub mod gcp;
pub mod health;
#[cfg(feature = "aws")]
pub mod interruption;
pub mod leader_election;
pub mod lenient_watch;
pub mod lifecycle;
pub mod nodeclaim_disruption;
#[cfg(any(feature = "aws", feature = "gcp"))]
pub mod nodeclass_status;
pub mod nodepool_status;
pub mod pod_events;
pub mod pod_metrics;
pub mod provisioning;
pub mod static_capacity;
pub mod volumes;

mod client;
mod context;
mod error;
mod notices;
mod own_writes;
mod recent_launches;
mod settings;

pub use client::{agent_client, identify};
pub use context::Context;
pub use error::Error;
pub(crate) use error::is_not_found;
pub use health::Health;
pub use notices::Notices;
pub use own_writes::OwnWrites;
pub use recent_launches::RecentLaunches;
pub use settings::Settings;

use crate::apis::{NodeClaim, NodePool};
use crate::cloud::{CloudProvider, Metered};
use crate::state::{CachedNode, CachedPod, WatchedPod, pod_cache, trim_claim};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use std::sync::Arc;

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

/// [`start`], reporting readiness and liveness to `health` (the binary's probes).
pub async fn start_with<P: CloudProvider + 'static>(
    client: Client,
    provider: Arc<P>,
    settings: Settings,
    metrics: Arc<crate::metrics::Metrics>,
    health: Arc<Health>,
) -> Running<Metered<P>> {
    start_reporting(client, provider, settings, metrics, health).await
}

/// The running loops: the shared [`Context`] (so a provider's own loops, such as the AWS
/// interruption queue, read the same reflector stores instead of caching the cluster twice)
/// and the tasks. Dropping it stops every loop.
pub struct Running<P> {
    pub ctx: Arc<Context<P>>,
    lifecycle: Option<tokio::task::JoinHandle<()>>,
    tasks: Vec<(&'static str, tokio::task::JoinHandle<()>)>,
}

impl<P> Running<P> {
    /// Runs `task` beside the controllers, stopped with them; `/healthz` fails if it ends.
    pub fn spawn(
        &mut self,
        name: &'static str,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let handle = spawn_watched(&self.ctx.health, name, task);
        self.tasks.push((name, handle));
    }

    /// Stops the loop `name` as if it had died (tests of liveness).
    pub fn abort(&self, name: &str) {
        for (_, task) in self.tasks.iter().filter(|(n, _)| *n == name) {
            task.abort();
        }
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
        // Stopping on purpose: the loops ending now is not a failure.
        self.ctx.health.shutting_down();
        for task in self
            .lifecycle
            .iter()
            .chain(self.tasks.iter().map(|(_, task)| task))
        {
            task.abort();
        }
    }
}

/// Spawns `task`, reporting to `health` when it ends for any reason (returned, panicked,
/// aborted) unless the agent is shutting down.
fn spawn_watched(
    health: &Arc<Health>,
    name: &'static str,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let guard = health.task(name);
    // Cloud calls made by the task are labelled with the loop (upstream's `controller`).
    tokio::spawn(crate::cloud::metered::CONTROLLER.scope(name, async move {
        let _guard = guard;
        task.await;
    }))
}

/// Starts the reflectors and every control loop, once the reflectors have listed the cluster.
pub async fn start<P: CloudProvider + 'static>(
    client: Client,
    provider: Arc<P>,
    settings: Settings,
    metrics: Arc<crate::metrics::Metrics>,
) -> Running<Metered<P>> {
    start_reporting(client, provider, settings, metrics, Arc::default()).await
}

async fn start_reporting<P: CloudProvider + 'static>(
    client: Client,
    provider: Arc<P>,
    settings: Settings,
    metrics: Arc<crate::metrics::Metrics>,
    health: Arc<Health>,
) -> Running<Metered<P>> {
    health.set_unready("listing the cluster");
    // Every cloud call the loops make is timed and its errors counted, as upstream's decorator.
    let provider = Arc::new(Metered::new(provider, metrics.clone()));
    use futures::StreamExt;
    use kube::runtime::reflector::Lookup;
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    use kube::{Api, ResourceExt};

    let (pending, wake) = provisioning::PendingPods::new();
    let recent = Arc::new(provisioning::RecentClaims::default());
    let pod_events = Arc::new(pod_events::PodEvents::default());

    let (claims, claims_writer) = reflector::store::<NodeClaim>();
    let unreadable_claims = lenient_watch::Unreadable::default();
    let own_writes = Arc::new(OwnWrites::default());
    let (nodes, nodes_writer) = reflector::store::<CachedNode>();
    let (pools, pools_writer) = reflector::store::<NodePool>();
    let (pods, pods_writer) = reflector::store::<CachedPod>();
    let (namespaces, namespaces_writer) = reflector::store::<Namespace>();
    let (volume_claims, volume_claims_writer) = reflector::store::<PersistentVolumeClaim>();
    let (volumes, volumes_writer) = reflector::store::<PersistentVolume>();
    let (classes, classes_writer) = reflector::store::<StorageClass>();
    let (daemon_sets, daemon_sets_writer) = reflector::store::<DaemonSet>();
    let (pdbs, pdbs_writer) = reflector::store::<PodDisruptionBudget>();

    // A watch of an API kind as its store keeps it: retried with backoff, each object less its
    // managed fields (which no loop reads) and what `trim` drops.
    fn trimmed<K>(
        events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
        trim: impl Fn(&mut K) + Send + Sync + 'static,
    ) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
    where
        K: kube::Resource + Clone + std::fmt::Debug + Send + 'static,
    {
        events.default_backoff().modify(move |object: &mut K| {
            object.managed_fields_mut().clear();
            trim(object);
        })
    }

    // A watch whose store keeps each object as `cache` makes it of the one decoded: a slimmer
    // type sharing what many objects repeat (see `CachedNode`, `CachedPod`).
    fn cached<K, T>(
        events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
        mut cache: impl FnMut(K) -> T + Send,
    ) -> impl futures::Stream<Item = Result<watcher::Event<T>, watcher::Error>> + Send
    where
        K: Send,
    {
        events.default_backoff().map(move |event| {
            event.map(|event| match event {
                watcher::Event::Apply(object) => watcher::Event::Apply(cache(object)),
                watcher::Event::Delete(object) => watcher::Event::Delete(cache(object)),
                watcher::Event::InitApply(object) => watcher::Event::InitApply(cache(object)),
                watcher::Event::Init => watcher::Event::Init,
                watcher::Event::InitDone => watcher::Event::InitDone,
            })
        })
    }

    // Each reflector runs as its own task.
    fn spawn_reflector<K>(
        health: &Arc<Health>,
        name: &'static str,
        events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
        writer: reflector::store::Writer<K>,
        on_event: impl Fn(&watcher::Event<K>) + Send + Sync + 'static,
    ) -> (&'static str, tokio::task::JoinHandle<()>)
    where
        K: Lookup + Clone + std::fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let handle = spawn_watched(health, name, async move {
            reflector::reflector(writer, events)
                .for_each(|event| {
                    match &event {
                        Ok(event) => on_event(event),
                        Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
                    }
                    futures::future::ready(())
                })
                .await;
        });
        (name, handle)
    }

    let tracker = pending.clone();
    // The lifecycle controller reconciles the claims these watches name (see lifecycle::run).
    let (lifecycle_triggers, lifecycle_queue) = tokio::sync::mpsc::unbounded_channel();
    let reflectors = [
        spawn_reflector(
            &health,
            "NodeClaim watch",
            trimmed(
                lenient_watch::watch(
                    client.clone(),
                    claims.clone(),
                    unreadable_claims.clone(),
                    lenient_watch::report_undecodable::<NodeClaim>(client.clone()),
                ),
                trim_claim,
            ),
            claims_writer,
            {
                let recent = recent.clone();
                let pending = pending.clone();
                let lifecycle_triggers = lifecycle_triggers.clone();
                let initialized = provisioning::Initialized::default();
                let own_writes = own_writes.clone();
                move |event| match event {
                    watcher::Event::Apply(claim) => {
                        own_writes.observed(claim);
                        recent.seen(claim);
                        if initialized.newly(claim) {
                            pending.nudge();
                        }
                        let _ = lifecycle_triggers
                            .send(kube::runtime::reflector::ObjectRef::from_obj(claim));
                    }
                    watcher::Event::InitApply(claim) => {
                        own_writes.observed(claim);
                        recent.seen(claim);
                        initialized.seen(claim);
                        let _ = lifecycle_triggers
                            .send(kube::runtime::reflector::ObjectRef::from_obj(claim));
                    }
                    watcher::Event::Delete(claim) => {
                        own_writes.forget(claim);
                        recent.seen(claim);
                        initialized.forget(claim);
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
        spawn_reflector(
            &health,
            "Node watch",
            // Label and condition strings are shared among all Nodes through one table (most
            // of a Node's size otherwise).
            cached(
                watcher(Api::<Node>::all(client.clone()), watcher::Config::default()),
                {
                    let mut interner = crate::interner::Interner::default();
                    move |node| CachedNode::new(node, &mut interner)
                },
            ),
            nodes_writer,
            {
                let claims = claims.clone();
                move |event| match event {
                    watcher::Event::Apply(node) | watcher::Event::Delete(node) => {
                        for claim in lifecycle::claims_of_node(&claims, node) {
                            let _ = lifecycle_triggers.send(claim);
                        }
                    }
                    watcher::Event::InitApply(_)
                    | watcher::Event::Init
                    | watcher::Event::InitDone => {}
                }
            },
        ),
        spawn_reflector(
            &health,
            "NodePool watch",
            trimmed(
                lenient_watch::watch(
                    client.clone(),
                    pools.clone(),
                    lenient_watch::Unreadable::default(),
                    lenient_watch::report_undecodable::<NodePool>(client.clone()),
                ),
                |_| {},
            ),
            pools_writer,
            |_| {},
        ),
        // Namespace labels, for pod (anti-)affinity terms with a `namespaceSelector`.
        spawn_reflector(
            &health,
            "Namespace watch",
            trimmed(
                watcher(
                    Api::<Namespace>::all(client.clone()),
                    watcher::Config::default(),
                ),
                |ns: &mut Namespace| {
                    ns.metadata.annotations = None;
                    ns.spec = None;
                    ns.status = None;
                },
            ),
            namespaces_writer,
            |_| {},
        ),
        // Claims, volumes and classes, for the topology of pods with persistent volumes.
        spawn_reflector(
            &health,
            "PersistentVolumeClaim watch",
            trimmed(
                watcher(
                    Api::<PersistentVolumeClaim>::all(client.clone()),
                    watcher::Config::default(),
                ),
                volumes::trim_claim,
            ),
            volume_claims_writer,
            {
                // A claim that gets bound (or created) changes where its pods may go, and the
                // pods themselves may not change at all: plan them again.
                let pending = pending.clone();
                move |event| {
                    if let watcher::Event::Apply(_) = event {
                        pending.nudge();
                    }
                }
            },
        ),
        spawn_reflector(
            &health,
            "PersistentVolume watch",
            trimmed(
                watcher(
                    Api::<PersistentVolume>::all(client.clone()),
                    watcher::Config::default(),
                ),
                volumes::trim_volume,
            ),
            volumes_writer,
            |_| {},
        ),
        spawn_reflector(
            &health,
            "StorageClass watch",
            trimmed(
                watcher(
                    Api::<StorageClass>::all(client.clone()),
                    watcher::Config::default(),
                ),
                volumes::trim_class,
            ),
            classes_writer,
            |_| {},
        ),
        // DaemonSets (their pods are overhead on every new node) and PodDisruptionBudgets (for
        // disruption), read from watches as upstream reads its informer cache, not listed
        // every round. Only the template and the budget are used.
        spawn_reflector(
            &health,
            "DaemonSet watch",
            trimmed(
                watcher(
                    Api::<DaemonSet>::all(client.clone()),
                    watcher::Config::default(),
                ),
                |ds: &mut DaemonSet| {
                    ds.metadata.annotations = None;
                    ds.status = None;
                },
            ),
            daemon_sets_writer,
            |_| {},
        ),
        spawn_reflector(
            &health,
            "PodDisruptionBudget watch",
            trimmed(
                watcher(
                    Api::<PodDisruptionBudget>::all(client.clone()),
                    watcher::Config::default(),
                ),
                |pdb: &mut PodDisruptionBudget| pdb.metadata.annotations = None,
            ),
            pdbs_writer,
            |_| {},
        ),
        spawn_reflector(
            &health,
            "Pod watch",
            // Each pod shares its spec, labels and owner references with the other replicas of
            // its controller.
            cached(
                watcher(
                    Api::<WatchedPod>::all(client.clone()),
                    watcher::Config::default(),
                ),
                {
                    let mut parts = pod_cache::ReplicaParts::default();
                    move |pod| parts.cache(pod)
                },
            ),
            pods_writer,
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
        namespaces.wait_until_ready().await?;
        volume_claims.wait_until_ready().await?;
        volumes.wait_until_ready().await?;
        classes.wait_until_ready().await?;
        daemon_sets.wait_until_ready().await?;
        pdbs.wait_until_ready().await?;
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

    let mut ctx = Context::new(
        client, provider, claims, nodes, pools, pods, settings, metrics,
    );
    ctx.health = health.clone();
    ctx.own_writes = own_writes;
    ctx.unreadable_claims = unreadable_claims;
    ctx.namespaces = Some(namespaces);
    ctx.volumes = Some(volumes::VolumeStores {
        claims: volume_claims,
        volumes,
        classes,
    });
    ctx.daemon_sets = Some(daemon_sets);
    ctx.pdbs = Some(pdbs);
    let ctx = Arc::new(ctx);
    // The lifecycle controller ends on a shutdown signal; everything else goes with it.
    let lifecycle = tokio::spawn(crate::cloud::metered::CONTROLLER.scope(
        names::LIFECYCLE,
        lifecycle::run(ctx.clone(), lifecycle_queue),
    ));
    let mut running = Running {
        ctx: ctx.clone(),
        lifecycle: Some(lifecycle),
        tasks: Vec::from(reflectors),
    };
    running.spawn(
        names::PROVISIONER,
        provisioning::run(ctx.clone(), pending, recent, wake),
    );
    running.spawn(
        names::GARBAGE_COLLECTION,
        garbage_collection::run(ctx.clone()),
    );
    running.spawn(names::DISRUPTION, disruption::run(ctx.clone()));
    running.spawn(names::STATIC_CAPACITY, static_capacity::run(ctx.clone()));
    running.spawn(names::NODEPOOL_STATUS, nodepool_status::run(ctx.clone()));
    running.spawn(
        names::NODECLAIM_DISRUPTION,
        nodeclaim_disruption::run(ctx.clone()),
    );
    running.spawn(names::POD_EVENTS, pod_events::run(ctx.clone(), pod_events));
    running.spawn(names::POD_METRICS, pod_metrics::run(ctx.clone()));
    health.set_ready();
    running
}
