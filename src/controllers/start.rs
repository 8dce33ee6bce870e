//! Start-up: the watches, then every control loop, one line each (upstream's `controllers.go`
//! in `pkg/controllers`), and [`Running`], the handle that stops them all when dropped.
//!
//! The loops that react to the cluster changing hear of it here, through the watches'
//! [`Observers`]: provisioning (a pod turning pending, a claim going or turning initialized, a
//! volume claim binding), the lifecycle (a claim or its Node changing) and the pod Events.

use super::{
    Context, Error, Health, OwnWrites, Settings, disruption, garbage_collection, lifecycle, names,
    nodeclaim_disruption, nodepool_status, pod_events, pod_metrics, provisioning, static_capacity,
};
use crate::apis::NodeClaim;
use crate::cloud::{CloudProvider, Metered, metered};
use crate::state::{self, CachedNode, CachedPod, Observer, Observers, Stores};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Client;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

/// Starts every control loop over `client` and `provider` and runs them until the future is
/// dropped.
pub async fn run<P: CloudProvider + 'static>(
    client: Client,
    provider: Arc<P>,
    settings: Settings,
    metrics: Arc<crate::metrics::Metrics>,
) -> Result<(), Error> {
    start(client, provider, settings, metrics)
        .await
        .run_until(std::future::pending())
        .await;
    Ok(())
}

/// Starts the watches and every control loop, once the watches have listed the cluster.
pub async fn start<P: CloudProvider + 'static>(
    client: Client,
    provider: Arc<P>,
    settings: Settings,
    metrics: Arc<crate::metrics::Metrics>,
) -> Running<Metered<P>> {
    start_with(client, provider, settings, metrics, Arc::default()).await
}

