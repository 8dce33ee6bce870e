//! Deleting NodeClaims whose `expireAfter` has passed, as upstream v1's
//! `pkg/controllers/nodeclaim/expiration/controller.go`: forcefully, whatever the disruption
//! budgets say (designs/forceful-expiration.md). The deletion goes through the claim's
//! finalizer like any other, so the drain still honours PodDisruptionBudgets until the claim's
//! `terminationGracePeriod`; provisioning launches a node for the pods it evicts.

use super::owned;
use crate::apis::NodeClaim;
use crate::cloud::CloudProvider;
use crate::controllers::{Context, Error};
use crate::disruption::expires_at;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use std::collections::HashSet;
use tracing::{info, warn};

/// The claims (by UID) this loop deleted whose deletion the watch has not shown yet, so a pass
/// that runs before it does neither deletes nor counts them twice.
#[derive(Default)]
pub(super) struct Memory(HashSet<String>);

/// Deletes every expired claim; returns when the next one expires.
pub(super) async fn reconcile<P: CloudProvider>(
    ctx: &Context<P>,
    memory: &mut Memory,
    now: Timestamp,
) -> Option<Timestamp> {
    let claims = ctx.cluster.claims.state();
    memory.0.retain(|uid| {
        claims
            .iter()
            .any(|c| c.uid().as_ref() == Some(uid) && c.metadata.deletion_timestamp.is_none())
    });
    let mut next: Option<Timestamp> = None;
    for claim in claims {
        if claim.metadata.deletion_timestamp.is_some()
            || claim.uid().is_some_and(|uid| memory.0.contains(&uid))
            || !owned(ctx, &claim)
        {
            continue;
        }
        let Some(at) = expires_at(&claim) else {
            continue;
        };
        if at > now {
            next = Some(next.map_or(at, |n| n.min(at)));
            continue;
        }
        match expire(ctx, &claim).await {
            Ok(()) => {
                if let Some(uid) = claim.uid() {
                    memory.0.insert(uid);
                }
            }
            Err(e) => {
                warn!(nodeclaim = %claim.name_any(), error = %e, cause = ?std::error::Error::source(&e), "could not delete an expired nodeclaim");
            }
        }
    }
    next
}

/// Deletes an expired claim, counts it in `karpenter_nodeclaims_disrupted_total` (reason
/// `expired`, as upstream) and says so in an Event on it.
async fn expire<P>(ctx: &Context<P>, claim: &NodeClaim) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api
        .delete(&claim.name_any(), &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        // Gone already: nothing was disrupted by us.
        Err(e) if crate::controllers::is_not_found(&e) => return Ok(()),
        Err(e) => return Err(Error::kube("deleting an expired nodeclaim")(e)),
    }
    ctx.count_disrupted(claim, "expired", None, false);
    let note = format!(
        "expireAfter {} has passed since the node was made; deleting it, its pods go to a new node",
        claim.spec.expire_after.0
    );
    info!(nodeclaim = %claim.name_any(), expire_after = %claim.spec.expire_after.0, "deleting expired nodeclaim");
    let event = Event {
        type_: EventType::Normal,
        reason: "Expired".to_owned(),
        note: Some(note),
        action: "Expiring".to_owned(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &claim.object_ref(&())).await {
        warn!(nodeclaim = %claim.name_any(), error = %e, "could not publish event");
    }
    Ok(())
}
