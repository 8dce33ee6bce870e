//! Chaos with the EC2 provider, on moto, as it runs in a cluster: two replicas of
//! `karpenter-agent run --provider aws` with leader election, and a pool that consolidates. A
//! 200-pod scale-out arrives in 20 steps while the leader (whoever holds the Lease) is SIGKILLed
//! at a random moment of each step and started again as a standby; then the workload shrinks to
//! half and the leader is killed again each time a node carries the disruption taint (in the
//! middle of a consolidation), 5 times. CreateFleet answers only after 2 s (the proxy holds the
//! answer, as a real EC2 takes seconds), so many kills land between an instance's creation and
//! its claim's update; the proxy honours CreateFleet's client token as EC2 does (a repeated
//! token replays the first answer), so a launch repeated by the next leader finds the first
//! one's instance.
//!
//! At the end every pod runs and, once garbage collection and consolidation have settled,
//! every live instance belongs to exactly one NodeClaim, every claim has its instance, no claim
//! is without pods, no node keeps the `karpenter.sh/disrupted` taint, and no claim ever had a
//! second instance launched for it (counting terminated instances too). It prints the figures.
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
  # Consolidation on, so kills land in its commands too; an instance launched twice is seen in
  # EC2's history even after consolidation removed it.
  disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 10s}}
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

/// How many instances were ever launched for each NodeClaim, terminated ones included.
async fn launches_per_claim(env: &env::Env) -> BTreeMap<String, usize> {
    let mut out: BTreeMap<String, usize> = BTreeMap::new();
    for instance in env.instances().await {
        if let Some(claim) = instance
            .tags()
            .iter()
            .find(|t| t.key() == Some("karpenter.sh/nodeclaim"))
            .and_then(|t| t.value())
        {
            *out.entry(claim.to_owned()).or_default() += 1;
        }
    }
    out
}

/// The `POD_NAME` of the Lease's holder, if any (its identity is `<POD_NAME>_<suffix>`).
async fn leader(client: &kube::Client) -> Option<String> {
    let identity =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), NAMESPACE)
            .get_opt(karpenter_core::apis::labels::LEADER_ELECTION_LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)?;
    identity.split('_').next().map(str::to_owned)
}

/// Whether a node carries `karpenter.sh/disrupted`.
fn has_disruption_taint(node: &k8s_openapi::api::core::v1::Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter()
                .any(|t| t.key == karpenter_core::apis::labels::DISRUPTED_TAINT_KEY)
        })
}

/// Nodes carrying the disruption taint whose claim is not being deleted.
async fn stranded_taints(client: &kube::Client) -> Vec<String> {
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("list nodes")
        .items;
    let claims = claims_of(client, CLUSTER).await;
    nodes
        .into_iter()
        .filter(has_disruption_taint)
        .filter(|n| {
            !claims.iter().any(|c| {
                c.status.as_ref().and_then(|s| s.node_name.as_deref()) == n.metadata.name.as_deref()
                    && c.metadata.deletion_timestamp.is_some()
            })
        })
        .filter_map(|n| n.metadata.name)
        .collect()
}

/// The claims whose node runs none of the workload's pods.
async fn without_pods(client: &kube::Client, claims: &[NodeClaim]) -> Vec<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), WORKLOAD_NAMESPACE)
        .list(&Default::default())
        .await
        .expect("list pods")
        .items;
    let used: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    claims
        .iter()
        .filter(|c| {
            let node = c.status.as_ref().and_then(|s| s.node_name.clone());
            node.is_none_or(|n| !used.contains(&n))
        })
        .filter_map(|c| c.metadata.name.clone())
        .collect()
}

/// Whether any Karpenter node carries the disruption taint now.
async fn disrupting(client: &kube::Client) -> bool {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&Default::default())
        .await
        .map(|l| l.items.iter().any(has_disruption_taint))
        .unwrap_or(false)
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

/// Two replicas: the one holding the Lease and the standby, each known by its `POD_NAME`.
struct Replicas {
    agents: Vec<(String, AgentProcess)>,
    started: u32,
    start: Box<dyn Fn(&str) -> AgentProcess>,
}

impl Replicas {
    fn new(start: Box<dyn Fn(&str) -> AgentProcess>) -> Self {
        let mut replicas = Self {
            agents: Vec::new(),
            started: 0,
            start,
        };
        replicas.add();
        replicas.add();
        replicas
    }

    fn add(&mut self) {
        self.started += 1;
        let name = format!("chaos-{}", self.started);
        let agent = (self.start)(&name);
        self.agents.push((name, agent));
    }

    fn all(&self) -> Vec<&AgentProcess> {
        self.agents.iter().map(|(_, a)| a).collect()
    }

    /// SIGKILLs the replica holding the Lease and starts another in its place; whether one did.
    async fn kill_leader(&mut self, client: &kube::Client) -> bool {
        let Some(holder) = leader(client).await else {
            return false;
        };
        let Some(i) = self.agents.iter().position(|(n, _)| *n == holder) else {
            return false;
        };
        let (_, mut agent) = self.agents.remove(i);
        agent.child.kill().expect("SIGKILL the leader");
        agent.child.wait().expect("the leader exited");
        self.add();
        true
    }

