//! Repair (upstream's `repair.go`, behind the `NodeRepair` gate): a node whose Node condition
//! has been unhealthy past its cloud's toleration is replaced, one at a time, under the pools'
//! `Unhealthy` budgets, before drift and consolidation are tried. Longest overdue first.
//!
//! As upstream, repair replaces before it terminates (the node's pods get a new home first)
//! and does not wait for pods that block eviction unless the claim has a
//! `terminationGracePeriod` to bound the drain; without one such a node is kept, with why.
//!
//! Two vetoes, as upstream: `karpenter.sh/do-not-repair` on the Node or the NodeClaim, and a
//! pool where more than 20% of the nodes are unhealthy (counted by condition, whatever the
//! toleration): then the fault is likely not the nodes', and replacing them would not help.

use super::super::candidate::Candidate;
use super::super::consolidation::{Outcome, simulate};
use super::super::decision::{Budgets, Command, Input, Method, disrupted};
use super::super::disruptability::BlockerKind;
use super::super::repair::{Unhealthy, unhealthy};
use crate::apis::{DisruptionReason, labels};
use std::collections::BTreeMap;

/// Upstream's `repairUnhealthyThreshold`: a pool with more unhealthy nodes than this share
/// (rounded up) is not repaired.
const UNHEALTHY_THRESHOLD_PERCENT: u64 = 20;

/// Why repair leaves a due claim alone: the Event reason and its message.
pub(crate) type RepairBlocked = BTreeMap<String, (&'static str, String)>;

/// The judged claims that are due for repair, with their unhealthy condition.
pub(crate) fn due<'c, 'a>(
    input: &Input<'_>,
    candidates: &'c [Candidate<'a>],
) -> Vec<(&'c Candidate<'a>, Unhealthy)> {
    if input.repair_policies.is_empty() {
        return Vec::new();
    }
    candidates
        .iter()
        .filter(|c| c.pool.is_some())
        .filter(|c| {
            !c.disruptability.blockers.iter().any(|b| {
                matches!(
                    b.kind,
                    BlockerKind::Terminating | BlockerKind::Disrupting | BlockerKind::NoNodePool
                )
            })
        })
        .filter_map(|c| Some((c, unhealthy(c.node?, input.repair_policies, input.now)?)))
        .collect()
}

pub(crate) fn repair(
    input: &Input<'_>,
    candidates: &[Candidate<'_>],
    budgets: &mut Budgets,
    kept: &mut BTreeMap<String, String>,
    blocked: &mut RepairBlocked,
) -> Option<Command> {
    let mut due = due(input, candidates);
    due.retain(|(c, _)| match vetoed(input, candidates, c) {
        Some(veto) => {
            blocked.insert(c.name().to_owned(), veto);
            false
        }
        None => true,
    });
    due.sort_by(|(a, ua), (b, ub)| {
        ua.eligible_at
            .cmp(&ub.eligible_at)
            .then_with(|| a.disruption_cost.total_cmp(&b.disruption_cost))
            .then_with(|| a.name().cmp(b.name()))
    });
    for (candidate, unhealthy) in due {
        let pod_blocked = candidate.disruptability.blockers.iter().any(|b| {
            matches!(
                b.kind,
                BlockerKind::DoNotDisruptPod | BlockerKind::PodDisruptionBudget
            )
        });
        if pod_blocked && candidate.claim.spec.termination_grace_period.is_none() {
            kept.insert(
                candidate.name().to_owned(),
                format!(
                    "{}, but repair requires a termination grace period to bypass blocking pods",
                    unhealthy.describe()
                ),
            );
            continue;
        }
        if !budgets.take(candidate.pool_name(), DisruptionReason::Unhealthy) {
            continue;
        }
        let command = |replacements| Command {
            method: Method::Repair,
            reason: DisruptionReason::Unhealthy,
            candidates: vec![disrupted(candidate)],
            replacements,
            scores: Vec::new(),
        };
        match simulate(&input.snapshot, &[candidate]) {
            Outcome::Delete => return Some(command(Vec::new())),
            Outcome::Replace(replacements) => return Some(command(replacements)),
            Outcome::Keep(why) => {
                kept.insert(
                    candidate.name().to_owned(),
                    format!("{}, but {why}", unhealthy.describe()),
                );
            }
        }
    }
    None
}

/// Upstream's vetoes on repairing `candidate`, with the Event that says so.
fn vetoed(
    input: &Input<'_>,
    candidates: &[Candidate<'_>],
    candidate: &Candidate<'_>,
) -> Option<(&'static str, String)> {
    let annotated = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(labels::DO_NOT_REPAIR))
            .is_some_and(|v| v == "true")
    };
    if annotated(&candidate.claim.metadata)
        || candidate
            .node
            .is_some_and(|n| n.annotation(labels::DO_NOT_REPAIR) == Some("true"))
    {
        return Some((
            "DisruptionBlocked",
            format!(
                "Cannot disrupt NodeClaim: repair is blocked through the \"{}\" annotation",
                labels::DO_NOT_REPAIR
            ),
        ));
    }
    let pool = candidate.pool_name();
    let nodes: Vec<_> = candidates
        .iter()
        .filter(|c| c.pool_name() == pool)
        .filter_map(|c| c.node)
        .collect();
    let sick = nodes
        .iter()
        .filter(|n| super::super::repair::matches_any(n, input.repair_policies))
        .count();
    let total = u64::try_from(nodes.len()).unwrap_or(u64::MAX);
    let threshold = (total * UNHEALTHY_THRESHOLD_PERCENT).div_ceil(100);
    (u64::try_from(sick).unwrap_or(u64::MAX) > threshold).then(|| {
        (
            "NodeRepairBlocked",
            format!("more than {UNHEALTHY_THRESHOLD_PERCENT}% of nodes in nodepool {pool:?} are unhealthy"),
        )
    })
}
