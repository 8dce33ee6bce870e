//! A disruption interrupted outright: the `karpenter-agent` process is killed with SIGKILL
//! while a consolidation waits for its replacement (the kwok node class delays registration
//! to hold the window open), with its candidate tainted `karpenter.sh/disrupted`. The agent
//! that leads next must leave no node tainted for ever and no replacement running empty: the
//! cluster settles on one cheaper node with the pod running on it.

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_test_support::rig::rig;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::time::Duration;

use crate::common::{AgentProcess, NAMESPACE, service_account_kubeconfig, wait_for};

const POOL: &str = "interrupted";

fn apply(yaml: &str) {
    let out = rig().kubectl_with_input(&["apply", "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A pool that consolidates at once, whose nodes register 30 s after launch, and one pod of
/// `cpu` named `name`.
fn workload(name: &str, cpu: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {{name: {POOL}}}
spec: {{nodeRegistrationDelay: 30s}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {POOL}}}
spec:
  disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{{nodes: "100%"}}]}}
  template:
    metadata:
      labels: {{test-pool: {POOL}}}
    spec:
      requirements:
        - {{key: kubernetes.io/os, operator: In, values: [linux]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: {POOL}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{test-pool: {POOL}}}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: "{cpu}"}}}}
"#
    )
}

fn is_disrupted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_replacement_leaves_no_taint_and_no_extra_node_behind() {
    let _rig = crate::common::exclusive().await;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let client = rig().client().await;
    let _ = rig().agent_client().await;
    let kubeconfig = service_account_kubeconfig(dir.path(), NAMESPACE, "karpenter");
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let of_pool = ListParams::default().labels(&format!("{}={POOL}", labels::NODE_POOL));
    let live_claims = || async {
        claims
            .list(&of_pool)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .collect::<Vec<_>>()
    };
    let pool_nodes = || async {
        nodes
            .list(&ListParams::default().labels(&format!("test-pool={POOL}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    };

    // A big pod and a small one on one node.
    apply(&workload("big", "6"));
    apply(&workload("small", "500m"));
    let a = AgentProcess::start("agent-a", &kubeconfig, dir.path());
    let running = |name: &'static str| {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default().labels(&format!("app={name}")))
                .await
                .ok()?
                .items
                .into_iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        }
    };
    wait_for(
        "both pods to run",
        Duration::from_secs(180),
        &[&a],
        || async { running("big").await.and(running("small").await) },
    )
    .await;
    let first = live_claims().await;
    assert_eq!(first.len(), 1, "both pods were planned onto one node");
    let first_claim = first[0].name_any();
    let first_node = first[0]
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("registered");

    // The big pod goes: consolidation taints the node and launches a cheaper one, which takes
    // 30 s to register. The agent is killed in that window.
    rig().kubectl_ok(&[
        "-n",
        "default",
        "delete",
        "deployment",
        "big",
        "--wait=true",
    ]);
    wait_for(
        "the node to be tainted and its replacement launched",
        Duration::from_secs(120),
        &[&a],
        || async {
            let tainted = nodes.get_opt(&first_node).await.ok()??;
            let replacement = live_claims()
                .await
                .into_iter()
                .any(|c| c.name_any() != first_claim);
            (is_disrupted(&tainted) && replacement).then_some(())
        },
    )
    .await;
    let mut a = a;
    a.child.kill().expect("SIGKILL the agent");
    a.child.wait().expect("the agent exited");
    let at_kill = live_claims().await.len();
    eprintln!("killed the agent mid-replacement with {at_kill} NodeClaims in the pool");

    let b = AgentProcess::start("agent-b", &kubeconfig, dir.path());
    let settled = wait_for(
        "one untainted, cheaper node running the small pod",
        Duration::from_secs(300),
        &[&b],
        || async {
            let claims = live_claims().await;
            let nodes = pool_nodes().await;
            let small = running("small").await?;
            let on = small.spec.as_ref()?.node_name.clone()?;
            (claims.len() == 1
                && claims[0].name_any() != first_claim
                && nodes.len() == 1
                && nodes[0].name_any() == on
                && !is_disrupted(&nodes[0]))
            .then_some(on)
        },
    )
    .await;
    assert_ne!(settled, first_node);
    // Nothing comes back tainted, and no third node is launched, over a few more passes.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let nodes_now = pool_nodes().await;
    assert_eq!(
        nodes_now.iter().map(|n| n.name_any()).collect::<Vec<_>>(),
        std::slice::from_ref(&settled)
    );
    assert!(nodes_now.iter().all(|n| !is_disrupted(n)));
    assert_eq!(live_claims().await.len(), 1);

    rig().kubectl_ok(&[
        "-n",
        "default",
        "delete",
        "deployment",
        "small",
        "--wait=true",
    ]);
    rig().kubectl_ok(&["delete", "nodepool", POOL, "--wait=false"]);
    wait_for(
        "the pool's claims to go",
        Duration::from_secs(120),
        &[&b],
        || async {
            claims
                .list(&of_pool)
                .await
                .ok()
                .filter(|l| l.items.is_empty())
                .map(|_| ())
        },
    )
    .await;
    rig().kubectl_ok(&["delete", "kwoknodeclass", POOL, "--ignore-not-found"]);
}