    /// Waits until a live replica holds the Lease and is ready.
    async fn led(&self, client: &kube::Client) {
        wait_for(
            "a live replica to lead",
            Duration::from_secs(120),
            &self.all(),
            || async {
                let holder = leader(client).await?;
                let (_, agent) = self.agents.iter().find(|(n, _)| *n == holder)?;
                (agent.probe("/readyz").await == Some(200)).then_some(())
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long; run by hand (see the module doc)"]
async fn on_ec2_two_replicas_whose_leader_is_killed_during_a_scale_out_and_consolidation_leave_one_instance_per_claim_and_every_pod_running()
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
    let log_dir = dir.path().to_owned();
    let mut replicas = Replicas::new(Box::new(move |name: &str| {
        AgentProcess::start_with(
            name,
            &kubeconfig,
            &log_dir,
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
    }));
    let kubelet = tokio::spawn(kubelet::ec2_kubelet(
        client.clone(),
        CLUSTER.to_owned(),
        env.ec2.clone(),
    ));
    env.proxy.slow("CreateFleet", Duration::from_secs(2));
    apply(&pool_and_class(&role));

    let started = Instant::now();
    let step = PODS.div_ceil(KILLS);
    let mut in_flight_at_kills = 0;
    let mut kills = 0;
    for n in 1..=KILLS {
        // Killed while it leads, not while it starts: 0.3 to 4 s after the step's pods arrive.
        replicas.led(&client).await;
        apply(&workload(WORKLOAD_NAMESPACE, CLUSTER, (n * step).min(PODS)));
        tokio::time::sleep(kill_after(n)).await;
        if replicas.kill_leader(&client).await {
            kills += 1;
        }
        let claims = claims_of(&client, CLUSTER).await;
        in_flight_at_kills += claims.iter().filter(|c| instance_of(c).is_none()).count();
    }
    wait_for(
        "every pod Running",
        Duration::from_secs(600),
        &replicas.all(),
        || async {
            (running(&client, WORKLOAD_NAMESPACE).await.len() == PODS as usize).then_some(())
        },
    )
    .await;
    let all_running = started.elapsed();

    // Half the pods go: consolidation removes and replaces nodes, and the leader is killed
    // each time a node carries the disruption taint.
    let kept = PODS / 2;
    apply(&workload(WORKLOAD_NAMESPACE, CLUSTER, kept));
    let mut mid_disruption_kills = 0;
    let consolidating_until = Instant::now() + Duration::from_secs(300);
    while mid_disruption_kills < 5 && Instant::now() < consolidating_until {
        replicas.led(&client).await;
        if disrupting(&client).await && replicas.kill_leader(&client).await {
            mid_disruption_kills += 1;
            continue;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Garbage collection (every 30 s, for instances older than 30 s) leaves only instances a
    // claim owns; consolidation leaves no claim without pods; nothing stays tainted.
    let (claims, instances) = wait_for(
        "the fleet to settle",
        Duration::from_secs(600),
        &replicas.all(),
        || async {
            if running(&client, WORKLOAD_NAMESPACE).await.len() != kept as usize
                || !stranded_taints(&client).await.is_empty()
            {
                return None;
            }
            let claims = claims_of(&client, CLUSTER).await;
            let instances = live_instances(&env).await;
            let claimed: BTreeSet<String> = claims.iter().filter_map(instance_of).collect();
            (instances == claimed && without_pods(&client, &claims).await.is_empty())
                .then_some((claims, instances))
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
    let launches = launches_per_claim(&env).await;
    let twice: Vec<(&String, &usize)> = launches.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "claims with a second instance launched for them: {twice:?}"
    );
    let empty = without_pods(&client, &claims).await;
    // CreateFleet calls that repeated a token already sent: launches a new leader (or a
    // retry) repeated, which EC2 answers with the first call's instance.
    let tokens = env.proxy.fleet_tokens();
    let replayed = tokens.len() - tokens.iter().collect::<BTreeSet<_>>().len();
    eprintln!(
        "chaos on EC2: {PODS} pods in {KILLS} steps with two replicas, the leader SIGKILLed {kills} times during the scale-out ({in_flight_at_kills} claims without an instance yet, summed over the kills) and {mid_disruption_kills} times mid-consolidation after scaling to {kept}; all pods Running after {:.1}s; settled after {:.1}s: {} claims, {} live instances, {} instances ever launched for {} claims (none twice), {replayed} CreateFleet calls repeating a client token, {} claims without pods, no stranded taint",
        all_running.as_secs_f64(),
        settled.as_secs_f64(),
        claims.len(),
        instances.len(),
        launches.values().sum::<usize>(),
        launches.len(),
        empty.len(),
    );
    assert!(empty.is_empty(), "claims without pods: {empty:?}");

    clean_up(&client, WORKLOAD_NAMESPACE, CLUSTER, "ec2nodeclass").await;
    wait_for(
        "the pool's instances to be terminated",
        Duration::from_secs(120),
        &replicas.all(),
        || async { live_instances(&env).await.is_empty().then_some(()) },
    )
    .await;
    kubelet.abort();
}
