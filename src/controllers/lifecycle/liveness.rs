//! The launch and registration deadlines: a claim whose instance has not launched within
//! `launch_ttl` of its creation (its launch keeps failing for a reason other than capacity), or
//! whose Node has not registered within `registration_ttl` of the launch, is given up on: it is
//! deleted with an Event saying why (the termination path deletes any instance, provisioning
//! plans its pods again), counted in `karpenter_nodeclaims_disrupted_total`, and recorded as a
//! failure of its pool ([`crate::controllers::pool_health`]), whose `NodeRegistrationHealthy`
//! condition goes False after repeated failures.
//!
//! Follows upstream's `pkg/controllers/nodeclaim/lifecycle/liveness.go` (5 and 15 minutes).
//! Upstream times the launch from the `Launched` condition's transition, which its status
//! initialisation writes as Unknown when the claim is created; this agent writes no condition
//! before the first attempt, so the claim's creation is the same instant.

use super::{delete_claim, publish};
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodeClaimStatus, labels};
use crate::controllers::{Context, Error, conditions};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use std::time::Duration;
use tracing::warn;

/// Upstream's reasons in `karpenter_nodeclaims_disrupted_total`.
const LAUNCH_TIMEOUT: &str = "launch_timeout";
const REGISTRATION_TIMEOUT: &str = "registration_timeout";

/// How long the claim has before its launch deadline, or `None` when it has passed.
pub(super) fn launch_time_left<P>(claim: &NodeClaim, ctx: &Context<P>) -> Option<Duration> {
    let created = claim.metadata.creation_timestamp.as_ref()?.0;
    ctx.settings.launch_ttl.checked_sub(age(created))
}

/// Gives up on a claim whose launch deadline passed.
pub(super) async fn launch_timed_out<P>(
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    // The pool's condition carries the last failure, as upstream copies the claim's Launched
    // condition (reason LaunchFailed and the cloud's error).
    let (reason, message) = status
        .conditions
        .iter()
        .find(|c| c.type_ == cond::LAUNCHED && !c.reason.is_empty())
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_else(|| {
            (
                "LaunchTimeout".to_owned(),
                "the launch did not finish".to_owned(),
            )
        });
    let note = format!(
        "the instance did not launch within {}s ({message}); deleting the claim so its pods are planned again",
        ctx.settings.launch_ttl.as_secs()
    );
    give_up(
        claim,
        ctx,
        "LaunchTimeout",
        LAUNCH_TIMEOUT,
        &note,
        (&reason, &message),
    )
    .await
}

pub(super) async fn check_registration_deadline<P>(
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let launched_at = conditions::since(&status.conditions, cond::LAUNCHED);
    if launched_at.is_some_and(|t| age(t) > ctx.settings.registration_ttl) {
        let note = format!(
            "the node did not register within {}s; deleting the claim",
            ctx.settings.registration_ttl.as_secs()
        );
        let failure = ("RegistrationFailed", "Failed to register node");
        return give_up(
            claim,
            ctx,
            "RegistrationTimeout",
            REGISTRATION_TIMEOUT,
            &note,
            failure,
        )
        .await;
    }
    Ok(Action::requeue(Duration::from_secs(10)))
}

fn age(since: Timestamp) -> Duration {
    Timestamp::now().duration_since(since).unsigned_abs()
}

async fn give_up<P>(
    claim: &NodeClaim,
    ctx: &Context<P>,
    event_reason: &str,
    metric_reason: &str,
    note: &str,
    (failure_reason, failure_message): (&str, &str),
) -> Result<Action, Error> {
    warn!(nodeclaim = %claim.name_any(), reason = metric_reason, %note, "giving up on the nodeclaim");
    publish(ctx, claim, EventType::Warning, event_reason, note).await;
    delete_claim(claim, ctx).await?;
    let pool = claim.labels().get(labels::NODE_POOL).and_then(|name| {
        ctx.cluster
            .pools
            .get(&kube::runtime::reflector::ObjectRef::new(name))
    });
    if let Some(uid) = super::pool_uid(claim) {
        ctx.pool_health
            .failed(uid, failure_reason, failure_message, Timestamp::now());
    }
    ctx.count_disrupted(claim, metric_reason, pool.as_deref(), false);
    Ok(Action::await_change())
}
