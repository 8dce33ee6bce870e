//! Fixed API objects and a fixed clock for the snapshot tests of the tables: a small cluster
//! with one claim of each kind a user meets (ready and priced, launching, created by upstream
//! Karpenter without status), a node no NodePool made, and pods pending for different reasons.

#![allow(clippy::expect_used)]

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::{NodeClaim, NodePool, labels};
use karpenter_core::explain::ClusterObjects;
use karpenter_core::state::CachedNode;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub(crate) const NOW: &str = "2026-03-02T10:00:00Z";

pub(crate) fn now() -> Timestamp {
    NOW.parse().expect("fixed clock")
}

fn object<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("fixture object")
}

fn conditions(launched: &str, ready: bool) -> Value {
    let mut list = vec![
        json!({"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": launched}),
    ];
    if ready {
        for t in ["Registered", "Initialized", "Ready"] {
            list.push(json!({"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": "2026-03-02T09:01:10Z"}));
        }
    } else {
        list.push(json!({"type": "Registered", "status": "False", "reason": "NotRegistered", "message": "waiting for the node to register", "lastTransitionTime": launched}));
    }
    Value::Array(list)
}

fn pool(name: &str, limits: Value) -> NodePool {
    object(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "creationTimestamp": "2026-02-28T10:00:00Z"},
        "spec": {
            "limits": limits,
            "disruption": {"consolidateAfter": "30m", "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}]},
            "template": {"spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}},
        },
    }))
}

const OPTIONS: &str = r#"[{"name":"m5.large","price":0.096,"zone":"us-west-2a","capacityType":"on-demand"},{"name":"c5.xlarge","price":0.17,"zone":"us-west-2a","capacityType":"on-demand"},{"name":"m5.xlarge","price":0.192,"zone":"us-west-2b","capacityType":"on-demand"}]"#;

/// A claim of ours, launched as `instance_type`, on node `node` when given.
pub(crate) fn our_claim(
    name: &str,
    instance_type: &str,
    node: Option<&str>,
    created: &str,
) -> NodeClaim {
    let mut status = json!({"capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"}, "conditions": conditions(created, node.is_some())});
    status["providerID"] = json!(format!("kwok://{}", node.unwrap_or(name)));
    if let Some(n) = node {
        status["nodeName"] = json!(n);
    }
    object(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "name": name, "uid": format!("uid-{name}"), "creationTimestamp": created,
            "labels": {labels::NODE_POOL: "default", labels::INSTANCE_TYPE: instance_type, labels::CAPACITY_TYPE: "on-demand", labels::ZONE: "us-west-2a"},
            "annotations": {labels::PROVISIONED_FOR: r#"["shop/web-0","shop/web-1"]"#, labels::INSTANCE_TYPE_OPTIONS: OPTIONS},
        },
        "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
        "status": status,
    }))
}

