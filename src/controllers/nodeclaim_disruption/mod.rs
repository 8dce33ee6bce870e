//! The loop that keeps what disruption reads about NodeClaims current, beside the lifecycle
//! loop: each NodePool's template hash and the claims stamped with it (upstream's
//! `pkg/controllers/nodepool/hash`, in `hash`), the `Drifted` condition of every initialized
//! claim (upstream's `pkg/controllers/nodeclaim/disruption`, in `drift`), and the deletion of
//! claims whose `expireAfter` has passed (upstream's `pkg/controllers/nodeclaim/expiration`, in
//! `expiration`). The decisions are the pure ones of [`crate::disruption`]; this module does the
//! writes.
//!
//! One pass covers every pool and claim, every [`PASS_EVERY`] and at the moment the next claim
//! expires, whichever comes first. A periodic pass (rather than upstream's per-object watches)
//! sees a NodePool edit within [`PASS_EVERY`] without another watch, and costs little: the
//! decisions are pure and a write happens only when something changed.

mod drift;
mod expiration;
mod hash;

use super::{Context, Error, FIELD_MANAGER};
use crate::apis::NodeClaim;
use crate::cloud::{CloudProvider, ProviderId};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The longest a NodePool edit waits before its claims are judged again.
pub const PASS_EVERY: Duration = Duration::from_secs(15);

/// What the loop remembers between passes; a restart loses nothing that matters (a claim deleted
/// twice is deleted once; a cloud verdict is asked again).
#[derive(Default)]
pub struct Memory {
    expiration: expiration::Memory,
    drift: drift::Memory,
}

/// Runs the loop until cancelled.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>) {
    let mut memory = Memory::default();
    loop {
        let guard = ctx.health.pass(
            super::names::NODECLAIM_DISRUPTION,
            ctx.settings.stuck_pass_after,
        );
        let next_expiry = pass(&ctx, &mut memory).await;
        drop(guard);
        let until_expiry = next_expiry.map(|at| {
            let wait = at.duration_since(Timestamp::now());
            // A second past the moment, so the claim is expired when the pass looks at it.
            Duration::try_from(wait).unwrap_or(Duration::ZERO) + Duration::from_secs(1)
        });
        tokio::time::sleep(until_expiry.map_or(PASS_EVERY, |d| d.min(PASS_EVERY))).await;
    }
}

/// One pass: pool hashes, then expiry, then drift. Returns when the next claim expires.
pub async fn pass<P: CloudProvider>(ctx: &Context<P>, memory: &mut Memory) -> Option<Timestamp> {
    for pool in ctx.cluster.pools.state() {
        if let Err(e) = hash::reconcile(ctx, &pool).await {
            tracing::warn!(nodepool = %pool.name_any(), error = %e, cause = ?std::error::Error::source(&e), "could not stamp the nodepool hash");
        }
    }
    let now = Timestamp::now();
    let next_expiry = expiration::reconcile(ctx, &mut memory.expiration, now).await;
    drift::reconcile(ctx, &mut memory.drift, now).await;
    next_expiry
}

/// Whether this agent's provider owns `claim`'s machine; a claim not launched yet counts as
/// ours (the lifecycle loop launches it).
fn owned<P: CloudProvider>(ctx: &Context<P>, claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .and_then(|id| id.parse::<ProviderId>().ok())
        .is_none_or(|id| ctx.provider.owns(&id))
}

/// Writes `conditions` as the claim's conditions, the rest of its status as read. Applied as the
/// lifecycle loop applies the status (same field manager, so a condition left out is removed),
/// but only if the claim is still the version read: a newer one is judged on the next pass.
pub(crate) async fn write_conditions<P>(
    ctx: &Context<P>,
    claim: &NodeClaim,
    conditions: Vec<Condition>,
) -> Result<(), Error> {
    let mut status = claim.status.clone().unwrap_or_default();
    status.conditions = conditions;
    // lastPodEventTime belongs to the pod-events loop (see the lifecycle's write_status).
    status.last_pod_event_time = None;
    let patch = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": claim.name_any(), "resourceVersion": claim.resource_version()},
        "status": status,
    });
    let write = ctx.own_writes.begin(claim);
    let written = Api::<NodeClaim>::all(ctx.client.clone())
        .patch_status(
            &claim.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::kube("writing the nodeclaim's conditions"))?;
    write.done(&written);
    Ok(())
}
