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

/// A pool that never consolidates, so a pass does nothing but its own start.
fn never_consolidating() -> NodePool {
    let mut pool = pool();
    pool.spec.disruption =
        serde_json::from_value(json!({"consolidateAfter": "Never"})).expect("a disruption block");
    pool
}

/// What a command killed half-way leaves: its node tainted `karpenter.sh/disrupted`, its claim
/// marked with a `DisruptionReason`, neither being deleted.
fn left_by_a_killed_command(name: &str) -> (NodeClaim, CachedNode) {
    let (mut claim, mut node) = claim_and_node(name);
    node.taints.push(k8s_openapi::api::core::v1::Taint {
        key: labels::DISRUPTED_TAINT_KEY.to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Default::default()
    });
    let reason = serde_json::from_value(json!({"type": "DisruptionReason", "status": "True",
        "reason": "Underutilized", "message": "Disrupting NodeClaim: Underutilized",
        "lastTransitionTime": "2026-03-02T09:30:00Z"}))
    .expect("a condition");
    claim.status.get_or_insert_default().conditions.push(reason);
    (claim, node)
}

#[tokio::test]
async fn a_pass_first_takes_off_a_disruption_taint_and_reason_no_command_holds() {
    let (claim, node) = left_by_a_killed_command("left");
    let objects = Objects {
        claims: vec![claim.clone()],
        nodes: vec![node],
        pools: vec![never_consolidating()],
        pods: vec![running("web-1", "left", "1")],
    };
    let (ctx, mut server) = context(
        Arc::new(FakeProvider::default()),
        objects,
        Settings::default(),
    );
    let passing = tokio::spawn({
        let ctx = ctx.clone();
        async move { pass(&ctx, &mut Memory::default()).await }
    });
    let tainted = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "left", "resourceVersion": "7"},
        "spec": {"taints": [{"key": labels::DISRUPTED_TAINT_KEY, "effect": "NoSchedule"},
                            {"key": "example.com/gpu", "effect": "NoSchedule"}]}});
    let read = server.next().await;
    assert!(read.is(&Method::GET, "/api/v1/nodes/left"), "{read:?}");
    read.answer(200, &tainted);
    let untaint = server.next().await;
    assert!(
        untaint.is(&Method::PATCH, "/api/v1/nodes/left"),
        "{untaint:?}"
    );
    assert_eq!(
        untaint.body["spec"]["taints"],
        json!([{"key": "example.com/gpu", "effect": "NoSchedule"}]),
        "only the disruption taint comes off"
    );
    assert_eq!(untaint.body["metadata"]["resourceVersion"], "7");
    untaint.answer(200, &tainted);
    let clear = server.next().await;
    assert!(
        clear.is(
            &Method::PATCH,
            "/apis/karpenter.sh/v1/nodeclaims/left/status"
        ),
        "{clear:?}"
    );
    let conditions = clear.body["status"]["conditions"]
        .as_array()
        .expect("conditions");
    assert!(
        conditions.iter().all(|c| c["type"] != "DisruptionReason"),
        "{conditions:?}"
    );
    assert!(conditions.iter().any(|c| c["type"] == "Initialized"));
    clear.answer(200, &serde_json::to_value(&claim).expect("a claim"));
    passing
        .await
        .expect("the pass ends")
        .expect("the pass succeeds");
    server.expect_quiet(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn a_node_being_terminated_keeps_its_disruption_taint() {
    let (mut claim, node) = left_by_a_killed_command("going");
    claim.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-03-02T09:59:00Z")).expect("a timestamp"));
    let objects = Objects {
        claims: vec![claim],
        nodes: vec![node],
        pools: vec![never_consolidating()],
        pods: Vec::new(),
    };
    let (ctx, mut server) = context(
        Arc::new(FakeProvider::default()),
        objects,
        Settings::default(),
    );
    pass(&ctx, &mut Memory::default())
        .await
        .expect("the pass succeeds");
    server.expect_quiet(Duration::from_millis(200)).await;
}

/// The second replacement's create is refused: the first replacement is deleted again and the
/// candidate's taint comes off, so nothing of the command is left.
#[tokio::test]
async fn a_create_refused_half_way_through_a_command_undoes_the_taint_and_the_first_replacement() {
    // The fake's catalogue makes no consolidation with two replacements; the command is built
    // by hand, as the decision would hand it over.
    let (claim, node) = claim_and_node("old");
    let objects = Objects {
        claims: vec![claim.clone()],
        nodes: vec![node],
        pools: vec![pool()],
        pods: Vec::new(),
    };
    let (ctx, mut server) = context(
        Arc::new(FakeProvider::default()),
        objects,
        Settings::default(),
    );
    let command = two_replacements_for("old");
    let executing = tokio::spawn({
        let ctx = ctx.clone();
        async move { super::queue::execute(&ctx, &mut Default::default(), command).await }
    });
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "old", "resourceVersion": "7"}, "spec": {}});
    let tainted = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "old", "resourceVersion": "8"},
        "spec": {"taints": [{"key": labels::DISRUPTED_TAINT_KEY, "effect": "NoSchedule"}]}});
    let mut writes = Vec::new();
    let mut creates = 0;
    loop {
        let request = server.next().await;
        writes.push(format!("{} {}", request.method, request.uri));
        if request.is(&Method::GET, "/api/v1/nodes/old") {
            let taints = writes
                .iter()
                .filter(|w| w.starts_with("PATCH /api/v1/nodes"))
                .count();
            request.answer(200, if taints == 0 { &node } else { &tainted });
        } else if request.is(&Method::PATCH, "/api/v1/nodes/old") {
            request.answer(200, &tainted);
        } else if request.is(&Method::POST, "/apis/karpenter.sh/v1/nodeclaims") {
            creates += 1;
            if creates == 1 {
                let mut created = request.body.clone();
                created["metadata"]["name"] = json!("replacement-1");
                request.answer(201, &created);
            } else {
                request.answer(
                    403,
                    &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "Forbidden", "code": 403,
                        "message": "nodeclaims is forbidden: exceeded quota"}),
                );
            }
        } else if request.is(
            &Method::DELETE,
            "/apis/karpenter.sh/v1/nodeclaims/replacement-1",
        ) {
            request.answer(200, &serde_json::to_value(&claim).expect("a claim"));
            break;
        } else {
            panic!("unexpected request: {request:?}");
        }
    }
    let result = executing.await.expect("the command ends");
    assert!(result.is_err(), "the refusal is reported");
    let patches: Vec<&String> = writes
        .iter()
        .filter(|w| w.starts_with("PATCH /api/v1/nodes/old"))
        .collect();
    assert_eq!(patches.len(), 2, "tainted, then untainted: {writes:?}");
    assert!(
        writes.iter().all(|w| !w.contains("nodeclaims/old")),
        "the candidate is not deleted: {writes:?}"
    );
    server.expect_quiet(Duration::from_millis(200)).await;
}

/// A consolidation of `name` that needs two new nodes (the pool's, of no particular type).
fn two_replacements_for(name: &str) -> crate::disruption::Command {
    let replacement = || crate::disruption::Replacement {
        claim: crate::scheduling::NewClaim {
            node_pool: "default".to_owned(),
            requirements: Default::default(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            labels: Default::default(),
            pods: Vec::new(),
            pod_requests: crate::resources::ResourceList::new(),
            daemon_requests: crate::resources::ResourceList::new(),
            instance_types: Vec::new(),
        },
        pods: Vec::new(),
    };
    crate::disruption::Command {
        method: crate::disruption::Method::SingleNodeConsolidation,
        reason: crate::apis::DisruptionReason::Underutilized,
        candidates: vec![crate::disruption::Disrupted {
            claim: name.to_owned(),
            node: name.to_owned(),
            pool: "default".to_owned(),
            instance_type: "fake-medium".to_owned(),
            capacity_type: "on-demand".to_owned(),
            price: None,
        }],
        replacements: vec![replacement(), replacement()],
        scores: Vec::new(),
    }
}
