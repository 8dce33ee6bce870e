//! The registration deadline: a launched instance whose Node has not registered within
//! `registration_ttl` is given up on, and its claim deleted (the termination path deletes the
//! instance, provisioning plans the pods again).
//!
//! Follows upstream's `pkg/controllers/nodeclaim/lifecycle/liveness.go`.

use super::{delete_claim, publish};
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodeClaimStatus};
use crate::controllers::{Context, Error, conditions};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use std::time::Duration;
use tracing::warn;

pub(super) async fn check_registration_deadline<P>(
    claim: &NodeClaim,
    status: &NodeClaimStatus,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let launched_at = conditions::since(&status.conditions, cond::LAUNCHED);
    let age = launched_at.map(|t| {
        k8s_openapi::jiff::Timestamp::now()
            .duration_since(t)
            .unsigned_abs()
    });
    if age.is_some_and(|age| age > ctx.settings.registration_ttl) {
        let note = format!(
            "the node did not register within {}s; deleting the claim",
            ctx.settings.registration_ttl.as_secs()
        );
        warn!(nodeclaim = %claim.name_any(), %note, "registration timed out");
        publish(ctx, claim, EventType::Warning, "RegistrationTimeout", &note).await;
        delete_claim(claim, ctx).await?;
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(Duration::from_secs(10)))
}
