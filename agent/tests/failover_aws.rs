//! Leader failover with the EC2 provider: two `karpenter-agent run --provider aws` processes
//! against moto (behind the project's proxy) and the rig, each acting as `init`'s
//! ServiceAccount, with a stand-in kubelet registering each instance's Node. The leader is
//! SIGKILLed while its first CreateFleet calls are in flight (the proxy holds their answers, as
//! a slow EC2 would): moto has made instances the leader never wrote into its NodeClaims. The
//! standby takes over and finishes the scale-out, and once garbage collection has run every
//! instance in the account belongs to a NodeClaim and no claim has two: what the killed leader
//! left half-launched was adopted (CreateFleet's ClientToken) or collected.

#![cfg(not(target_os = "windows"))]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, dead_code)]

use crate::common::{AgentProcess, NAMESPACE, service_account_kubeconfig, wait_for};
use crate::{env, kubelet};
use k8s_openapi::api::coordination::v1::Lease;
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_core::cloud::ProviderId;
use karpenter_test_support::cloud_agent::{apply, claims_of, clean_up, running, workload};
use karpenter_test_support::rig::rig;
use kube::Api;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The EKS cluster in moto, and the NodePool (the stand-in kubelet serves claims named for it).
const CLUSTER: &str = "failover-aws";
const WORKLOAD_NAMESPACE: &str = "failover-aws";
const PODS: u32 = 40;

async fn holder(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), NAMESPACE)
        .get_opt(labels::LEADER_ELECTION_LEASE)
        .await
        .expect("read the Lease")
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

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
  template:
    metadata:
      labels: {{test-pool: {CLUSTER}}}
    spec:
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {CLUSTER}}}
"#
    )
}

/// The ids of the cluster's instances that are not terminated.
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

/// The instance of each launched claim.
fn claimed_instances(claims: &[NodeClaim]) -> Vec<String> {
    claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.as_deref()?.parse().ok())
        .filter_map(|id| match id {
            ProviderId::Aws { instance_id, .. } => Some(instance_id),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_ec2_the_standby_finishes_a_killed_leaders_scale_out_and_after_garbage_collection_every_instance_has_one_claim()
 {
    let _rig = crate::common::exclusive().await;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let env = env::Env::new(CLUSTER, true).await;
    let role = env.node_role().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let client = rig().client().await;
    // Installs init's ServiceAccount and RBAC (the Role for the Lease among them).
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
    let start = |name: &str| {
        AgentProcess::start_with(
            name,
            &kubeconfig,
            dir.path(),
            &[
                "run",
                "--provider",
                "aws",
                "--log-format",
                "json",
                "--leader-election-namespace",
                NAMESPACE,
            ],
            &aws_env,
        )
    };

    let a = start("aws-a");
    wait_for("aws-a to lead", Duration::from_secs(60), &[&a], || async {
        holder(&client).await.filter(|h| h.starts_with("aws-a_"))
    })
    .await;
    let b = start("aws-b");
    wait_for(
        "both agents to be ready",
        Duration::from_secs(60),
        &[&a, &b],
        || async {
            (a.probe("/readyz").await == Some(200) && b.probe("/readyz").await == Some(200))
                .then_some(())
        },
    )
    .await;
    let kubelet = tokio::spawn(kubelet::ec2_kubelet(
        client.clone(),
        CLUSTER.to_owned(),
        env.ec2.clone(),
    ));

    // Real CreateFleet calls take seconds; these take long enough to die in the middle of.
    env.proxy.slow("CreateFleet", Duration::from_secs(4));
    apply(&pool_and_class(&role));
    apply(&workload(WORKLOAD_NAMESPACE, CLUSTER, PODS));
    wait_for(
        "the leader's first instances",
        Duration::from_secs(120),
        &[&a, &b],
        || async { (!live_instances(&env).await.is_empty()).then_some(()) },
    )
    .await;
    let mut a = a;
    a.child.kill().expect("SIGKILL the leader");
    a.child.wait().expect("the leader exited");
    let killed = Instant::now();
    let claims_at_kill = claims_of(&client, CLUSTER).await;
    let instances_at_kill = live_instances(&env).await;
    let unclaimed_at_kill = instances_at_kill
        .iter()
        .filter(|i| !claimed_instances(&claims_at_kill).contains(i))
        .count();

    wait_for("aws-b to lead", Duration::from_secs(60), &[&b], || async {
        holder(&client).await.filter(|h| h.starts_with("aws-b_"))
    })
    .await;
    wait_for(
        "every pod Running",
        Duration::from_secs(300),
        &[&b],
        || async {
            (running(&client, WORKLOAD_NAMESPACE).await.len() == PODS as usize).then_some(())
        },
    )
    .await;
    let all_running = killed.elapsed();

    // Garbage collection (every 30 s, for instances older than 30 s) leaves only instances a
    // claim owns: none launched by the dead leader without a claim, none launched twice.
    let (claims, instances) = wait_for(
        "every instance to belong to a NodeClaim",
        Duration::from_secs(180),
        &[&b],
        || async {
            let claims = claims_of(&client, CLUSTER).await;
            let instances = live_instances(&env).await;
            let claimed: BTreeSet<String> = claimed_instances(&claims).into_iter().collect();
            (instances == claimed).then_some((claims, instances))
        },
    )
    .await;
    let claimed = claimed_instances(&claims);
    assert_eq!(
        claimed.len(),
        claims.len(),
        "every claim is launched: {claimed:?}"
    );
    assert_eq!(
        claimed.iter().collect::<BTreeSet<_>>().len(),
        claimed.len(),
        "no two claims share an instance"
    );
    let adopted = instances_at_kill.intersection(&instances).count();
    eprintln!(
        "killed the leader with {} NodeClaims and {} instances ({unclaimed_at_kill} not yet in a claim); all {PODS} pods Running {:.1}s later on {} claims; after garbage collection {} instances, each one claim's: {adopted} of the dead leader's adopted, {} collected",
        claims_at_kill.len(),
        instances_at_kill.len(),
        all_running.as_secs_f64(),
        claims.len(),
        instances.len(),
        instances_at_kill.len() - adopted,
    );

    clean_up(&client, WORKLOAD_NAMESPACE, CLUSTER, "ec2nodeclass").await;
    wait_for(
        "the pool's instances to be terminated",
        Duration::from_secs(60),
        &[&b],
        || async { live_instances(&env).await.is_empty().then_some(()) },
    )
    .await;
    kubelet.abort();
}
