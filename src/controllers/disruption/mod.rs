//! The disruption controller (upstream's `pkg/controllers/disruption/controller.go`): every
//! `disruption_poll` (10 s) it reads the cluster, lets [`crate::disruption::decide`] pick one
//! command, waits the validation period (15 s) for consolidation and emptiness, checks the
//! command again on a fresh read, and carries it out (`queue.rs`): replacements first, then the
//! candidates are deleted and the termination finalizer drains them.
//!
//! Several commands at once, as upstream: a pass starts one command (`queue.rs` waits for its
//! replacements in a task), and the next pass follows at once, until the budgets allow no more
//! (the nodes of commands in flight count against them) or nothing is left to do; then the
//! loop waits `disruption_poll`. Every pass first releases what an interrupted command left
//! (`stranded.rs`), except the nodes the queue holds.
//!
//! Claims that are blocked get a `DisruptionBlocked` Event on the NodeClaim and its Node when
//! the reason changes (a budget, a `do-not-disrupt` annotation, a PodDisruptionBudget,
//! `consolidateAfter: Never`, a budget that cannot be read), so `kubectl describe` says why a
//! node stays; it is not repeated every pass. A budget that cannot be read also gets a Warning
//! on its NodePool.

mod queue;
#[cfg(test)]
mod reconcile_tests;
mod stranded;

use super::{Context, Error};
use crate::apis::{DisruptionReason, NodePool};
use crate::cloud::{CloudProvider, RepairPolicy};
use crate::disruption::disruptability::is_disrupting;
use crate::disruption::{
    self, BlockerKind, Command, Decision, Method, budgets::REASONS, reason_name,
};
use crate::metrics::{ConsolidationLabels, DecisionLabels, PoolReasonLabels, ReasonLabels};
use crate::state::Gathered;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;
use tracing::{info, warn};

/// The cluster as one pass reads it; [`Parts::input`] borrows it as the decision's input.
struct Parts {
    cluster: Gathered,
    pdbs: Vec<PodDisruptionBudget>,
    /// The cloud's repair policies, or none while the `NodeRepair` gate is off.
    repair_policies: Vec<RepairPolicy>,
}

impl Parts {
    /// Reads the cluster; the nodes in `held` carry the disruption taint in what is read even
    /// when the watch has not delivered it yet, so a command in flight is never decided again
    /// and always counts against its pool's budget.
    async fn read<P: CloudProvider>(ctx: &Context<P>, held: &HashSet<String>) -> Parts {
        let mut cluster = ctx
            .cluster
            .gather(ctx.cluster.pods.state(), ctx.cluster.claims.state());
        for node in &mut cluster.nodes {
            if held.contains(&node.name) && !is_disrupting(node) {
                let mut tainted = (**node).clone();
                tainted.taints.push(k8s_openapi::api::core::v1::Taint {
                    key: crate::apis::labels::DISRUPTED_TAINT_KEY.to_owned(),
                    effect: "NoSchedule".to_owned(),
                    ..Default::default()
                });
                *node = Arc::new(tainted);
            }
        }
        super::provisioning::fetch_catalogues(ctx, &mut cluster).await;
        Self {
            cluster,
            pdbs: ctx.cluster.pdbs(),
            repair_policies: if ctx.settings.node_repair {
                ctx.provider.repair_policies()
            } else {
                Vec::new()
            },
        }
    }

    fn input<P>(&self, ctx: &Context<P>) -> disruption::Input<'_> {
        disruption::Input {
            snapshot: self.cluster.snapshot(),
            pdbs: &self.pdbs,
            now: Timestamp::now(),
            options: disruption::Options {
                spot_to_spot: ctx.settings.spot_to_spot_consolidation,
                ..disruption::Options::default()
            },
            repair_policies: &self.repair_policies,
        }
    }
}

/// What the loop remembers between passes: the last blocker announced per claim, and the
/// commands in flight.
#[derive(Default)]
struct Memory {
    announced: HashMap<String, String>,
    queue: queue::Queue,
}

/// Runs the disruption loop until the task is dropped.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>) {
    let mut memory = Memory::default();
    // What a predecessor (or this agent before a restart) left half-done is released at once,
    // not a poll later.
    if let Err(e) = stranded::release(&ctx, &HashSet::new()).await {
        warn!(error = %e, "could not release what an interrupted disruption left; retrying next pass");
    }
    let mut started = false;
    loop {
        // As upstream's singleton requeues at once after starting a command: the budgets may
        // allow another now.
        if !started {
            tokio::time::sleep(ctx.settings.disruption_poll).await;
        }
        // A pass waits, on purpose, for its validation.
        let bound = ctx.settings.stuck_pass_after + ctx.settings.disruption_validation;
        let _pass = ctx.health.pass(super::names::DISRUPTION, bound);
        started = match pass(&ctx, &mut memory).await {
            Ok(started) => started,
            Err(e) => {
                warn!(error = %e, cause = ?std::error::Error::source(&e), "disruption pass failed; retrying");
                false
            }
        };
    }
}

