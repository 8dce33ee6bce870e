//! Chaos with the EC2 provider (issue 18's first check, on moto): a 200-pod scale-out arrives
//! in 20 steps while `karpenter-agent run --provider aws` is SIGKILLed at a random moment of
//! each step and started again at once. CreateFleet answers only after 2 s (the proxy holds the
//! answer, as a real EC2 takes seconds), so many kills land between an instance's creation and
//! its claim's update. At the end every pod runs and, once garbage collection has run, every
//! live instance belongs to exactly one NodeClaim, every claim has its instance, and no claim
//! is without pods. It prints the figures.
//!
//! Not part of `tests/run` (it takes minutes); run it with:
//!
//! ```text
//! cargo test -p karpenter-agent --test agent chaos_aws -- --ignored --nocapture
//! ```
//!
//! The kwok counterpart, with the API server stopped for a minute as well, is
//! `tests/kwok/chaos.sh`.

#![cfg(not(target_os = "windows"))]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, dead_code)]

use crate::common::{AgentProcess, NAMESPACE, service_account_kubeconfig, wait_for};
use crate::{env, kubelet};
use k8s_openapi::api::core::v1::Pod;
use karpenter_core::apis::NodeClaim;
use karpenter_core::cloud::ProviderId;
use karpenter_test_support::cloud_agent::{apply, claims_of, clean_up, running, workload};
use karpenter_test_support::rig::rig;
use kube::Api;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const CLUSTER: &str = "chaos-aws";
const WORKLOAD_NAMESPACE: &str = "chaos-aws";
const PODS: u32 = 200;
const KILLS: u32 = 20;

fn pool_and_class(role: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: {CLUSTER}}}
spec:
  role: {role}
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: {CLUSTER}}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: {CLUSTER}}}}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {CLUSTER}}}
spec:
  # Never consolidated, so an instance launched twice would stay to be seen.
  disruption: {{consolidationPolicy: WhenEmpty, consolidateAfter: Never}}
  limits: {{cpu: "1000"}}
  template:
    metadata:
      labels: {{test-pool: {CLUSTER}}}
    spec:
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge, m5.2xlarge]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {CLUSTER}}}
"#
    )
}

async fn live_instances(env: &env::Env) -> BTreeSet<String> {
    env.instances()
        .await
        .into_iter()
        .filter(|i| {
            !matches!(
                i.state().and_then(|s| s.name()).map(|n| n.as_str()),
                Some("terminated" | "shutting-down")
            )
        })
        .filter_map(|i| i.instance_id().map(str::to_owned))
        .collect()
}

fn instance_of(claim: &NodeClaim) -> Option<String> {
    match claim
        .status
        .as_ref()?
        .provider_id
        .as_deref()?
        .parse()
        .ok()?
    {
        ProviderId::Aws { instance_id, .. } => Some(instance_id),
        _ => None,
    }
}

/// A pseudo-random delay between 0.3 and 4 s, different per step (no RNG crate needed here).
fn kill_after(step: u32) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(step * 7919);
    Duration::from_millis(300 + u64::from((nanos ^ step.wrapping_mul(2_654_435_761)) % 3_700))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long; run by hand (see the module doc)"]
