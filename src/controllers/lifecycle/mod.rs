//! The NodeClaim lifecycle, one reconcile per claim: launch the instance, register its Node
//! (labels, taints, finalizer), mark it initialized once Ready, delete claims whose instance never
//! registered, and, when a claim or its Node is deleted, drain the Node, delete the instance and
//! release the finalizers.
//!
//! This module is the controller (upstream's `pkg/controllers/nodeclaim/lifecycle/controller.go`):
//! it runs the reconciles, orders the phases, and owns the writes they share (the claim's status
//! and finalizer, its deletion, its Events). Each phase is its own file, as upstream splits them:
//! `launch`, `registration`, `initialization`, `liveness` (the registration deadline), and
//! `termination` (upstream's `pkg/controllers/node/termination`: drain, delete the instance,
//! release the finalizers).

mod initialization;
mod launch;
mod liveness;
mod registration;
mod termination;

pub(crate) use termination::release_finalizer;

pub use launch::launch_candidates;

use super::{Context, Error, FIELD_MANAGER, conditions};
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodeClaimStatus, labels};
use crate::cloud::{CloudProvider, ProviderId};
use crate::state::CachedNode;
use futures::StreamExt;
use initialization::initialize;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, applier};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use launch::launch;
use liveness::check_registration_deadline;
use registration::register;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use termination::terminate;
use tokio::sync::mpsc;
use tracing::{info, warn};

/// How many claims are reconciled at once. Unbounded, a scale-out of hundreds of claims opened
/// an API connection per claim in flight (the client speaks HTTP/1.1), each with its TLS and
/// HTTP buffers, and the pool then kept them all idle for 90 s: megabytes for no speed-up,
/// since the API server and the cloud throttle such bursts anyway.
const MAX_CONCURRENT_RECONCILES: u16 = 64;

/// Runs the lifecycle controller until the task is dropped. `triggers` names the claims to
/// reconcile: the agent's own claim and node watches feed it (see `controllers::start`), so the
/// controller reads the shared claim store instead of caching every claim and watching every
/// node a second time.
pub async fn run<P: CloudProvider + 'static>(
    ctx: Arc<Context<P>>,
    triggers: mpsc::UnboundedReceiver<ObjectRef<NodeClaim>>,
) {
    let store = ctx.cluster.claims.clone();
    let queue = tokio_stream_of(triggers);
    let config = controller::Config::default().concurrency(MAX_CONCURRENT_RECONCILES);
    let reconciles = applier(
        |claim, ctx| Box::pin(reconcile_with_backoff(claim, ctx)),
        error_policy,
        ctx,
        store,
        queue,
        config,
    )
    .for_each(|_| futures::future::ready(()));
    reconciles.await;
}

fn tokio_stream_of<T: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = Result<T, std::convert::Infallible>> + Send + Unpin {
    Box::pin(futures::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|item| item.map(Ok))
    }))
}

/// The claims a Node event concerns: those whose providerID is the node's.
pub(crate) fn claims_of_node(
    claims: &kube::runtime::reflector::Store<NodeClaim>,
    node: &CachedNode,
) -> Vec<ObjectRef<NodeClaim>> {
    let Some(provider_id) = node.provider_id.as_deref() else {
        return Vec::new();
    };
    claims
        .state()
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
        .map(|c| ObjectRef::from_obj(&**c))
        .collect()
}

/// A failed claim waits out its backoff even when an event (often its own status write) wakes
/// it early; a pass that succeeds resets the backoff.
async fn reconcile_with_backoff<P: CloudProvider>(
    claim: Arc<NodeClaim>,
    ctx: Arc<Context<P>>,
) -> Result<Action, Error> {
    let key = claim.name_any();
    if let Some(wait) = ctx.claim_failures.hold(&key)
        && claim.metadata.deletion_timestamp.is_none()
    {
        return Ok(Action::requeue(wait));
    }
    let result = reconcile(claim, ctx.clone()).await;
    if result.is_ok() {
        ctx.claim_failures.succeeded(&key);
    }
    result
}

fn error_policy<P: CloudProvider>(
    claim: Arc<NodeClaim>,
    error: &Error,
    ctx: Arc<Context<P>>,
) -> Action {
    if error.is_conflict() {
        // Someone else wrote the object since we read it: read it again and retry at once.
        tracing::debug!(nodeclaim = %claim.name_any(), error = %error, "conflict; retrying");
        return Action::requeue(Duration::from_millis(200));
    }
    let wait = ctx.claim_failures.failed(&claim.name_any());
    warn!(nodeclaim = %claim.name_any(), error = %error, cause = ?std::error::Error::source(error),
        retry_in_ms = wait.as_millis(), "nodeclaim reconcile failed");
    ctx.metrics
        .reconcile_errors
        .get_or_create(&crate::metrics::ErrorLabels {
            kind: error.kind().to_owned(),
        })
        .inc();
    Action::requeue(wait)
}