/// One pass: whether it started a command.
async fn pass<P: CloudProvider + 'static>(
    ctx: &Arc<Context<P>>,
    memory: &mut Memory,
) -> Result<bool, Error> {
    let in_flight = memory.queue.in_flight();
    let held = memory.queue.held();
    // As upstream, no new command while a stranded taint cannot be taken off.
    stranded::release(ctx, &held).await?;
    let parts = Parts::read(ctx, &held).await;
    let input = parts.input(ctx);
    let started = Instant::now();
    let decision = disruption::decide(&input);
    ctx.metrics
        .disruption_evaluation_seconds
        .observe(started.elapsed().as_secs_f64());
    record_metrics(ctx, &decision);
    for (pool, score) in &decision.rejected_scores {
        record_move(ctx, "rejected", pool, "Balanced", Some(score.value()));
    }
    announce_invalid_budgets(ctx, &parts.cluster.pools, &decision).await;
    announce_blocked(ctx, memory, &decision).await;
    let Some(command) = decision.command else {
        return Ok(false);
    };
    info!(command = %command.describe(), in_flight, "disruption decided");
    let command = match command.method {
        // Upstream validates consolidation (emptiness included) after 15 s: pods the
        // kube-scheduler was about to bind, or a burst of new pods, may change the answer.
        Method::Emptiness | Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
            tokio::time::sleep(ctx.settings.disruption_validation).await;
            let parts = Parts::read(ctx, &memory.queue.held()).await;
            match disruption::validate(&parts.input(ctx), &command) {
                Ok(command) => command,
                Err(why) => {
                    info!(command = %command.describe(), why, "disruption no longer holds; not carried out");
                    return Ok(false);
                }
            }
        }
        Method::Repair | Method::StaticDrift | Method::Drift => command,
    };
    if matches!(
        command.method,
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation
    ) {
        announce_moves(ctx, &parts.cluster.pools, &command).await;
    }
    ctx.metrics
        .disruption_decisions
        .get_or_create(&DecisionLabels {
            decision: command.decision().to_owned(),
            reason: reason_name(command.reason).to_owned(),
            consolidation_type: command.method.consolidation_type().to_owned(),
        })
        .inc();
    queue::execute(ctx, &mut memory.queue, command).await?;
    Ok(true)
}

/// Upstream's Balanced bookkeeping for a consolidation about to be carried out: a move counted
/// per pool (every policy), and for each Balanced pool its score and a `ConsolidationApproved`
/// Event (on the claim and its Node for one node, on the NodePool for several).
async fn announce_moves<P>(ctx: &Context<P>, pools: &[Arc<NodePool>], command: &Command) {
    let mut names: Vec<&str> = command.candidates.iter().map(|c| c.pool.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let Some(pool) = pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
        else {
            continue;
        };
        let policy = format!("{:?}", pool.spec.disruption.consolidation_policy);
        let score = command
            .scores
            .iter()
            .find(|(p, _)| p == name)
            .map(|(_, s)| s);
        record_move(ctx, "approved", name, &policy, score.map(|s| s.value()));
        let Some(score) = score else {
            continue;
        };
        let event = Event {
            type_: EventType::Normal,
            reason: "ConsolidationApproved".to_owned(),
            note: Some(score.approved_note()),
            action: "Disrupt".to_owned(),
            secondary: None,
        };
        let mut targets = Vec::new();
        if command.method == Method::SingleNodeConsolidation {
            for c in command.candidates.iter().filter(|c| c.pool == name) {
                if let Some(claim) = ctx
                    .cluster
                    .claims
                    .state()
                    .iter()
                    .find(|x| x.metadata.name.as_deref() == Some(&c.claim))
                {
                    targets.push(claim.object_ref(&()));
                }
                if let Some(node) = ctx.cluster.nodes.state().iter().find(|x| x.name == c.node) {
                    targets.push(node.object_ref());
                }
            }
        } else {
            targets.push(pool.object_ref(&()));
        }
        for target in targets {
            if let Err(e) = ctx.recorder.publish(&event, &target).await {
                warn!(nodepool = name, error = %e, "could not publish event");
            }
        }
    }
}

/// Counts a consolidation move, and scores it when its pool is Balanced.
fn record_move<P>(ctx: &Context<P>, decision: &str, pool: &str, policy: &str, score: Option<f64>) {
    let labels = ConsolidationLabels {
        decision: decision.to_owned(),
        nodepool: pool.to_owned(),
        policy: policy.to_owned(),
    };
    ctx.metrics.consolidation_moves.get_or_create(&labels).inc();
    if let Some(score) = score.filter(|s| s.is_finite()) {
        ctx.metrics
            .consolidation_score
            .get_or_create(&labels)
            .observe(score);
    }
}