async fn on_ec2_an_agent_killed_twenty_times_during_a_scale_out_leaves_one_instance_per_claim_and_every_pod_running()
 {
    let _rig = crate::common::exclusive().await;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let env = env::Env::new(CLUSTER, true).await;
    let role = env.node_role().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let client = rig().client().await;
    let _ = rig().agent_client().await;
    let kubeconfig = service_account_kubeconfig(dir.path(), NAMESPACE, "karpenter");
    let aws_env: Vec<(String, String)> = [
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", env::REGION),
        ("AWS_ENDPOINT_URL", env.proxy.url.as_str()),
        ("CLUSTER_NAME", CLUSTER),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .to_vec();
    // Without leader election a restarted agent acts at once instead of waiting out the dead
    // one's Lease, so more of the kills land in the middle of launches.
    let start = |n: u32| {
        AgentProcess::start_with(
            &format!("chaos-{n}"),
            &kubeconfig,
            dir.path(),
            &[
                "run",
                "--provider",
                "aws",
                "--log-format",
                "json",
                "--leader-elect=false",
            ],
            &aws_env,
        )
    };
    let kubelet = tokio::spawn(kubelet::ec2_kubelet(
        client.clone(),
        CLUSTER.to_owned(),
        env.ec2.clone(),
    ));
    env.proxy.slow("CreateFleet", Duration::from_secs(2));
    apply(&pool_and_class(&role));

    let started = Instant::now();
    let mut agent = start(0);
    let step = PODS.div_ceil(KILLS);
    let mut in_flight_at_kills = 0;
    for n in 1..=KILLS {
        // Killed while it works, not while it starts: the kill comes once it is ready (its
        // stores listed), 0.3 to 4 s after the step's pods arrive.
        wait_for(
            "the agent to be ready",
            Duration::from_secs(120),
            &[&agent],
            || async { (agent.probe("/readyz").await == Some(200)).then_some(()) },
        )
        .await;
        apply(&workload(WORKLOAD_NAMESPACE, CLUSTER, (n * step).min(PODS)));
        tokio::time::sleep(kill_after(n)).await;
        agent.child.kill().expect("SIGKILL the agent");
        agent.child.wait().expect("the agent exited");
        let claims = claims_of(&client, CLUSTER).await;
        in_flight_at_kills += claims.iter().filter(|c| instance_of(c).is_none()).count();
        agent = start(n);
    }
    wait_for(
        "every pod Running",
        Duration::from_secs(600),
        &[&agent],
        || async {
            (running(&client, WORKLOAD_NAMESPACE).await.len() == PODS as usize).then_some(())
        },
    )
    .await;
    let all_running = started.elapsed();

    // Garbage collection (every 30 s, for instances older than 30 s) leaves only instances a
    // claim owns.
    let (claims, instances) = wait_for(
        "every instance to belong to a NodeClaim",
        Duration::from_secs(300),
        &[&agent],
        || async {
            let claims = claims_of(&client, CLUSTER).await;
            let instances = live_instances(&env).await;
            let claimed: BTreeSet<String> = claims.iter().filter_map(instance_of).collect();
            (instances == claimed).then_some((claims, instances))
        },
    )
    .await;
    let settled = started.elapsed();
    let claimed: Vec<String> = claims.iter().filter_map(instance_of).collect();
    assert_eq!(claimed.len(), claims.len(), "every claim has its instance");
    assert_eq!(
        claimed.iter().collect::<BTreeSet<_>>().len(),
        claimed.len(),
        "no two claims share an instance"
    );
    let pods = Api::<Pod>::namespaced(client.clone(), WORKLOAD_NAMESPACE)
        .list(&Default::default())
        .await
        .expect("list pods")
        .items;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            *per_node.entry(node).or_default() += 1;
        }
    }
    let empty: Vec<String> = claims
        .iter()
        .filter(|c| {
            let node = c.status.as_ref().and_then(|s| s.node_name.clone());
            node.is_none_or(|n| !per_node.contains_key(&n))
        })
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    eprintln!(
        "chaos on EC2: {PODS} pods in {KILLS} steps, the agent SIGKILLed {KILLS} times ({in_flight_at_kills} claims without an instance yet, summed over the kills); all pods Running after {:.1}s; every instance one claim's after {:.1}s: {} claims, {} instances, {} claims without pods",
        all_running.as_secs_f64(),
        settled.as_secs_f64(),
        claims.len(),
        instances.len(),
        empty.len(),
    );
    assert!(empty.is_empty(), "claims without pods: {empty:?}");

    clean_up(&client, WORKLOAD_NAMESPACE, CLUSTER, "ec2nodeclass").await;
    wait_for(
        "the pool's instances to be terminated",
        Duration::from_secs(120),
        &[&agent],
        || async { live_instances(&env).await.is_empty().then_some(()) },
    )
    .await;
    kubelet.abort();
}
