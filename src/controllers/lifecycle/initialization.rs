//! Initialization: a registered Node is initialized once it is Ready, neither the claim's
//! startup taints nor the known ephemeral (not-ready) taints remain, and every resource the
//! claim was launched for is allocatable (a GPU's device plugin has registered it: the kubelet
//! reports extended resources as zero until then, and provisioning would otherwise launch a
//! second GPU node for pods that are only waiting for the first); then the Node is labelled
//! initialized and the claim marked Initialized and Ready.
//!
//! Follows upstream's `pkg/controllers/nodeclaim/lifecycle/initialization.go`.

use super::write_status;
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodeClaimStatus, labels};
use crate::controllers::{Context, Error, conditions};
use crate::state::{Allocatable, CachedNode};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;
use std::time::Duration;
use tracing::info;

/// Upstream's `RequestedResourcesRegistered`: the first resource the claim requests (non-zero)
/// that the Node does not report allocatable yet.
fn unregistered_resource<'c>(claim: &'c NodeClaim, node: &CachedNode) -> Option<&'c str> {
    let is_zero = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.is_none_or(|q| crate::resources::parse_milli(&q.0).is_ok_and(|v| v == 0))
    };
    claim
        .spec
        .resources
        .requests
        .iter()
        .filter(|(_, quantity)| !is_zero(Some(quantity)))
        .find(|(name, _)| match &node.allocatable {
            Allocatable::NotReported => true,
            Allocatable::Reported(list) => list.get(name) == 0,
            // A quantity that does not parse is not known to be zero.
            Allocatable::Invalid(_) => false,
        })
        .map(|(name, _)| name.as_str())
}

pub(super) async fn initialize<P>(
    claim: &NodeClaim,
    mut status: NodeClaimStatus,
    node: &CachedNode,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    if !node.is_ready() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let node_taints = &node.taints;
    let waiting: Vec<&str> = claim
        .spec
        .startup_taints
        .iter()
        .filter(|st| {
            node_taints
                .iter()
                .any(|t| t.key == st.key && t.effect == st.effect)
        })
        .map(|t| t.key.as_str())
        .collect();
    if !waiting.is_empty() {
        let message = format!(
            "waiting for startup taints to be removed: {}",
            waiting.join(", ")
        );
        conditions::set(
            &mut status.conditions,
            cond::INITIALIZED,
            false,
            "StartupTaintsExist",
            &message,
            claim.metadata.generation,
        );
        write_status(claim, &status, ctx).await?;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    // Until the node lifecycle controller has taken its not-ready taints off (it lags the Ready
    // condition), pods cannot land: an initialized claim must be one they can land on.
    if let Some(taint) = node_taints
        .iter()
        .find(|t| crate::scheduling::taints::is_known_ephemeral(t))
    {
        let message = format!(
            "KnownEphemeralTaint \"{}\" still exists",
            crate::scheduling::taints::DisplayTaint(taint)
        );
        conditions::set(
            &mut status.conditions,
            cond::INITIALIZED,
            false,
            "KnownEphemeralTaintsExist",
            &message,
            claim.metadata.generation,
        );
        write_status(claim, &status, ctx).await?;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    if let Some(resource) = unregistered_resource(claim, node) {
        let message = format!("Resource \"{resource}\" was requested but not registered");
        conditions::set(
            &mut status.conditions,
            cond::INITIALIZED,
            false,
            "ResourceNotRegistered",
            &message,
            claim.metadata.generation,
        );
        write_status(claim, &status, ctx).await?;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {"labels": {labels::NODE_INITIALIZED: "true"}}});
    nodes
        .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube("labelling the node initialized"))?;
    conditions::set(
        &mut status.conditions,
        cond::INITIALIZED,
        true,
        "Initialized",
        "",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::READY,
        true,
        "Ready",
        "",
        claim.metadata.generation,
    );
    write_status(claim, &status, ctx).await?;
    ctx.metrics.nodeclaims_initialized.inc();
    info!(nodeclaim = %claim.name_any(), node = %node.name, "initialized");
    Ok(Action::requeue(Duration::from_secs(300)))
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn claim(requests: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "gpu"},
            "spec": {"requirements": [], "resources": {"requests": requests},
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
        }))
        .expect("a claim")
    }

    fn node(allocatable: serde_json::Value) -> CachedNode {
        serde_json::from_value(
            json!({"metadata": {"name": "gpu"}, "status": {"allocatable": allocatable}}),
        )
        .expect("a node")
    }

    #[test]
    fn a_gpu_claim_waits_until_its_device_plugin_registers_the_gpus() {
        let gpu = claim(json!({"cpu": "1", "nvidia.com/gpu": "1"}));
        assert_eq!(
            unregistered_resource(&gpu, &node(json!({"cpu": "4", "nvidia.com/gpu": "0"}))),
            Some("nvidia.com/gpu"),
            "the kubelet reports zero until the device plugin registers"
        );
        assert_eq!(
            unregistered_resource(&gpu, &node(json!({"cpu": "4"}))),
            Some("nvidia.com/gpu")
        );
        assert_eq!(
            unregistered_resource(&gpu, &node(json!({"cpu": "4", "nvidia.com/gpu": "1"}))),
            None
        );
    }

    #[test]
    fn requests_of_zero_are_not_waited_for() {
        let plain = claim(json!({"cpu": "1", "nvidia.com/gpu": "0"}));
        assert_eq!(
            unregistered_resource(&plain, &node(json!({"cpu": "4"}))),
            None
        );
    }
}
