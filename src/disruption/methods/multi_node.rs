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

pub(crate) fn multi_node(
    input: &Input<'_>,
    candidates: &[Candidate<'_>],
    budgets: &mut Budgets,
    rejected: &mut Vec<(String, balanced::Score)>,
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
    let mut best: Option<(usize, Outcome, balanced::PoolScores)> = None;
    // Upstream records one rejection per pass: the last window its score turned down.
    let mut last_rejected: Option<(String, balanced::Score)> = None;
    while low <= high {
        let mid = (low + high) / 2;
        if !room.could_move(&pool[..mid]) {
            high = mid - 1;
            continue;
        }
        let outcome = consolidate(
            &input.snapshot,
            &pool[..mid],
            input.options.spot_to_spot,
            true,
        );
        let price = match &outcome {
            Outcome::Keep(_) => {
                high = mid - 1;
                continue;
            }
            Outcome::Replace(r) => replacement_price(r),
            Outcome::Delete => 0.0,
        };
        let scores = balanced::scores(&pool[..mid], price, &totals);
        if let Some(failed) = scores.iter().find(|(_, s)| !s.approved()) {
            last_rejected = Some(failed.clone());
            high = mid - 1;
        } else {
            best = Some((mid, outcome, scores));
            low = mid + 1;
        }
    }
    rejected.extend(last_rejected);
    let (n, outcome, scores) = best?;
    let replacements = match outcome {
        Outcome::Replace(r) => r,
        _ => Vec::new(),
    };
    Some(Command {
        method: Method::MultiNodeConsolidation,
        reason: CONSOLIDATION,
        candidates: pool[..n].iter().map(|c| disrupted(c)).collect(),
        replacements,
        scores,
    })
}
