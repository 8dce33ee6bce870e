//! [`Gathered`]: the cluster read once, owned, as every decision reads it. A provisioning round
//! and a disruption pass gather it from the [`super::Stores`], `kubectl karpenter simulate` from
//! one list of each kind, the disruption benchmark builds one by hand; each then borrows it as
//! the [`Snapshot`] the scheduler's input and the disruption decisions are computed from.
//!
//! Only the catalogues come from elsewhere: the agent asks its cloud provider, `simulate` the
//! tables shipped with the plugin, both through [`Gathered::fetch_catalogues`].

use super::input::{Catalogues, Snapshot, node_classes};
use super::node_cache::CachedNode;
use super::pod_cache::CachedPod;
use crate::apis::{NodeClaim, NodeClassReference, NodePool};
use crate::scheduling::{InstanceType, NamespaceLabels, VolumeTopology};
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashSet;
use std::sync::Arc;

/// Everything a [`Snapshot`] borrows, owned.
#[derive(Clone, Debug, Default)]
pub struct Gathered {
    /// Every pod, those bound and those waiting.
    pub pods: Vec<Arc<CachedPod>>,
    pub nodes: Vec<Arc<CachedNode>>,
    /// Every NodeClaim, with any just created that the watch has not delivered yet.
    pub claims: Vec<Arc<NodeClaim>>,
    /// Every NodePool, those being deleted included.
    pub pools: Vec<Arc<NodePool>>,
    /// The catalogue of each node class the live pools and the claims name.
    pub catalogues: Catalogues,
    /// One pod per DaemonSet (see [`super::daemon_set_pods`]).
    pub daemon_set_pods: Vec<Pod>,
    /// Each namespace's labels.
    pub namespace_labels: NamespaceLabels,
    /// The volume topology of the pods with persistent volume claims.
    pub volumes: VolumeTopology,
}

impl Gathered {
    /// The cluster as a decision borrows it.
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            pods: &self.pods,
            nodes: &self.nodes,
            claims: &self.claims,
            pools: &self.pools,
            catalogues: &self.catalogues,
            daemon_set_pods: &self.daemon_set_pods,
            namespace_labels: &self.namespace_labels,
            volumes: &self.volumes,
        }
    }

    /// Asks `catalogue` for the instance types of each node class the live pools and the
    /// claims name, once per class, and returns the classes it could not answer for with why.
    /// A class without a catalogue offers nothing: its pools launch nothing, the rest go on.
    ///
    /// Each class is asked once, answered or not: every claim names its class, and asking again
    /// per claim after a failure made an API server outage cost one failed call per claim per
    /// round (a hung one, a request timeout each).
    pub async fn fetch_catalogues<E, F>(
        &mut self,
        mut catalogue: impl FnMut(NodeClassReference) -> F,
    ) -> Vec<(NodeClassReference, E)>
    where
        F: Future<Output = Result<Arc<[InstanceType]>, E>>,
    {
        let mut failed = Vec::new();
        let mut asked = HashSet::new();
        for class in node_classes(&self.pools, &self.claims) {
            if !asked.insert((&class.group, &class.kind, &class.name)) {
                continue;
            }
            // Owned: an async closure borrowing the class made the loops' futures not `Send`.
            match catalogue(class.clone()).await {
                Ok(types) => self.catalogues.insert(class, types),
                Err(e) => failed.push((class.clone(), e)),
            }
        }
        failed
    }
}
