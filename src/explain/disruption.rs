//! Whether a NodeClaim can be disrupted now, and if not what blocks it: deletion under way, not
//! initialized, `karpenter.sh/do-not-disrupt` on the node, claim or a pod, exhausted
//! PodDisruptionBudgets, its NodePool's disruption budgets, `consolidateAfter` and the
//! consolidation policy (upstream's disruption controller checks the same). Whether consolidation
//! then removes it depends on whether its pods fit elsewhere for less, which this does not
//! simulate.

use super::{
    ClaimPhase, ClaimState, Cluster, annotation, human_duration, is_daemon_or_mirror, is_terminal,
    label, name_of, plural, pod_key,
};
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{Budget, ConsolidationPolicy, DisruptionReason, NodeClaim, NodePool, labels};
use crate::scheduling::selector::Selector;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use std::collections::BTreeMap;

/// Whether a claim can be disrupted now.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Disruptability {
    /// Nothing found blocks every way of disrupting it. Whether consolidation then removes it
    /// depends on whether its pods fit elsewhere for less, which this does not simulate.
    pub disruptable_now: bool,
    pub blockers: Vec<Blocker>,
    pub notes: Vec<String>,
}

/// Something that keeps a claim's node from being disrupted.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    pub kind: BlockerKind,
    pub message: String,
}

