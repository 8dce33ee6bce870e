//! [`Stores`]: the one handle on the cluster as the agent's watches hold it, shared by every
//! control loop (upstream's `state.Cluster` and the informer cache behind it). The watches that
//! fill it are started by [`super::watches`]; every store is always fed, so no loop carries a
//! fallback for a store that is missing.
//!
//! What the loops ask of the stores together (each namespace's labels, the volume topology of
//! some pods, the DaemonSets' pods, the whole cluster read at once) is answered here, once.

use super::gather::Gathered;
use super::input::daemon_set_pods;
use super::node_cache::CachedNode;
use super::pod_cache::CachedPod;
use super::volumes::VolumeStores;
use crate::apis::{NodeClaim, NodePool};
use crate::client::lenient_watch::Unreadable;
use crate::scheduling::{NamespaceLabels, VolumeTopology};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, Store, store::Writer};
use std::sync::Arc;

/// The reflector stores of every kind the control loops read. Cloning it clones the handles,
/// not the objects.
#[derive(Clone)]
pub struct Stores {
    /// Every NodeClaim that decodes, less what only `explain` reads (see `trim_claim`).
    pub claims: Store<NodeClaim>,
    /// NodeClaims the API server has that do not decode (left out of `claims`).
    pub unreadable_claims: Unreadable,
    pub nodes: Store<CachedNode>,
    /// Every NodePool that decodes.
    pub pools: Store<NodePool>,
    pub pods: Store<CachedPod>,
    /// Namespaces (their labels), for pod-affinity terms with a `namespaceSelector`.
    pub namespaces: Store<Namespace>,
    /// Claims, volumes and classes, for the topology of pods with persistent volumes.
    pub volumes: VolumeStores,
    /// DaemonSets, whose pods are overhead on every new node.
    pub daemon_sets: Store<DaemonSet>,
    /// PodDisruptionBudgets, for disruption's candidates and the drain.
    pub pdbs: Store<PodDisruptionBudget>,
}

/// The write halves of [`Stores`], which only the watches hold.
pub struct Writers {
    pub(super) claims: Writer<NodeClaim>,
    pub(super) nodes: Writer<CachedNode>,
    pub(super) pools: Writer<NodePool>,
    pub(super) pods: Writer<CachedPod>,
    pub(super) namespaces: Writer<Namespace>,
    pub(super) volume_claims: Writer<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    pub(super) volumes: Writer<k8s_openapi::api::core::v1::PersistentVolume>,
    pub(super) classes: Writer<k8s_openapi::api::storage::v1::StorageClass>,
    pub(super) daemon_sets: Writer<DaemonSet>,
    pub(super) pdbs: Writer<PodDisruptionBudget>,
}

#[cfg(test)]
impl Writers {
    /// Lists these objects into the stores, and nothing into the others, as the watches' first
    /// lists would (reconcile-level tests, `controllers::testing`).
    pub(crate) fn fill(
        &mut self,
        claims: Vec<NodeClaim>,
        nodes: Vec<CachedNode>,
        pools: Vec<NodePool>,
        pods: Vec<CachedPod>,
    ) {
        use kube::runtime::watcher::Event;
        fn list<K>(writer: &mut Writer<K>, objects: Vec<K>)
        where
            K: kube::runtime::reflector::Lookup + Clone,
            K::DynamicType: Default + Eq + std::hash::Hash + Clone,
        {
            writer.apply_watcher_event(&Event::Init);
            for object in objects {
                writer.apply_watcher_event(&Event::InitApply(object));
            }
            writer.apply_watcher_event(&Event::InitDone);
        }
        list(&mut self.claims, claims);
        list(&mut self.nodes, nodes);
        list(&mut self.pools, pools);
        list(&mut self.pods, pods);
        list(&mut self.namespaces, Vec::new());
        list(&mut self.volume_claims, Vec::new());
        list(&mut self.volumes, Vec::new());
        list(&mut self.classes, Vec::new());
        list(&mut self.daemon_sets, Vec::new());
        list(&mut self.pdbs, Vec::new());
    }
}

