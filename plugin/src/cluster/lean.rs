//! Lean shapes to decode lists into: only the fields `status` reads, then turned into the usual
//! k8s-openapi and Karpenter types (the rest left at their defaults) so `karpenter_core::explain`
//! sees ordinary objects.
//!
//! Why: on a cluster of 1,000 nodes the Node list is ~4 MB of JSON, half of it `managedFields`
//! (arbitrary JSON per entry, the costliest thing to decode), most of the rest status nobody
//! here reads (`nodeInfo`, `images`, `addresses`...). serde skips a field it has no slot for
//! without allocating, so decoding into these shapes costs a fraction of decoding full objects.

use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use karpenter_core::apis::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Object metadata without `managedFields`.
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        Self {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            labels: m.labels,
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            owner_references: m.owner_references,
            finalizers: m.finalizers,
            ..Self::default()
        }
    }
}

/// A Node as `status` reads it: labels (price, pool), provider id, and conditions (Ready).
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(default)]
pub struct LeanNode {
    metadata: Meta,
    spec: Option<LeanNodeSpec>,
    status: Option<LeanNodeStatus>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
struct LeanNodeSpec {
    #[serde(rename = "providerID")]
    provider_id: Option<String>,
    unschedulable: Option<bool>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(default)]
struct LeanNodeStatus {
    allocatable: Option<BTreeMap<String, Quantity>>,
    conditions: Option<Vec<NodeCondition>>,
}

impl From<LeanNode> for Node {
    fn from(n: LeanNode) -> Self {
        Self {
            metadata: n.metadata.into(),
            spec: n.spec.map(|s| NodeSpec {
                provider_id: s.provider_id,
                unschedulable: s.unschedulable,
                ..NodeSpec::default()
            }),
            status: n.status.map(|s| NodeStatus {
                allocatable: s.allocatable,
                conditions: s.conditions,
                ..NodeStatus::default()
            }),
        }
    }
}

/// A NodeClaim without `managedFields` (the rest is small and all of it is read).
#[derive(Deserialize, Clone, Debug)]
pub struct LeanNodeClaim {
    #[serde(default)]
    metadata: Meta,
    spec: NodeClaimSpec,
    #[serde(default)]
    status: Option<NodeClaimStatus>,
}

impl From<LeanNodeClaim> for NodeClaim {
    fn from(c: LeanNodeClaim) -> Self {
        let mut claim = NodeClaim::new("", c.spec);
        claim.metadata = c.metadata.into();
        claim.status = c.status;
        claim
    }
}

/// A Pod as `status` reads it: its spec (requests, gates, node), phase and conditions; not the
/// container statuses, which are most of a running pod's status.
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(default)]
pub struct LeanPod {
    metadata: Meta,
    spec: Option<PodSpec>,
    status: Option<LeanPodStatus>,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase", default)]
struct LeanPodStatus {
    phase: Option<String>,
    conditions: Option<Vec<PodCondition>>,
    nominated_node_name: Option<String>,
}

impl From<LeanPod> for Pod {
    fn from(p: LeanPod) -> Self {
        Self {
            metadata: p.metadata.into(),
            spec: p.spec,
            status: p.status.map(|s| PodStatus {
                phase: s.phase,
                conditions: s.conditions,
                nominated_node_name: s.nominated_node_name,
                ..PodStatus::default()
            }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lean_node_keeps_what_status_reads_and_drops_managed_fields() {
        let raw = json!({
            "metadata": {"name": "n1", "labels": {"a": "b"}, "creationTimestamp": "2026-01-01T00:00:00Z",
                         "managedFields": [{"manager": "kwok", "fieldsV1": {"f:status": {}}}]},
            "spec": {"providerID": "kwok://n1"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "x"}, "images": [{"names": ["a"]}]},
        });
        let node: Node = serde_json::from_value::<LeanNode>(raw)
            .expect("decodes")
            .into();
        assert_eq!(node.metadata.name.as_deref(), Some("n1"));
        assert_eq!(
            node.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("a"))
                .map(String::as_str),
            Some("b")
        );
        assert!(node.metadata.managed_fields.is_none());
        assert_eq!(
            node.spec.and_then(|s| s.provider_id).as_deref(),
            Some("kwok://n1")
        );
        let status = node.status.expect("status");
        assert_eq!(status.conditions.map(|c| c.len()), Some(1));
        assert!(status.node_info.is_none());
    }

    #[test]
    fn a_lean_claim_decodes_to_the_same_claim_less_managed_fields() {
        let raw = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": "p"}, "managedFields": [{"manager": "x"}]},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
            "status": {"nodeName": "n1", "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        });
        let mut full: NodeClaim = serde_json::from_value(raw.clone()).expect("full");
        full.metadata.managed_fields = None;
        let lean: NodeClaim = serde_json::from_value::<LeanNodeClaim>(raw)
            .expect("lean")
            .into();
        assert_eq!(
            serde_json::to_value(&lean).expect("json"),
            serde_json::to_value(&full).expect("json")
        );
    }

    #[test]
    fn a_lean_pod_keeps_its_spec_phase_and_conditions() {
        let raw = json!({
            "metadata": {"name": "p", "namespace": "ns", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}], "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0}]},
        });
        let pod: Pod = serde_json::from_value::<LeanPod>(raw)
            .expect("decodes")
            .into();
        assert_eq!(pod.metadata.owner_references.map(|o| o.len()), Some(1));
        assert_eq!(pod.spec.and_then(|s| s.node_name).as_deref(), Some("n1"));
        let status = pod.status.expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.container_statuses.is_none());
    }
}
