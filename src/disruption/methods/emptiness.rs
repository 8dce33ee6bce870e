//! Emptiness (upstream's `emptiness.go`): consolidatable nodes with no pod that would have to
//! move are deleted together, as many of each pool as its `Empty` budgets allow.

use super::super::candidate::Candidate;
use super::super::decision::{Budgets, Command, Method, disrupted};
use super::by_cost;
use crate::apis::DisruptionReason;

pub(crate) fn emptiness(candidates: &[Candidate<'_>], budgets: &mut Budgets) -> Option<Command> {
    let mut empty: Vec<&Candidate<'_>> = candidates
        .iter()
        .filter(|c| c.disruptability.consolidation == Some(DisruptionReason::Empty))
        .collect();
    by_cost(&mut empty);
    let chosen: Vec<_> = empty
        .into_iter()
        .filter(|c| budgets.take(c.pool_name(), DisruptionReason::Empty))
        .map(disrupted)
        .collect();
    (!chosen.is_empty()).then(|| Command {
        method: Method::Emptiness,
        reason: DisruptionReason::Empty,
        candidates: chosen,
        replacements: Vec::new(),
        scores: Vec::new(),
    })
}
