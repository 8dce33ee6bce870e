//! Single-node consolidation (upstream's `singlenodeconsolidation.go`): the first candidate,
//! cheapest to disrupt first, whose pods fit on the rest of the cluster (delete) or on the rest
//! plus one cheaper new node (replace). Each candidate it keeps is recorded with why. A
//! `Balanced` pool's node is skipped when even deleting it would not pass its score (upstream's
//! candidate filter), and its move taken only when the move's score passes.

use super::super::balanced;
use super::super::candidate::Candidate;
use super::super::consolidation::{Outcome, consolidate};
use super::super::decision::{Budgets, Command, Input, Method, disrupted};
use super::super::room::Room;
use super::{CONSOLIDATION, consolidatable, replacement_price};
use std::collections::BTreeMap;

pub(crate) fn single_node(
    input: &Input<'_>,
    candidates: &[Candidate<'_>],
    budgets: &mut Budgets,
    kept: &mut BTreeMap<String, String>,
    rejected: &mut Vec<(String, balanced::Score)>,
) -> Option<Command> {
    let totals = balanced::pool_totals(candidates);
    let room = Room::of(&input.snapshot);
    for candidate in consolidatable(candidates)
        .into_iter()
        .take(input.options.single_node_max)
    {
        if !budgets.allows(candidate.pool_name(), CONSOLIDATION) {
            continue;
        }
        if let Some(best) = balanced::delete_score(candidate, &totals)
            && !best.approved()
        {
            kept.insert(
                candidate.name().to_owned(),
                format!(
                    "not worth disrupting under consolidationPolicy Balanced, even deleted outright: {}",
                    best.describe()
                ),
            );
            continue;
        }
        if !room.could_move(&[candidate]) {
            kept.insert(
                candidate.name().to_owned(),
                "its pods need more room than the rest of the cluster has free plus any instance type cheaper than it"
                    .to_owned(),
            );
            continue;
        }
        let replacements = match consolidate(
            &input.snapshot,
            &[candidate],
            input.options.spot_to_spot,
            false,
        ) {
            Outcome::Delete => Vec::new(),
            Outcome::Replace(r) => r,
            Outcome::Keep(why) => {
                kept.insert(candidate.name().to_owned(), why);
                continue;
            }
        };
        let scores = balanced::scores(&[candidate], replacement_price(&replacements), &totals);
        if let Some((pool, score)) = scores.iter().find(|(_, s)| !s.approved()) {
            kept.insert(
                candidate.name().to_owned(),
                format!(
                    "its move is not worth it under consolidationPolicy Balanced: {}",
                    score.describe()
                ),
            );
            rejected.push((pool.clone(), *score));
            continue;
        }
        return Some(Command {
            method: Method::SingleNodeConsolidation,
            reason: CONSOLIDATION,
            candidates: vec![disrupted(candidate)],
            replacements,
            scores,
        });
    }
    None
}
