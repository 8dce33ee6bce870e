//! How many of a NodePool's nodes may be disrupted now, for a reason: the smallest `nodes` among
//! the pool's budgets that are active and name the reason (percentages of the pool's nodes,
//! rounded up), less the nodes already being disrupted (upstream's
//! `NodePool.GetAllowedDisruptionsByReason` in `pkg/apis/v1/nodepool.go`, counted as
//! `pkg/controllers/disruption/helpers.go` `BuildDisruptionBudgetMapping` counts).
//!
//! A budget whose schedule or duration cannot be read (stored by an older CRD that did not
//! check it) makes the pool allow nothing, as upstream, where the error stops the pool's
//! disruption; the error says which budget and why.

use crate::apis::{Budget, DisruptionReason, NodeClaim, NodePool};
use k8s_openapi::jiff::Timestamp;
use std::fmt;

/// Every reason a budget can name, in upstream's order.
pub(crate) const REASONS: [DisruptionReason; 4] = [
    DisruptionReason::Empty,
    DisruptionReason::Drifted,
    DisruptionReason::Underutilized,
    DisruptionReason::Unhealthy,
];

/// The name upstream's metrics and Events give a reason.
pub(crate) fn reason_name(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Empty => "empty",
        DisruptionReason::Drifted => "drifted",
        DisruptionReason::Underutilized => "underutilized",
        DisruptionReason::Unhealthy => "unhealthy",
    }
}

/// What a pool's budgets allow for one reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowance {
    /// How many more of its nodes may start being disrupted now (`u64::MAX`: no budget names
    /// the reason).
    pub allowed: u64,
    /// The pool's nodes, those being deleted excluded.
    pub nodes: usize,
    /// The pool's nodes being deleted or disrupted now.
    pub disrupting: usize,
    /// The budget that set `allowed`, described, or why none could be read.
    pub because: Option<String>,
    /// A budget that cannot be read: the pool allows nothing until it is fixed.
    pub error: Option<String>,
}

impl Allowance {
    /// Why nothing more may be disrupted, or `None` when something may.
    pub fn blocked(&self, pool: &str, reason: DisruptionReason) -> Option<String> {
        if let Some(error) = &self.error {
            return Some(format!("NodePool {pool}: {error}"));
        }
        (self.allowed == 0).then(|| {
            format!(
                "NodePool {pool} allows no more {reason:?} disruptions now under {}; it has {} {}, {} being disrupted",
                self.because.as_deref().unwrap_or("its budgets"),
                self.nodes,
                if self.nodes == 1 { "node" } else { "nodes" },
                self.disrupting
            )
        })
    }
}

/// A budget the pool cannot apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("budget {index} has {what}")]
pub(crate) struct BudgetError {
    /// 1-based, as a user counts the list.
    pub index: usize,
    pub what: String,
}

/// What `pool`'s budgets allow for `reason` at `now`. `claims` are the pool's NodeClaims; a
/// claim being deleted, or whose node is being disrupted (`disrupting` says so), counts as being
/// disrupted.
pub(crate) fn allowance(
    pool: &NodePool,
    claims: &[&NodeClaim],
    disrupting: impl Fn(&NodeClaim) -> bool,
    reason: DisruptionReason,
    now: Timestamp,
) -> Allowance {
    let being_disrupted = claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_some() || disrupting(c))
        .count();
    let nodes = claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .count();
    let mut allowance = Allowance {
        allowed: u64::MAX,
        nodes,
        disrupting: being_disrupted,
        because: None,
        error: None,
    };
    let mut tightest: Option<(u64, String)> = None;
    for (i, budget) in pool.spec.disruption.budgets.iter().enumerate() {
        if budget
            .reasons
            .as_ref()
            .is_some_and(|r| !r.contains(&reason))
        {
            continue;
        }
        let active = match budget.is_active(now) {
            Ok(active) => active,
            Err(e) => {
                allowance.allowed = 0;
                allowance.error = Some(
                    BudgetError {
                        index: i + 1,
                        what: format!(
                            "a schedule that cannot be read ({e}); fix it to let this pool's nodes be disrupted"
                        ),
                    }
                    .to_string(),
                );
                return allowance;
            }
        };
        if !active {
            continue;
        }
        let Some(allowed) = budget.nodes_allowed(nodes) else {
            allowance.allowed = 0;
            allowance.error = Some(
                BudgetError {
                    index: i + 1,
                    what: format!("nodes {:?}, which is neither a count nor a percentage; fix it to let this pool's nodes be disrupted", budget.nodes),
                }
                .to_string(),
            );
            return allowance;
        };
        if tightest.as_ref().is_none_or(|(a, _)| allowed < *a) {
            tightest = Some((allowed, describe(i, budget).to_string()));
        }
    }
    if let Some((allowed, which)) = tightest {
        allowance.allowed = allowed.saturating_sub(being_disrupted as u64);
        allowance.because = Some(which);
    }
    allowance
}

