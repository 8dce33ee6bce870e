//! Termination at reconcile level (see `controllers::testing`): one pass over a deleted claim
//! against the fake cloud and an API server the test answers, asserting what a user would see
//! go wrong if the order broke: an instance deleted under pods still draining, or a finalizer
//! released while the instance still runs.

use super::terminate;
use crate::apis::{NodeClaim, labels};
use crate::cloud::CloudProvider;
use crate::cloud::fake::FakeProvider;
use crate::controllers::Settings;
use crate::controllers::testing::{ApiServer, Objects, context};
use crate::interner::Interner;
use crate::state::CachedNode;
use http::Method;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const CLAIMS: &str = "/apis/karpenter.sh/v1/nodeclaims/default-abcde";
const NODE: &str = "/api/v1/nodes/node-a";

/// A claim for one of the fake's machines, launched, then deleted by someone.
async fn launched_and_deleted(provider: &FakeProvider) -> NodeClaim {
    let mut claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-abcde", "uid": "claim-uid", "resourceVersion": "7",
            "labels": {labels::NODE_POOL: "default"},
            "finalizers": [labels::TERMINATION_FINALIZER],
            "deletionTimestamp": "2026-12-07T10:00:00Z"},
        "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": []},
    }))
    .expect("a NodeClaim");
    let instance = provider
        .create(&claim, &crate::cloud::fake::catalogue()[..1])
        .await
        .expect("the fake launches");
    claim.status = Some(
        serde_json::from_value(json!({
            "providerID": instance.provider_id.to_string(), "nodeName": "node-a",
        }))
        .expect("a status"),
    );
    claim
}

/// The claim's Node, Ready, as its kubelet reports it.
fn ready_node(claim: &NodeClaim) -> CachedNode {
    let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-a", "finalizers": [labels::TERMINATION_FINALIZER],
            "labels": {labels::NODE_POOL: "default"}},
        "spec": {"providerID": provider_id},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("a Node");
    CachedNode::new(node, &mut Interner::default())
}

fn pod_on_node() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-1", "namespace": "default", "uid": "pod-uid",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs", "controller": true}]},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"}})
}

fn pod_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items})
}

/// Answers a pass over a drained node: its taint, the list of its pods (none left), and the
/// list of volume attachments (`attachments`).
async fn answer_drained(server: &mut ApiServer, attachments: Vec<Value>) {
    let taint = server.next().await;
    assert!(taint.is(&Method::PATCH, NODE), "{taint:?}");
    taint.answer(
        200,
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}),
    );
    let list = server.next().await;
    assert!(list.is(&Method::GET, "/api/v1/pods?"), "{list:?}");
    list.answer(200, &pod_list(Vec::new()));
    let volumes = server.next().await;
    assert!(
        volumes.is(&Method::GET, "/apis/storage.k8s.io/v1/volumeattachments"),
        "{volumes:?}"
    );
    volumes.answer(
        200,
        &json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachmentList",
            "metadata": {"resourceVersion": "1"}, "items": attachments}),
    );
}

/// A VolumeAttachment of `volume` on node-a.
fn attachment(name: &str, volume: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
        "metadata": {"name": name},
        "spec": {"attacher": "csi.example.com", "nodeName": "node-a",
                 "source": {"persistentVolumeName": volume}}})
}

/// Answers the patch that releases the claim's finalizer, checking it does.
async fn expect_claim_released(server: &mut ApiServer, claim: &NodeClaim) {
    let release = server.next().await;
    assert!(release.is(&Method::PATCH, CLAIMS), "{release:?}");
    assert_eq!(release.body["metadata"]["finalizers"], json!([]));
    release.answer(200, &serde_json::to_value(claim).expect("a claim"));
}

#[tokio::test]
async fn a_claim_whose_node_never_registered_keeps_its_finalizer_until_its_instance_is_gone() {
    let provider = Arc::new(FakeProvider::default());
    let claim = launched_and_deleted(&provider).await;
    let (ctx, mut server) = context(provider.clone(), Objects::default(), Settings::default());
    // First pass: the instance is asked to terminate and is shutting down; nothing is released.
    let action = terminate(&claim, &ctx).await.expect("the pass succeeds");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(5))
    );
    assert!(
        provider.instances().is_empty(),
        "the instance was asked to go"
    );
    server.expect_quiet(Duration::from_millis(100)).await;
    // Next pass: the cloud says it is gone, so the claim lets go.
    let pass = tokio::spawn({
        let (claim, ctx) = (claim.clone(), ctx.clone());
        async move { terminate(&claim, &ctx).await }
    });
    expect_claim_released(&mut server, &claim).await;
    pass.await
        .expect("the pass ends")
        .expect("the pass succeeds");
}

