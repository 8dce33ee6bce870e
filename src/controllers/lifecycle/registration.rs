//! Registration: once the claim's Node exists, give it the claim's labels and taints (dropping
//! the unregistered taint) and the termination finalizer, and mark the claim Registered.
//!
//! Follows upstream's `pkg/controllers/nodeclaim/lifecycle/registration.go`.

use super::write_status;
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodeClaimStatus, labels};
use crate::controllers::{Context, Error, conditions};
use crate::state::CachedNode;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;
use std::time::Duration;
use tracing::info;

fn without_taint(taints: &[Taint], key: &str) -> Vec<Taint> {
    taints.iter().filter(|t| t.key != key).cloned().collect()
}

pub(super) async fn register<P>(
    claim: &NodeClaim,
    mut status: NodeClaimStatus,
    node: &CachedNode,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node_name = node.name.clone();
    let mut node_labels = claim.labels().clone();
    node_labels.insert(labels::NODE_REGISTERED.to_owned(), "true".to_owned());
    let mut taints = without_taint(&node.taints, labels::UNREGISTERED_TAINT_KEY);
    for taint in &claim.spec.taints {
        if !taints
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect)
        {
            taints.push(taint.clone());
        }
    }
    let mut finalizers = node.finalizers.clone();
    if !finalizers
        .iter()
        .any(|f| f == labels::TERMINATION_FINALIZER)
    {
        finalizers.push(labels::TERMINATION_FINALIZER.to_owned());
    }
    let patch = json!({
        "metadata": {"labels": node_labels, "finalizers": finalizers, "resourceVersion": node.resource_version},
        "spec": {"taints": taints},
    });
    let registered = nodes
        .patch(&node_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube("registering the node"))?;
    status.node_name = Some(node_name.clone());
    conditions::set(
        &mut status.conditions,
        cond::REGISTERED,
        true,
        "Registered",
        "",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::INITIALIZED,
        false,
        "NotInitialized",
        "waiting for the node to be ready",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::READY,
        false,
        "NotInitialized",
        "waiting for the node to be ready",
        claim.metadata.generation,
    );
    write_status(claim, &status, ctx).await?;
    if let Some(uid) = super::pool_uid(claim) {
        ctx.pool_health.registered(uid);
    }
    ctx.count_node_created(&CachedNode::from(registered));
    info!(nodeclaim = %claim.name_any(), node = %node_name, "registered");
    Ok(Action::requeue(Duration::from_secs(2)))
}