fn record_metrics<P>(ctx: &Context<P>, decision: &Decision<'_>) {
    for reason in REASONS {
        ctx.metrics
            .disruption_eligible_nodes
            .get_or_create(&ReasonLabels {
                reason: reason_name(reason).to_owned(),
            })
            .set(i64::try_from(decision.eligible(reason)).unwrap_or(i64::MAX));
    }
    for ((pool, reason), allowance) in &decision.allowances {
        ctx.metrics
            .nodepools_allowed_disruptions
            .get_or_create(&PoolReasonLabels {
                nodepool: pool.clone(),
                reason: reason_name(*reason).to_owned(),
            })
            .set(i64::try_from(allowance.allowed.min(i64::MAX as u64)).unwrap_or(i64::MAX));
    }
}

/// A budget the agent cannot read (a schedule or a node count an older CRD let through)
/// stops its own pool's disruption; a Warning on the NodePool says which and how to fix it,
/// once per wording (see `Notices`).
async fn announce_invalid_budgets<P>(
    ctx: &Context<P>,
    pools: &[Arc<NodePool>],
    decision: &Decision<'_>,
) {
    for pool in pools {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let Some(error) = decision
            .allowances
            .iter()
            .find(|((p, _), _)| p == name)
            .and_then(|(_, a)| a.error.as_ref())
        else {
            continue;
        };
        let event = Event {
            type_: EventType::Warning,
            reason: "DisruptionBlocked".to_owned(),
            note: Some(format!("NodePool {name}: {error}")),
            action: "Disrupt".to_owned(),
            secondary: None,
        };
        ctx.notices
            .publish(&event, &pool.object_ref(&()), error)
            .await;
    }
}

/// Blockers worth an Event: lasting conditions a user set or can change. Transient ones (not
/// initialized, `consolidateAfter` still counting, a disruption under way) and the normal case
/// of a `WhenEmpty` pool with pods are left to `explain`.
fn worth_announcing(kind: BlockerKind) -> bool {
    matches!(
        kind,
        BlockerKind::Budget
            | BlockerKind::DoNotDisruptNode
            | BlockerKind::DoNotDisruptPod
            | BlockerKind::PodDisruptionBudget
            | BlockerKind::ConsolidationDisabled
    )
}

/// Publishes, once per change, why each claim stays: a blocker (`DisruptionBlocked`) or
/// consolidation's verdict on it (`Unconsolidatable`, as upstream), on the claim and its Node.
async fn announce_blocked<P>(ctx: &Context<P>, memory: &mut Memory, decision: &Decision<'_>) {
    let mut seen = HashMap::new();
    for candidate in &decision.candidates {
        let d = &candidate.disruptability;
        let name = candidate.name().to_owned();
        let mut type_ = EventType::Normal;
        let (reason, note) = if let Some((reason, why)) = decision.repair_blocked.get(&name) {
            if *reason == "NodeRepairBlocked" {
                type_ = EventType::Warning;
            }
            (*reason, why.clone())
        } else if let Some(why) = decision.kept.get(&name) {
            ("Unconsolidatable", why.clone())
        } else if d.disruptable_now {
            continue;
        } else if let Some(blocker) = d.blockers.iter().find(|b| worth_announcing(b.kind)) {
            (
                "DisruptionBlocked",
                format!("Cannot disrupt NodeClaim: {}", blocker.message),
            )
        } else {
            continue;
        };
        seen.insert(name.clone(), note.clone());
        if memory.announced.get(&name) == Some(&note) {
            continue;
        }
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Disrupt".to_owned(),
            secondary: None,
        };
        let mut targets = vec![candidate.claim.object_ref(&())];
        if let Some(node) = candidate.node {
            targets.push(node.object_ref());
        }
        // Upstream also warns on the pool when too many of its nodes are unhealthy to repair.
        if reason == "NodeRepairBlocked"
            && let Some(pool) = candidate.pool
        {
            targets.push(pool.object_ref(&()));
        }
        // Through `notices`: the Recorder would fold a new reason for the same claim into the
        // Event already there and keep its old note.
        let state = event.note.clone().unwrap_or_default();
        for target in targets {
            ctx.notices.publish(&event, &target, &state).await;
        }
    }
    memory.announced = seen;
}

/// The reason a command's Events name, as upstream words it (`Underutilized`, `Empty`,
/// `Drifted`).
fn titled(reason: DisruptionReason) -> String {
    format!("{reason:?}")
}
