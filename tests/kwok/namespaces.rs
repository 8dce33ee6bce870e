//! Pod anti-affinity across namespaces chosen by label (`namespaceSelector`), as a user sees it
//! on the rig: a pod that must not share a node with another team's pod gets a node of its
//! own, because the agent reads the namespaces' labels as the kube-scheduler does.

use super::{Agent, apply, exclusive, kwok_pool, pool_claims, running_pods, wait_for};
use k8s_openapi::api::core::v1::Pod;
use karpenter_test_support::rig::rig;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;
use std::time::Duration;

const POOL: &str = "ns-pool";

fn manifests() -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: ns-team-x, labels: {{team: alpha}}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: ns-team-y, labels: {{team: beta}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: x-db, namespace: ns-team-x, labels: {{app: db}}}}
spec:
  terminationGracePeriodSeconds: 0
  nodeSelector: {{test-pool: {POOL}}}
  containers: [{{name: pause, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m}}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: y-web, namespace: ns-team-y, labels: {{app: web}}}}
spec:
  terminationGracePeriodSeconds: 0
  nodeSelector: {{test-pool: {POOL}}}
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {{matchLabels: {{app: db}}}}
          namespaceSelector: {{matchLabels: {{team: alpha}}}}
          topologyKey: kubernetes.io/hostname
  containers: [{{name: pause, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 100m}}}}}}]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_avoids_another_teams_namespace_gets_a_node_of_its_own() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&kwok_pool(POOL, "", ""));
    apply(&manifests());
    wait_for("both pods running", Duration::from_secs(90), || async {
        let x = running_pods(&client, "ns-team-x").await.len();
        let y = running_pods(&client, "ns-team-y").await.len();
        (x == 1 && y == 1).then_some(())
    })
    .await;
    let mut nodes = BTreeSet::new();
    for ns in ["ns-team-x", "ns-team-y"] {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        for pod in pods.list(&ListParams::default()).await.expect("pods").items {
            nodes.extend(pod.spec.and_then(|s| s.node_name));
        }
    }
    assert_eq!(nodes.len(), 2, "the two pods share a node: {nodes:?}");
    assert_eq!(pool_claims(&client, POOL).await.len(), 2);
    for ns in ["ns-team-x", "ns-team-y"] {
        let _ = rig()
            .kubectl()
            .args(["delete", "namespace", ns, "--wait=true", "--timeout=120s"])
            .output();
    }
    super::clean_up(&client, "ns-team-x", POOL).await;
}
