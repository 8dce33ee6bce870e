//! Repair (upstream's `repair.go`, behind the `NodeRepair` gate): a node whose Node condition
//! has been unhealthy past its cloud's toleration is replaced, one at a time, under the pools'
//! `Unhealthy` budgets, before drift and consolidation are tried. Longest overdue first.
//!
//! As upstream, repair replaces before it terminates (the node's pods get a new home first)
//! and does not wait for pods that block eviction unless the claim has a
//! `terminationGracePeriod` to bound the drain; without one such a node is kept, with why.

use super::super::candidate::Candidate;
use super::super::candidates::BlockerKind;
use super::super::consolidation::{Outcome, simulate};
use super::super::decision::{Budgets, Command, Input, Method, disrupted};
use super::super::repair::{Unhealthy, unhealthy};
use crate::apis::DisruptionReason;
use std::collections::BTreeMap;

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
) -> Option<Command> {
    let mut due = due(input, candidates);
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
