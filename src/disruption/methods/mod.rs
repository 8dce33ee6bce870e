//! The disruption methods, one file each as upstream splits them
//! (`pkg/controllers/disruption/{repair,emptiness,staticdrift,drift,multinodeconsolidation,singlenodeconsolidation}.go`).
//! Each takes the judged candidates and what the budgets still allow, and returns a command or
//! nothing; repair, consolidation and drift record why they kept the candidates they looked at.

mod drift;
mod emptiness;
mod multi_node;
mod repair;
mod single_node;
mod static_drift;

pub(super) use drift::drift;
pub(super) use emptiness::emptiness;
pub(super) use multi_node::multi_node;
pub(super) use repair::{RepairBlocked, due as due_for_repair, repair};
pub(super) use single_node::single_node;
pub(super) use static_drift::static_drift;

use super::candidate::Candidate;
use super::consolidation::Replacement;
use crate::apis::{ConsolidationPolicy, DisruptionReason};

/// The candidates consolidation may consider beyond emptiness, cheapest to disrupt first: those
/// of `WhenEmptyOrUnderutilized` and `Balanced` pools (the latter's moves are then scored, see
/// [`balanced`](super::balanced)).
fn consolidatable<'c, 'a>(candidates: &'c [Candidate<'a>]) -> Vec<&'c Candidate<'a>> {
    let mut out: Vec<&Candidate<'a>> = candidates
        .iter()
        .filter(|c| c.disruptability.consolidation.is_some())
        .filter(|c| {
            c.pool.is_some_and(|p| {
                matches!(
                    p.spec.disruption.consolidation_policy,
                    ConsolidationPolicy::WhenEmptyOrUnderutilized | ConsolidationPolicy::Balanced
                )
            })
        })
        .collect();
    by_cost(&mut out);
    out
}

/// The hourly price a replacement is expected to cost: its cheapest remaining option, which
/// the launch tries first.
pub(super) fn replacement_price(replacements: &[Replacement]) -> f64 {
    replacements
        .iter()
        .map(|r| {
            r.claim
                .instance_types
                .iter()
                .map(|o| o.price)
                .fold(f64::INFINITY, f64::min)
        })
        .filter(|p| p.is_finite())
        .sum()
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
