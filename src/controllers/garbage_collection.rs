//! Deletes instances no NodeClaim owns (no claim's `status.providerID` names them, and no claim
//! still launching names them in its tags), older than the grace period: launched by an agent
//! that crashed before it recorded the launch and then launched again, or left behind by a
//! claim deleted while its launch was in flight. Instances are money; none may leak.
//!
//! The other direction too: a launched NodeClaim whose instance the cloud stopped or removed
//! (a preempted spot VM, an instance deleted by hand) is deleted, so its pods go pending and
//! get a new claim. Its Node may still be there (a stopped VM's Node just goes NotReady), so the
//! lifecycle's "node vanished" check alone would never notice.
//!
//! Garbage collection never kills what it cannot read: a NodeClaim the agent cannot decode is
//! missing from the store (see `client::lenient_watch`), but it still owns its instance. The
//! provider ID it records (read from the raw object) and its name (which a launching
//! instance's tag carries) count as owned while it stays unreadable, with a Warning on the
//! claim and `karpenter_nodeclaims_unreadable` saying so. And a Node left behind with the
//! termination finalizer after its claim went (deleted by hand, its finalizer removed) has the
//! finalizer released here, as upstream's node termination controller does when it finds no
//! claim, so `kubectl delete node` does not hang.

use super::lifecycle::release_finalizer;
use super::{Context, Error, conditions};
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, labels};
use crate::cloud::{CloudProvider, ListedInstance, ProviderId};
use k8s_openapi::api::core::v1::{Node, ObjectReference};
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
        match release_abandoned_nodes(&ctx).await {
            Ok(0) => {}
            Ok(released) => info!(nodes = released, "released nodes whose nodeclaims are gone"),
            Err(e) => {
                warn!(error = %e, cause = ?std::error::Error::source(&e), "releasing abandoned nodes failed")
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
    let unreadable = &ctx.cluster.unreadable_claims;
    let unreadable_names: HashSet<String> = unreadable.names().into_iter().collect();
    ctx.metrics
        .nodeclaims_unreadable
        .set(i64::try_from(unreadable_names.len()).unwrap_or(i64::MAX));
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
        let id = instance.provider_id.to_string();
        if owned_ids.contains(&id) {
            continue;
        }
        let unreadable_owner = instance
            .node_claim
            .as_ref()
            .filter(|name| unreadable_names.contains(*name))
            .cloned()
            .or_else(|| unreadable.owner_of(&id));
        if let Some(owner) = unreadable_owner {
            keep_for_unreadable(ctx, &owner, &id).await;
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

/// Says on an unreadable claim that its instance is kept until the claim can be read.
async fn keep_for_unreadable<P>(ctx: &Context<P>, claim: &str, provider_id: &str) {
    warn!(
        nodeclaim = claim,
        provider_id, "keeping an instance whose NodeClaim the agent cannot read"
    );
    let event = Event {
        type_: EventType::Warning,
        reason: "OrphanDeletionSuspended".to_owned(),
        note: Some(format!(
            "karpenter-agent cannot read this NodeClaim, so garbage collection keeps its instance {provider_id} until it can; nothing it owns is deleted"
        )),
        action: "GarbageCollect".to_owned(),
        secondary: None,
    };
    let reference = ObjectReference {
        api_version: Some("karpenter.sh/v1".to_owned()),
        kind: Some("NodeClaim".to_owned()),
        name: Some(claim.to_owned()),
        ..ObjectReference::default()
    };
    ctx.notices.publish(&event, &reference, provider_id).await;
}

/// Releases the termination finalizer of Nodes being deleted whose claim is gone (upstream's
/// node termination controller, when `NodeClaimForNode` finds none): nothing else would, and
/// the Node would hang for ever. Waits the grace period after the deletion, so a claim the
/// store has not caught up with is not taken for gone; returns how many it released.
pub(crate) async fn release_abandoned_nodes<P>(ctx: &Context<P>) -> Result<usize, Error> {
    let claims = ctx.cluster.claims.state();
    let unreadable = &ctx.cluster.unreadable_claims;
    // An unreadable claim without a provider ID could be any Node's: release none meanwhile.
    if unreadable.names().len() > unreadable.provider_ids().len() {
        return Ok(0);
    }
    let unreadable_ids: HashSet<String> = unreadable.provider_ids().into_iter().collect();
    let now = k8s_openapi::jiff::Timestamp::now();
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let mut released = 0;
    for node in ctx.cluster.nodes.state() {
        let Some(deleted) = node.deletion_timestamp.as_ref() else {
            continue;
        };
        if !node
            .finalizers
            .iter()
            .any(|f| f == labels::TERMINATION_FINALIZER)
            || now.duration_since(deleted.0).unsigned_abs() < ctx.settings.garbage_collection_grace
        {
            continue;
        }
        let provider_id = node.provider_id.as_deref();
        let claimed = claims.iter().any(|c| {
            let status = c.status.as_ref();
            status.and_then(|s| s.node_name.as_deref()) == Some(node.name.as_str())
                || (provider_id.is_some()
                    && status.and_then(|s| s.provider_id.as_deref()) == provider_id)
        });
        if claimed || provider_id.is_some_and(|id| unreadable_ids.contains(id)) {
            continue;
        }
        info!(node = %node.name, "releasing the termination finalizer of a node whose nodeclaim is gone");
        release_finalizer(
            &nodes,
            &node.name,
            &node.finalizers,
            "releasing the finalizer of a node without a nodeclaim",
        )
        .await?;
        released += 1;
    }
    Ok(released)
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

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use crate::cloud::fake::FakeProvider;
    use crate::controllers::Settings;
    use crate::controllers::testing::{Objects, context};
    use crate::state::CachedNode;
    use http::Method;
    use serde_json::json;
    use std::time::Duration;

    /// A Node being deleted since long ago, held by the termination finalizer and another's.
    fn deleted_node(name: &str) -> CachedNode {
        serde_json::from_value(json!({
            "metadata": {"name": name, "deletionTimestamp": "2026-03-02T09:00:00Z",
                "finalizers": [labels::TERMINATION_FINALIZER, "example.com/keep"]},
            "spec": {"providerID": format!("kwok://{name}")},
        }))
        .expect("a Node")
    }

    fn settings() -> Settings {
        Settings {
            garbage_collection_grace: Duration::ZERO,
            ..Settings::default()
        }
    }

    #[tokio::test]
    async fn a_deleted_node_whose_claim_is_gone_loses_only_the_termination_finalizer() {
        let objects = Objects {
            nodes: vec![deleted_node("left")],
            ..Objects::default()
        };
        let (ctx, mut server) = context(Arc::new(FakeProvider::default()), objects, settings());
        let releasing = tokio::spawn({
            let ctx = ctx.clone();
            async move { release_abandoned_nodes(&ctx).await }
        });
        let patch = server.next().await;
        assert!(patch.is(&Method::PATCH, "/api/v1/nodes/left"), "{patch:?}");
        assert_eq!(
            patch.body,
            json!({"metadata": {"finalizers": ["example.com/keep"]}})
        );
        patch.answer(
            200,
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "left"}}),
        );
        assert_eq!(releasing.await.expect("ends").expect("succeeds"), 1);
    }

    #[tokio::test]
    async fn a_deleted_node_whose_claim_exists_or_cannot_be_read_is_left_to_termination() {
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "owned"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
            "status": {"providerID": "kwok://owned"},
        }))
        .expect("a NodeClaim");
        let objects = Objects {
            claims: vec![claim],
            nodes: vec![deleted_node("owned"), deleted_node("unread")],
            ..Objects::default()
        };
        let (ctx, mut server) = context(Arc::new(FakeProvider::default()), objects, settings());
        ctx.cluster
            .unreadable_claims
            .insert_for_test("unread", Some("kwok://unread"));
        assert_eq!(release_abandoned_nodes(&ctx).await.expect("succeeds"), 0);
        server.expect_quiet(Duration::from_millis(200)).await;
    }
}
