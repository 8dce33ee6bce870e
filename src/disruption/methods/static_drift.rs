//! Static drift (upstream's `staticdrift.go`): a drifted node of a static pool (`replicas`) is
//! replaced by a bare claim of the pool (no simulation: the pool keeps its count, whatever runs
//! on the node), replacement first, under the pool's `Drifted` budget and within `limits.nodes`.
//! A pool with more nodes than `replicas` waits for its scale-down first. One command carries
//! every candidate the pool's budget and node limit allow.

use super::super::candidate::Candidate;
use super::super::consolidation::Replacement;
use super::super::decision::{Budgets, Command, Input, Method, disrupted};
use crate::apis::{DisruptionReason, NodePool, labels};
use crate::scheduling::static_claim;
use std::collections::BTreeMap;

pub(crate) fn static_drift(
    input: &Input<'_>,
    candidates: &[Candidate<'_>],
    budgets: &mut Budgets,
    kept: &mut BTreeMap<String, String>,
) -> Option<Command> {
    let mut by_pool: BTreeMap<&str, (&NodePool, Vec<&Candidate<'_>>)> = BTreeMap::new();
    for c in candidates.iter().filter(|c| c.disruptability.drift) {
        if let Some(pool) = c.pool.filter(|p| p.spec.is_static()) {
            by_pool
                .entry(c.pool_name())
                .or_insert((pool, Vec::new()))
                .1
                .push(c);
        }
    }
    for (name, (pool, drifted)) in by_pool {
        let replicas = u64::try_from(pool.spec.replicas.unwrap_or_default()).unwrap_or_default();
        let (live, all) = claim_counts(input, name);
        if live > replicas {
            for c in &drifted {
                kept.insert(
                    c.name().to_owned(),
                    format!("drifted, but static NodePool {name} has {live} nodes for {replicas} replicas: its scale-down goes first"),
                );
            }
            continue;
        }
        let room = pool
            .spec
            .node_limit()
            .map_or(u64::MAX, |limit| limit.saturating_sub(all));
        let catalogue = input
            .snapshot
            .catalogues
            .of(&pool.spec.template.spec.node_class_ref);
        let mut chosen = Vec::new();
        let mut replacements = Vec::new();
        for c in drifted {
            if u64::try_from(chosen.len()).unwrap_or(u64::MAX) >= room {
                kept.insert(
                    c.name().to_owned(),
                    "drifted, but static NodePool is at its node limit and cannot stage a replacement"
                        .to_owned(),
                );
                continue;
            }
            match static_claim(pool, catalogue) {
                Ok(claim) => {
                    if !budgets.take(name, DisruptionReason::Drifted) {
                        continue;
                    }
                    chosen.push(disrupted(c));
                    replacements.push(Replacement {
                        claim,
                        pods: Vec::new(),
                    });
                }
                Err(why) => {
                    kept.insert(c.name().to_owned(), format!("drifted, but {why}"));
                }
            }
        }
        if !chosen.is_empty() {
            return Some(Command {
                method: Method::StaticDrift,
                reason: DisruptionReason::Drifted,
                candidates: chosen,
                replacements,
                scores: Vec::new(),
            });
        }
    }
    None
}

/// The pool's claims not being deleted, and all of them.
fn claim_counts(input: &Input<'_>, pool: &str) -> (u64, u64) {
    let mut live = 0;
    let mut all = 0;
    for claim in input.snapshot.claims.iter() {
        if claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODE_POOL))
            != Some(&pool.to_owned())
        {
            continue;
        }
        all += 1;
        if claim.metadata.deletion_timestamp.is_none() {
            live += 1;
        }
    }
    (live, all)
}
