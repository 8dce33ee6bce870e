//! The watches that fill the [`Stores`]: one per kind the loops read, each retried with backoff,
//! each object trimmed to what the loops read before it is stored (managed fields always; the
//! rest per kind, below), NodeClaims and NodePools through the lenient watch so that one object
//! the agent cannot decode does not stop the rest.
//!
//! The loops that react to a change (a pod turning pending, a claim or its Node changing) hear
//! of it through [`Observers`], called for every event after the store took it, as upstream's
//! controllers are triggered by the informers that fill its cluster state.

use super::claim_cache::trim_claim;
use super::node_cache::CachedNode;
use super::pod_cache::{CachedPod, ReplicaParts, WatchedPod};
use super::stores::Writers;
use super::volumes;
use crate::apis::{NodeClaim, NodePool};
use crate::client::lenient_watch;
use crate::interner::Interner;
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::WatchStreamExt;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{self, Lookup, store::Writer};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, Resource, ResourceExt};

/// Called for each event of a kind, after its store took it.
pub type Observer<K> = Box<dyn Fn(&Event<K>) + Send + Sync>;

/// What the control loops want to hear of as the watches deliver it; the rest of the kinds
/// are only stored.
pub struct Observers {
    pub claims: Observer<NodeClaim>,
    pub nodes: Observer<CachedNode>,
    pub volume_claims: Observer<PersistentVolumeClaim>,
    pub pods: Observer<CachedPod>,
}

impl Default for Observers {
    fn default() -> Self {
        Self {
            claims: Box::new(|_| {}),
            nodes: Box::new(|_| {}),
            volume_claims: Box::new(|_| {}),
            pods: Box::new(|_| {}),
        }
    }
}

/// A running watch: its name (what `/healthz` says of it when it stops) and its task.
pub(crate) type Watch = (&'static str, BoxFuture<'static, ()>);

/// The watches that fill `writers`' stores, to be spawned. Objects of the agent's own kinds that
/// do not decode are reported through `recorder` (a Warning Event on each) and counted in the
/// stores' `unreadable_claims`.
pub fn watches(
    client: &Client,
    recorder: &Recorder,
    writers: Writers,
    unreadable_claims: lenient_watch::Unreadable,
    observers: Observers,
) -> Vec<Watch> {
    let Writers {
        claims,
        nodes,
        pools,
        pods,
        namespaces,
        volume_claims,
        volumes,
        classes,
        daemon_sets,
        pdbs,
    } = writers;
    let Observers {
        claims: on_claim,
        nodes: on_node,
        volume_claims: on_volume_claim,
        pods: on_pod,
    } = observers;
    let claim_store = claims.as_reader();
    let pool_store = pools.as_reader();
    vec![
        watch(
            "NodeClaim watch",
            trimmed(
                lenient_watch::watch(
                    client.clone(),
                    claim_store,
                    unreadable_claims,
                    lenient_watch::report_undecodable::<NodeClaim>(recorder.clone()),
                ),
                trim_claim,
            ),
            claims,
            on_claim,
        ),
        watch(
            "Node watch",
            // Label and condition strings are shared among all Nodes through one table (most
            // of a Node's size otherwise).
            cached(all::<Node>(client), {
                let mut interner = Interner::default();
                move |node| CachedNode::new(node, &mut interner)
            }),
            nodes,
            on_node,
        ),
        watch(
            "NodePool watch",
            trimmed(
                lenient_watch::watch(
                    client.clone(),
                    pool_store,
                    lenient_watch::Unreadable::default(),
                    lenient_watch::report_undecodable::<NodePool>(recorder.clone()),
                ),
                |_| {},
            ),
            pools,
            Box::new(|_| {}),
        ),
        // Namespace labels, for pod (anti-)affinity terms with a `namespaceSelector`.
        watch(
            "Namespace watch",
            trimmed(all(client), trim_namespace),
            namespaces,
            Box::new(|_| {}),
        ),
        // Claims, volumes and classes, for the topology of pods with persistent volumes.
        watch(
            "PersistentVolumeClaim watch",
            trimmed(all(client), volumes::trim_claim),
            volume_claims,
            on_volume_claim,
        ),
        watch(
            "PersistentVolume watch",
            trimmed(all(client), volumes::trim_volume),
            volumes,
            Box::new(|_| {}),
        ),
        watch(
            "StorageClass watch",
            trimmed(all(client), volumes::trim_class),
            classes,
            Box::new(|_| {}),
        ),
        // DaemonSets (their pods are overhead on every new node) and PodDisruptionBudgets (for
        // disruption), read from watches as upstream reads its informer cache, not listed
        // every round. Only the template and the budget are used.
        watch(
            "DaemonSet watch",
            trimmed(all(client), trim_daemon_set),
            daemon_sets,
            Box::new(|_| {}),
        ),
        watch(
            "PodDisruptionBudget watch",
            trimmed(all(client), |pdb: &mut PodDisruptionBudget| {
                pdb.metadata.annotations = None;
            }),
            pdbs,
            Box::new(|_| {}),
        ),
        watch(
            "Pod watch",
            // Each pod shares its spec, labels and owner references with the other replicas of
            // its controller.
            cached(all::<WatchedPod>(client), {
                let mut parts = ReplicaParts::default();
                move |pod| parts.cache(pod)
            }),
            pods,
            on_pod,
        ),
    ]
}

/// Keeps of a Namespace its name and labels.
fn trim_namespace(ns: &mut Namespace) {
    ns.metadata.annotations = None;
    ns.spec = None;
    ns.status = None;
}

/// Keeps of a DaemonSet its template.
fn trim_daemon_set(ds: &mut DaemonSet) {
    ds.metadata.annotations = None;
    ds.status = None;
}

/// Every object of kind `K` in the cluster, as events.
fn all<K>(client: &Client) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + use<K>
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
    K: Send + 'static,
{
    watcher(Api::<K>::all(client.clone()), watcher::Config::default())
}

/// A watch of an API kind as its store keeps it: retried with backoff, each object less its
/// managed fields (which no loop reads) and what `trim` drops.
fn trimmed<K>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    trim: impl Fn(&mut K) + Send + Sync + 'static,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + std::fmt::Debug + Send + 'static,
{
    events.default_backoff().modify(move |object: &mut K| {
        object.managed_fields_mut().clear();
        trim(object);
    })
}

/// A watch whose store keeps each object as `cache` makes it of the one decoded: a slimmer type
/// sharing what many objects repeat (see `CachedNode`, `CachedPod`).
fn cached<K, T>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    mut cache: impl FnMut(K) -> T + Send,
) -> impl Stream<Item = Result<Event<T>, watcher::Error>> + Send
where
    K: Send,
{
    events.default_backoff().map(move |event| {
        event.map(|event| match event {
            Event::Apply(object) => Event::Apply(cache(object)),
            Event::Delete(object) => Event::Delete(cache(object)),
            Event::InitApply(object) => Event::InitApply(cache(object)),
            Event::Init => Event::Init,
            Event::InitDone => Event::InitDone,
        })
    })
}

/// The task that feeds `writer` from `events` and tells `observe` of each event.
fn watch<K>(
    name: &'static str,
    events: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    writer: Writer<K>,
    observe: Observer<K>,
) -> Watch
where
    K: Lookup + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let task = reflector::reflector(writer, events).for_each(move |event| {
        match &event {
            Ok(event) => observe(event),
            Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
        }
        futures::future::ready(())
    });
    (name, task.boxed())
}
