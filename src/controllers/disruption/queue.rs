//! Carrying out disruption commands (upstream's `pkg/controllers/disruption/queue.go` and
//! `orchestration`): taint the candidates' nodes `karpenter.sh/disrupted:NoSchedule` so nothing
//! new lands on them, launch the replacements, wait until every replacement is Initialized,
//! then delete the candidates' NodeClaims; termination drains them under their PodDisruption
//! Budgets. Nothing is evicted before the replacements are up.
//!
//! As upstream's orchestration queue, the pass that decides a command only starts it (taint,
//! launch); the wait for its replacements and the deletion run in a task of the [`Queue`], so
//! the next pass can start another command while this one waits, as many as the pools'
//! budgets allow (the held nodes carry the taint, which the budgets count and candidate
//! selection skips). A command without replacements is finished by its pass. The queue lives
//! in the disruption loop: when the loop stops (its Lease lost), the waiting commands stop with
//! it, and the next leader's first pass releases their taints (`stranded.rs`).
//!
//! Upstream taints before it launches (the candidates' pods stay where they are until the
//! deletion; the taint only keeps new pods off nodes about to go). If a replacement is deleted
//! (its launch failed) or is not Initialized within `disruption_replacement_timeout`, the
//! command is rolled back: the taint comes off, the replacements that did not come up are
//! deleted, and the candidates get an Event saying why. A failure part-way (a taint, a create)
//! rolls back what was done; a command interrupted outright (the agent killed, its Lease lost)
//! is released by the next pass (`stranded.rs`).

use super::titled;
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, labels};
use crate::controllers::provisioning::node_claim_for;
use crate::controllers::{Context, Error, is_not_found};
use crate::disruption::{Command, reason_name};
use crate::state::CachedPod;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// The commands waiting for their replacements: the nodes they hold, and their tasks.
#[derive(Default)]
pub(super) struct Queue {
    held: Arc<Mutex<HashSet<String>>>,
    tasks: tokio::task::JoinSet<()>,
}

impl Queue {
    /// The nodes the commands in flight hold.
    pub(super) fn held(&self) -> HashSet<String> {
        lock(&self.held).clone()
    }

    /// How many commands are waiting for their replacements.
    pub(super) fn in_flight(&mut self) -> usize {
        while let Some(done) = self.tasks.try_join_next() {
            if let Err(e) = done
                && e.is_panic()
            {
                warn!(error = %e, "a disruption command's task panicked; its nodes are released next pass");
            }
        }
        self.tasks.len()
    }
}