/// [`start`], reporting readiness and liveness to `health` (the binary's probes).
pub async fn start_with<P: CloudProvider + 'static>(
    client: Client,
    provider: Arc<P>,
    settings: Settings,
    metrics: Arc<crate::metrics::Metrics>,
    health: Arc<Health>,
) -> Running<Metered<P>> {
    health.set_unready("listing the cluster");
    // Every cloud call the loops make is timed and its errors counted, as upstream's decorator.
    let provider =
        Arc::new(Metered::new(provider, metrics.clone()).fenced(settings.write_fence.clone()));
    let (cluster, writers) = Stores::new();
    let (pending, wake) = provisioning::PendingPods::new();
    let recent = Arc::new(provisioning::RecentClaims::default());
    let pod_events = Arc::new(pod_events::PodEvents::default());
    let own_writes = Arc::new(OwnWrites::default());
    // The lifecycle controller reconciles the claims these watches name (see lifecycle::run).
    let (lifecycle_triggers, lifecycle_queue) = tokio::sync::mpsc::unbounded_channel();
    let observers = Observers {
        claims: on_claim(&pending, &recent, &own_writes, &lifecycle_triggers),
        nodes: on_node(&cluster, lifecycle_triggers),
        volume_claims: on_volume_claim(&pending),
        pods: on_pod(&pending, &pod_events),
    };
    let recorder = Recorder::new(client.clone(), super::context::reporter(&settings));
    let unreadable = cluster.unreadable_claims.clone();
    let watches = state::watches(&client, &recorder, writers, unreadable, observers);
    let tasks = watches
        .into_iter()
        .map(|(name, task)| (name, spawn_watched(&health, name, task)))
        .collect();
    if let Err(e) = cluster.wait_until_ready().await {
        tracing::warn!(error = %e, "reflectors stopped before they were ready");
    }
    tracing::info!(
        provider = provider.name(),
        nodeclaims = cluster.claims.state().len(),
        nodes = cluster.nodes.state().len(),
        nodepools = cluster.pools.state().len(),
        pods = cluster.pods.state().len(),
        "cluster state loaded"
    );
    // Pods that were already pending before we started still need a round.
    pending.nudge();

    let ctx = Arc::new(Context::new(
        client,
        provider,
        cluster,
        settings,
        metrics,
        health.clone(),
        own_writes,
    ));
    let mut running = Running { ctx, tasks };
    let ctx = &running.ctx.clone();
    running.spawn_unwatched(
        names::LIFECYCLE,
        lifecycle::run(ctx.clone(), lifecycle_queue),
    );
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

/// A NodeClaim changed: our own writes are confirmed, provisioning stops counting a claim it
/// created as unconfirmed and replans when one is first initialized or goes, and the lifecycle
/// reconciles it.
fn on_claim(
    pending: &Arc<provisioning::PendingPods>,
    recent: &Arc<provisioning::RecentClaims>,
    own_writes: &Arc<OwnWrites>,
    lifecycle: &UnboundedSender<ObjectRef<NodeClaim>>,
) -> Observer<NodeClaim> {
    let (pending, recent, own_writes) = (pending.clone(), recent.clone(), own_writes.clone());
    let lifecycle = lifecycle.clone();
    let initialized = provisioning::Initialized::default();
    Box::new(move |event| match event {
        Event::Apply(claim) => {
            own_writes.observed(claim);
            recent.seen(claim);
            if initialized.newly(claim) {
                pending.nudge();
            }
            let _ = lifecycle.send(ObjectRef::from_obj(claim));
        }
        Event::InitApply(claim) => {
            own_writes.observed(claim);
            recent.seen(claim);
            initialized.seen(claim);
            let _ = lifecycle.send(ObjectRef::from_obj(claim));
        }
        Event::Delete(claim) => {
            own_writes.forget(claim);
            recent.seen(claim);
            initialized.forget(claim);
            // Pods planned onto a claim that is gone (its launch failed for capacity or a node
            // class that is not ready, its node never registered, a user deleted it) are still
            // pending under the same UID, so no pod event will wake the batcher. The store
            // already lacks the claim when this runs, so the round that follows plans them
            // afresh.
            pending.nudge();
        }
        Event::Init | Event::InitDone => {}
    })
}

/// A Node changed: the lifecycle reconciles the claims whose instance it is.
fn on_node(
    cluster: &Stores,
    lifecycle: UnboundedSender<ObjectRef<NodeClaim>>,
) -> Observer<CachedNode> {
    let claims = cluster.claims.clone();
    Box::new(move |event| match event {
        Event::Apply(node) | Event::Delete(node) => {
            for claim in lifecycle::claims_of_node(&claims, node) {
                let _ = lifecycle.send(claim);
            }
        }
        Event::InitApply(_) | Event::Init | Event::InitDone => {}
    })
}

/// A volume claim that gets bound (or created) changes where its pods may go, and the pods
/// themselves may not change at all: plan them again.
fn on_volume_claim(pending: &Arc<provisioning::PendingPods>) -> Observer<PersistentVolumeClaim> {
    let pending = pending.clone();
    Box::new(move |event| {
        if let Event::Apply(_) = event {
            pending.nudge();
        }
    })
}

/// A pod changed: the batcher sees whether it waits, and its Events follow its state.
fn on_pod(
    pending: &Arc<provisioning::PendingPods>,
    pod_events: &Arc<pod_events::PodEvents>,
) -> Observer<CachedPod> {
    let (pending, pod_events) = (pending.clone(), pod_events.clone());
    Box::new(move |event| match event {
        Event::Apply(pod) => {
            pending.observe(pod);
            pod_events.observe(pod, false);
        }
        Event::InitApply(pod) => {
            pending.observe(pod);
            pod_events.observe(pod, true);
        }
        Event::Delete(pod) => {
            pending.forget(pod);
            pod_events.forget(pod);
        }
        Event::Init | Event::InitDone => {}
    })
}

/// The running loops: the shared [`Context`] (so a provider's own loops, such as the AWS
/// interruption queue, read the same stores instead of caching the cluster twice) and the
/// tasks. Dropping it stops every loop.
pub struct Running<P> {
    pub ctx: Arc<Context<P>>,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
}

impl<P> Running<P> {
    /// Runs `task` beside the controllers, stopped with them; `/healthz` fails if it ends.
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let handle = spawn_watched(&self.ctx.health, name, task);
        self.tasks.push((name, handle));
    }

    /// Runs `task` beside the controllers, stopped with them, but not reported to `/healthz`
    /// when it ends (the lifecycle controller's reconciles report their own passes).
    fn spawn_unwatched(
        &mut self,
        name: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let handle = tokio::spawn(metered::CONTROLLER.scope(name, task));
        self.tasks.push((name, handle));
    }

    /// Stops the loop `name` as if it had died (tests of liveness).
    pub fn abort(&self, name: &str) {
        for (_, task) in self.tasks.iter().filter(|(n, _)| *n == name) {
            task.abort();
        }
    }

    /// Keeps the loops running until `shutdown` resolves (the binary passes its signal
    /// handler), then stops them.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        shutdown.await;
    }
}

impl<P> Drop for Running<P> {
    fn drop(&mut self) {
        // Stopping on purpose: the loops ending now is not a failure.
        self.ctx.health.shutting_down();
        for (_, task) in &self.tasks {
            task.abort();
        }
    }
}

/// Spawns `task`, reporting to `health` when it ends for any reason (returned, panicked,
/// aborted) unless the agent is shutting down.
fn spawn_watched(
    health: &Arc<Health>,
    name: &'static str,
    task: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<()> {
    let guard = health.task(name);
    // Cloud calls made by the task are labelled with the loop (upstream's `controller`).
    tokio::spawn(metered::CONTROLLER.scope(name, async move {
        let _guard = guard;
        task.await;
    }))
}

/// The loops a provider runs beside the common ones, started by the binary after
/// [`start_with`]: EC2NodeClass status and the interruption queue on AWS (`aws.rs`),
/// GCENodeClass status and the kubelets' certificate requests on GCP (`gcp.rs`), none on kwok.
pub trait ProviderLoops: CloudProvider + Sized + 'static {
    /// Starts them beside `running`; fails only on a configuration error worth stopping for.
    fn start_loops(running: &mut Running<Metered<Self>>)
    -> impl Future<Output = Result<(), Error>>;
}

impl ProviderLoops for crate::cloud::kwok::KwokProvider {
    async fn start_loops(_: &mut Running<Metered<Self>>) -> Result<(), Error> {
        Ok(())
    }
}
