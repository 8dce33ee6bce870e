//! `karpenter.sh/v1` NodeClaim: one request for one node. Its spec is fixed at creation (the API
//! server rejects changes); its status follows the instance from launch to a Ready node.

use super::common::{
    NillableDuration, NodeClassReference, NodeSelectorRequirementWithMinValues, add_rules,
    requirement_list_rules,
};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A request for one node that satisfies its requirements.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    doc = "NodeClaim is the Schema for the NodeClaims API: a request for one node",
    plural = "nodeclaims",
    singular = "nodeclaim",
    status = "NodeClaimStatus",
    category = "karpenter",
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".metadata.labels.node\\.kubernetes\\.io/instance-type"}"#,
    printcolumn = r#"{"name":"Capacity","type":"string","jsonPath":".metadata.labels.karpenter\\.sh/capacity-type"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","jsonPath":".metadata.labels.topology\\.kubernetes\\.io/zone"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"ImageID","type":"string","jsonPath":".status.imageID","priority":1}"#,
    printcolumn = r#"{"name":"ID","type":"string","jsonPath":".status.providerID","priority":1}"#,
    printcolumn = r#"{"name":"NodePool","type":"string","jsonPath":".metadata.labels.karpenter\\.sh/nodepool","priority":1}"#,
    printcolumn = r#"{"name":"NodeClass","type":"string","jsonPath":".spec.nodeClassRef.name","priority":1}"#,
    printcolumn = r#"{"name":"Drifted","type":"string","jsonPath":".status.conditions[?(@.type==\"Drifted\")].status","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_is_immutable)]
pub struct NodeClaimSpec {
    /// Taints on the node; pods must tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints present only while the node starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// What the node's labels must satisfy; the cloud provider picks an instance type that does.
    #[schemars(transform = requirement_list_rules)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// What the node must have room for: the sum of the pods it was created for, plus daemons.
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    /// The node class with the cloud-specific settings.
    pub node_class_ref: NodeClassReference,
    /// How long the node may take to drain before its pods are deleted regardless.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^([0-9]+(s|m|h))+$"))]
    pub termination_grace_period: Option<String>,
    /// How long the node lives before it is replaced, or `Never`.
    #[serde(default = "NillableDuration::default_expire_after")]
    pub expire_after: NillableDuration,
}

fn spec_is_immutable(schema: &mut schemars::Schema) {
    add_rules(schema, &[("self == oldSelf", "spec is immutable")]);
}

/// Resource requests of a NodeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// The least the node must offer, by resource name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
}

impl ResourceRequirements {
    fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

/// What is known about the node behind a NodeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// The Node's name, once it registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The cloud's id of the instance, e.g. `aws:///us-west-2a/i-0123`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "providerID"
    )]
    pub provider_id: Option<String>,
    /// The image the instance booted from.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "imageID")]
    pub image_id: Option<String>,
    /// What the instance has.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,
    /// What pods can use: capacity minus system and kubelet reservations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: BTreeMap<String, Quantity>,
    /// Launched, Registered, Initialized, Ready, Drifted, Consolidatable, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When a pod was last scheduled to or removed from the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}

/// The condition types a NodeClaim reports.
pub mod conditions {
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const READY: &str = "Ready";
    pub const DRIFTED: &str = "Drifted";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    pub const DRAINED: &str = "Drained";
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
}

impl NodeClaim {
    /// The status of a condition (`"True"`, `"False"`, `"Unknown"`), if the claim has it.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }

    /// Whether a condition is present and `"True"`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }
}
