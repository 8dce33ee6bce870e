//! Multi-node consolidation (upstream's `multinodeconsolidation.go`): the largest prefix of the
//! candidates, cheapest to disrupt first and at most `multi_node_max` of them, whose pods fit on
//! the rest of the cluster plus at most one cheaper new node. Found by binary search over the
//! prefix length, from two candidates up, as upstream's `firstNConsolidationOption`. A prefix
//! with nodes of `Balanced` pools counts only if its move passes their scores.

use super::super::balanced;
use super::super::candidate::Candidate;
use super::super::consolidation::{Outcome, consolidate};
use super::super::decision::{Budgets, Command, Input, Method, disrupted};
use super::super::room::Room;
use super::{CONSOLIDATION, consolidatable, replacement_price};
use std::collections::BTreeMap;

pub(crate) fn multi_node(
    input: &Input<'_>,
    candidates: &[Candidate<'_>],
    budgets: &mut Budgets,
    _kept: &mut BTreeMap<String, String>,
) -> Option<Command> {
    let pool: Vec<&Candidate<'_>> = consolidatable(candidates)
        .into_iter()
        .filter(|c| budgets.take(c.pool_name(), CONSOLIDATION))
        .take(input.options.multi_node_max)
        .collect();
    if pool.len() < 2 {
        return None;
    }
    let totals = balanced::pool_totals(candidates);
    let room = Room::of(&input.snapshot);
    let (mut low, mut high) = (2, pool.len());
    let mut best: Option<(usize, Outcome)> = None;
    while low <= high {
        let mid = (low + high) / 2;
        if !room.could_move(&pool[..mid]) {
            high = mid - 1;
            continue;
        }
        match consolidate(
            &input.snapshot,
            &pool[..mid],
            input.options.spot_to_spot,
            true,
        ) {
            Outcome::Keep(_) => high = mid - 1,
            Outcome::Replace(r)
                if balanced::rejected(&pool[..mid], replacement_price(&r), &totals).is_some() =>
            {
                high = mid - 1
            }
            Outcome::Delete if balanced::rejected(&pool[..mid], 0.0, &totals).is_some() => {
                high = mid - 1
            }
            outcome => {
                best = Some((mid, outcome));
                low = mid + 1;
            }
        }
    }
    let (n, outcome) = best?;
    let replacements = match outcome {
        Outcome::Replace(r) => r,
        _ => Vec::new(),
    };
    Some(Command {
        method: Method::MultiNodeConsolidation,
        reason: CONSOLIDATION,
        candidates: pool[..n].iter().map(|c| disrupted(c)).collect(),
        replacements,
    })
}