/// A budget as a user would point at it: its position and fields.
pub struct Described<'a>(usize, &'a Budget);

/// Describes budget `index` (0-based) of a pool.
pub fn describe(index: usize, budget: &Budget) -> Described<'_> {
    Described(index, budget)
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Described(index, budget) = self;
        write!(f, "budget {} (nodes {:?}", index + 1, budget.nodes)?;
        if let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) {
            write!(f, ", schedule {schedule:?} for {duration}, active now")?;
        }
        if let Some(reasons) = &budget.reasons {
            let reasons: Vec<String> = reasons.iter().map(|r| format!("{r:?}")).collect();
            write!(f, ", reasons {}", reasons.join(","))?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(budgets: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"disruption": {"consolidateAfter": "0s", "budgets": budgets},
                "template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "d"}}}},
        }))
        .expect("a pool")
    }

    fn claims(n: usize) -> Vec<NodeClaim> {
        (0..n)
            .map(|i| {
                serde_json::from_value(json!({
                    "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                    "metadata": {"name": format!("c{i}")},
                    "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "d"}},
                }))
                .expect("a claim")
            })
            .collect()
    }

    fn allowed(
        pool: &NodePool,
        n: usize,
        disrupting: usize,
        reason: DisruptionReason,
    ) -> Allowance {
        let claims = claims(n);
        let refs: Vec<&NodeClaim> = claims.iter().collect();
        let now: Timestamp = "2026-11-30T10:00:00Z".parse().expect("a Monday");
        allowance(
            pool,
            &refs,
            |c| {
                c.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n[1..].parse::<usize>().is_ok_and(|i| i < disrupting))
            },
            reason,
            now,
        )
    }

    #[test]
    fn the_default_budget_lets_a_tenth_of_the_nodes_go_rounded_up() {
        let pool = pool(json!([{"nodes": "10%"}]));
        assert_eq!(allowed(&pool, 25, 0, DisruptionReason::Empty).allowed, 3);
        assert_eq!(allowed(&pool, 25, 2, DisruptionReason::Empty).allowed, 1);
        assert_eq!(allowed(&pool, 1, 0, DisruptionReason::Empty).allowed, 1);
    }

    #[test]
    fn the_tightest_active_budget_for_the_reason_wins() {
        let pool = pool(json!([
            {"nodes": "5"},
            {"nodes": "0", "reasons": ["Drifted"]},
            {"nodes": "1", "schedule": "0 9 * * mon-fri", "duration": "8h"},
            {"nodes": "0", "schedule": "0 0 * * sun", "duration": "8h"},
        ]));
        assert_eq!(allowed(&pool, 10, 0, DisruptionReason::Drifted).allowed, 0);
        let empty = allowed(&pool, 10, 0, DisruptionReason::Empty);
        assert_eq!(empty.allowed, 1);
        assert!(empty.because.expect("a budget").contains("budget 3"));
    }

    #[test]
    fn a_schedule_that_cannot_be_read_stops_only_its_pool_with_the_reason() {
        let pool = pool(json!([{"nodes": "5", "schedule": "every tuesday", "duration": "1h"}]));
        let a = allowed(&pool, 10, 0, DisruptionReason::Empty);
        assert_eq!(a.allowed, 0);
        let message = a.blocked("p", DisruptionReason::Empty).expect("blocked");
        assert!(
            message.contains("budget 1 has a schedule that cannot be read"),
            "{message}"
        );
    }
}
