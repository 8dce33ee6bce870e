//! One disruption pass: judge every claim, then try the methods in upstream's order
//! (`pkg/controllers/disruption/controller.go`): repair (with the `NodeRepair` gate), emptiness,
//! static drift (static pools' drifted nodes), drift, multi-node consolidation, single-node
//! consolidation. The first method that finds something to do gives the pass's [`Command`];
//! the rest are not tried, as upstream acts on one command at a time.

use super::budgets::{Allowance, REASONS, allowance, reason_name};
use super::candidate::{Candidate, candidates};
use super::consolidation::Replacement;
use super::disruptability::is_disrupting;
use super::methods;
use crate::apis::{DisruptionReason, NodeClaim, labels};
use crate::cloud::RepairPolicy;
use crate::state::Snapshot;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, HashMap};

/// What a pass decides from.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    /// The cluster as the watches hold it, with each node class's catalogue.
    pub snapshot: Snapshot<'a>,
    pub pdbs: &'a [PodDisruptionBudget],
    pub now: Timestamp,
    pub options: Options,
    /// The cloud's repair policies when the `NodeRepair` gate is on; empty turns repair off.
    pub repair_policies: &'a [RepairPolicy],
}

/// Tuning, upstream's defaults unless said otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Upstream's `SpotToSpotConsolidation` feature gate (off by default).
    pub spot_to_spot: bool,
    /// The most candidates multi-node consolidation considers (upstream: 100).
    pub multi_node_max: usize,
    /// The most candidates single-node consolidation simulates in one pass. Upstream bounds it
    /// by time (3 min); a count keeps the pass deterministic, and the next pass goes on where
    /// cost order puts the rest.
    pub single_node_max: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            spot_to_spot: false,
            multi_node_max: 100,
            single_node_max: 100,
        }
    }
}

/// The method behind a command, as upstream names it in metrics and Events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Repair,
    Emptiness,
    StaticDrift,
    Drift,
    MultiNodeConsolidation,
    SingleNodeConsolidation,
}

impl Method {
    /// Upstream's `consolidation_type` label: `empty`, `multi`, `single`, or empty for repair
    /// and drift.
    pub fn consolidation_type(self) -> &'static str {
        match self {
            Self::Emptiness => "empty",
            Self::Repair | Self::StaticDrift | Self::Drift => "",
            Self::MultiNodeConsolidation => "multi",
            Self::SingleNodeConsolidation => "single",
        }
    }
}

/// A node a command disrupts.
#[derive(Clone, Debug, PartialEq)]
pub struct Disrupted {
    pub claim: String,
    pub node: String,
    pub pool: String,
    /// Its type and capacity type as its labels say (see [`super::Candidate`]).
    pub instance_type: String,
    pub capacity_type: String,
    pub price: Option<f64>,
}

/// What a pass decided to do.
#[derive(Clone, Debug)]
pub struct Command {
    pub method: Method,
    pub reason: DisruptionReason,
    pub candidates: Vec<Disrupted>,
    /// Nodes to launch and see initialized before the candidates go; none for a delete.
    pub replacements: Vec<Replacement>,
    /// Each Balanced pool's score for its part of the move (all approved).
    pub scores: Vec<(String, super::balanced::Score)>,
}

impl Command {
    /// Upstream's `decision` label: `delete` or `replace`.
    pub fn decision(&self) -> &'static str {
        if self.replacements.is_empty() {
            "delete"
        } else {
            "replace"
        }
    }

    /// The candidates' hourly price less the replacements', unless a replacement's price is
    /// unknown (drift and expiry may replace onto a type no price table lists).
    pub fn savings(&self) -> Option<f64> {
        let before: f64 = self.candidates.iter().filter_map(|c| c.price).sum();
        let after: f64 = self.replacements.iter().map(|r| r.claim.price()).sum();
        crate::scheduling::known_price(after).map(|after| before - after)
    }

    /// One line for logs and Events: what goes, what comes, what it saves.
    pub fn describe(&self) -> String {
        let names: Vec<String> = self
            .candidates
            .iter()
            .map(|c| format!("{} ({}, {})", c.claim, c.instance_type, c.capacity_type))
            .collect();
        let mut text = format!(
            "{:?}/{}: {} {}",
            self.method,
            self.decision(),
            reason_name(self.reason),
            names.join(", ")
        );
        for r in &self.replacements {
            if let Some(o) = r.claim.instance_types.first() {
                let price = o
                    .known_price()
                    .map_or_else(|| "price unknown".to_owned(), |p| format!("${p:.4}/h"));
                text.push_str(&format!(
                    "; replacement {} {} ({price}, {} options)",
                    o.name,
                    o.capacity_type,
                    r.claim.instance_types.len()
                ));
            }
        }
        if let Some(savings) = self.savings()
            && (self.replacements.is_empty() || savings > 0.0)
        {
            text.push_str(&format!("; saves ${savings:.4}/h"));
        }
        text
    }
}