fn lock(held: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    // A panic while holding the lock left a set of names behind, which stays usable.
    held.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A command's hold on its candidates' nodes, let go when its task ends however it ends.
struct Hold {
    held: Arc<Mutex<HashSet<String>>>,
    nodes: Vec<String>,
}

impl Hold {
    fn new(held: &Arc<Mutex<HashSet<String>>>, command: &Command) -> Self {
        let nodes: Vec<String> = command.candidates.iter().map(|c| c.node.clone()).collect();
        lock(held).extend(nodes.iter().cloned());
        Self {
            held: held.clone(),
            nodes,
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        for node in &self.nodes {
            held.remove(node);
        }
    }
}

/// Starts `command`: taints its candidates and launches its replacements, then leaves the wait
/// for them and the deletion to a task of `queue` (a command without replacements is finished
/// here).
pub(super) async fn execute<P: crate::cloud::CloudProvider + 'static>(
    ctx: &Arc<Context<P>>,
    queue: &mut Queue,
    command: Command,
) -> Result<(), Error> {
    let hold = Hold::new(&queue.held, &command);
    for candidate in &command.candidates {
        if let Err(e) = set_disrupted_taint(ctx, &candidate.node, true).await {
            rollback(ctx, &command, &[], &format!("tainting a node failed: {e}")).await;
            return Err(e);
        }
    }
    let mut replacements = Vec::new();
    if let Err(e) = launch(ctx, &command, &mut replacements).await {
        // The replacements created before the failure go too, or they would run empty.
        rollback(
            ctx,
            &command,
            &replacements,
            &format!("launching a replacement failed: {e}"),
        )
        .await;
        return Err(e);
    }
    if replacements.is_empty() {
        return finish(ctx, &command).await;
    }
    announce(
        ctx,
        &command,
        "DisruptionWaitingReadiness",
        "Waiting on readiness to continue disruption".to_owned(),
    )
    .await;
    let ctx = ctx.clone();
    queue.tasks.spawn(async move {
        let _hold = hold;
        match wait_initialized(&ctx, &replacements).await {
            Err(why) => rollback(&ctx, &command, &replacements, &why).await,
            Ok(()) => {
                if let Err(e) = finish(&ctx, &command).await {
                    warn!(command = %command.describe(), error = %e, "disruption did not finish");
                }
            }
        }
    });
    Ok(())
}

/// Deletes the candidates of a command whose replacements are up (or that needs none).
async fn finish<P>(ctx: &Context<P>, command: &Command) -> Result<(), Error> {
    announce(
        ctx,
        command,
        "DisruptionTerminating",
        format!("Disrupting NodeClaim: {}", titled(command.reason)),
    )
    .await;
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for candidate in &command.candidates {
        mark_disrupted(ctx, &candidate.claim, command).await;
        match api
            .delete(&candidate.claim, &DeleteParams::background())
            .await
        {
            Ok(claim) => {
                if let Some(claim) = claim.left() {
                    let pool = ctx
                        .cluster
                        .pools
                        .get(&kube::runtime::reflector::ObjectRef::new(&candidate.pool));
                    let consolidating = !command.method.consolidation_type().is_empty();
                    ctx.count_disrupted(
                        &claim,
                        reason_name(command.reason),
                        pool.as_deref(),
                        consolidating,
                    );
                }
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                // The candidates keep their taint until the next pass releases it
                // (`stranded.rs`); the user hears why the node stays.
                let note = format!(
                    "Disruption did not finish: deleting NodeClaim {} failed: {}",
                    candidate.claim,
                    refusal(&e)
                );
                warn_candidates(ctx, command, note).await;
                return Err(Error::kube("deleting a disrupted nodeclaim")(e));
            }
        }
    }
    info!(command = %command.describe(), "disruption carried out");
    Ok(())
}

/// Sets the claim's `DisruptionReason` condition before it is deleted (upstream's
/// `MarkDisrupted`), so the claim says why it goes and termination's `Evicted` Events name the
/// reason. A failed write is logged, not fatal: the deletion matters more than the label on it.
async fn mark_disrupted<P>(ctx: &Context<P>, name: &str, command: &Command) {
    let Some(claim) = ctx
        .cluster
        .claims
        .state()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
    else {
        return;
    };
    let mut conditions = claim
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    crate::controllers::conditions::set(
        &mut conditions,
        cond::DISRUPTION_REASON,
        true,
        &titled(command.reason),
        &format!("Disrupting NodeClaim: {}", titled(command.reason)),
        claim.metadata.generation,
    );
    if let Err(e) =
        crate::controllers::nodeclaim_disruption::write_conditions(ctx, &claim, conditions).await
    {
        warn!(nodeclaim = %name, error = %e, "could not set the DisruptionReason condition");
    }
}

/// Creates the replacements' NodeClaims, adding each one's name to `names` as it is created
/// (so a failure part-way still says which exist).
async fn launch<P>(
    ctx: &Context<P>,
    command: &Command,
    names: &mut Vec<String>,
) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let pools = ctx.cluster.pools.state();
    for replacement in &command.replacements {
        let Some(pool) = pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(replacement.claim.node_pool.as_str()))
        else {
            return Err(Error::Invalid {
                object: format!("NodePool {}", replacement.claim.node_pool),
                reason: "it is gone".to_owned(),
            });
        };
        let pods: Vec<&CachedPod> = replacement.pods.iter().collect();
        let claim = node_claim_for(&replacement.claim, pool, &pods);
        let created = api
            .create(&PostParams::default(), &claim)
            .await
            .map_err(Error::kube("creating a replacement nodeclaim"))?;
        ctx.count_created(&created, reason_name(command.reason));
        let name = created.name_any();
        info!(nodeclaim = %name, cheapest = ?replacement.claim.instance_types.first().map(|o| &o.name), "launching a replacement");
        names.push(name);
    }
    if !names.is_empty() {
        announce(
            ctx,
            command,
            "DisruptionLaunching",
            format!(
                "Launching NodeClaim: {} ({})",
                titled(command.reason),
                names.join(", ")
            ),
        )
        .await;
    }
    Ok(())
}

