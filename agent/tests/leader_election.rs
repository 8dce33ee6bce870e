//! Two `karpenter-agent` processes on one cluster, as the chart's two replicas: the rig with the
//! kwok provider, each agent acting as the ServiceAccount `init` installs. The leader is killed
//! with SIGKILL in the middle of a 200-pod scale-out; the standby takes the Lease once the
//! leader's lease has run out, finishes the scale-out without launching twice, and releases
//! the Lease when it is stopped with SIGTERM. And a leader frozen with SIGSTOP past its lease,
//! then resumed once the standby leads, writes nothing after its renew deadline (the rig's
//! audit log tells the agents' writes apart) and exits.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_test_support::rig::rig;
use kube::api::{Api, ListParams};
use std::process::Command;
use std::time::Duration;

use crate::common::{
    AgentProcess, NAMESPACE, marked_service_account_kubeconfig, service_account_kubeconfig,
    wait_for,
};

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
    workload_of(POOL, PODS)
}

/// A kwok pool that never consolidates, and a Deployment of `pods` small pods on it.
fn workload_of(pool: &str, pods: usize) -> String {
    format!(
        r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {{name: {pool}}}
spec: {{}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {pool}}}
spec:
  # Never consolidated, so a node launched twice would stay to be seen.
  disruption: {{consolidationPolicy: WhenEmpty, consolidateAfter: Never}}
  template:
    metadata:
      labels: {{test-pool: {pool}}}
    spec:
      requirements:
        - {{key: kubernetes.io/os, operator: In, values: [linux]}}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: {pool}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {pool}, namespace: default}}
