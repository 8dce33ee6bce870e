//! Deletes instances no NodeClaim owns (no claim's `status.providerID` names them, and no claim
//! still launching names them in its tags), older than the grace period: launched by an agent
//! that crashed before it recorded the launch and then launched again, or left behind by a
//! claim deleted while its launch was in flight. Instances are money; none may leak.
//!
//! The other direction too: a launched NodeClaim whose instance the cloud stopped or removed
//! (a preempted spot VM, an instance deleted by hand) is deleted, so its pods go pending and
//! get a new claim. Its Node may still be there (a stopped VM's Node just goes NotReady), so the
//! lifecycle's "node vanished" check alone would never notice.

use super::{Context, Error, conditions};
use crate::apis::NodeClaim;
use crate::apis::nodeclaim::conditions as cond;
use crate::cloud::{CloudProvider, ListedInstance, ProviderId};
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tracing::{info, warn};

/// Runs garbage collection every `settings.garbage_collection_interval` until cancelled.
pub(crate) async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>) {
    let mut interval = tokio::time::interval(ctx.settings.garbage_collection_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let _pass = ctx.health.pass(
            super::names::GARBAGE_COLLECTION,
            ctx.settings.stuck_pass_after,
        );
        // One listing serves both directions: at thousands of nodes each list is pages of
        // objects to decode, and the second direction confirms with a `get` of its own anyway.
        let instances = match ctx.provider.list().await {
            Ok(instances) => instances,
            Err(e) => {
                let e = Error::cloud("listing instances")(e);
                warn!(error = %e, cause = ?std::error::Error::source(&e), "garbage collection failed");
                continue;
            }
        };
        match collect(&ctx, &instances).await {
            Ok(0) => {}
            Ok(deleted) => info!(instances = deleted, "garbage-collected orphaned instances"),
            Err(e) => {
                warn!(error = %e, cause = ?std::error::Error::source(&e), "garbage collection failed")
            }
        }
        match collect_claims_without_instances(&ctx, &instances).await {
            Ok(0) => {}
            Ok(deleted) => info!(
                nodeclaims = deleted,
                "deleted nodeclaims whose instances are gone"
            ),
            Err(e) => {
                warn!(error = %e, cause = ?std::error::Error::source(&e), "checking nodeclaims' instances failed")
            }
        }
    }
}

/// One pass over `instances` (the provider's list): deletes every instance older than the grace
/// period that no NodeClaim owns, and returns how many it deleted.
pub(crate) async fn collect<P: CloudProvider>(
    ctx: &Context<P>,
    instances: &[ListedInstance],
) -> Result<usize, Error> {
    // Read the claims after the instances: a claim created in between is then seen, never the
    // other way round.
    let claims = ctx.cluster.claims.state();
    let owned_ids: HashSet<String> = claims
        .iter()
        .filter_map(|c| c.status.as_ref().and_then(|s| s.provider_id.clone()))
        .collect();
    // A claim whose launch is not recorded yet may own an instance it names: the launch is in
    // flight. A claim that already records another instance does not: that instance is a
    // duplicate (a launch retried after a crash), and goes like any orphan, as upstream's
    // garbage collection compares provider IDs.
    let launching: HashSet<String> = claims
        .iter()
        .filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.provider_id.as_ref())
                .is_none()
        })
        .map(|c| c.name_any())
        .collect();
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut deleted = 0;
    for instance in instances {
        if owned_ids.contains(&instance.provider_id.to_string()) {
            continue;
        }
        if instance
            .node_claim
            .as_ref()
            .is_some_and(|name| launching.contains(name))
        {
            continue;
        }
        let age = instance
            .created
            .map(|t| now.duration_since(t).unsigned_abs());
        if age.is_none_or(|age| age < ctx.settings.garbage_collection_grace) {
            continue;
        }
        info!(provider_id = %instance.provider_id, nodeclaim = ?instance.node_claim, "deleting orphaned instance");
        ctx.provider
            .delete(&instance.provider_id)
            .await
            .map_err(Error::cloud("deleting an orphaned instance"))?;
        ctx.metrics.instances_garbage_collected.inc();
        deleted += 1;
    }
    Ok(deleted)
}

/// One pass the other way: deletes every launched NodeClaim (older than the grace period, not
/// already deleting, of this provider) whose instance is stopped, terminated or gone, confirmed
/// with a `get` of its own. Returns how many it deleted.
pub(crate) async fn collect_claims_without_instances<P: CloudProvider>(
    ctx: &Context<P>,
    instances: &[ListedInstance],
) -> Result<usize, Error> {
    let listed: HashMap<String, bool> = instances
        .iter()
        .map(|i| (i.provider_id.to_string(), i.terminating))
        .collect();
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut deleted = 0;
    for claim in ctx.cluster.claims.state() {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(status) = claim.status.as_ref() else {
            continue;
        };
        let Some(id) = status
            .provider_id
            .as_deref()
            .and_then(|p| p.parse::<ProviderId>().ok())
        else {
            continue;
        };
        if !ctx.provider.owns(&id) || listed.get(&id.to_string()) == Some(&false) {
            continue;
        }
        let launched = conditions::since(&status.conditions, cond::LAUNCHED)
            .filter(|_| conditions::is_true(&status.conditions, cond::LAUNCHED));
        if launched.is_none_or(|t| {
            now.duration_since(t).unsigned_abs() < ctx.settings.garbage_collection_grace
        }) {
            continue;
        }
        // The list may predate the launch, or lag: ask about this one instance.
        let instance = ctx
            .provider
            .get(&id)
            .await
            .map_err(Error::cloud("looking up a nodeclaim's instance"))?;
        let state = match &instance {
            None => "gone",
            Some(i) if i.terminating => "stopped or terminating",
            Some(_) => continue,
        };
        info!(nodeclaim = %claim.name_any(), provider_id = %id, state, "instance is not running; deleting its nodeclaim");
        let note = format!(
            "instance {id} is {state} (preempted or removed outside Karpenter); replacing it"
        );
        let event = Event {
            type_: EventType::Warning,
            reason: "InstanceTerminated".to_owned(),
            note: Some(note),
            action: "Replace".to_owned(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &claim.object_ref(&())).await {
            warn!(nodeclaim = %claim.name_any(), error = %e, "could not publish event");
        }
        let api: Api<NodeClaim> = Api::all(ctx.client.clone());
        match api
            .delete(&claim.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => deleted += 1,
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                return Err(Error::kube("deleting a nodeclaim whose instance is gone")(
                    e,
                ));
            }
        }
    }
    Ok(deleted)
}
