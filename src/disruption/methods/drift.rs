//! Drift (upstream's `drift.go`): drifted nodes are replaced whatever they cost, one at a time,
//! under the pools' `Drifted` budgets. Empty drifted nodes go first, together; then the
//! cheapest to disrupt whose pods fit on the rest of the cluster plus any new nodes they need.

use super::super::candidate::Candidate;
use super::super::consolidation::{Outcome, simulate};
use super::super::decision::{Budgets, Command, Input, Method, disrupted};
use super::by_cost;
use crate::apis::DisruptionReason;
use std::collections::BTreeMap;

pub(crate) fn drift(
    input: &Input<'_>,
    candidates: &[Candidate<'_>],
    budgets: &mut Budgets,
    kept: &mut BTreeMap<String, String>,
) -> Option<Command> {
    let mut drifted: Vec<&Candidate<'_>> = candidates
        .iter()
        .filter(|c| c.disruptability.drift)
        // Static pools' nodes are static drift's (see `static_drift`).
        .filter(|c| !c.pool.is_some_and(|p| p.spec.is_static()))
        .collect();
    by_cost(&mut drifted);
    let command = |candidates, replacements| Command {
        method: Method::Drift,
        reason: DisruptionReason::Drifted,
        candidates,
        replacements,
        scores: Vec::new(),
    };
    let empty: Vec<_> = drifted
        .iter()
        .filter(|c| c.pods.is_empty())
        .filter(|c| budgets.take(c.pool_name(), DisruptionReason::Drifted))
        .map(|c| disrupted(c))
        .collect();
    if !empty.is_empty() {
        return Some(command(empty, Vec::new()));
    }
    for candidate in drifted.into_iter().filter(|c| !c.pods.is_empty()) {
        if !budgets.take(candidate.pool_name(), DisruptionReason::Drifted) {
            continue;
        }
        match simulate(&input.snapshot, &[candidate]) {
            Outcome::Delete => return Some(command(vec![disrupted(candidate)], Vec::new())),
            Outcome::Replace(replacements) => {
                return Some(command(vec![disrupted(candidate)], replacements));
            }
            Outcome::Keep(why) => {
                kept.insert(candidate.name().to_owned(), format!("drifted, but {why}"));
            }
        }
    }
    None
}
