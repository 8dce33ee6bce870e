//! Provisioning at reconcile level (see `controllers::testing`): one scheduling round over stores
//! the test fills, against the fake cloud's catalogue and an API server the test answers.

use super::creates::Creates;
use super::round::{Memory, provision};
use super::{PendingPods, RecentClaims};
use crate::apis::CapacityType;
use crate::apis::{NodeClaim, NodePool, labels};
use crate::cloud::fake::{Failure, FakeProvider, Operation, Times};
use crate::controllers::Settings;
use crate::controllers::testing::{ApiServer, Objects, context};
use crate::state::CachedPod;
use http::Method;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const CLAIMS: &str = "/apis/karpenter.sh/v1/nodeclaims";

fn pool() -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "uid": "pool-uid"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": [{"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]}}},
    }))
    .expect("a NodePool")
}

/// A pod the kube-scheduler gave up on, asking for `cpu`.
fn pending(name: &str, cpu: &str) -> CachedPod {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }))
    .expect("a Pod");
    CachedPod::from(pod)
}

/// Answers the round's check that the NodeClaim watch holds every claim there is: there are
/// none.
async fn answer_claims_synced(server: &mut ApiServer) {
    let list = server.next().await;
    assert!(list.is(&Method::GET, CLAIMS), "{list:?}");
    list.answer(
        200,
        &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
            "metadata": {"resourceVersion": "1"}, "items": []}),
    );
}

/// Runs one round with what a provisioner starts with.
async fn round(ctx: &Arc<crate::controllers::Context<FakeProvider>>) -> Creates {
    let (pending, _wake) = PendingPods::new();
    let recent = Arc::new(RecentClaims::default());
    let mut memory = Memory::new(false);
    let mut creates = Creates::default();
    provision(ctx, &pending, &recent, &mut memory, &mut creates)
        .await
        .expect("the round succeeds");
    creates
}

#[tokio::test]
async fn a_pending_pod_gets_one_claim_for_the_cheapest_type_that_holds_it() {
    let objects = Objects {
        pools: vec![pool()],
        pods: vec![pending("web-1", "3")],
        ..Objects::default()
    };
    let provider = Arc::new(FakeProvider::default());
    let (ctx, mut server) = context(provider.clone(), objects, Settings::default());
    let round = tokio::spawn({
        let ctx = ctx.clone();
        async move { round(&ctx).await }
    });
    answer_claims_synced(&mut server).await;
    let create = server.next().await;
    assert!(create.is(&Method::POST, CLAIMS), "{create:?}");
    let claim: NodeClaim = serde_json::from_value(create.body.clone()).expect("a NodeClaim");
    let body = create.body.clone();
    create.answer(201, &body);
    let _creates = round.await.expect("the round ends");

    assert_eq!(
        claim.labels().get(labels::NODE_POOL).map(String::as_str),
        Some("default")
    );
    assert_eq!(
        claim.provisioned_for(),
        Some(vec!["default/web-1".to_owned()])
    );
    // 3 CPU do not fit fake-small (2 CPU); fake-medium is the cheapest that holds them.
    let options = claim
        .instance_type_options()
        .expect("the options are recorded");
    assert_eq!(
        options.first().map(|o| o.name.as_str()),
        Some("fake-medium")
    );
    assert!(options.iter().all(|o| o.name != "fake-small"));
    assert!(
        options
            .iter()
            .all(|o| o.capacity_type == CapacityType::OnDemand.as_str())
    );
    // The round asked the cloud for its catalogue and launched nothing itself: launching is
    // the lifecycle's.
    assert!(!provider.calls_to(Operation::InstanceTypes).is_empty());
    assert!(provider.calls_to(Operation::Create).is_empty());
    server.expect_quiet(Duration::from_millis(200)).await;
    // The pod hears where it goes, in upstream's words.
    assert_eq!(
        server.events(),
        vec![(
            "Nominated".to_owned(),
            format!("Pod should schedule on: nodeclaim/{}", claim.name_any())
        )]
    );
}

#[tokio::test]
async fn a_pod_no_instance_type_can_hold_gets_no_claim_and_is_told_why() {
    let objects = Objects {
        pools: vec![pool()],
        pods: vec![pending("huge", "64")],
        ..Objects::default()
    };
    let (ctx, mut server) = context(
        Arc::new(FakeProvider::default()),
        objects,
        Settings::default(),
    );
    let round = tokio::spawn({
        let ctx = ctx.clone();
        async move { round(&ctx).await }
    });
    answer_claims_synced(&mut server).await;
    let _creates = round.await.expect("the round ends");
    server.expect_quiet(Duration::from_millis(200)).await;
    let events = server.events();
    assert!(
        events
            .iter()
            .any(|(reason, note)| reason == "FailedScheduling"
                && note.starts_with("Failed to schedule pod, ")
                && note.contains("cpu")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_node_class_the_cloud_cannot_list_launches_nothing_and_the_round_goes_on() {
    let objects = Objects {
        pools: vec![pool()],
        pods: vec![pending("web-1", "1")],
        ..Objects::default()
    };
    let provider = Arc::new(FakeProvider::default());
    provider.fail(
        Operation::InstanceTypes,
        Failure::Api {
            message: "the API is down".to_owned(),
        },
        Times::Always,
    );
    let (ctx, mut server) = context(provider, objects, Settings::default());
    let round = tokio::spawn({
        let ctx = ctx.clone();
        async move { round(&ctx).await }
    });
    answer_claims_synced(&mut server).await;
    let _creates = round.await.expect("the round ends without an error");
    server.expect_quiet(Duration::from_millis(200)).await;
    let failed: Vec<Value> = server
        .events()
        .into_iter()
        .filter(|(reason, _)| reason == "FailedScheduling")
        .map(|(_, note)| Value::String(note))
        .collect();
    assert_eq!(failed.len(), 1, "the pod hears why: {failed:?}");
}