/// What one pass found.
#[derive(Debug)]
pub struct Decision<'a> {
    /// The command to carry out, if any.
    pub command: Option<Command>,
    /// Every claim, judged.
    pub candidates: Vec<Candidate<'a>>,
    /// Claims repair, consolidation or drift looked at and kept, with why (pods with nowhere
    /// to go, no cheaper replacement, …).
    pub kept: BTreeMap<String, String>,
    /// Claims whose nodes are unhealthy past their cloud's toleration (repair on).
    pub due_for_repair: std::collections::BTreeSet<String>,
    /// Claims due for repair that repair leaves alone, with the Event reason and message
    /// (`do-not-repair`, too many unhealthy nodes in the pool).
    pub repair_blocked: BTreeMap<String, (&'static str, String)>,
    /// What each pool's budgets allow now, per reason.
    pub allowances: BTreeMap<(String, DisruptionReason), Allowance>,
    /// Consolidation moves a Balanced pool's score turned down this pass, per pool.
    pub rejected_scores: Vec<(String, super::balanced::Score)>,
}

impl Decision<'_> {
    /// How many claims each reason could disrupt now (upstream's
    /// `karpenter_voluntary_disruption_eligible_nodes`).
    pub fn eligible(&self, reason: DisruptionReason) -> usize {
        self.candidates
            .iter()
            .filter(|c| match reason {
                DisruptionReason::Drifted => c.disruptability.drift,
                DisruptionReason::Unhealthy => self.due_for_repair.contains(c.name()),
                r => c.disruptability.consolidation == Some(r),
            })
            .count()
    }
}

/// Budgets left per pool and reason while a pass picks candidates.
pub(super) struct Budgets(pub(super) HashMap<(String, DisruptionReason), u64>);

impl Budgets {
    /// Whether one more of `pool`'s nodes may go for `reason`.
    pub(super) fn allows(&self, pool: &str, reason: DisruptionReason) -> bool {
        self.0.get(&(pool.to_owned(), reason)) != Some(&0)
    }

    /// Whether one more of `pool`'s nodes may go for `reason`, and if so counts it.
    pub(super) fn take(&mut self, pool: &str, reason: DisruptionReason) -> bool {
        match self.0.get_mut(&(pool.to_owned(), reason)) {
            Some(0) => false,
            Some(left) => {
                *left -= 1;
                true
            }
            None => true,
        }
    }
}

/// Runs one pass over `input`.
pub fn decide<'a>(input: &Input<'a>) -> Decision<'a> {
    let judged = candidates(&input.snapshot, input.pdbs, input.now);
    let allowances = allowances(input);
    let mut decision = Decision {
        command: None,
        candidates: judged,
        kept: BTreeMap::new(),
        due_for_repair: Default::default(),
        repair_blocked: BTreeMap::new(),
        allowances,
        rejected_scores: Vec::new(),
    };
    let budgets = || {
        Budgets(
            decision
                .allowances
                .iter()
                .map(|(k, a)| (k.clone(), a.allowed))
                .collect(),
        )
    };
    let mut kept = BTreeMap::new();
    decision.due_for_repair = methods::due_for_repair(input, &decision.candidates)
        .into_iter()
        .map(|(c, _)| c.name().to_owned())
        .collect();
    let mut repair_blocked = methods::RepairBlocked::new();
    let mut rejected_scores = Vec::new();
    let command = methods::repair(
        input,
        &decision.candidates,
        &mut budgets(),
        &mut kept,
        &mut repair_blocked,
    )
    .or_else(|| methods::emptiness(&decision.candidates, &mut budgets()))
    .or_else(|| methods::static_drift(input, &decision.candidates, &mut budgets(), &mut kept))
    .or_else(|| methods::drift(input, &decision.candidates, &mut budgets(), &mut kept))
    .or_else(|| {
        methods::multi_node(
            input,
            &decision.candidates,
            &mut budgets(),
            &mut rejected_scores,
        )
    })
    .or_else(|| {
        methods::single_node(
            input,
            &decision.candidates,
            &mut budgets(),
            &mut kept,
            &mut rejected_scores,
        )
    });
    decision.command = command;
    decision.kept = kept;
    decision.repair_blocked = repair_blocked;
    decision.rejected_scores = rejected_scores;
    decision
}

