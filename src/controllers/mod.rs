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
pub mod conditions;
pub mod csr_approval;
pub mod disruption;
pub mod garbage_collection;
#[cfg(feature = "gcp")]
pub mod gcp;
#[cfg(feature = "aws")]
pub mod interruption;
pub mod lifecycle;
pub mod nodeclaim_disruption;
#[cfg(any(feature = "aws", feature = "gcp"))]
pub mod nodeclass_status;
pub mod nodepool_status;
pub mod pod_events;
pub mod provisioning;
pub mod static_capacity;
pub mod volumes;

mod client;
mod context;
mod error;
mod notices;
mod own_writes;
mod settings;

pub use client::agent_client;
pub use context::Context;
pub use error::Error;
pub(crate) use error::is_not_found;
pub use notices::Notices;
pub use own_writes::OwnWrites;
pub use settings::Settings;

use crate::apis::{NodeClaim, NodePool};
use crate::cloud::CloudProvider;
use crate::state::{CachedPod, pod_cache, trim_node};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use std::sync::Arc;

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
    let (namespaces, namespaces_writer) = reflector::store::<Namespace>();
    let (volume_claims, volume_claims_writer) = reflector::store::<PersistentVolumeClaim>();
    let (volumes, volumes_writer) = reflector::store::<PersistentVolume>();
    let (classes, classes_writer) = reflector::store::<StorageClass>();

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
        // Namespace labels, for pod (anti-)affinity terms with a `namespaceSelector`.
        spawn_reflector(
            Api::<Namespace>::all(client.clone()),
            namespaces_writer,
            |ns: &mut Namespace| {
                ns.metadata.annotations = None;
                ns.spec = None;
                ns.status = None;
            },
            |_| {},
        ),
        // Claims, volumes and classes, for the topology of pods with persistent volumes.
        spawn_reflector(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            volume_claims_writer,
            volumes::trim_claim,
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
            Api::<PersistentVolume>::all(client.clone()),
            volumes_writer,
            volumes::trim_volume,
            |_| {},
        ),
        spawn_reflector(
            Api::<StorageClass>::all(client.clone()),
            classes_writer,
            volumes::trim_class,
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
        namespaces.wait_until_ready().await?;
        volume_claims.wait_until_ready().await?;
        volumes.wait_until_ready().await?;
        classes.wait_until_ready().await?;
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
    ctx.namespaces = Some(namespaces);
    ctx.volumes = Some(volumes::VolumeStores {
        claims: volume_claims,
        volumes,
        classes,
    });
    let ctx = Arc::new(ctx);
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
    tasks.push(tokio::spawn(disruption::run(ctx.clone())));
    tasks.push(tokio::spawn(static_capacity::run(ctx.clone())));
    tasks.push(tokio::spawn(nodepool_status::run(ctx.clone())));
    tasks.push(tokio::spawn(nodeclaim_disruption::run(ctx.clone())));
    tasks.push(tokio::spawn(pod_events::run(ctx.clone(), pod_events)));
    Running {
        ctx,
        lifecycle: Some(lifecycle),
        tasks,
    }
}
