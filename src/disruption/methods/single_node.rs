//! Single-node consolidation (upstream's `singlenodeconsolidation.go`): the first candidate,
//! cheapest to disrupt first, whose pods fit on the rest of the cluster (delete) or on the rest
//! plus one cheaper new node (replace). Each candidate it keeps is recorded with why.

use super::super::candidate::Candidate;
use super::super::consolidation::{Outcome, consolidate};
use super::super::decision::{Budgets, Command, Input, Method, disrupted};
use super::{CONSOLIDATION, consolidatable};
use std::collections::BTreeMap;

pub(crate) fn single_node(
    input: &Input<'_>,
    candidates: &[Candidate<'_>],
    budgets: &mut Budgets,
    kept: &mut BTreeMap<String, String>,
) -> Option<Command> {
    for candidate in consolidatable(candidates)
        .into_iter()
        .take(input.options.single_node_max)
    {
        if !budgets.allows(candidate.pool_name(), CONSOLIDATION) {
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
        return Some(Command {
            method: Method::SingleNodeConsolidation,
            reason: CONSOLIDATION,
            candidates: vec![disrupted(candidate)],
            replacements,
        });
    }
    None
}
