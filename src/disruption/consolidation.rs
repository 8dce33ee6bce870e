//! Whether a set of candidates can go: the cluster is simulated without them (upstream's
//! `SimulateScheduling` in `pkg/controllers/disruption/helpers.go`) and the outcome judged as
//! upstream's `computeConsolidation` (`consolidation.go`) judges it:
//!
//! * every pod of the candidates must fit somewhere, or nothing happens;
//! * no new node: delete the candidates;
//! * one new node: replace them, with only the instance types strictly cheaper than the
//!   candidates together (KA#5903); when every candidate is spot, only with the
//!   spot-to-spot gate on and, for one candidate, at least 15 such types (upstream's
//!   `MinInstanceTypesForSpotToSpotConsolidation`, which keeps spot from churning down to the
//!   one type most likely to be interrupted);
//! * more than one new node: nothing happens.
//!
//! Pending pods join the simulation first, so the candidates' pods never take the room that
//! in-flight claims hold for them; a new node that holds only pending pods is provisioning's
//! business and does not count against the consolidation. The pods still on nodes another
//! disruption holds (tainted `karpenter.sh/disrupted`) or that are being deleted come next, as
//! upstream's `deletingNodePods`: they are about to move, so the room they will take (often the
//! replacement launched for them, empty until they arrive) is not free for the candidates.
//! Unlike the candidates' pods, they may fail to fit without blocking the candidates.

use super::candidate::Candidate;
use super::disruptability::{is_disrupting, is_reschedulable};
use crate::apis::CapacityType;
use crate::apis::labels;
use crate::scheduling::{self, NewClaim, Requirement};
use crate::state::{self, CachedNode, CachedPod, Snapshot};
use std::collections::HashSet;
use std::sync::Arc;

/// Fewest cheaper types a spot candidate's spot replacement must offer (upstream's
/// `MinInstanceTypesForSpotToSpotConsolidation`).
pub(crate) const MIN_SPOT_TO_SPOT_TYPES: usize = 15;

/// A node to launch in place of candidates, with the pods it is for.
#[derive(Clone, Debug)]
pub struct Replacement {
    /// The scheduler's new claim; its `pods` index [`Replacement::pods`].
    pub claim: NewClaim,
    pub pods: Vec<CachedPod>,
}

/// What removing a set of candidates would take.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Their pods fit on the rest of the cluster.
    Delete,
    /// Their pods need these new nodes.
    Replace(Vec<Replacement>),
    /// They cannot go, and why.
    Keep(String),
}

/// The simulation of the cluster without `candidates`: where their pods would go.
pub fn simulate(snapshot: &Snapshot<'_>, candidates: &[&Candidate<'_>]) -> Outcome {
    let gone_claims: HashSet<&str> = candidates.iter().map(|c| c.name()).collect();
    let gone_nodes: HashSet<&str> = candidates.iter().map(|c| c.node_name()).collect();
    let nodes: Vec<Arc<CachedNode>> = snapshot
        .nodes
        .iter()
        .filter(|n| !gone_nodes.contains(n.name.as_str()))
        .cloned()
        .collect();
    let claims: Vec<_> = snapshot
        .claims
        .iter()
        .filter(|c| !gone_claims.contains(c.metadata.name.as_deref().unwrap_or_default()))
        .cloned()
        .collect();
    let without = Snapshot {
        nodes: &nodes,
        claims: &claims,
        ..*snapshot
    };
    let mut input = state::scheduling_input(&without);
    let leaving: HashSet<&str> = snapshot
        .nodes
        .iter()
        .filter(|n| !gone_nodes.contains(n.name.as_str()))
        .filter(|n| is_disrupting(n) || n.deletion_timestamp.is_some())
        .map(|n| n.name.as_str())
        .collect();
    input.pods.extend(
        snapshot
            .pods
            .iter()
            .filter(|p| p.node_name.as_deref().is_some_and(|n| leaving.contains(n)))
            .filter(|p| is_reschedulable(p))
            .map(AsRef::as_ref),
    );
    let pending = input.pods.len();
    for candidate in candidates {
        input.pods.extend(candidate.pods.iter().copied());
    }
    if input.pods.len() == pending {
        return Outcome::Delete;
    }
    let plan = scheduling::schedule(&input);
    if let Some(stuck) = plan.unschedulable.iter().find(|u| u.pod >= pending) {
        return Outcome::Keep(format!(
            "pod {} would have nowhere to go ({})",
            stuck.pod_name, stuck
        ));
    }
    let replacements: Vec<Replacement> = plan
        .new_claims
        .into_iter()
        .filter(|c| c.pods.iter().any(|&p| p >= pending))
        .map(|mut claim| {
            let pods: Vec<CachedPod> = claim.pods.iter().map(|&i| input.pods[i].clone()).collect();
            claim.pods = (0..pods.len()).collect();
            Replacement { claim, pods }
        })
        .collect();
    if replacements.is_empty() {
        Outcome::Delete
    } else {
        Outcome::Replace(replacements)
    }
}

