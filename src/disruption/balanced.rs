//! `consolidationPolicy: Balanced`: a consolidation move must save enough to be worth the pods it
//! disrupts (upstream's designs/balanced-consolidation.md).
//!
//! A move's score is its share of the pool's hourly price saved over its share of the pool's
//! disruption cost; it passes when the score is at least `1 / consolidationThreshold` (k,
//! default 2). A node's disruption cost here is 1 (so an empty node still counts) plus its pods'
//! eviction costs, negatives counted as 0. The pool totals are over all of the pool's claims,
//! candidates or not, so a pool where most nodes are busy does not make the idle ones look
//! precious. Emptiness and drift are not scored, as upstream.
//!
//! Multi-node moves whose nodes come from several pools are scored per Balanced pool: each
//! pool's part of the move saves its nodes' price less its share (by price) of the replacement,
//! and every Balanced pool involved must pass.

use super::candidate::{Candidate, eviction_cost};
use crate::apis::{ConsolidationPolicy, NodePool};
use std::collections::HashMap;

/// Upstream's default `consolidationThreshold`.
pub(crate) const DEFAULT_THRESHOLD: f64 = 2.0;

/// A pool's price and disruption cost, the denominators of its moves' scores.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PoolTotals {
    /// $/h of the pool's nodes whose price is known.
    pub price: f64,
    pub disruption: f64,
}

/// Per pool, over every judged claim.
pub(crate) fn pool_totals(candidates: &[Candidate<'_>]) -> HashMap<String, PoolTotals> {
    let mut totals: HashMap<String, PoolTotals> = HashMap::new();
    for candidate in candidates {
        let t = totals.entry(candidate.pool_name().to_owned()).or_default();
        t.price += candidate.price.unwrap_or_default();
        t.disruption += node_disruption(candidate);
    }
    totals
}

/// The node's disruption cost for scoring: 1 plus its pods' non-negative eviction costs.
pub(crate) fn node_disruption(candidate: &Candidate<'_>) -> f64 {
    1.0 + candidate
        .pods
        .iter()
        .map(|p| eviction_cost(p).max(0.0))
        .sum::<f64>()
}

/// Whether the pool scores its consolidation moves.
pub(crate) fn is_balanced(pool: Option<&NodePool>) -> bool {
    pool.is_some_and(|p| p.spec.disruption.consolidation_policy == ConsolidationPolicy::Balanced)
}

/// The pool's k: its `consolidationThreshold` when usable, else the default. A value an older
/// CRD let through (zero, negative) is not usable.
pub(crate) fn threshold(pool: &NodePool) -> f64 {
    pool.spec
        .disruption
        .consolidation_threshold
        .filter(|k| k.is_finite() && *k > 0.0)
        .unwrap_or(DEFAULT_THRESHOLD)
}

/// One move's score against its pool.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score {
    pub savings_fraction: f64,
    pub disruption_fraction: f64,
    pub threshold: f64,
}

impl Score {
    /// savings fraction / disruption fraction; 0 when nothing is saved.
    pub fn value(&self) -> f64 {
        if self.savings_fraction <= 0.0 || self.disruption_fraction <= 0.0 {
            return 0.0;
        }
        self.savings_fraction / self.disruption_fraction
    }

    /// Whether the move is worth it: score ≥ 1/k, and something is saved.
    pub fn approved(&self) -> bool {
        self.savings_fraction > 0.0 && self.value() >= 1.0 / self.threshold - 1e-12
    }

    /// Upstream's `ConsolidationApproved` note: "score 3.33 >= threshold 0.50 (k: 2, savings
    /// 12.5%, disruption 3.8%)".
    pub(crate) fn approved_note(&self) -> String {
        let k = if self.threshold.fract() == 0.0 {
            format!("{:.0}", self.threshold)
        } else {
            format!("{}", self.threshold)
        };
        format!(
            "score {:.2} >= threshold {:.2} (k: {k}, savings {:.1}%, disruption {:.1}%)",
            self.value(),
            1.0 / self.threshold,
            self.savings_fraction * 100.0,
            self.disruption_fraction * 100.0
        )
    }

    /// Upstream's event wording, e.g. "score 0.42 < threshold 0.50 (consolidationThreshold:
    /// 2.0, savings 4.2%, disruption 10.0%)".
    pub fn describe(&self) -> String {
        let sign = if self.approved() { ">=" } else { "<" };
        format!(
            "score {:.2} {sign} threshold {:.2} (consolidationThreshold: {:.1}, savings {:.1}%, disruption {:.1}%)",
            self.value(),
            1.0 / self.threshold,
            self.threshold,
            self.savings_fraction * 100.0,
            self.disruption_fraction * 100.0
        )
    }
}

