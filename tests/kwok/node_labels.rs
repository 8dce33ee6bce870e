//! Node labels as a user sees them on the rig: a NodePool restricted by a custom requirement
//! (`tenant In [acme]`, with a matching taint) gets nodes labelled `tenant=acme`, so pods that
//! select on it run there and the pool launches no more nodes for them; the Node also carries
//! every label of its instance type. The kwok provider registers Nodes as a kubelet would (only
//! the labels a kubelet may set), so these labels must come from the claim and registration.

use super::{Agent, apply, clean_up, exclusive, kwok_pool, pool_claims, running_pods, wait_for};
use k8s_openapi::api::core::v1::Node;
use karpenter_test_support::cloud_agent;
use karpenter_test_support::rig::rig;
use kube::api::{Api, ListParams};
use std::time::Duration;

const POOL: &str = "tenant-pool";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_restricted_to_a_custom_label_gets_nodes_with_it_and_launches_no_more() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&kwok_pool(POOL, "", cloud_agent::tenant_requirement()));
    apply(&cloud_agent::tenant_workload("tenant-test"));
    wait_for("both pods running", Duration::from_secs(120), || async {
        (running_pods(&client, "tenant-test").await.len() == 2).then_some(())
    })
    .await;
    // Give a runaway loop time to show itself: provisioning rounds run every few seconds.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let claims = pool_claims(&client, POOL).await;
    assert_eq!(claims.len(), 1, "one node for both pods, no more launched");
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .list(&ListParams::default().labels(&format!("test-pool={POOL}")))
        .await
        .expect("nodes")
        .items
        .pop()
        .expect("the pool's node");
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("tenant").map(String::as_str), Some("acme"));
    for key in [
        "karpenter.k8s.aws/instance-family",
        "karpenter.k8s.aws/instance-cpu",
        "kubernetes.io/arch",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "karpenter.sh/capacity-type",
        "karpenter.sh/nodepool",
    ] {
        assert!(
            labels.contains_key(key),
            "the node has no {key}: {labels:?}"
        );
    }
    clean_up(&client, "tenant-test", POOL).await;
}
