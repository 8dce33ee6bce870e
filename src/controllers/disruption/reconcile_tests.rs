//! Disruption at reconcile level (see `controllers::testing`): one pass of the disruption
//! controller over stores the test fills, against the fake cloud and an API server the test
//! answers.

use super::{Memory, pass};
use crate::apis::{NodeClaim, NodePool, labels};
use crate::cloud::fake::{FakeProvider, Operation};
use crate::controllers::Settings;
use crate::controllers::testing::{Objects, context};
use crate::state::{CachedNode, CachedPod};
use http::Method;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const CLASS: &str = r#"{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}"#;

fn class() -> Value {
    serde_json::from_str(CLASS).expect("a node class reference")
}

fn pool() -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default", "uid": "pool-uid"},
        "spec": {"disruption": {"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized",
                                "budgets": [{"nodes": "100%"}]},
                 "template": {"spec": {"nodeClassRef": class(), "requirements": [
                    {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]}}},
    }))
    .expect("a NodePool")
}

/// An initialized claim of the fake's `fake-medium` type, its Node Ready.
fn claim_and_node(name: &str) -> (NodeClaim, CachedNode) {
    let node_labels = json!({labels::NODE_POOL: "default", labels::INSTANCE_TYPE: "fake-medium",
        labels::CAPACITY_TYPE: "on-demand", labels::ZONE: "fake-zone-a", labels::HOSTNAME: name});
    let claim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "3",
            "creationTimestamp": "2026-03-02T09:00:00Z", "labels": node_labels,
            "finalizers": [labels::TERMINATION_FINALIZER]},
        "spec": {"requirements": [], "nodeClassRef": class()},
        "status": {"nodeName": name, "providerID": format!("kwok://{name}"),
            "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                            "lastTransitionTime": "2026-03-02T09:01:00Z"}]},
    }))
    .expect("a NodeClaim");
    let node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": node_labels},
        "spec": {"providerID": format!("kwok://{name}")},
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}},
    }))
    .expect("a Node");
    (claim, node)
}

/// A running pod of a ReplicaSet, on `node`.
fn running(name: &str, node: &str, cpu: &str) -> CachedPod {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }))
    .expect("a Pod");
    CachedPod::from(pod)
}

#[tokio::test]
async fn an_empty_node_is_tainted_before_its_claim_is_deleted_and_the_busy_one_is_left_alone() {
    let (busy_claim, busy_node) = claim_and_node("busy");
    let (empty_claim, empty_node) = claim_and_node("empty");
    let objects = Objects {
        claims: vec![busy_claim, empty_claim.clone()],
        nodes: vec![busy_node, empty_node],
        pools: vec![pool()],
        pods: vec![running("web-1", "busy", "3")],
    };
    let provider = Arc::new(FakeProvider::default());
    let settings = Settings {
        disruption_validation: Duration::ZERO,
        ..Settings::default()
    };
    let (ctx, mut server) = context(provider.clone(), objects, settings);
    let passing = tokio::spawn({
        let ctx = ctx.clone();
        async move { pass(&ctx, &mut Memory::default()).await }
    });

    // Every request until the claim's deletion, answered as the API server would.
    let mut writes = Vec::new();
    loop {
        let request = server.next().await;
        writes.push(format!("{} {}", request.method, request.uri));
        let deleted = request.is(&Method::DELETE, "/apis/karpenter.sh/v1/nodeclaims/empty");
        let answer = if request.uri.starts_with("/api/v1/nodes/") {
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "empty"}})
        } else {
            serde_json::to_value(&empty_claim).expect("a claim")
        };
        request.answer(200, &answer);
        if deleted {
            break;
        }
    }
    passing
        .await
        .expect("the pass ends")
        .expect("the pass succeeds");

    let writes: Vec<&String> = writes.iter().filter(|w| !w.starts_with("GET ")).collect();
    assert!(
        writes
            .first()
            .is_some_and(|w| w.starts_with("PATCH /api/v1/nodes/empty")),
        "the empty node is tainted before anything else is written: {writes:?}"
    );
    assert!(
        writes
            .last()
            .is_some_and(|w| w.starts_with("DELETE /apis/karpenter.sh/v1/nodeclaims/empty")),
        "its claim is deleted last: {writes:?}"
    );
    assert!(
        writes.iter().all(|w| !w.contains("busy")),
        "the busy node is not touched: {writes:?}"
    );
    assert!(
        provider.calls_to(Operation::Create).is_empty(),
        "an empty node needs no replacement"
    );
    server.expect_quiet(Duration::from_millis(200)).await;
}