/// Scores the part of a move that takes `nodes` (all of one pool) away, where that part's
/// share of the replacement costs `replacement_price` $/h.
pub(crate) fn score(
    nodes: &[&Candidate<'_>],
    replacement_price: f64,
    totals: PoolTotals,
    k: f64,
) -> Score {
    let price: f64 = nodes.iter().map(|c| c.price.unwrap_or_default()).sum();
    let disruption: f64 = nodes.iter().map(|c| node_disruption(c)).sum();
    let fraction = |part: f64, total: f64| if total > 0.0 { part / total } else { 0.0 };
    Score {
        savings_fraction: fraction(price - replacement_price, totals.price),
        disruption_fraction: fraction(disruption, totals.disruption),
        threshold: k,
    }
}

/// The best a node can score: deleted outright, nothing launched in its place (upstream's
/// candidate filter: if this fails, no move of this node alone can pass).
pub(crate) fn delete_score(
    candidate: &Candidate<'_>,
    totals: &HashMap<String, PoolTotals>,
) -> Option<Score> {
    let pool = candidate.pool.filter(|p| is_balanced(Some(p)))?;
    let totals = totals
        .get(candidate.pool_name())
        .copied()
        .unwrap_or_default();
    Some(score(&[candidate], 0.0, totals, threshold(pool)))
}

/// Each Balanced pool's score for its part of a move, pools by name.
pub(crate) type PoolScores = Vec<(String, Score)>;

/// Scores each Balanced pool's part of a move of `nodes` replaced by nodes costing
/// `replacement_price` $/h in all (the replacement's price shared by the parts' prices, as
/// upstream splits savings by each pool's share of the source cost), pools by name.
pub(crate) fn scores(
    nodes: &[&Candidate<'_>],
    replacement_price: f64,
    totals: &HashMap<String, PoolTotals>,
) -> PoolScores {
    let total_price: f64 = nodes.iter().map(|c| c.price.unwrap_or_default()).sum();
    let mut pools: Vec<&str> = nodes
        .iter()
        .filter(|c| is_balanced(c.pool))
        .map(|c| c.pool_name())
        .collect();
    pools.sort_unstable();
    pools.dedup();
    let mut out = Vec::new();
    for name in pools {
        let part: Vec<&Candidate<'_>> = nodes
            .iter()
            .copied()
            .filter(|c| c.pool_name() == name)
            .collect();
        let Some(pool) = part.first().and_then(|c| c.pool) else {
            continue;
        };
        let part_price: f64 = part.iter().map(|c| c.price.unwrap_or_default()).sum();
        let share = if total_price > 0.0 {
            replacement_price * part_price / total_price
        } else {
            replacement_price
        };
        let totals = totals.get(name).copied().unwrap_or_default();
        out.push((
            name.to_owned(),
            score(&part, share, totals, threshold(pool)),
        ));
    }
    out
}

/// Judges a move as [`scores`] does: the first Balanced pool's part that fails, with its
/// score, or `None` when every Balanced pool's part passes (or no pool is Balanced).
pub fn rejected(
    nodes: &[&Candidate<'_>],
    replacement_price: f64,
    totals: &HashMap<String, PoolTotals>,
) -> Option<(String, Score)> {
    scores(nodes, replacement_price, totals)
        .into_iter()
        .find(|(_, s)| !s.approved())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(savings: f64, disruption: f64) -> Score {
        Score {
            savings_fraction: savings,
            disruption_fraction: disruption,
            threshold: DEFAULT_THRESHOLD,
        }
    }

    // The design's worked examples, k = 2.
    #[test]
    fn an_oversized_node_scores_above_the_threshold() {
        let oversized = s(7.26 / 58.08, 3.0 / 80.0);
        assert!((oversized.value() - 3.33).abs() < 0.01);
        assert!(oversized.approved());
    }

    #[test]
    fn a_marginal_move_is_rejected_and_says_by_how_much() {
        let marginal = s(2.42 / 58.08, 8.0 / 80.0);
        assert!(!marginal.approved());
        assert_eq!(
            marginal.describe(),
            "score 0.42 < threshold 0.50 (consolidationThreshold: 2.0, savings 4.2%, disruption 10.0%)"
        );
    }

    #[test]
    fn an_approved_move_is_announced_in_upstreams_words() {
        assert_eq!(
            s(7.26 / 58.08, 3.0 / 80.0).approved_note(),
            "score 3.33 >= threshold 0.50 (k: 2, savings 12.5%, disruption 3.8%)"
        );
    }

    #[test]
    fn halving_a_node_in_a_uniform_pool_is_exactly_on_the_threshold() {
        assert!(s(2.42 / 48.40, 8.0 / 80.0).approved());
    }

    #[test]
    fn a_move_that_saves_nothing_is_never_approved() {
        assert!(!s(0.0, 0.1).approved());
        assert!(!s(-0.1, 0.1).approved());
        let generous = Score {
            threshold: 1000.0,
            ..s(0.0, 0.1)
        };
        assert!(!generous.approved());
    }
}
