//! A NodeClaim the agent cannot decode (here a `status.lastPodEventTime` it cannot parse, as a
//! newer CRD could allow; in a cluster the usual cause is an agent older than its CRDs) still
//! owns its instance: garbage collection keeps the instance and its Node, and says why.

use super::{
    Agent, apply, clean_up, deployment, exclusive, node_pool, pool_claims, running_pods, wait_for,
};
use k8s_openapi::api::core::v1::Node;
use karpenter_test_support::rig::rig;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::time::Duration;

const POOL: &str = "unreadable-pool";
const NAMESPACE: &str = "unreadable-test";
const FORMAT: &str =
    "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/lastPodEventTime/format";

/// The NodeClaim CRD without the `date-time` format on `lastPodEventTime`, until dropped.
struct LaxerCrd;

impl LaxerCrd {
    fn install() -> Self {
        rig().kubectl_ok(&[
            "patch",
            "crd",
            "nodeclaims.karpenter.sh",
            "--type=json",
            "-p",
            &format!(r#"[{{"op": "remove", "path": "{FORMAT}"}}]"#),
        ]);
        Self
    }
}

impl Drop for LaxerCrd {
    fn drop(&mut self) {
        rig().kubectl_ok(&[
            "patch",
            "crd",
            "nodeclaims.karpenter.sh",
            "--type=json",
            "-p",
            &format!(r#"[{{"op": "add", "path": "{FORMAT}", "value": "date-time"}}]"#),
        ]);
    }
}

/// Sets the claim's `status.lastPodEventTime`; retried while the API server still applies
/// the schema it had.
async fn set_last_pod_event_time(claim: &str, value: &str) {
    let patch = format!(r#"{{"status": {{"lastPodEventTime": "{value}"}}}}"#);
    wait_for(
        "the status patch to be accepted",
        Duration::from_secs(30),
        || async {
            rig()
                .kubectl()
                .args([
                    "patch",
                    "nodeclaim",
                    claim,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    &patch,
                ])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|_| ())
        },
    )
    .await;
}

/// The reason and note of every Event about the NodeClaim `name`.
async fn events_of_claim(client: &kube::Client, name: &str) -> Vec<(String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("NodeClaim") && r.name.as_deref() == Some(name)
            })
        })
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_the_agent_cannot_read_keeps_its_instance_and_node() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let first = Agent::start().await;
    apply(&node_pool(POOL, "{}"));
    apply(&deployment(NAMESPACE, "inflate", POOL, 1, "1"));
    wait_for("the pod to run", Duration::from_secs(120), || async {
        (running_pods(&client, NAMESPACE).await.len() == 1).then_some(())
    })
    .await;
    let claims = pool_claims(&client, POOL).await;
    assert_eq!(claims.len(), 1);
    let claim = claims[0].name_any();
    let node_name = claims[0]
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("registered");
    drop(first);

    let crd = LaxerCrd::install();
    set_last_pod_event_time(&claim, "last tuesday").await;
    let agent = Agent::start().await;
    // Garbage collection runs every 2 s with a 2 s grace: five passes.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .get_opt(&node_name)
        .await
        .expect("read the node")
        .expect("the node is still there");
    assert!(
        node.metadata.deletion_timestamp.is_none(),
        "the unreadable claim's instance was deleted"
    );
    // Listed untyped: the test's own client cannot read the claim either.
    let listed = rig().kubectl_ok(&[
        "get",
        "nodeclaims",
        "-l",
        &format!("karpenter.sh/nodepool={POOL}"),
        "-o",
        "jsonpath={.items[*].metadata.name} {.items[*].metadata.deletionTimestamp}",
    ]);
    assert_eq!(listed.trim(), claim, "the claim is there and not deleted");
    let metrics = agent.metrics.encode().expect("metrics");
    assert!(
        metrics.contains("karpenter_nodeclaims_unreadable 1"),
        "{metrics}"
    );
    let said = events_of_claim(&client, &claim).await;
    assert!(
        said.iter()
            .any(|(reason, note)| reason == "OrphanDeletionSuspended"
                && note.contains(&format!("kwok://{node_name}"))),
        "{said:?}"
    );
    assert!(
        said.iter().any(|(reason, _)| reason == "FailedToDecode"),
        "{said:?}"
    );

    // Readable again: the agent takes it back and cleans up as usual.
    set_last_pod_event_time(&claim, "2026-12-01T00:00:00Z").await;
    drop(crd);
    clean_up(&client, NAMESPACE, POOL).await;
}
