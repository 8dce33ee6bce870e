//! The disruption methods, one file each as upstream splits them
//! (`pkg/controllers/disruption/{emptiness,drift,multinodeconsolidation,singlenodeconsolidation}.go`).
//! Each takes the judged candidates and what the budgets still allow, and returns a command or
//! nothing; consolidation and drift record why they kept the candidates they looked at.

mod drift;
mod emptiness;
mod multi_node;
mod single_node;

pub(super) use drift::drift;
pub(super) use emptiness::emptiness;
pub(super) use multi_node::multi_node;
pub(super) use single_node::single_node;

use super::candidate::Candidate;
use crate::apis::{ConsolidationPolicy, DisruptionReason};

/// The candidates consolidation may consider beyond emptiness, cheapest to disrupt first.
/// Pools with `consolidationPolicy: Balanced` are left to emptiness and drift for now: upstream
/// scores each of their moves (designs/balanced-consolidation.md), which is not built yet.
fn consolidatable<'c, 'a>(candidates: &'c [Candidate<'a>]) -> Vec<&'c Candidate<'a>> {
    let mut out: Vec<&Candidate<'a>> = candidates
        .iter()
        .filter(|c| c.disruptability.consolidation.is_some())
        .filter(|c| {
            c.pool.is_some_and(|p| {
                p.spec.disruption.consolidation_policy
                    == ConsolidationPolicy::WhenEmptyOrUnderutilized
            })
        })
        .collect();
    by_cost(&mut out);
    out
}

/// Orders candidates cheapest to disrupt first, then by name so equal costs keep one order.
fn by_cost(candidates: &mut [&Candidate<'_>]) {
    candidates.sort_by(|a, b| {
        a.disruption_cost
            .total_cmp(&b.disruption_cost)
            .then_with(|| a.name().cmp(b.name()))
    });
}

/// The reason consolidation counts against the budgets (upstream: `Underutilized`).
const CONSOLIDATION: DisruptionReason = DisruptionReason::Underutilized;