#[tokio::test]
async fn a_ready_node_is_tainted_and_drained_before_its_instance_is_deleted() {
    let provider = Arc::new(FakeProvider::default());
    let claim = launched_and_deleted(&provider).await;
    let objects = Objects {
        claims: vec![claim.clone()],
        nodes: vec![ready_node(&claim)],
        ..Objects::default()
    };
    let (ctx, mut server) = context(provider.clone(), objects, Settings::default());

    // First pass: taint, list the node's pods, evict the one there; the instance stays.
    let pass = tokio::spawn({
        let (claim, ctx) = (claim.clone(), ctx.clone());
        async move { terminate(&claim, &ctx).await }
    });
    let taint = server.next().await;
    assert!(taint.is(&Method::PATCH, NODE), "{taint:?}");
    assert!(
        taint.body.to_string().contains(labels::DISRUPTED_TAINT_KEY),
        "the node is tainted first: {taint:?}"
    );
    taint.answer(
        200,
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}),
    );
    let list = server.next().await;
    assert!(list.is(&Method::GET, "/api/v1/pods?"), "{list:?}");
    assert!(
        list.uri.contains("spec.nodeName%3Dnode-a") || list.uri.contains("spec.nodeName=node-a"),
        "{list:?}"
    );
    list.answer(200, &pod_list(vec![pod_on_node()]));
    let eviction = server.next().await;
    assert!(
        eviction.is(
            &Method::POST,
            "/api/v1/namespaces/default/pods/web-1/eviction"
        ),
        "{eviction:?}"
    );
    eviction.answer(
        201,
        &json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}),
    );
    let action = pass
        .await
        .expect("the pass ends")
        .expect("the pass succeeds");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(2))
    );
    assert_eq!(
        provider.instances().len(),
        1,
        "the instance runs while its pods drain"
    );
    server.expect_quiet(Duration::from_millis(100)).await;

    // Second pass: nothing left on the node and no volume attached, so the instance is asked
    // to go; it is shutting down, so nothing is released yet.
    let pass = tokio::spawn({
        let (claim, ctx) = (claim.clone(), ctx.clone());
        async move { terminate(&claim, &ctx).await }
    });
    answer_drained(&mut server, Vec::new()).await;
    let action = pass
        .await
        .expect("the pass ends")
        .expect("the pass succeeds");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(5))
    );
    assert!(
        provider.instances().is_empty(),
        "the instance was asked to go"
    );
    server.expect_quiet(Duration::from_millis(100)).await;

    // Third pass: the cloud says it is gone: the Node, then the claim, let go.
    let pass = tokio::spawn({
        let (claim, ctx) = (claim.clone(), ctx.clone());
        async move { terminate(&claim, &ctx).await }
    });
    answer_drained(&mut server, Vec::new()).await;
    let release = server.next().await;
    assert!(release.is(&Method::PATCH, NODE), "{release:?}");
    release.answer(
        200,
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}),
    );
    let delete = server.next().await;
    assert!(delete.is(&Method::DELETE, NODE), "{delete:?}");
    delete.answer(
        200,
        &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}),
    );
    let stranded = server.next().await;
    assert!(stranded.is(&Method::GET, "/api/v1/pods?"), "{stranded:?}");
    stranded.answer(200, &pod_list(Vec::new()));
    expect_claim_released(&mut server, &claim).await;
    let action = pass
        .await
        .expect("the pass ends")
        .expect("the pass succeeds");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
}

#[tokio::test]
async fn a_drained_pods_attached_volume_holds_the_instance_and_the_node_says_so() {
    let provider = Arc::new(FakeProvider::default());
    let claim = launched_and_deleted(&provider).await;
    let objects = Objects {
        claims: vec![claim.clone()],
        nodes: vec![ready_node(&claim)],
        ..Objects::default()
    };
    let (ctx, mut server) = context(provider.clone(), objects, Settings::default());
    let pass = tokio::spawn({
        let (claim, ctx) = (claim.clone(), ctx.clone());
        async move { terminate(&claim, &ctx).await }
    });
    answer_drained(&mut server, vec![attachment("csi-1", "pv-1")]).await;
    let action = pass
        .await
        .expect("the pass ends")
        .expect("the pass succeeds");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(1))
    );
    assert_eq!(
        provider.instances().len(),
        1,
        "the instance waits for the detach"
    );
    server.expect_quiet(Duration::from_millis(100)).await;
    assert!(
        server.events().contains(&(
            "AwaitingVolumeDetachment".to_owned(),
            "Awaiting deletion of bound volumeattachments (csi-1)".to_owned()
        )),
        "{:?}",
        server.events()
    );
}