fn allowances(input: &Input<'_>) -> BTreeMap<(String, DisruptionReason), Allowance> {
    let snapshot = &input.snapshot;
    let disrupting_ids: std::collections::HashSet<&str> = snapshot
        .nodes
        .iter()
        .filter(|n| is_disrupting(n))
        .filter_map(|n| n.provider_id.as_deref())
        .collect();
    let disrupting = |c: &NodeClaim| {
        c.status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .is_some_and(|id| disrupting_ids.contains(id))
    };
    let mut out = BTreeMap::new();
    for pool in snapshot.pools.iter() {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let claims: Vec<&NodeClaim> = snapshot
            .claims
            .iter()
            .map(AsRef::as_ref)
            .filter(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(labels::NODE_POOL))
                    == Some(&name)
            })
            .collect();
        for reason in REASONS {
            out.insert(
                (name.clone(), reason),
                allowance(pool, &claims, disrupting, reason, input.now),
            );
        }
    }
    out
}

/// A candidate as a command names it.
pub(super) fn disrupted(c: &Candidate<'_>) -> Disrupted {
    Disrupted {
        claim: c.name().to_owned(),
        node: c.node_name().to_owned(),
        pool: c.pool_name().to_owned(),
        instance_type: c.instance_type.clone(),
        capacity_type: c.capacity_type.clone(),
        price: c.price,
    }
}

/// Checks a command again after upstream's validation period (15 s): its candidates must still
/// be candidates for its reason within the budgets, and consolidation must still reach the same
/// decision (upstream's `validation.go`). Returns the command to carry out, with fresh
/// replacements, or why it no longer holds.
pub(crate) fn validate<'a>(input: &Input<'a>, command: &Command) -> Result<Command, String> {
    let decision_now = candidates(&input.snapshot, input.pdbs, input.now);
    let allowances = allowances(input);
    let mut budgets = Budgets(
        allowances
            .iter()
            .map(|(k, a)| (k.clone(), a.allowed))
            .collect(),
    );
    let mut chosen: Vec<&Candidate<'_>> = Vec::new();
    for wanted in &command.candidates {
        let Some(c) = decision_now.iter().find(|c| c.name() == wanted.claim) else {
            return Err(format!("{} is gone", wanted.claim));
        };
        let still = match command.reason {
            DisruptionReason::Drifted => c.disruptability.drift,
            DisruptionReason::Unhealthy => methods::due_for_repair(input, &decision_now)
                .iter()
                .any(|(d, _)| d.name() == c.name()),
            DisruptionReason::Empty => {
                c.disruptability.consolidation == Some(DisruptionReason::Empty)
            }
            DisruptionReason::Underutilized => c.disruptability.consolidation.is_some(),
        };
        if !still {
            let why = c
                .disruptability
                .blockers
                .first()
                .map_or("it is no longer a candidate".to_owned(), |b| {
                    b.message.clone()
                });
            return Err(format!("{}: {why}", wanted.claim));
        }
        if !budgets.take(c.pool_name(), command.reason) {
            return Err(format!(
                "{}: NodePool {} allows no more {:?} disruptions now",
                wanted.claim,
                c.pool_name(),
                command.reason
            ));
        }
        chosen.push(c);
    }
    match command.method {
        Method::Repair | Method::Emptiness | Method::StaticDrift | Method::Drift => {
            Ok(command.clone())
        }
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
            let multi = command.method == Method::MultiNodeConsolidation;
            let outcome = super::consolidation::consolidate(
                &input.snapshot,
                &chosen,
                input.options.spot_to_spot,
                multi,
            );
            // A Balanced pool's move must still be worth it against the pool as it is now.
            let replacement_price = match &outcome {
                super::consolidation::Outcome::Replace(r) => methods::replacement_price(r),
                _ => 0.0,
            };
            if !matches!(outcome, super::consolidation::Outcome::Keep(_))
                && let Some((pool, score)) = super::balanced::rejected(
                    &chosen,
                    replacement_price,
                    &super::balanced::pool_totals(&decision_now),
                )
            {
                return Err(format!(
                    "the move is no longer worth it under NodePool {pool}'s consolidationPolicy Balanced: {}",
                    score.describe()
                ));
            }
            match outcome {
                super::consolidation::Outcome::Delete => Ok(Command {
                    replacements: Vec::new(),
                    ..command.clone()
                }),
                super::consolidation::Outcome::Replace(replacements)
                    if !command.replacements.is_empty() =>
                {
                    Ok(Command {
                        replacements,
                        ..command.clone()
                    })
                }
                super::consolidation::Outcome::Replace(_) => Err(
                    "its pods no longer fit on the rest of the cluster without a new node"
                        .to_owned(),
                ),
                super::consolidation::Outcome::Keep(why) => Err(why),
            }
        }
    }
}
