//! The cloud seam's contract (`karpenter_test_support::contract`) kept by the in-memory fake
//! provider (no rig) and by the kwok provider (on the rig). The aws and gcp providers run it in
//! `tests/aws` and `tests/gcp`.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use crate::rig::rig;
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_core::cloud::fake::{Failure, FakeProvider, Operation, Times};
use karpenter_core::cloud::kwok::KwokProvider;
use karpenter_test_support::contract::{self, Subject};

/// A NodeClaim (not stored anywhere) for the KWOKNodeClass `class`, with `requirements`.
fn claim(name: &str, class: &str, requirements: serde_json::Value) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {labels::NODE_POOL: "contract"}},
        "spec": {
            "requirements": requirements,
            "resources": {"requests": {"cpu": "1"}},
            "nodeClassRef": {"group": labels::KWOK_GROUP, "kind": "KWOKNodeClass", "name": class},
        },
    }))
    .expect("claim")
}

#[tokio::test]
async fn the_fake_provider_keeps_the_cloud_provider_contract() {
    let fake = FakeProvider::default();
    let claim = |name: &str| {
        claim(
            name,
            "fake",
            serde_json::json!([{"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["fake-small", "fake-medium"]}]),
        )
    };
    let exhaust = |instance_type: &str| {
        fake.fail(
            Operation::Create,
            Failure::InsufficientCapacity {
                offerings: vec![format!("*:{instance_type}:*")],
            },
            Times::Always,
        )
    };
    contract::run(&Subject {
        provider: &fake,
        claim: &claim,
        exhaust: Some(&exhaust),
        prefix: "fake",
    })
    .await;
    assert!(fake.instances().is_empty(), "the suite cleans up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kwok_provider_keeps_the_cloud_provider_contract() {
    let applied = rig().kubectl_with_input(
        &["apply", "-f", "-"],
        "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: contract-kwok}\nspec: {}\n",
    );
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let provider = KwokProvider::new(rig().client().await);
    let claim = |name: &str| {
        claim(
            name,
            "contract-kwok",
            serde_json::json!([{"key": labels::OS, "operator": "In", "values": ["linux"]}]),
        )
    };
    // kwok cannot be told to run out of capacity: the suite skips that check.
    contract::run(&Subject {
        provider: &provider,
        claim: &claim,
        exhaust: None,
        prefix: "contract-kwok",
    })
    .await;
    rig().kubectl_ok(&["delete", "kwoknodeclass", "contract-kwok"]);
}

/// The kwok provider reads its node classes from a watch; one created a moment ago is used at
/// once, and one deleted stops being offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_class_is_offered_as_soon_as_it_exists_and_not_once_it_is_deleted() {
    use karpenter_core::apis::NodeClassReference;
    use karpenter_core::cloud::{CloudError, CloudProvider};
    let provider = KwokProvider::new(rig().client().await);
    let reference = NodeClassReference {
        group: labels::KWOK_GROUP.to_owned(),
        kind: "KWOKNodeClass".to_owned(),
        name: "watched-kwok".to_owned(),
    };
    let missing = |result: Result<_, CloudError>| match result {
        Err(CloudError::NodeClassNotReady { reason, .. }) => reason.contains("does not exist"),
        Err(other) => panic!("unexpected error: {other}"),
        Ok(_) => false,
    };
    assert!(missing(provider.instance_types(&reference).await));

    let applied = rig().kubectl_with_input(
        &["apply", "-f", "-"],
        "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: watched-kwok}\nspec: {}\n",
    );
    assert!(applied.status.success());
    let offered = provider
        .instance_types(&reference)
        .await
        .expect("a class created a moment ago is offered");
    assert!(!offered.is_empty());

    rig().kubectl_ok(&["delete", "kwoknodeclass", "watched-kwok"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !missing(provider.instance_types(&reference).await) {
        assert!(
            std::time::Instant::now() < deadline,
            "a deleted class was still offered after 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
