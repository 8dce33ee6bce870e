//! Two `karpenter-agent` processes on one cluster, as the chart's two replicas: the rig with the
//! kwok provider, each agent acting as the ServiceAccount `init` installs. The leader is killed
//! with SIGKILL in the middle of a 200-pod scale-out; the standby takes the Lease once the
//! leader's lease has run out, finishes the scale-out without launching twice, and releases
//! the Lease when it is stopped with SIGTERM.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_test_support::rig::rig;
use kube::api::{Api, ListParams};
use std::process::Command;
use std::time::Duration;

use crate::common::{AgentProcess, NAMESPACE, service_account_kubeconfig, wait_for};

/// `init`'s ServiceAccount, whom the agents act as.
const SERVICE_ACCOUNT: &str = "karpenter";
const POOL: &str = "failover";
const PODS: usize = 200;

async fn lease(client: &kube::Client) -> Option<LeaseSpec> {
    Api::<Lease>::namespaced(client.clone(), NAMESPACE)
        .get_opt(labels::LEADER_ELECTION_LEASE)
        .await
        .expect("read the Lease")
        .and_then(|l| l.spec)
}

async fn holder(client: &kube::Client) -> Option<String> {
    lease(client).await.and_then(|s| s.holder_identity)
}

fn apply(yaml: &str) {
    let out = rig().kubectl_with_input(&["apply", "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn workload() -> String {
    format!(
        r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {{name: {POOL}}}
spec: {{}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {POOL}}}
spec:
  # Never consolidated, so a node launched twice would stay to be seen.
  disruption: {{consolidationPolicy: WhenEmpty, consolidateAfter: Never}}
  template:
    metadata:
      labels: {{test-pool: {POOL}}}
    spec:
      requirements:
        - {{key: kubernetes.io/os, operator: In, values: [linux]}}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: {POOL}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {POOL}, namespace: default}}
spec:
  replicas: {PODS}
  selector: {{matchLabels: {{app: {POOL}}}}}
  template:
    metadata: {{labels: {{app: {POOL}}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{test-pool: {POOL}}}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: 250m, memory: 64Mi}}}}
"#
    )
}

fn pods_api(client: &kube::Client) -> Api<Pod> {
    Api::namespaced(client.clone(), "default")
}

async fn running_pods(pods: &Api<Pod>) -> usize {
    let of_workload = ListParams::default().labels(&format!("app={POOL}"));
    pods.list(&of_workload)
        .await
        .map(|list| {
            list.items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count()
        })
        .unwrap_or_default()
}

fn seconds_between(
    earlier: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime,
    later: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime,
) -> f64 {
    (later.0 - earlier.0)
        .total(k8s_openapi::jiff::Unit::Millisecond)
        .expect("a span in milliseconds")
        / 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_a_killed_leaders_scale_out_without_launching_twice() {
    let _rig = crate::common::exclusive().await;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let client = rig().client().await;
    // Installs init's ServiceAccount and RBAC (the Role for the Lease among them).
    let _ = rig().agent_client().await;
    let kubeconfig = service_account_kubeconfig(dir.path(), NAMESPACE, SERVICE_ACCOUNT);

    let a = AgentProcess::start("agent-a", &kubeconfig, dir.path());
    let leader = wait_for(
        "agent-a to lead",
        Duration::from_secs(60),
        &[&a],
        || async { holder(&client).await.filter(|h| h.starts_with("agent-a_")) },
    )
    .await;
    wait_for(
        "agent-a to be ready",
        Duration::from_secs(60),
        &[&a],
        || async { (a.probe("/readyz").await == Some(200)).then_some(()) },
    )
    .await;
    let b = AgentProcess::start("agent-b", &kubeconfig, dir.path());
    wait_for(
        "the standby to be ready",
        Duration::from_secs(60),
        &[&a, &b],
        || async { (b.probe("/readyz").await == Some(200)).then_some(()) },
    )
    .await;
    assert_eq!(holder(&client).await, Some(leader.clone()), "a still leads");
    assert_eq!(a.probe("/healthz").await, Some(200));
    assert_eq!(b.probe("/healthz").await, Some(200));

    apply(&workload());
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let of_pool = ListParams::default().labels(&format!("{}={POOL}", labels::NODE_POOL));
    wait_for(
        "the leader's first NodeClaims",
        Duration::from_secs(120),
        &[&a, &b],
        || async {
            let n = claims.list(&of_pool).await.ok()?.items.len();
            (n > 0).then_some(())
        },
    )
    .await;

    let mut a = a;
    let claims_at_kill = claims.list(&of_pool).await.expect("claims").items.len();
    let running_at_kill = running_pods(&pods_api(&client)).await;
    a.child.kill().expect("SIGKILL the leader");
    a.child.wait().expect("the leader exited");
    let last = lease(&client).await.expect("the Lease");
    assert_eq!(last.holder_identity.as_deref(), Some(leader.as_str()));

    let taken = wait_for(
        "agent-b to take the Lease",
        Duration::from_secs(60),
        &[&b],
        || async {
            lease(&client).await.filter(|s| {
                s.holder_identity
                    .as_deref()
                    .is_some_and(|h| h.starts_with("agent-b_"))
            })
        },
    )
    .await;
    let waited = seconds_between(
        last.renew_time.as_ref().expect("renewed"),
        taken.acquire_time.as_ref().expect("acquired"),
    );
    // Never before the 15 s lease ran out; and within it plus two of the standby's retries
    // (2 s, with up to 1.2 periods of jitter each).
    eprintln!(
        "killed the leader with {claims_at_kill} NodeClaims and {running_at_kill}/{PODS} pods Running; the standby took the Lease {waited:.1}s after the leader's last renewal"
    );
    assert!(
        (15.0..=15.0 + 2.0 * 4.4 + 1.0).contains(&waited),
        "agent-b took the Lease {waited:.1}s after agent-a's last renewal"
    );

    let pods = pods_api(&client);
    let of_workload = ListParams::default().labels(&format!("app={POOL}"));
    wait_for(
        "every pod Running",
        Duration::from_secs(300),
        &[&b],
        || async { (running_pods(&pods).await == PODS).then_some(()) },
    )
    .await;

    // No claim was launched twice: every claim has a Node, and every Node runs some of the pods.
    let nodes: Api<Node> = Api::all(client.clone());
    let claims_now = claims.list(&of_pool).await.expect("claims").items;
    let workload_pods = pods.list(&of_workload).await.expect("pods").items;
    let used: std::collections::BTreeSet<&str> = workload_pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.as_deref())
        .collect();
    eprintln!("all {PODS} pods Running on {} NodeClaims", claims_now.len());
    for claim in &claims_now {
        let node = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| panic!("claim {:?} has no node", claim.metadata.name));
        assert!(nodes.get_opt(&node).await.expect("node").is_some());
        assert!(
            used.contains(node.as_str()),
            "node {node} of claim {:?} runs none of the pods: launched twice",
            claim.metadata.name
        );
    }

    // SIGTERM: the standby-turned-leader stops and gives the Lease up for the next one.
    let status = Command::new("kill")
        .args(["-TERM", &b.child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let mut b = b;
    let exit = wait_for("agent-b to exit", Duration::from_secs(30), &[], || {
        let exited = b.child.try_wait().expect("wait");
        async move { exited }
    })
    .await;
    assert!(
        exit.success(),
        "agent-b exited with {exit}:\n{}",
        b.log_tail()
    );
    assert_eq!(holder(&client).await, None, "the Lease was released");
}