impl Stores {
    /// Empty stores, and the writers [`super::watches`] fills them through.
    pub fn new() -> (Self, Writers) {
        let (claims, claims_writer) = reflector::store();
        let (nodes, nodes_writer) = reflector::store();
        let (pools, pools_writer) = reflector::store();
        let (pods, pods_writer) = reflector::store();
        let (namespaces, namespaces_writer) = reflector::store();
        let (volume_claims, volume_claims_writer) = reflector::store();
        let (volumes, volumes_writer) = reflector::store();
        let (classes, classes_writer) = reflector::store();
        let (daemon_sets, daemon_sets_writer) = reflector::store();
        let (pdbs, pdbs_writer) = reflector::store();
        let stores = Self {
            claims,
            unreadable_claims: Unreadable::default(),
            nodes,
            pools,
            pods,
            namespaces,
            volumes: VolumeStores {
                claims: volume_claims,
                volumes,
                classes,
            },
            daemon_sets,
            pdbs,
        };
        let writers = Writers {
            claims: claims_writer,
            nodes: nodes_writer,
            pools: pools_writer,
            pods: pods_writer,
            namespaces: namespaces_writer,
            volume_claims: volume_claims_writer,
            volumes: volumes_writer,
            classes: classes_writer,
            daemon_sets: daemon_sets_writer,
            pdbs: pdbs_writer,
        };
        (stores, writers)
    }

    /// Waits until every watch has listed the cluster once.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.claims.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.pools.wait_until_ready().await?;
        self.namespaces.wait_until_ready().await?;
        self.volumes.claims.wait_until_ready().await?;
        self.volumes.volumes.wait_until_ready().await?;
        self.volumes.classes.wait_until_ready().await?;
        self.daemon_sets.wait_until_ready().await?;
        self.pdbs.wait_until_ready().await?;
        self.pods.wait_until_ready().await
    }

    /// Each namespace's labels, as the Namespace watch holds them.
    pub fn namespace_labels(&self) -> NamespaceLabels {
        namespace_labels(self.namespaces.state().iter().map(AsRef::as_ref))
    }

    /// The volume topology of the pods with claims.
    pub fn volume_topology(&self, pods: &[Arc<CachedPod>]) -> VolumeTopology {
        self.volumes.topology(pods)
    }

    /// One pod per DaemonSet, as overhead on every new node. Read from the watch, as upstream's
    /// `getDaemonSetPods` reads its informer cache: a list per round cost the API server a read
    /// of every DaemonSet each time a batch closed.
    pub fn daemon_set_pods(&self) -> Vec<Pod> {
        daemon_set_pods(self.daemon_sets.state().iter().map(AsRef::as_ref))
    }

    /// Every PodDisruptionBudget, from the watch, as upstream reads its informer cache.
    pub fn pdbs(&self) -> Vec<PodDisruptionBudget> {
        self.pdbs
            .state()
            .iter()
            .map(|pdb| (**pdb).clone())
            .collect()
    }

    /// The Node whose providerID is `provider_id`, if the watch has seen one.
    pub fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<CachedNode>> {
        self.nodes
            .state()
            .into_iter()
            .find(|n| n.provider_id.as_deref() == Some(provider_id))
    }

    /// The cluster as the stores hold it now, with `pods` and `claims` as the caller read them
    /// (a provisioning round reads the pods first, to see whether any wait, and adds the claims
    /// it created that the watch has not delivered yet). The catalogues are the provider's:
    /// see [`Gathered::fetch_catalogues`].
    pub fn gather(&self, pods: Vec<Arc<CachedPod>>, claims: Vec<Arc<NodeClaim>>) -> Gathered {
        Gathered {
            volumes: self.volume_topology(&pods),
            pods,
            nodes: self.nodes.state(),
            claims,
            pools: self.pools.state(),
            catalogues: super::Catalogues::default(),
            daemon_set_pods: self.daemon_set_pods(),
            namespace_labels: self.namespace_labels(),
        }
    }
}

/// Each namespace's labels.
pub fn namespace_labels<'a>(
    namespaces: impl IntoIterator<Item = &'a Namespace>,
) -> NamespaceLabels {
    namespaces
        .into_iter()
        .filter_map(|ns| {
            Some((
                ns.metadata.name.clone()?,
                ns.metadata.labels.clone().unwrap_or_default(),
            ))
        })
        .collect()
}
