//! Termination, for every deletion of a claim (disruption, expiry, interruption, a user's
//! `kubectl delete nodeclaim|node`): record the claim's termination deadline, drain its Node
//! (taint, evictions in upstream's order under PodDisruptionBudgets, `do-not-disrupt` pods
//! waited for until the deadline), wait until the drained pods' volumes are detached (until the
//! deadline), delete the instance and wait until the cloud says it is gone, release and delete
//! the Node, delete the pods left bound to it, and release the claim's finalizer.
//!
//! Follows upstream's `pkg/controllers/node/termination` (the controller and its `terminator`),
//! run here from the claim's reconcile instead of a separate Node controller. The parts:
//! `deadline` (the `terminationGracePeriod` deadline), `drain_plan` (what to do with each pod,
//! pure), `drain` (one pass of it against the API), `volumes` (the attachments the instance
//! waits for), `events` (upstream's wording).
//!
//! A node whose instance is already gone is not drained (upstream's check in `finalize`): its
//! kubelet is gone too, so evicted pods would hang terminating for ever; its pods are deleted
//! instead, so their controllers recreate them elsewhere.

mod deadline;
mod drain;
mod drain_plan;
mod events;
#[cfg(test)]
mod tests;
mod volumes;

use crate::apis::{NodeClaim, labels};
use crate::cloud::{CloudProvider, DeleteOutcome, ProviderId};
use crate::controllers::{Context, Error, is_not_found};
use crate::scheduling::PodView;
use crate::state::CachedNode;
use drain::Drain;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;
use std::time::Duration;
use tracing::info;

/// How soon a drain that is still waiting looks again.
const DRAIN_REQUEUE: Duration = Duration::from_secs(2);

/// How soon termination looks again for volumes still attached (upstream: 1 s).
const VOLUME_REQUEUE: Duration = Duration::from_secs(1);

/// How soon termination asks the cloud again about an instance still shutting down (upstream:
/// 5 s).
const INSTANCE_REQUEUE: Duration = Duration::from_secs(5);

/// Whether the node's instance is gone: its kubelet stopped reporting Ready and the cloud has
/// no such instance. While the Node is Ready its kubelet runs, whatever a lagging cloud API
/// says, so a Ready node is always drained (upstream's rule, after the cloud-node-lifecycle
/// controller's).
async fn instance_is_gone<P: CloudProvider>(
    node: &CachedNode,
    provider_id: Option<&str>,
    ctx: &Context<P>,
) -> Result<bool, Error> {
    if node.is_ready() {
        return Ok(false);
    }
    let Some(id) = provider_id.and_then(|id| id.parse::<ProviderId>().ok()) else {
        return Ok(false);
    };
    let instance = ctx
        .provider
        .get(&id)
        .await
        .map_err(Error::cloud("looking up the instance"))?;
    Ok(instance.is_none())
}

/// Deletes pods still bound to a node that is gone (all but static pods, which go with their
/// Node): those of a node whose instance vanished, pods that tolerate the drain's taint, and a
/// pod the kube-scheduler bound in the moment between the drain and the instance's deletion.
/// None can ever run; without this each waits for the pod garbage collector (40 s and more)
/// before its controller replaces it.
async fn release_stranded_pods<P>(node_name: &str, ctx: &Context<P>) -> Result<(), Error> {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let stranded = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await
        .map_err(Error::kube("listing pods left on the deleted node"))?;
    for pod in stranded.items.iter().filter(|p| !p.is_mirror()) {
        let namespaced: Api<Pod> =
            Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
        if let Err(e) = namespaced
            .delete(
                &pod.name_any(),
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
            )
            .await
            && !is_not_found(&e)
        {
            return Err(Error::kube("deleting a pod left on the deleted node")(e));
        }
        info!(pod = %pod.name_any(), node = %node_name, "deleted a pod left on the deleted node");
    }
    Ok(())
}

/// Takes the termination finalizer off `object` (the Node or the NodeClaim); one already gone
/// is fine.
pub(crate) async fn release_finalizer<K>(
    api: &Api<K>,
    name: &str,
    finalizers: &[String],
    what: &'static str,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let finalizers: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != labels::TERMINATION_FINALIZER)
        .collect();
    let patch = json!({"metadata": {"finalizers": finalizers}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::kube(what)(e)),
    }
}

/// One termination pass over a deleted claim: drain, then delete the instance, the Node and
/// the finalizers once nothing is left to wait for.
pub(super) async fn terminate<P: CloudProvider>(
    claim: &NodeClaim,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    if !claim
        .finalizers()
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        return Ok(Action::await_change());
    }
    let deadline = deadline::ensure(claim, ctx).await?;
    let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
    let node = provider_id
        .as_deref()
        .and_then(|id| ctx.cluster.node_by_provider_id(id));
    if let Some(node) = &node {
        if instance_is_gone(node, provider_id.as_deref(), ctx).await? {
            info!(nodeclaim = %claim.name_any(), node = %node.name, "instance is gone; deleting the node and its pods without a drain");
        } else {
            if let Drain::Waiting = drain::pass(claim, node, deadline, ctx).await? {
                return Ok(Action::requeue(DRAIN_REQUEUE));
            }
            let past_deadline = deadline.is_some_and(|d| Timestamp::now() > d);
            let attached = if past_deadline {
                Vec::new()
            } else {
                volumes::pending(ctx, node).await?
            };
            if !attached.is_empty() {
                let event = events::awaiting_volume_detachment(&attached);
                ctx.notices
                    .publish(&event, &node.object_ref(), &attached.join(","))
                    .await;
                return Ok(Action::requeue(VOLUME_REQUEUE));
            }
        }
    }
    if let Some(id) = provider_id
        .as_deref()
        .and_then(|id| id.parse::<ProviderId>().ok())
    {
        // Upstream's `awaitInstanceTermination`: asked again until the cloud says it is gone;
        // only then do the Node and the claim let go, and the pods left on it are deleted.
        let outcome = ctx
            .provider
            .delete(&id)
            .await
            .map_err(Error::cloud("deleting the instance"))?;
        if outcome == DeleteOutcome::Terminating {
            info!(nodeclaim = %claim.name_any(), provider_id = %id, "instance terminating; waiting until it is gone");
            return Ok(Action::requeue(INSTANCE_REQUEUE));
        }
    }
    if let Some(node) = &node {
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        release_finalizer(
            &nodes,
            &node.name,
            &node.finalizers,
            "releasing the node's finalizer",
        )
        .await?;
        match nodes.delete(&node.name, &DeleteParams::background()).await {
            Ok(_) => ctx.count_node_terminated(node),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Error::kube("deleting the node")(e)),
        }
    }
    if let Some(node) = &node {
        release_stranded_pods(&node.name, ctx).await?;
    }
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    release_finalizer(
        &claims,
        &claim.name_any(),
        claim.finalizers(),
        "releasing the nodeclaim's finalizer",
    )
    .await?;
    ctx.count_terminated(claim);
    info!(nodeclaim = %claim.name_any(), "terminated");
    Ok(Action::await_change())
}