/// The kinds of [`Blocker`].
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockerKind {
    /// Already being deleted.
    Terminating,
    /// Not initialized yet: disruption only considers initialized nodes.
    NotInitialized,
    /// `karpenter.sh/do-not-disrupt` on the node or the claim.
    DoNotDisruptNode,
    /// `karpenter.sh/do-not-disrupt` on a pod of the node.
    DoNotDisruptPod,
    /// A PodDisruptionBudget covering a pod of the node allows no disruption.
    PodDisruptionBudget,
    /// The NodePool's disruption budgets allow no more disruptions now.
    Budget,
    /// `consolidateAfter` has not passed since the last pod event.
    ConsolidateAfter,
    /// `consolidateAfter: Never`.
    ConsolidationDisabled,
    /// `consolidationPolicy: WhenEmpty` and pods run on it.
    NotEmpty,
    /// Its NodePool does not exist.
    NoNodePool,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn disruptability(
    claim: &NodeClaim,
    state: &ClaimState,
    pool: Option<&NodePool>,
    pool_name: Option<&str>,
    node: Option<&Node>,
    pods_on_node: &[&Pod],
    cluster: &Cluster,
    now: Timestamp,
) -> Disruptability {
    let mut blockers = Vec::new();
    let mut notes = Vec::new();
    let block = |blockers: &mut Vec<Blocker>, kind, message: String| {
        blockers.push(Blocker { kind, message })
    };

    if state.phase == ClaimPhase::Terminating {
        block(
            &mut blockers,
            BlockerKind::Terminating,
            "it is already being deleted".to_owned(),
        );
        return Disruptability {
            disruptable_now: false,
            blockers,
            notes,
        };
    }
    if !claim.is_true(cond::INITIALIZED) {
        block(
            &mut blockers,
            BlockerKind::NotInitialized,
            format!("it is not initialized yet ({state}); only initialized nodes are disrupted"),
        );
        return Disruptability {
            disruptable_now: false,
            blockers,
            notes,
        };
    }
    let node_says = node
        .and_then(|n| annotation(&n.metadata, labels::DO_NOT_DISRUPT))
        .map(|v| ("node", v));
    let claim_says = annotation(&claim.metadata, labels::DO_NOT_DISRUPT).map(|v| ("nodeclaim", v));
    if let Some((on, _)) = node_says.or(claim_says).filter(|(_, v)| *v == "true") {
        block(
            &mut blockers,
            BlockerKind::DoNotDisruptNode,
            format!("the {on} has {}: \"true\"", labels::DO_NOT_DISRUPT),
        );
    }
    let workload: Vec<&Pod> = pods_on_node
        .iter()
        .copied()
        .filter(|p| !is_daemon_or_mirror(p) && !is_terminal(p))
        .collect();
    for pod in &workload {
        if annotation(&pod.metadata, labels::DO_NOT_DISRUPT) == Some("true") {
            block(
                &mut blockers,
                BlockerKind::DoNotDisruptPod,
                format!(
                    "pod {} has {}: \"true\"",
                    pod_key(pod),
                    labels::DO_NOT_DISRUPT
                ),
            );
        }
    }
    for pdb in &cluster.pod_disruption_budgets {
        let Some(allowed) = pdb.status.as_ref().map(|s| s.disruptions_allowed) else {
            continue;
        };
        if allowed > 0 {
            continue;
        }
        let selector = Selector::from_api(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()));
        let covered: Vec<String> = workload
            .iter()
            .filter(|p| p.metadata.namespace == pdb.metadata.namespace)
            .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
            .map(|p| pod_key(p))
            .collect();
        if !covered.is_empty() {
            block(
                &mut blockers,
                BlockerKind::PodDisruptionBudget,
                format!(
                    "PodDisruptionBudget {}/{} allows 0 disruptions and covers {} {}",
                    pdb.metadata.namespace.as_deref().unwrap_or_default(),
                    name_of(&pdb.metadata),
                    plural(covered.len(), "pod", "pods"),
                    covered.join(", ")
                ),
            );
        }
    }
    let common_blocked = !blockers.is_empty();

    let Some(pool) = pool else {
        let message = match pool_name {
            Some(p) => format!("its NodePool {p} does not exist, so no disruption method applies"),
            None => format!(
                "it has no {} label, so no disruption method applies",
                labels::NODE_POOL
            ),
        };
        block(&mut blockers, BlockerKind::NoNodePool, message);
        return Disruptability {
            disruptable_now: false,
            blockers,
            notes,
        };
    };
    let pool_name = name_of(&pool.metadata);
    let disruption = &pool.spec.disruption;

    // Budgets: how many of the pool's nodes may be disrupted now, for a reason.
    let members: Vec<&NodeClaim> = cluster
        .node_claims
        .iter()
        .filter(|c| label(&c.metadata, labels::NODE_POOL) == Some(pool_name.as_str()))
        .collect();
    let counted = members
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .count();
    let disrupting = members.len() - counted;
    let budget_allows =
        |reason: DisruptionReason, notes: &mut Vec<String>| -> (u64, Option<String>) {
            let mut tightest: Option<(u64, String)> = None;
            for (i, budget) in disruption.budgets.iter().enumerate() {
                if budget
                    .reasons
                    .as_ref()
                    .is_some_and(|r| !r.contains(&reason))
                {
                    continue;
                }
                let active = match budget.is_active(now) {
                    Ok(active) => active,
                    Err(e) => {
                        notes.push(format!(
                            "budget {} of NodePool {pool_name}: {e}; counted as active",
                            i + 1
                        ));
                        true
                    }
                };
                if !active {
                    continue;
                }
                let Some(allowed) = budget.nodes_allowed(counted) else {
                    notes.push(format!(
                        "budget {} of NodePool {pool_name}: nodes {:?} not understood; ignored",
                        i + 1,
                        budget.nodes
                    ));
                    continue;
                };
                if tightest.as_ref().is_none_or(|(a, _)| allowed < *a) {
                    tightest = Some((allowed, describe_budget(i, budget)));
                }
            }
            match tightest {
                Some((allowed, which)) => (allowed.saturating_sub(disrupting as u64), Some(which)),
                None => (u64::MAX, None),
            }
        };
    let budget_blocker = |reason: DisruptionReason, notes: &mut Vec<String>| -> Option<Blocker> {
        let (allowed, which) = budget_allows(reason, notes);
        (allowed == 0).then(|| Blocker {
            kind: BlockerKind::Budget,
            message: format!(
                "NodePool {pool_name} allows no more {reason:?} disruptions now under {}; it has {counted} {}, {disrupting} being disrupted",
                which.unwrap_or_default(),
                plural(counted, "node", "nodes")
            ),
        })
    };

    // Consolidation.
    let reason = if workload.is_empty() {
        DisruptionReason::Empty
    } else {
        DisruptionReason::Underutilized
    };
    let mut consolidation: Vec<Blocker> = Vec::new();
    let consolidate_after = match disruption.consolidate_after.to_duration() {
        Ok(Some(d)) => SignedDuration::try_from(d).ok(),
        Ok(None) => {
            consolidation.push(Blocker {
                kind: BlockerKind::ConsolidationDisabled,
                message: format!("NodePool {pool_name} has consolidateAfter: Never"),
            });
            None
        }
        Err(_) => None,
    };
    if disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty && !workload.is_empty() {
        consolidation.push(Blocker {
            kind: BlockerKind::NotEmpty,
            message: format!(
                "NodePool {pool_name} consolidates only empty nodes (WhenEmpty) and {} {} on it",
                workload.len(),
                plural(workload.len(), "pod runs", "pods run")
            ),
        });
    }
    if let Some(after) = consolidate_after {
        let last_pod_event = claim
            .status
            .as_ref()
            .and_then(|s| s.last_pod_event_time.as_ref())
            .map(|t| t.0);
        let initialized = claim
            .condition(cond::INITIALIZED)
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.0);
        if last_pod_event.is_none() && initialized.is_some() {
            notes.push("lastPodEventTime is not set; consolidateAfter is counted from when it was initialized".to_owned());
        }
        if let Some(since) = last_pod_event.or(initialized) {
            let ready_at = since.checked_add(after).unwrap_or(since);
            if ready_at > now {
                consolidation.push(Blocker {
                    kind: BlockerKind::ConsolidateAfter,
                    message: format!(
                        "consolidateAfter is {}: the last pod event was {} ago, so consolidation considers it in {}",
                        disruption.consolidate_after.0,
                        human_duration(now.duration_since(since)),
                        human_duration(ready_at.duration_since(now))
                    ),
                });
            }
        }
    }
    if consolidation.is_empty()
        && let Some(b) = budget_blocker(reason, &mut notes)
    {
        consolidation.push(b);
    }
    let consolidation_ok = consolidation.is_empty();
    blockers.extend(consolidation);

    // Drift.
    let drifted = claim.is_true(cond::DRIFTED);
    let mut drift_ok = false;
    if drifted {
        match budget_blocker(DisruptionReason::Drifted, &mut notes) {
            Some(b) => blockers.push(b),
            None => {
                drift_ok = true;
                notes.push(
                    "it has drifted: it can be replaced regardless of consolidation".to_owned(),
                );
            }
        }
    }

    if consolidation_ok && !common_blocked {
        notes.push(format!(
            "consolidation may consider it ({reason:?}); whether it is removed depends on whether its pods fit elsewhere for less"
        ));
    }
    if let Ok(Some(expire)) = claim.spec.expire_after.to_duration() {
        let expires = claim.metadata.creation_timestamp.as_ref().and_then(|t| {
            SignedDuration::try_from(expire)
                .ok()
                .and_then(|d| t.0.checked_add(d).ok())
        });
        if let Some(at) = expires {
            notes.push(if at > now {
                format!(
                    "it expires in {} (expireAfter {}); expiry does not wait for budgets",
                    human_duration(at.duration_since(now)),
                    claim.spec.expire_after.0
                )
            } else {
                format!(
                    "it expired {} ago (expireAfter {})",
                    human_duration(now.duration_since(at)),
                    claim.spec.expire_after.0
                )
            });
        }
    }
    Disruptability {
        disruptable_now: !common_blocked && (consolidation_ok || drift_ok),
        blockers,
        notes,
    }
}