/// Waits until every replacement is Initialized; says why not otherwise.
async fn wait_initialized<P>(ctx: &Context<P>, names: &[String]) -> Result<(), String> {
    let deadline = Instant::now() + ctx.settings.disruption_replacement_timeout;
    loop {
        let claims = ctx.cluster.claims.state();
        let mut ready = 0;
        for name in names {
            match claims
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
            {
                Some(c) if c.metadata.deletion_timestamp.is_some() => {
                    return Err(format!(
                        "replacement {name} is being deleted (its launch failed)"
                    ));
                }
                Some(c) if c.is_true(cond::INITIALIZED) => ready += 1,
                Some(_) => {}
                // The watch may not have delivered a claim created a moment ago; a claim that
                // stays missing past the deadline counts as failed.
                None => {}
            }
        }
        if ready == names.len() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} of {} replacements were not initialized within {:?}",
                names.len() - ready,
                names.len(),
                ctx.settings.disruption_replacement_timeout
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Undoes a command that cannot finish: untaints the candidates, deletes the replacements that
/// did not come up, and tells the candidates' owners why.
async fn rollback<P>(ctx: &Context<P>, command: &Command, replacements: &[String], why: &str) {
    warn!(command = %command.describe(), why, "disruption rolled back");
    for candidate in &command.candidates {
        if let Err(e) = set_disrupted_taint(ctx, &candidate.node, false).await {
            warn!(node = %candidate.node, error = %e, "could not untaint a node after a rollback");
        }
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let claims = ctx.cluster.claims.state();
    for name in replacements {
        let initialized = claims
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(name) && c.is_true(cond::INITIALIZED));
        if initialized {
            continue;
        }
        if let Err(e) = api.delete(name, &DeleteParams::background()).await
            && !is_not_found(&e)
        {
            warn!(nodeclaim = %name, error = %e, "could not delete a replacement after a rollback");
        }
    }
    warn_candidates(ctx, command, format!("Disruption rolled back: {why}")).await;
}

/// A Warning (`DisruptionBlocked`) on every candidate's NodeClaim: why the command stopped.
async fn warn_candidates<P>(ctx: &Context<P>, command: &Command, note: String) {
    let event = Event {
        type_: EventType::Warning,
        reason: "DisruptionBlocked".to_owned(),
        note: Some(note),
        action: "Disrupt".to_owned(),
        secondary: None,
    };
    let claims = ctx.cluster.claims.state();
    for claim in claims.iter().filter(|c| {
        command
            .candidates
            .iter()
            .any(|d| c.metadata.name.as_deref() == Some(&d.claim))
    }) {
        // Through `notices`, which `announce_blocked` shares: the Recorder would fold this
        // into an earlier `DisruptionBlocked` of the claim and keep that one's note.
        let state = event.note.clone().unwrap_or_default();
        ctx.notices
            .publish(&event, &claim.object_ref(&()), &state)
            .await;
    }
}

/// What the API server said, without the client's wrapping: the note a user reads.
fn refusal(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Publishes an Event on every candidate's NodeClaim and Node.
async fn announce<P>(ctx: &Context<P>, command: &Command, reason: &str, note: String) {
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Disrupt".to_owned(),
        secondary: None,
    };
    let claims = ctx.cluster.claims.state();
    let nodes = ctx.cluster.nodes.state();
    for candidate in &command.candidates {
        let claim = claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(&candidate.claim));
        let node = nodes.iter().find(|n| n.name == candidate.node);
        let targets = claim
            .map(|c| c.object_ref(&()))
            .into_iter()
            .chain(node.map(|n| n.object_ref()));
        for target in targets {
            if let Err(e) = ctx.recorder.publish(&event, &target).await {
                warn!(error = %e, "could not publish event");
            }
        }
    }
}

/// Adds or removes `karpenter.sh/disrupted:NoSchedule` on a node; whether the node changed.
pub(super) async fn set_disrupted_taint<P>(
    ctx: &Context<P>,
    node: &str,
    on: bool,
) -> Result<bool, Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let current = match nodes.get(node).await {
        Ok(n) => n,
        Err(e) if is_not_found(&e) => return Ok(false),
        Err(e) => return Err(Error::kube("reading a node to taint")(e)),
    };
    let mut taints = current
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let has = taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY);
    if has == on {
        return Ok(false);
    }
    if on {
        taints.push(Taint {
            key: labels::DISRUPTED_TAINT_KEY.to_owned(),
            effect: "NoSchedule".to_owned(),
            ..Taint::default()
        });
    } else {
        taints.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
    }
    // The resource version makes a concurrent change to the taints (the lifecycle loop syncing
    // a claim's taints) fail this patch instead of being overwritten.
    let patch = json!({
        "metadata": {"resourceVersion": current.metadata.resource_version},
        "spec": {"taints": taints},
    });
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube("tainting a node for disruption"))?;
    Ok(true)
}
