//! Drift and expiry as a user sees them on the rig: editing a NodePool's template marks its
//! NodeClaims `Drifted` (and undoing the edit clears it), and a pool whose nodes expire after
//! 30 s gets them replaced, its pods running again on a new node.

use super::{
    Agent, apply, clean_up, deployment, exclusive, kwok_pool, pool_claims, running_pods, wait_for,
};
use k8s_openapi::api::core::v1::Pod;
use karpenter_core::apis::{NodeClaim, NodePool, labels};
use karpenter_core::controllers::nodeclaim_disruption;
use karpenter_core::metrics::DisruptedLabels;
use karpenter_test_support::rig::rig;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use std::collections::BTreeSet;
use std::time::Duration;

/// A pool (see [`kwok_pool`]) whose nodes nothing may disrupt voluntarily: the tests watch the
/// conditions and expiry (which budgets do not block), not replacement. `extra_spec` is added to
/// the template's spec.
fn pool_with(name: &str, extra_spec: &str) -> String {
    kwok_pool(
        name,
        "  disruption: {consolidateAfter: Never, budgets: [{nodes: \"0\"}]}",
        extra_spec,
    )
}

fn drifted(claim: &NodeClaim) -> Option<(String, String)> {
    claim
        .condition("Drifted")
        .filter(|c| c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

async fn set_template_label(client: &kube::Client, pool: &str, value: serde_json::Value) {
    let patch = serde_json::json!({"spec": {"template": {"metadata": {"labels": {"drift-test-edition": value}}}}});
    Api::<NodePool>::all(client.clone())
        .patch(pool, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the nodepool");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_pools_template_labels_marks_its_claims_drifted_until_the_edit_is_undone() {
    let _lock = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    let (pool, namespace) = ("drift-pool", "drift-test");
    apply(&pool_with(pool, ""));
    apply(&deployment(namespace, "one", pool, 1, "1"));
    let claim = wait_for("an initialized claim", Duration::from_secs(120), || async {
        pool_claims(&client, pool)
            .await
            .into_iter()
            .find(|c| c.is_true("Initialized"))
    })
    .await;
    let name = claim.name_any();
    let claim_hash = claim.annotations().get(labels::NODE_POOL_HASH).cloned();
    assert!(claim_hash.is_some(), "the claim carries its pool's hash");
    // The pool is stamped with the hash its claims carry (upstream's nodepool hash controller).
    let pools: Api<NodePool> = Api::all(client.clone());
    wait_for(
        "the pool's hash annotation",
        Duration::from_secs(60),
        || async {
            let stamped = pools.get(pool).await.ok()?;
            (stamped.annotations().get(labels::NODE_POOL_HASH) == claim_hash.as_ref()
                && stamped
                    .annotations()
                    .get(labels::NODE_POOL_HASH_VERSION)
                    .is_some_and(|v| v == "v3"))
            .then_some(())
        },
    )
    .await;
    // A full pass after the stamp, the claim made from the current template is still not drifted.
    tokio::time::sleep(nodeclaim_disruption::PASS_EVERY + Duration::from_secs(5)).await;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let fresh = claims.get(&name).await.expect("the claim");
    assert_eq!(
        drifted(&fresh),
        None,
        "a claim of the current template has not drifted"
    );

    set_template_label(&client, pool, serde_json::json!("two")).await;
    let (reason, message) = wait_for(
        "the claim to be marked Drifted",
        Duration::from_secs(120),
        || async { drifted(&claims.get(&name).await.ok()?) },
    )
    .await;
    assert_eq!(reason, "NodePoolDrifted");
    assert!(
        message.contains(pool),
        "the message names the pool: {message}"
    );

    set_template_label(&client, pool, serde_json::Value::Null).await;
    wait_for(
        "the Drifted condition to be cleared",
        Duration::from_secs(120),
        || async {
            let claim = claims.get(&name).await.ok()?;
            claim.condition("Drifted").is_none().then_some(())
        },
    )
    .await;
    clean_up(&client, namespace, pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_past_its_expire_after_is_replaced_and_its_pods_run_on_a_new_node() {
    let _lock = exclusive().await;
    let client = rig().client().await;
    let agent = Agent::start().await;
    let (pool, namespace) = ("expiry-pool", "expiry-test");
    apply(&pool_with(pool, "      expireAfter: 30s"));
    apply(&deployment(namespace, "two", pool, 2, "1"));
    let running_on = |pods: Vec<Pod>| -> BTreeSet<String> {
        pods.iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect()
    };
    let first_nodes = wait_for("2 running pods", Duration::from_secs(120), || async {
        let pods = running_pods(&client, namespace).await;
        (pods.len() == 2).then(|| running_on(pods))
    })
    .await;
    let first_claims: Vec<NodeClaim> = pool_claims(&client, pool)
        .await
        .into_iter()
        .filter(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| first_nodes.contains(n))
        })
        .collect();
    assert!(!first_claims.is_empty(), "the pods' nodes have claims");

    // Each of those claims is deleted once 30 s old, and not before.
    let claims: Api<NodeClaim> = Api::all(client.clone());
    for claim in &first_claims {
        let deleted_at = wait_for(
            "the expired claim to be deleted",
            Duration::from_secs(150),
            || async {
                match claims.get_opt(&claim.name_any()).await.ok()? {
                    None => Some(k8s_openapi::jiff::Timestamp::now()),
                    Some(c) => c.metadata.deletion_timestamp.map(|t| t.0),
                }
            },
        )
        .await;
        let created = claim
            .metadata
            .creation_timestamp
            .as_ref()
            .expect("created")
            .0;
        let age = deleted_at.duration_since(created);
        assert!(
            age >= k8s_openapi::jiff::SignedDuration::from_secs(29),
            "{} deleted after {age:#}, before its expireAfter of 30s",
            claim.name_any()
        );
    }
    // The pods run again, on nodes that are not the expired ones.
    wait_for(
        "the pods running on new nodes",
        Duration::from_secs(150),
        || async {
            let pods = running_pods(&client, namespace).await;
            let nodes = running_on(pods.clone());
            (pods.len() == 2 && nodes.is_disjoint(&first_nodes)).then_some(())
        },
    )
    .await;
    let expired = agent
        .metrics
        .nodeclaims_disrupted
        .get_or_create(&DisruptedLabels {
            reason: "expired".to_owned(),
            nodepool: pool.to_owned(),
            capacity_type: first_claims[0]
                .labels()
                .get(labels::CAPACITY_TYPE)
                .cloned()
                .unwrap_or_default(),
            // Expiry is not consolidation; no terminationGracePeriod drains gracefully.
            consolidation_policy: String::new(),
            termination_mode: "graceful".to_owned(),
        })
        .get();
    assert!(
        expired >= 1,
        "karpenter_nodeclaims_disrupted_total counts the expiry"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let events = events.list(&ListParams::default()).await.expect("events");
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Expired")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                    == first_claims[0].metadata.name.as_deref()),
        "an Expired event on {}",
        first_claims[0].name_any()
    );
    clean_up(&client, namespace, pool).await;
}
