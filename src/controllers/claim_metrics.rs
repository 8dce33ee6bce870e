//! What the loops count about NodeClaims and Nodes, with upstream's metric labels
//! (`karpenter_nodeclaims_created_total`, `…_terminated_total`, `…_disrupted_total`,
//! `karpenter_nodes_created_total`, `…_terminated_total`), read off the objects themselves.

use super::Context;
use crate::apis::{ConsolidationPolicy, NodeClaim, NodePool, labels};
use crate::metrics::{
    CreatedLabels, DisruptedLabels, NodeLabels, TerminatedLabels, termination_mode,
};
use crate::state::CachedNode;
use kube::ResourceExt;

fn label(object: &impl ResourceExt, key: &str) -> String {
    object.labels().get(key).cloned().unwrap_or_default()
}

/// Upstream's `consolidation_policy` label value: the policy in snake case.
fn policy_name(policy: &ConsolidationPolicy) -> &'static str {
    match policy {
        ConsolidationPolicy::WhenEmpty => "when_empty",
        ConsolidationPolicy::WhenEmptyOrUnderutilized => "when_empty_or_underutilized",
        ConsolidationPolicy::Balanced => "balanced",
    }
}

impl<P> Context<P> {
    /// A NodeClaim this agent created, and why (`provisioned`, or a replacement's disruption
    /// reason).
    pub(crate) fn count_created(&self, claim: &NodeClaim, reason: &str) {
        let relaxed = claim
            .annotations()
            .get(labels::NODE_CLAIM_MIN_VALUES_RELAXED)
            .cloned()
            .unwrap_or_else(|| "false".to_owned());
        self.metrics
            .nodeclaims_created
            .get_or_create(&CreatedLabels {
                reason: reason.to_owned(),
                nodepool: label(claim, labels::NODE_POOL),
                min_values_relaxed: relaxed,
            })
            .inc();
    }

    /// A NodeClaim disrupted for `reason`; `consolidating` when by consolidation (upstream
    /// labels the pool's policy only then).
    pub(crate) fn count_disrupted(
        &self,
        claim: &NodeClaim,
        reason: &str,
        pool: Option<&NodePool>,
        consolidating: bool,
    ) {
        let grace = claim
            .spec
            .termination_grace_period
            .as_deref()
            .and_then(|text| crate::apis::parse_duration(text).ok());
        let policy = pool
            .filter(|_| consolidating)
            .map_or("", |p| policy_name(&p.spec.disruption.consolidation_policy));
        self.metrics
            .nodeclaims_disrupted
            .get_or_create(&DisruptedLabels {
                reason: reason.to_owned(),
                nodepool: label(claim, labels::NODE_POOL),
                capacity_type: label(claim, labels::CAPACITY_TYPE),
                consolidation_policy: policy.to_owned(),
                termination_mode: termination_mode(grace).to_owned(),
            })
            .inc();
    }

    /// A NodeClaim whose instance is gone and whose finalizer was released.
    pub(crate) fn count_terminated(&self, claim: &NodeClaim) {
        self.metrics
            .nodeclaims_terminated
            .get_or_create(&TerminatedLabels {
                nodepool: label(claim, labels::NODE_POOL),
                capacity_type: label(claim, labels::CAPACITY_TYPE),
                zone: label(claim, labels::ZONE),
            })
            .inc();
    }

    /// A Node that registered for one of this agent's claims.
    pub(crate) fn count_node_created(&self, node: &CachedNode) {
        self.metrics
            .nodes_created
            .get_or_create(&node_labels(node))
            .inc();
    }

    /// A Node that termination deleted.
    pub(crate) fn count_node_terminated(&self, node: &CachedNode) {
        self.metrics
            .nodes_terminated
            .get_or_create(&node_labels(node))
            .inc();
    }
}

fn node_labels(node: &CachedNode) -> NodeLabels {
    let label = |key| node.label(key).unwrap_or_default().to_owned();
    NodeLabels {
        nodepool: label(labels::NODE_POOL),
        zone: label(labels::ZONE),
    }
}