spec:
  replicas: {pods}
  selector: {{matchLabels: {{app: {pool}}}}}
  template:
    metadata: {{labels: {{app: {pool}}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{test-pool: {pool}}}
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
    running_pods_of(pods, POOL).await
}

async fn running_pods_of(pods: &Api<Pod>, app: &str) -> usize {
    let of_workload = ListParams::default().labels(&format!("app={app}"));
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

    // Everything both replicas logged reads as upstream's JSON lines, the objects keyed by kind.
    let lines: Vec<serde_json::Value> = [&a, &b].iter().flat_map(|p| p.json_log()).collect();
    assert!(
        lines.iter().any(|l| l["controller"] == "provisioner"
            && l["message"] == "created nodeclaim"
            && l["NodeClaim"]["name"].is_string()
            && l["NodePool"]["name"] == POOL),
        "a provisioning line names its NodeClaim and NodePool as upstream does"
    );
    assert!(
        lines.iter().any(|l| l["controller"] == "nodeclaim.lifecycle" && l["NodeClaim"]["name"].is_string()),
        "the lifecycle's lines name their NodeClaim"
    );

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

/// Sends `signal` (`STOP`, `CONT`, `TERM`) to the agent.
fn signal(agent: &AgentProcess, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &agent.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal}");
}

/// Client-go's renew deadline: the leader writes nothing once this long has passed since its
/// last successful renewal began.
const RENEW_DEADLINE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_past_its_lease_writes_nothing_once_resumed_and_nothing_is_launched_twice()
{
    const FROZEN: &str = "frozen";
    const FROZEN_PODS: usize = 120;
    let _rig = crate::common::exclusive().await;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let client = rig().client().await;
    let _ = rig().agent_client().await;
    let as_a = marked_service_account_kubeconfig(
        dir.path(),
        NAMESPACE,
        SERVICE_ACCOUNT,
        Some("test:agent-a"),
    );
    let as_b = marked_service_account_kubeconfig(
        dir.path(),
        NAMESPACE,
        SERVICE_ACCOUNT,
        Some("test:agent-b"),
    );
    let a = AgentProcess::start("frozen-a", &as_a, dir.path());
    wait_for(
        "agent-a to lead and be ready",
        Duration::from_secs(60),
        &[&a],
        || async {
            let leads = holder(&client)
                .await
                .is_some_and(|h| h.starts_with("frozen-a_"));
            (leads && a.probe("/readyz").await == Some(200)).then_some(())
        },
    )
    .await;
    let b = AgentProcess::start("frozen-b", &as_b, dir.path());
    wait_for(
        "the standby to be ready",
        Duration::from_secs(60),
        &[&a, &b],
        || async { (b.probe("/readyz").await == Some(200)).then_some(()) },
    )
    .await;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let of_pool = ListParams::default().labels(&format!("{}={FROZEN}", labels::NODE_POOL));

    // Frozen as a paused VM or a stopped process is. Frozen while idle: a request the process
    // had already handed to its connection when it froze is delivered when it runs again,
    // which no client-side fence can recall (see `client::fence`).
    signal(&a, "STOP");
    // A renewal already sent may still land; read the Lease once nothing more can.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let last = lease(&client).await.expect("the Lease");
    assert!(
        last.holder_identity
            .as_deref()
            .is_some_and(|h| h.starts_with("frozen-a_"))
    );
    // The work arrives while the leader is frozen: the standby takes it over with the Lease,
    // and the old leader's watches bring it the same pods and claims when it runs again.
    apply(&workload_of(FROZEN, FROZEN_PODS));
    let renewed = last.renew_time.clone().expect("renewed").0;
    wait_for(
        "agent-b to take the Lease",
        Duration::from_secs(90),
        &[&b],
        || async { holder(&client).await.filter(|h| h.starts_with("frozen-b_")) },
    )
    .await;
    // The new leader acts for a while; then the old one runs again, every timer of it due.
    tokio::time::sleep(Duration::from_secs(5)).await;
    signal(&a, "CONT");
    let mut a = a;
    let exit = wait_for(
        "the old leader to give up and exit",
        Duration::from_secs(60),
        &[],
        || {
            let exited = a.child.try_wait().expect("wait");
            async move { exited }
        },
    )
    .await;
    assert!(
        !exit.success(),
        "the old leader exits with an error when its Lease is lost"
    );

    let pods = pods_api(&client);
    wait_for(
        "every pod Running",
        Duration::from_secs(300),
        &[&b],
        || async { (running_pods_of(&pods, FROZEN).await == FROZEN_PODS).then_some(()) },
    )
    .await;

    // What the old leader wrote, from the API server's audit log.
    let fenced_from = renewed
        .checked_add(k8s_openapi::jiff::SignedDuration::try_from(RENEW_DEADLINE).expect("short"))
        .expect("a time");
    let writes = rig().audited_writes();
    let by_a: Vec<_> = writes
        .iter()
        .filter(|w| w.groups.iter().any(|g| g == "test:agent-a"))
        .collect();
    let late: Vec<_> = by_a.iter().filter(|w| w.received > fenced_from).collect();
    let by_b = writes
        .iter()
        .filter(|w| w.groups.iter().any(|g| g == "test:agent-b"))
        .count();
    eprintln!(
        "agent-a wrote {} times in all; agent-b {} times after taking over; agent-a after its renew deadline: {}",
        by_a.len(),
        by_b,
        late.len()
    );
    assert!(
        by_b > 0,
        "the audit log records the agents' writes, told apart"
    );
    assert!(
        late.is_empty(),
        "the old leader wrote after its renew deadline: {late:#?}"
    );

    // Nothing launched twice: every claim has a Node, and every Node runs some of the pods.
    let nodes: Api<Node> = Api::all(client.clone());
    let of_workload = ListParams::default().labels(&format!("app={FROZEN}"));
    let used: std::collections::BTreeSet<String> = pods
        .list(&of_workload)
        .await
        .expect("pods")
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    for claim in claims.list(&of_pool).await.expect("claims").items {
        let node = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| panic!("claim {:?} has no node", claim.metadata.name));
        assert!(nodes.get_opt(&node).await.expect("node").is_some());
        assert!(
            used.contains(&node),
            "node {node} of claim {:?} runs none of the pods: launched twice",
            claim.metadata.name
        );
    }

    // Clean up through the new leader, then stop it.
    rig().kubectl_ok(&[
        "-n",
        "default",
        "delete",
        "deployment",
        FROZEN,
        "--wait=true",
    ]);
    rig().kubectl_ok(&["delete", "nodepool", FROZEN, "--wait=false"]);
    wait_for(
        "the pool's claims to go",
        Duration::from_secs(180),
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
    rig().kubectl_ok(&["delete", "kwoknodeclass", FROZEN, "--ignore-not-found"]);
    signal(&b, "TERM");
}
