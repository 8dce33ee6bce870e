//! Termination, when a claim is deleted: taint and drain its Node (evictions that respect
//! PodDisruptionBudgets), delete the instance, release and delete the Node, delete the pods left
//! bound to it, and release the claim's finalizer.
//!
//! Follows upstream's `pkg/controllers/node/termination` (the controller and its `terminator`
//! drain), run here from the claim's reconcile instead of a separate Node controller.

use crate::apis::{NodeClaim, labels};
use crate::cloud::{CloudProvider, DeleteOutcome, ProviderId};
use crate::controllers::{Context, Error, is_not_found};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;
use std::time::Duration;
use tracing::info;

fn is_daemon_or_mirror(pod: &Pod) -> bool {
    let owned_by_daemonset = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    owned_by_daemonset || mirror
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Taints the node, evicts its pods and reports how many are still there.
async fn drain<P>(node: &Node, ctx: &Context<P>) -> Result<usize, Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node_name = node.name_any();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY) {
        let mut taints = taints.clone();
        taints.push(Taint {
            key: labels::DISRUPTED_TAINT_KEY.to_owned(),
            effect: "NoSchedule".to_owned(),
            ..Taint::default()
        });
        let patch = json!({"spec": {"taints": taints}});
        nodes
            .patch(&node_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube("tainting the node"))?;
    }
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await
        .map_err(Error::kube("listing the node's pods"))?;
    let mut remaining = 0;
    for pod in on_node
        .items
        .iter()
        .filter(|p| !is_daemon_or_mirror(p) && !is_terminal(p))
    {
        remaining += 1;
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let namespaced: Api<Pod> =
            Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
        match namespaced
            .evict(&pod.name_any(), &EvictParams::default())
            .await
        {
            Ok(_) => {}
            // 429: a PodDisruptionBudget says not now; try again on the next pass.
            Err(kube::Error::Api(status)) if status.code == 429 || status.code == 404 => {}
            // The pod's namespace is being deleted, which refuses the Eviction object; the
            // namespace controller deletes the pod itself.
            Err(kube::Error::Api(status))
                if status.code == 403 && status.message.contains("being terminated") => {}
            Err(e) => return Err(Error::kube("evicting a pod")(e)),
        }
    }
    Ok(remaining)
}

/// Deletes pods still bound to a node that is gone. A pod the kube-scheduler bound in the
/// moment between the drain and the instance's deletion can never run; without this it waits
/// for the pod garbage collector (40 s and more) before its controller replaces it.
async fn release_stranded_pods<P>(node_name: &str, ctx: &Context<P>) -> Result<(), Error> {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let stranded = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node_name}")))
        .await
        .map_err(Error::kube("listing pods left on the deleted node"))?;
    for pod in stranded.items.iter().filter(|p| !is_daemon_or_mirror(p)) {
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
    let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
    let node = provider_id
        .as_deref()
        .and_then(|id| ctx.node_by_provider_id(id));
    if let Some(node) = &node {
        let remaining = drain(node, ctx).await?;
        if remaining > 0 {
            info!(nodeclaim = %claim.name_any(), node = %node.name_any(), pods = remaining, "draining");
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
    }
    if let Some(id) = provider_id
        .as_deref()
        .and_then(|id| id.parse::<ProviderId>().ok())
    {
        let outcome = ctx
            .provider
            .delete(&id)
            .await
            .map_err(Error::cloud("deleting the instance"))?;
        if outcome == DeleteOutcome::Terminating {
            info!(nodeclaim = %claim.name_any(), provider_id = %id, "instance terminating");
        }
    }
    if let Some(node) = &node {
        let nodes: Api<Node> = Api::all(ctx.client.clone());
        let finalizers: Vec<String> = node
            .finalizers()
            .iter()
            .filter(|f| *f != labels::TERMINATION_FINALIZER)
            .cloned()
            .collect();
        let patch = json!({"metadata": {"finalizers": finalizers}});
        if let Err(e) = nodes
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            && !is_not_found(&e)
        {
            return Err(Error::kube("releasing the node's finalizer")(e));
        }
        if let Err(e) = nodes
            .delete(&node.name_any(), &DeleteParams::background())
            .await
            && !is_not_found(&e)
        {
            return Err(Error::kube("deleting the node")(e));
        }
    }
    if let Some(node) = &node {
        release_stranded_pods(&node.name_any(), ctx).await?;
    }
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let finalizers: Vec<String> = claim
        .finalizers()
        .iter()
        .filter(|f| *f != labels::TERMINATION_FINALIZER)
        .cloned()
        .collect();
    let patch = json!({"metadata": {"finalizers": finalizers}});
    if let Err(e) = api
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        && !is_not_found(&e)
    {
        return Err(Error::kube("releasing the nodeclaim's finalizer")(e));
    }
    ctx.metrics.nodeclaims_terminated.inc();
    info!(nodeclaim = %claim.name_any(), "terminated");
    Ok(Action::await_change())
}
