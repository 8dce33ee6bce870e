//! Objects the explain tests build their clusters from.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use super::{ClaimExplanation, ClusterObjects, explain_node_claim};
use crate::apis::{NodeClaim, NodePool, labels};
use crate::state::CachedNode;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

pub(super) fn at(text: &str) -> Timestamp {
    text.parse().expect("timestamp")
}

pub(super) const NOW: &str = "2026-03-02T10:00:00Z"; // a Monday

pub(super) fn claim(value: serde_json::Value) -> NodeClaim {
    let mut base = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-abcde", "uid": "uid-1", "creationTimestamp": "2026-03-02T09:00:00Z",
                     "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
    });
    merge(&mut base, value);
    serde_json::from_value(base).expect("nodeclaim")
}

pub(super) fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, p) => *b = p,
    }
}

pub(super) fn ready_conditions(at: &str) -> serde_json::Value {
    json!([
        {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": at},
        {"type": "Registered", "status": "True", "reason": "Registered", "message": "", "lastTransitionTime": at},
        {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": at},
        {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": at},
    ])
}

/// A launched, ready claim of ours on node `n1`, with recorded options.
pub(super) fn ours(launched: &str) -> NodeClaim {
    claim(json!({
        "metadata": {
            "labels": {"node.kubernetes.io/instance-type": launched, "karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": "zone-a"},
            "annotations": {
                labels::PROVISIONED_FOR: "[\"default/web-1\",\"default/web-2\"]",
                labels::INSTANCE_TYPE_OPTIONS: "[{\"name\":\"m.small\",\"price\":0.1,\"zone\":\"zone-a\",\"capacityType\":\"on-demand\"},{\"name\":\"m.large\",\"price\":0.2,\"zone\":\"zone-a\",\"capacityType\":\"on-demand\"}]",
            },
        },
        "status": {"nodeName": "n1", "providerID": "kwok://n1", "conditions": ready_conditions("2026-03-02T09:01:00Z")},
    }))
}

pub(super) fn node(name: &str, price: Option<&str>) -> CachedNode {
    let mut labels = serde_json::Map::new();
    if let Some(p) = price {
        labels.insert(labels::INSTANCE_PRICE.to_owned(), json!(p));
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-03-02T09:00:30Z"},
        "spec": {"providerID": format!("kwok://{name}")},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("node")
}

pub(super) fn pod(name: &str, node: Option<&str>, extra: serde_json::Value) -> Pod {
    let mut base = json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "web"},
                     "creationTimestamp": "2026-03-02T08:59:00Z"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
        "status": {"phase": if node.is_some() { "Running" } else { "Pending" }},
    });
    if let Some(n) = node {
        base["spec"]["nodeName"] = json!(n);
    }
    merge(&mut base, extra);
    serde_json::from_value(base).expect("pod")
}

pub(super) fn pool(disruption: serde_json::Value) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "creationTimestamp": "2026-03-01T10:00:00Z"},
        "spec": {
            "limits": {"cpu": "100", "memory": "400Gi"},
            "disruption": disruption,
            "template": {"spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}},
        },
    }))
    .expect("nodepool")
}

pub(super) fn event(kind: &str, name: &str, reason: &str, message: &str, when: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{name}.{reason}"), "namespace": "default"},
        "involvedObject": {"kind": kind, "name": name, "namespace": if kind == "Pod" { "default" } else { "" }},
        "reason": reason, "message": message, "type": "Warning", "lastTimestamp": when,
    }))
    .expect("event")
}

pub(super) fn consolidatable_pool() -> NodePool {
    pool(
        json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%"}]}),
    )
}

pub(super) fn explained(cluster: &ClusterObjects) -> ClaimExplanation {
    explain_node_claim(cluster, "default-abcde", at(NOW)).expect("claim exists")
}