fn node(name: &str, price: Option<&str>, created: &str) -> CachedNode {
    let mut node_labels = serde_json::Map::new();
    if let Some(p) = price {
        node_labels.insert(labels::INSTANCE_PRICE.to_owned(), json!(p));
    }
    object(json!({
        "metadata": {"name": name, "labels": node_labels, "creationTimestamp": created},
        "spec": {"providerID": format!("kwok://{name}")},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
}

fn pod(namespace: &str, name: &str, node: Option<&str>, created: &str, status: Value) -> Pod {
    let mut value = json!({
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"), "labels": {"app": name.split('-').next().unwrap_or(name)}, "creationTimestamp": created},
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]},
        "status": status,
    });
    if let Some(n) = node {
        value["spec"]["nodeName"] = json!(n);
    }
    object(value)
}

fn unschedulable() -> Value {
    json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."}]})
}

/// The cluster the snapshots render.
pub(crate) fn cluster() -> ClusterObjects {
    let upstream: NodeClaim = object(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "general-x7k2p", "creationTimestamp": "2026-03-02T09:58:00Z", "labels": {labels::NODE_POOL: "general"}},
        "spec": {
            "requirements": [{"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m6i.large", "m6i.xlarge"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
    }));
    let running = json!({"phase": "Running"});
    ClusterObjects {
        node_pools: vec![pool("default", json!({"cpu": "100", "memory": "400Gi"})), pool("general", json!({}))],
        node_claims: vec![
            our_claim("default-abcde", "c5.xlarge", Some("default-abcde"), "2026-03-02T07:00:00Z"),
            our_claim("default-fghij", "m5.large", None, "2026-03-02T09:59:30Z"),
            upstream,
        ],
        nodes: vec![node("default-abcde", Some("0.1700"), "2026-03-02T07:00:40Z"), node("control-plane", None, "2026-02-20T10:00:00Z")],
        pods: vec![
            pod("shop", "web-0", Some("default-abcde"), "2026-03-02T06:59:00Z", running.clone()),
            pod("shop", "web-1", Some("default-abcde"), "2026-03-02T06:59:00Z", json!({"phase": "Running"})),
            pod("shop", "cart-0", None, "2026-03-02T09:59:00Z", unschedulable()),
            pod("batch", "huge-0", None, "2026-03-02T09:40:00Z", unschedulable()),
            pod("batch", "gpu-0", None, "2026-03-02T09:50:00Z", unschedulable()),
        ],
        events: vec![object::<Event>(json!({
            "metadata": {"name": "huge-0.1", "namespace": "batch"},
            "involvedObject": {"kind": "Pod", "name": "huge-0", "namespace": "batch"},
            "reason": "FailedScheduling", "type": "Warning", "lastTimestamp": "2026-03-02T09:55:00Z",
            "message": "Failed to schedule pod, no NodePool can launch a node for batch/huge-0: default: requests cpu=200 but the largest allowed type has 96",
        }))],
        pod_disruption_budgets: Vec::new(),
        list_prices: Default::default(),
    }
    .with_pending_claim_for("shop/cart-0")
}

trait WithPending {
    fn with_pending_claim_for(self, pod: &str) -> Self;
}

impl WithPending for ClusterObjects {
    /// Records `pod` on the launching claim, as the agent would have.
    fn with_pending_claim_for(mut self, pod: &str) -> Self {
        let claim = self
            .node_claims
            .iter_mut()
            .find(|c| c.metadata.name.as_deref() == Some("default-fghij"));
        if let Some(a) = claim.and_then(|c| c.metadata.annotations.as_mut()) {
            a.insert(labels::PROVISIONED_FOR.to_owned(), format!("[\"{pod}\"]"));
        }
        self
    }
}

/// A cluster as upstream Karpenter leaves it: a Ready claim with upstream's labels and a status
/// its controllers wrote, its Node (no price label: upstream sets none), a pod on it that an
/// exhausted PodDisruptionBudget covers, in a pool that waits 1h before consolidating.
pub(crate) fn upstream_cluster() -> ClusterObjects {
    let claim: NodeClaim = object(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "general-q9z8w", "creationTimestamp": "2026-03-02T09:00:00Z",
            "labels": {labels::NODE_POOL: "general", labels::INSTANCE_TYPE: "m6i.large", labels::CAPACITY_TYPE: "spot", labels::ZONE: "eu-west-1b"}},
        "spec": {
            "requirements": [{"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m6i.large", "m6i.xlarge"]}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        },
        "status": {
            "nodeName": "ip-10-0-1-23.eu-west-1.compute.internal", "providerID": "aws:///eu-west-1b/i-0abc",
            "capacity": {"cpu": "2", "memory": "8Gi"},
            "lastPodEventTime": "2026-03-02T09:30:00Z",
            "conditions": conditions("2026-03-02T09:00:30Z", true),
        },
    }));
    let node: CachedNode = object(json!({
        "metadata": {"name": "ip-10-0-1-23.eu-west-1.compute.internal", "creationTimestamp": "2026-03-02T09:01:00Z",
            "labels": {labels::NODE_POOL: "general", labels::INSTANCE_TYPE: "m6i.large", labels::CAPACITY_TYPE: "spot", labels::ZONE: "eu-west-1b"}},
        "spec": {"providerID": "aws:///eu-west-1b/i-0abc"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }));
    let mut general = pool("general", json!({"cpu": "16"}));
    general.spec.disruption.consolidate_after = object(json!("1h"));
    let pdb = object(json!({
        "metadata": {"name": "api", "namespace": "shop"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "api"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
    }));
    ClusterObjects {
        node_pools: vec![general],
        node_claims: vec![claim],
        nodes: vec![node],
        pods: vec![pod(
            "shop",
            "api-0",
            Some("ip-10-0-1-23.eu-west-1.compute.internal"),
            "2026-03-02T09:30:00Z",
            json!({"phase": "Running"}),
        )],
        events: Vec::new(),
        pod_disruption_budgets: vec![pdb],
        list_prices: Default::default(),
    }
}
