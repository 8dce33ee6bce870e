//! Whether a NodeClaim can be disrupted now, and if not what blocks it: the disruption layer's
//! own answer ([`crate::disruption::disruptability`], which the agent's disruption controller
//! takes its candidates from), computed from the objects `explain` lists.

use super::{ClusterObjects, label, node_name_of};
use crate::apis::{NodeClaim, NodePool, labels};
use crate::disruption::{ClaimView, Disruptability, disruptability::is_disrupting};
use crate::scheduling::PodView;
use crate::state::CachedNode;
use crate::state::CachedPod;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

pub(super) fn disruptability(
    claim: &NodeClaim,
    pool: Option<&NodePool>,
    node: Option<&CachedNode>,
    pods_on_node: &[&Pod],
    cluster: &ClusterObjects,
    now: Timestamp,
) -> Disruptability {
    let pods: Vec<CachedPod> = pods_on_node
        .iter()
        .map(|p| CachedPod::from((*p).clone()))
        .collect();
    let pods: Vec<&CachedPod> = pods.iter().collect();
    let pool_name = label(&claim.metadata, labels::NODE_POOL);
    let pool_claims: Vec<&NodeClaim> = cluster
        .node_claims
        .iter()
        .filter(|c| pool_name.is_some() && label(&c.metadata, labels::NODE_POOL) == pool_name)
        .collect();
    let node_of = |c: &NodeClaim| {
        let id = c.status.as_ref()?.provider_id.as_deref()?;
        cluster
            .nodes
            .iter()
            .find(|n| n.provider_id.as_deref() == Some(id))
    };
    let disrupting = |c: &NodeClaim| node_of(c).is_some_and(is_disrupting);
    let pending = |key: &str| {
        cluster.pods.iter().any(|p| {
            node_name_of(p).is_none()
                && !p.is_terminal()
                && p.metadata.namespace.as_deref().unwrap_or_default()
                    == key.split('/').next().unwrap_or_default()
                && p.metadata.name.as_deref() == key.split('/').nth(1)
        })
    };
    crate::disruption::disruptability(
        &ClaimView {
            claim,
            pool,
            node,
            pods: &pods,
            pool_claims: &pool_claims,
            disrupting: &disrupting,
            pending: &pending,
        },
        &cluster.pod_disruption_budgets,
        now,
    )
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::disruption::BlockerKind;
    use crate::explain::ClaimExplanation;
    use crate::explain::fixtures::*;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use serde_json::json;

    fn kinds(e: &ClaimExplanation) -> Vec<BlockerKind> {
        e.disruption.blockers.iter().map(|b| b.kind).collect()
    }

    #[test]
    fn nothing_blocks_an_initialized_claim_in_a_consolidating_pool() {
        let cluster = ClusterObjects {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            ..ClusterObjects::default()
        };
        let e = explained(&cluster);
        assert!(e.disruption.disruptable_now, "{:?}", e.disruption);
    }

    /// A `do-not-disrupt` pod is never evicted, so a budget covering it blocks nothing (as
    /// upstream's `pdb.Limits` skips pods it would not evict); the budget blocks through the
    /// other pod.
    #[test]
    fn do_not_disrupt_pods_and_exhausted_pdbs_block_disruption() {
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
        }))
        .expect("pdb");
        let cluster = ClusterObjects {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            pods: vec![
                pod(
                    "web-1",
                    Some("n1"),
                    json!({"metadata": {"annotations": {labels::DO_NOT_DISRUPT: "true"}}}),
                ),
                pod("web-2", Some("n1"), json!({})),
            ],
            pod_disruption_budgets: vec![pdb],
            ..ClusterObjects::default()
        };
        let e = explained(&cluster);
        assert!(!e.disruption.disruptable_now);
        assert_eq!(
            kinds(&e),
            [
                BlockerKind::DoNotDisruptPod,
                BlockerKind::PodDisruptionBudget
            ]
        );
    }

    #[test]
    fn a_zero_budget_blocks_disruption() {
        let zero = pool(json!({"consolidateAfter": "0s", "budgets": [{"nodes": "0"}]}));
        let cluster = ClusterObjects {
            node_pools: vec![zero],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            ..ClusterObjects::default()
        };
        assert_eq!(kinds(&explained(&cluster)), [BlockerKind::Budget]);
    }

    #[test]
    fn a_scheduled_budget_counts_only_inside_its_window() {
        // Monday 10:00 UTC: inside "09:00 on weekdays for 8h", outside "Sundays for 8h".
        let weekdays = pool(
            json!({"consolidateAfter": "0s", "budgets": [{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}]}),
        );
        let sundays = pool(
            json!({"consolidateAfter": "0s", "budgets": [{"nodes": "0", "schedule": "0 0 * * sun", "duration": "8h"}]}),
        );
        let base = ClusterObjects {
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            ..ClusterObjects::default()
        };
        let weekday_cluster = ClusterObjects {
            node_pools: vec![weekdays],
            ..base.clone()
        };
        let e = explained(&weekday_cluster);
        assert_eq!(kinds(&e), [BlockerKind::Budget]);
        assert!(
            e.disruption.blockers[0].message.contains("active now"),
            "{}",
            e.disruption.blockers[0].message
        );
        let sunday_cluster = ClusterObjects {
            node_pools: vec![sundays],
            ..base
        };
        assert!(explained(&sunday_cluster).disruption.disruptable_now);
    }

    #[test]
    fn when_empty_pools_keep_nodes_with_pods_and_consolidate_after_makes_it_wait() {
        let when_empty =
            pool(json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmpty"}));
        let mut cluster = ClusterObjects {
            node_pools: vec![when_empty],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            pods: vec![pod("web-1", Some("n1"), json!({}))],
            ..ClusterObjects::default()
        };
        assert_eq!(kinds(&explained(&cluster)), [BlockerKind::NotEmpty]);
        cluster.node_pools = vec![pool(json!({"consolidateAfter": "2h"}))];
        let e = explained(&cluster);
        assert_eq!(kinds(&e), [BlockerKind::ConsolidateAfter]);
        assert!(
            e.disruption.blockers[0].message.contains("in 61m"),
            "{}",
            e.disruption.blockers[0].message
        );
        cluster.node_pools = vec![pool(json!({"consolidateAfter": "Never"}))];
        assert_eq!(
            kinds(&explained(&cluster)),
            [BlockerKind::ConsolidationDisabled]
        );
    }
}