/// The candidates' hourly price together; `None` when one of them has no known price.
pub fn total_price(candidates: &[&Candidate<'_>]) -> Option<f64> {
    candidates.iter().map(|c| c.price).sum()
}

/// Judges a simulation as consolidation: delete, replace with one cheaper node, or keep.
/// `multi` relaxes the spot-to-spot type count as upstream's multi-node consolidation does
/// (it truncates to the cheapest 15 instead).
pub fn consolidate(
    snapshot: &Snapshot<'_>,
    candidates: &[&Candidate<'_>],
    spot_to_spot: bool,
    multi: bool,
) -> Outcome {
    let replacements = match simulate(snapshot, candidates) {
        Outcome::Replace(r) => r,
        other => return other,
    };
    if replacements.len() > 1 {
        return Outcome::Keep(format!(
            "its pods would need {} new nodes; consolidation replaces with at most one",
            replacements.len()
        ));
    }
    let Some(mut replacement) = replacements.into_iter().next() else {
        return Outcome::Delete;
    };
    let Some(current) = total_price(candidates) else {
        return Outcome::Keep(
            "its instance type's price is unknown, so no replacement can be shown to be cheaper"
                .to_owned(),
        );
    };
    let all_spot = candidates
        .iter()
        .all(|c| c.capacity_type == CapacityType::Spot.as_str());
    let options = &mut replacement.claim.instance_types;
    options.retain(|o| o.price < current - 1e-9);
    if all_spot {
        options.retain(|o| o.capacity_type == CapacityType::Spot);
        if !spot_to_spot {
            return Outcome::Keep(
                "it is spot and only spot could replace it; spot-to-spot consolidation is off (as upstream's default)"
                    .to_owned(),
            );
        }
        if !multi && options.len() < MIN_SPOT_TO_SPOT_TYPES {
            return Outcome::Keep(format!(
                "it is spot, and a spot replacement needs at least {MIN_SPOT_TO_SPOT_TYPES} cheaper instance types to choose from ({} found)",
                options.len()
            ));
        }
        if multi {
            options.truncate(MIN_SPOT_TO_SPOT_TYPES);
        }
    }
    if options.is_empty() {
        return Outcome::Keep(format!(
            "no instance type that holds its pods costs less than its ${current:.4}/h"
        ));
    }
    let names: Vec<String> = options.iter().map(|o| o.name.clone()).collect();
    let capacity_types: Vec<String> = {
        let mut c: Vec<String> = options
            .iter()
            .map(|o| o.capacity_type.to_string())
            .collect();
        c.sort();
        c.dedup();
        c
    };
    let requirements = &mut replacement.claim.requirements;
    let narrowed = requirements
        .get(labels::INSTANCE_TYPE)
        .map(|r| r.intersection(&Requirement::in_values(labels::INSTANCE_TYPE, &names)))
        .unwrap_or_else(|| Requirement::in_values(labels::INSTANCE_TYPE, &names));
    requirements.remove(labels::INSTANCE_TYPE);
    requirements.add(narrowed);
    if all_spot {
        let spot = Requirement::in_values(labels::CAPACITY_TYPE, &capacity_types);
        let narrowed = requirements
            .get(labels::CAPACITY_TYPE)
            .map_or(spot.clone(), |r| r.intersection(&spot));
        requirements.remove(labels::CAPACITY_TYPE);
        requirements.add(narrowed);
    }
    Outcome::Replace(vec![replacement])
}