fn describe_budget(index: usize, budget: &Budget) -> String {
    let mut text = format!("budget {} (nodes {:?}", index + 1, budget.nodes);
    if let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) {
        text.push_str(&format!(
            ", schedule {schedule:?} for {duration}, active now"
        ));
    }
    if let Some(reasons) = &budget.reasons {
        let reasons: Vec<String> = reasons.iter().map(|r| format!("{r:?}")).collect();
        text.push_str(&format!(", reasons {}", reasons.join(",")));
    }
    text.push(')');
    text
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::explain::ClaimExplanation;
    use crate::explain::fixtures::*;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use serde_json::json;

    fn kinds(e: &ClaimExplanation) -> Vec<BlockerKind> {
        e.disruption.blockers.iter().map(|b| b.kind).collect()
    }

    #[test]
    fn nothing_blocks_an_initialized_claim_in_a_consolidating_pool() {
        let cluster = Cluster {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            ..Cluster::default()
        };
        let e = explained(&cluster);
        assert!(e.disruption.disruptable_now, "{:?}", e.disruption);
    }

    #[test]
    fn do_not_disrupt_pods_and_exhausted_pdbs_block_disruption() {
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
        }))
        .expect("pdb");
        let cluster = Cluster {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            pods: vec![pod(
                "web-1",
                Some("n1"),
                json!({"metadata": {"annotations": {labels::DO_NOT_DISRUPT: "true"}}}),
            )],
            pod_disruption_budgets: vec![pdb],
            ..Cluster::default()
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
        let cluster = Cluster {
            node_pools: vec![zero],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            ..Cluster::default()
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
        let base = Cluster {
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            ..Cluster::default()
        };
        let weekday_cluster = Cluster {
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
        let sunday_cluster = Cluster {
            node_pools: vec![sundays],
            ..base
        };
        assert!(explained(&sunday_cluster).disruption.disruptable_now);
    }

    #[test]
    fn when_empty_pools_keep_nodes_with_pods_and_consolidate_after_makes_it_wait() {
        let when_empty =
            pool(json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmpty"}));
        let mut cluster = Cluster {
            node_pools: vec![when_empty],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            pods: vec![pod("web-1", Some("n1"), json!({}))],
            ..Cluster::default()
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
