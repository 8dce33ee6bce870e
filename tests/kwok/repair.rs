//! Node repair (the `NodeRepair` gate) as a user sees it on the rig: a node whose simulated
//! fault (`KWOKUnhealthy=True`, upstream's kwok repair policy, tolerated 30 s) persists is kept
//! while it carries `karpenter.sh/do-not-repair`, with an Event saying so, and replaced once the
//! annotation is gone, its pods running again on the new node.

use super::{
    Agent, apply, clean_up, deployment, exclusive, kwok_pool, pool_claims, running_pods, wait_for,
};
use k8s_openapi::api::core::v1::Node;
use karpenter_core::cloud::kwok::KWOK_UNHEALTHY;
use karpenter_core::controllers::Settings;
use karpenter_test_support::rig::rig;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use std::time::Duration;

const POOL: &str = "repair-pool";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_node_is_kept_under_do_not_repair_and_replaced_once_it_is_lifted() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start_with(Settings {
        node_repair: true,
        disruption_poll: Duration::from_secs(2),
        garbage_collection_interval: Duration::from_secs(2),
        garbage_collection_grace: Duration::from_secs(2),
        ..Settings::default()
    })
    .await;
    apply(&kwok_pool(
        POOL,
        "  disruption: {consolidateAfter: Never}",
        "",
    ));
    apply(&deployment("repair-test", "web", POOL, 2, "100m"));
    wait_for("2 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, "repair-test").await.len() == 2).then_some(())
    })
    .await;
    let claims = pool_claims(&client, POOL).await;
    assert_eq!(claims.len(), 1);
    let sick_claim = claims[0].name_any();
    let sick_node = claims[0]
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("the claim's node");

    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            &sick_node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"karpenter.sh/do-not-repair": "true"}}})),
        )
        .await
        .expect("annotate the node");
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    nodes
        .patch_status(
            &sick_node,
            &PatchParams::default(),
            &Patch::Strategic(serde_json::json!({"status": {"conditions": [{
                "type": KWOK_UNHEALTHY, "status": "True", "reason": "SimulatedFault",
                "message": "injected by the test", "lastTransitionTime": now, "lastHeartbeatTime": now,
            }]}})),
        )
        .await
        .expect("the node turns unhealthy");

    let note = wait_for(
        "a DisruptionBlocked Event naming do-not-repair",
        Duration::from_secs(120),
        || async {
            super::disruption::events_with_reason(&client, "DisruptionBlocked")
                .await
                .into_iter()
                .find(|n| n.contains("do-not-repair"))
        },
    )
    .await;
    assert!(note.contains("repair is blocked"), "{note}");
    assert!(
        pool_claims(&client, POOL)
            .await
            .iter()
            .any(|c| c.name_any() == sick_claim && c.metadata.deletion_timestamp.is_none()),
        "the annotated node was disrupted"
    );

    nodes
        .patch(
            &sick_node,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"karpenter.sh/do-not-repair": null}}})),
        )
        .await
        .expect("lift the annotation");
    wait_for(
        "the unhealthy node replaced, its pods running on the new one",
        Duration::from_secs(180),
        || async {
            let claims = pool_claims(&client, POOL).await;
            let replaced = claims.len() == 1 && claims[0].name_any() != sick_claim;
            let gone = nodes.get_opt(&sick_node).await.ok()?.is_none();
            let running = running_pods(&client, "repair-test").await.len() == 2;
            (replaced && gone && running).then_some(())
        },
    )
    .await;
    let replaced_reason = nodes
        .list(&ListParams::default().labels(&format!("test-pool={POOL}")))
        .await
        .expect("nodes")
        .items
        .len();
    assert_eq!(replaced_reason, 1);
    clean_up(&client, "repair-test", POOL).await;
}