/// One pass over one NodeClaim.
pub async fn reconcile<P: CloudProvider>(
    claim: Arc<NodeClaim>,
    ctx: Arc<Context<P>>,
) -> Result<Action, Error> {
    if claim.metadata.deletion_timestamp.is_some() {
        return terminate(&claim, &ctx).await;
    }
    if ctx.own_writes.is_stale(&claim) {
        // The watch has not delivered our last write yet; its event reconciles the claim again.
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    if !claim
        .finalizers()
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        add_claim_finalizer(&claim, &ctx).await?;
        return Ok(Action::requeue(Duration::ZERO));
    }
    let status = claim.status.clone().unwrap_or_default();
    if !conditions::is_true(&status.conditions, cond::LAUNCHED) {
        if liveness::launch_time_left(&claim, &ctx).is_none() {
            return liveness::launch_timed_out(&claim, &status, &ctx).await;
        }
        return launch(&claim, status, &ctx).await;
    }
    let Some(provider_id) = status.provider_id.clone() else {
        return Err(Error::Invalid {
            object: describe(&claim),
            reason: "Launched but has no providerID".to_owned(),
        });
    };
    let node = ctx.cluster.node_by_provider_id(&provider_id);
    if let Some(node) = &node
        && node.deletion_timestamp.is_some()
    {
        // Someone deleted the Node: the claim goes with it, through the claim's finalizer.
        info!(nodeclaim = %claim.name_any(), node = %node.name, "node deleted, deleting its nodeclaim");
        delete_claim(&claim, &ctx).await?;
        return Ok(Action::await_change());
    }
    if !conditions::is_true(&status.conditions, cond::REGISTERED) {
        return match node {
            Some(node) => register(&claim, status, &node, &ctx).await,
            None => check_registration_deadline(&claim, &status, &ctx).await,
        };
    }
    let Some(node) = node else {
        // The Node vanished after registering: is the instance gone too?
        let id: Option<ProviderId> = provider_id.parse().ok();
        let instance = match &id {
            Some(id) => ctx
                .provider
                .get(id)
                .await
                .map_err(Error::cloud("looking up the instance"))?,
            None => None,
        };
        if instance.is_none() || instance.as_ref().is_some_and(|i| i.terminating) {
            info!(nodeclaim = %claim.name_any(), "instance is gone, deleting its nodeclaim");
            publish(
                &ctx,
                &claim,
                EventType::Warning,
                "InstanceTerminated",
                "the instance is gone; replacing it",
            )
            .await;
            delete_claim(&claim, &ctx).await?;
            return Ok(Action::await_change());
        }
        return Ok(Action::requeue(Duration::from_secs(30)));
    };
    if !conditions::is_true(&status.conditions, cond::INITIALIZED) {
        return initialize(&claim, status, &node, &ctx).await;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// The UID of the NodePool that made the claim, from its owner reference: outcomes are
/// recorded for that pool, not for a later pool of the same name (as upstream checks).
fn pool_uid(claim: &NodeClaim) -> Option<&str> {
    let pool = claim.labels().get(labels::NODE_POOL)?;
    claim
        .owner_references()
        .iter()
        .find(|o| o.kind == "NodePool" && &o.name == pool)
        .map(|o| o.uid.as_str())
}

fn describe(claim: &NodeClaim) -> String {
    format!("NodeClaim {}", claim.name_any())
}

async fn publish<P>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.to_owned()),
        action: reason.to_owned(),
        secondary: None,
    };
    // Each of a claim's Events marks a step it takes once (a changed launch failure is a new
    // step): there is no series to fold repeats into.
    ctx.notices
        .publish_once(&event, &claim.object_ref(&()))
        .await;
}

async fn add_claim_finalizer<P>(claim: &NodeClaim, ctx: &Context<P>) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut finalizers = claim.finalizers().to_vec();
    finalizers.push(labels::TERMINATION_FINALIZER.to_owned());
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": claim.resource_version()}});
    let write = ctx.own_writes.begin(claim);
    let written = api
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(Error::kube("adding the termination finalizer"))?;
    write.done(&written);
    Ok(())
}

async fn write_status<P>(
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    ctx: &Context<P>,
) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    // lastPodEventTime belongs to the pod-events loop: applying the (possibly older) copy read
    // with the claim would set it back, and owning it here would clear it when left out.
    let status = NodeClaimStatus {
        last_pod_event_time: None,
        ..status.clone()
    };
    let patch = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "status": status});
    let write = ctx.own_writes.begin(claim);
    let written = api
        .patch_status(
            &claim.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::kube("writing the nodeclaim status"))?;
    write.done(&written);
    Ok(())
}

async fn delete_claim<P>(claim: &NodeClaim, ctx: &Context<P>) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api
        .delete(&claim.name_any(), &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(Error::kube("deleting the nodeclaim")(e)),
    }
}
