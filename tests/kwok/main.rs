//! The agent's provisioning loop against a real control plane, with the kwok provider: pending
//! pods become NodeClaims, NodeClaims become Nodes that kwok keeps Ready, pods run.
//!
//! The agent runs in-process (`karpenter_core::controllers::run`), one test at a time: two
//! agents on one cluster would fight over the same pods.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

mod device_plugin;
mod disruption;
mod drift;
mod half_done;
mod health;
mod leader_election;
mod namespaces;
mod node_labels;
mod readiness;
mod refused_claims;
mod repair;
mod static_capacity;
mod termination;
mod unreadable_claims;
mod volumes;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_core::cloud::kwok::KwokProvider;
use karpenter_core::controllers::{self, Settings};
use karpenter_core::metrics::Metrics;
use karpenter_test_support::rig::rig;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One agent on the rig at a time (an async lock: tests run on separate runtimes).
async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// An agent running in this process until dropped.
struct Agent {
    task: tokio::task::JoinHandle<()>,
    metrics: Arc<Metrics>,
}

impl Agent {
    async fn start() -> Self {
        Self::start_with(Settings {
            garbage_collection_interval: Duration::from_secs(2),
            garbage_collection_grace: Duration::from_secs(2),
            ..Settings::default()
        })
        .await
    }

    async fn start_with(settings: Settings) -> Self {
        // Agent logs go to the file named by KARPENTER_TEST_LOG, if set (RUST_LOG=debug for more).
        karpenter_test_support::logging::init();
        let client = rig().agent_client().await;
        let provider = Arc::new(KwokProvider::new(client.clone()));
        let metrics = Arc::new(Metrics::new());
        let task = tokio::spawn({
            let metrics = metrics.clone();
            async move {
                let _ = controllers::run(client, provider, settings, metrics).await;
            }
        });
        Self { task, metrics }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn apply(yaml: &str) {
    let out = rig().kubectl_with_input(&["apply", "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A KWOKNodeClass and a NodePool named `name` whose nodes carry `test-pool: {name}` and run
/// linux. `spec` is added under the NodePool's spec (indented two spaces), `template_spec` under
/// its template's spec after the linux requirement (six spaces for a field, eight for another
/// requirement). The one pool every agent test builds on.
fn kwok_pool(name: &str, spec: &str, template_spec: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {{name: {name}}}
spec: {{}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
{spec}
  template:
    metadata:
      labels: {{test-pool: {name}}}
    spec:
      requirements:
        - {{key: kubernetes.io/os, operator: In, values: [linux]}}
{template_spec}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: {name}}}
"#
    )
}

/// Sets a label in `pool`'s template (`kubectl patch`), which drifts its nodes.
fn set_template_label(pool: &str, key: &str, value: &str) {
    let patch = serde_json::json!({"spec": {"template": {"metadata": {"labels": {key: value}}}}});
    let out = rig()
        .kubectl()
        .args([
            "patch",
            "nodepool",
            pool,
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ])
        .output()
        .expect("kubectl patch");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`kwok_pool`] with optional limits (a YAML flow map).
fn node_pool(name: &str, limits: &str) -> String {
    kwok_pool(name, &format!("  limits: {limits}"), "")
}

/// A Deployment of `replicas` pods requesting `cpu` each, pinned to the pool `pool`.
fn deployment(namespace: &str, name: &str, pool: &str, replicas: u32, cpu: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{test-pool: {pool}}}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: "{cpu}"}}}}
"#
    )
}

async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The message of the agent's `FailedScheduling` Event (upstream's wording: "Failed to
/// schedule pod, …", unlike the kube-scheduler's) in `namespace` (on `pod`, if named) that
/// says `why`, once there is one (an earlier one may give an earlier reason).
async fn failed_provisioning(
    client: &kube::Client,
    namespace: &str,
    pod: Option<&str>,
    why: &str,
) -> String {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    wait_for(
        &format!("the agent's FailedScheduling event saying {why}"),
        Duration::from_secs(60),
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
                .filter(|e| pod.is_none() || e.involved_object.name.as_deref() == pod)
                .filter(|e| {
                    e.message
                        .as_deref()
                        .is_some_and(|m| m.starts_with("Failed to schedule pod, "))
                })
                .find_map(|e| e.message.filter(|m| m.contains(why)))
        },
    )
    .await
}

async fn pool_claims(client: &kube::Client, pool: &str) -> Vec<NodeClaim> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    api.list(&ListParams::default().labels(&format!("{}={pool}", labels::NODE_POOL)))
        .await
        .expect("list claims")
        .items
}

async fn running_pods(client: &kube::Client, namespace: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = api
        .list(&ListParams::default())
        .await
        .expect("list pods")
        .items;
    pods.into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect()
}

/// Deletes the workload (and waits until its pods are gone, so the next test's agent does not
/// see them), then the pool's claims through the agent, which must still run, then the pool.
async fn clean_up(client: &kube::Client, namespace: &str, pool: &str) {
    let _ = rig()
        .kubectl()
        .args([
            "delete",
            "namespace",
            namespace,
            "--wait=true",
            "--timeout=180s",
        ])
        .output();
    let _ = rig()
        .kubectl()
        .args([
            "delete",
            "nodeclaims",
            "-l",
            &format!("{}={pool}", labels::NODE_POOL),
            "--wait=false",
        ])
        .output();
    wait_for(
        "the pool's claims to be gone",
        Duration::from_secs(120),
        || async { pool_claims(client, pool).await.is_empty().then_some(()) },
    )
    .await;
    let _ = rig()
        .kubectl()
        .args(["delete", "nodepool", pool, "--wait=true", "--timeout=60s"])
        .output();
    let _ = rig()
        .kubectl()
        .args([
            "delete",
            "kwoknodeclass",
            pool,
            "--wait=true",
            "--timeout=60s",
        ])
        .output();
}

/// The pods the claims were created for (`namespace/name`, as each claim's annotation lists
/// them): a pod listed twice was provided for twice.
fn provided_for(claims: &[NodeClaim]) -> Vec<String> {
    claims
        .iter()
        .filter_map(|c| c.annotations().get(labels::PROVISIONED_FOR))
        .flat_map(|pods| serde_json::from_str::<Vec<String>>(pods).unwrap_or_default())
        .collect()
}

fn hourly_price(node: &Node) -> f64 {
    node.labels()
        .get(labels::INSTANCE_PRICE)
        .and_then(|p| p.parse().ok())
        .unwrap_or(f64::INFINITY)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_one_cpu_pods_get_nodes_and_run_on_the_cheapest_fleet() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    apply(&node_pool("inflate-pool", "{}"));
    apply(&deployment(
        "inflate-test",
        "inflate",
        "inflate-pool",
        15,
        "1",
    ));
    // All 15 pending before the agent starts, so they are planned together whatever the
    // machine's load does to the timing of their creation.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "inflate-test");
    wait_for("15 unschedulable pods", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        let pending = list
            .items
            .iter()
            .filter(|p| {
                karpenter_core::controllers::provisioning::is_provisionable(&(*p).clone().into())
            })
            .count();
        (pending == 15).then_some(())
    })
    .await;
    let _agent = Agent::start().await;

    wait_for("15 running pods", Duration::from_secs(90), || async {
        (running_pods(&client, "inflate-test").await.len() == 15).then_some(())
    })
    .await;
    // Initialized can trail the pods by a few seconds: it also waits for the node lifecycle
    // controller to take the node's not-ready taint off (pods tolerate its NoExecute form).
    let claims = wait_for(
        "every claim initialized",
        Duration::from_secs(60),
        || async {
            let claims = pool_claims(&client, "inflate-pool").await;
            claims
                .iter()
                .all(|c| c.is_true("Registered") && c.is_true("Initialized"))
                .then_some(claims)
        },
    )
    .await;
    assert!(!claims.is_empty());
    let nodes: Api<Node> = Api::all(client.clone());
    let mut total = 0.0;
    for claim in &claims {
        let node_name = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("node name");
        total += hourly_price(&nodes.get(&node_name).await.expect("node"));
    }
    // No more expensive than the cheapest fleet of one instance type that holds the 15 pods.
    let cheapest_fleet = karpenter_core::cloud::kwok::catalogue::catalogue()
        .iter()
        .filter_map(|it| {
            let pods_per_node = it.allocatable().get(karpenter_core::resources::CPU) / 1000;
            let nodes = 15_u64.div_ceil(pods_per_node.min(it.allocatable().get("pods")).max(1));
            let price = it
                .offerings
                .iter()
                .map(|o| o.price)
                .fold(f64::INFINITY, f64::min);
            (pods_per_node > 0).then_some(nodes as f64 * price)
        })
        .fold(f64::INFINITY, f64::min);
    assert!(
        total <= cheapest_fleet + 1e-9,
        "fleet costs ${total:.4}/h; one instance type could do it for ${cheapest_fleet:.4}/h"
    );
    // Pods were bound to every claim's node: each records when (upstream's lastPodEventTime),
    // and says it launched.
    wait_for(
        "lastPodEventTime on every claim",
        Duration::from_secs(60),
        || async {
            let claims = pool_claims(&client, "inflate-pool").await;
            claims
                .iter()
                .all(|c| {
                    c.status
                        .as_ref()
                        .is_some_and(|s| s.last_pod_event_time.is_some())
                })
                .then_some(())
        },
    )
    .await;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let launched = events.list(&ListParams::default()).await.expect("events");
    for claim in &claims {
        assert!(
            launched
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("Launched")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                        == claim.metadata.name.as_deref()),
            "no Launched event for {}",
            claim.name_any()
        );
    }
    // Every field of a claim is the agent's, and its managedFields say so: the API server names
    // a write that gives no field manager after the client's User-Agent ("unknown" without one).
    for claim in pool_claims(&client, "inflate-pool").await {
        let managers: Vec<&str> = claim
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.as_deref())
            .collect();
        assert!(
            !managers.is_empty() && managers.iter().all(|m| *m == "karpenter-agent"),
            "{} is managed by {managers:?}",
            claim.name_any()
        );
    }
    clean_up(&client, "inflate-test", "inflate-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_no_pool_can_fit_stays_pending_with_a_reason_and_others_still_run() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&node_pool("fit-pool", "{}"));
    apply(&deployment("fit-test", "huge", "fit-pool", 1, "500"));
    let events: Api<Event> = Api::namespaced(client.clone(), "fit-test");
    let message = wait_for(
        "the agent's FailedScheduling event on the huge pod",
        Duration::from_secs(60),
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
                .find_map(|e| {
                    e.message
                        .filter(|m| m.starts_with("Failed to schedule pod, "))
                })
        },
    )
    .await;
    // Where a user looks first: `kubectl events --for pod/NAME` lists it beside the
    // kube-scheduler's, under the same reason.
    let pod_name = rig().kubectl_ok(&[
        "-n",
        "fit-test",
        "get",
        "pods",
        "-l",
        "app=huge",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let listed = rig().kubectl_ok(&[
        "-n",
        "fit-test",
        "events",
        "--for",
        &format!("pod/{pod_name}"),
    ]);
    assert!(
        listed
            .lines()
            .any(|l| l.contains("FailedScheduling") && l.contains("Failed to schedule pod, ")),
        "kubectl events --for pod/{pod_name} shows the agent's reason:\n{listed}"
    );
    assert!(
        message.contains("cpu"),
        "the reason does not name the resource: {message}"
    );
    apply(&deployment("fit-test", "small", "fit-pool", 2, "500m"));
    wait_for("the small pods to run", Duration::from_secs(60), || async {
        (running_pods(&client, "fit-test").await.len() == 2).then_some(())
    })
    .await;
    // Each small pod was told where it would go, as upstream tells it.
    let small = rig().kubectl_ok(&[
        "-n",
        "fit-test",
        "get",
        "pods",
        "-l",
        "app=small",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let listed = rig().kubectl_ok(&["-n", "fit-test", "events", "--for", &format!("pod/{small}")]);
    assert!(
        listed
            .lines()
            .any(|l| l.contains("Nominated") && l.contains("Pod should schedule on: nodeclaim/")),
        "kubectl events --for pod/{small} shows the nomination:\n{listed}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "fit-test");
    let huge = pods
        .list(&ListParams::default().labels("app=huge"))
        .await
        .expect("pods")
        .items;
    assert!(
        huge.iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()),
        "the huge pod was placed"
    );
    clean_up(&client, "fit-test", "fit-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_pool_at_its_limit_gets_no_more_claims() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let agent = Agent::start().await;
    apply(&node_pool("limited-pool", "{cpu: \"4\"}"));
    apply(&deployment(
        "limit-test",
        "limited",
        "limited-pool",
        10,
        "1",
    ));
    wait_for("some pods running", Duration::from_secs(60), || async {
        (!running_pods(&client, "limit-test").await.is_empty()).then_some(())
    })
    .await;
    // Give the agent a few more rounds to (wrongly) go over the limit.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let claims = pool_claims(&client, "limited-pool").await;
    let cpu: u64 = claims
        .iter()
        .map(|c| {
            let capacity = c
                .status
                .as_ref()
                .map(|s| s.capacity.clone())
                .unwrap_or_default();
            karpenter_core::resources::ResourceList::from_quantities(&capacity)
                .expect("capacity")
                .get("cpu")
        })
        .sum();
    assert!(
        cpu <= 4000,
        "the pool's claims hold {cpu}m CPU against a 4 CPU limit"
    );
    assert!(
        running_pods(&client, "limit-test").await.len() < 10,
        "all pods ran despite the limit"
    );
    assert!(
        agent
            .metrics
            .encode()
            .expect("metrics")
            .contains("karpenter_pods_unschedulable")
    );
    clean_up(&client, "limit-test", "limited-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_node_claim_removes_its_node_and_instance() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&node_pool("delete-pool", "{}"));
    apply(&deployment("delete-test", "one", "delete-pool", 1, "1"));
    let claim = wait_for("a ready claim", Duration::from_secs(60), || async {
        pool_claims(&client, "delete-pool")
            .await
            .into_iter()
            .find(|c| c.is_true("Initialized"))
    })
    .await;
    let node_name = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("node");
    rig().kubectl_ok(&["delete", "nodeclaim", &claim.name_any(), "--wait=false"]);
    let nodes: Api<Node> = Api::all(client.clone());
    let claims: Api<NodeClaim> = Api::all(client.clone());
    wait_for(
        "the node and the claim to be gone",
        Duration::from_secs(60),
        || async {
            let node_gone = nodes.get_opt(&node_name).await.ok()?.is_none();
            let claim_gone = claims.get_opt(&claim.name_any()).await.ok()?.is_none();
            (node_gone && claim_gone).then_some(())
        },
    )
    .await;
    clean_up(&client, "delete-test", "delete-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_the_agent_mid_provisioning_creates_no_duplicate_claims() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let agent = Agent::start().await;
    apply(&node_pool("restart-pool", "{}"));
    // Pods big enough that they need several claims (two fit an e2-standard-16).
    apply(&deployment(
        "restart-test",
        "restart",
        "restart-pool",
        6,
        "6",
    ));
    wait_for("the first claims", Duration::from_secs(60), || async {
        (!pool_claims(&client, "restart-pool").await.is_empty()).then_some(())
    })
    .await;
    drop(agent);
    let _agent = Agent::start().await;
    wait_for("6 running pods", Duration::from_secs(90), || async {
        (running_pods(&client, "restart-test").await.len() == 6).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let claims = pool_claims(&client, "restart-pool").await;
    let pods = running_pods(&client, "restart-test").await;
    for claim in &claims {
        let node = claim.status.as_ref().and_then(|s| s.node_name.clone());
        let used = pods
            .iter()
            .any(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()) == node);
        assert!(used, "claim {} has no pods: a duplicate", claim.name_any());
    }
    // Each pod was provided for once, by one agent or the other.
    let planned = provided_for(&claims);
    assert_eq!(
        planned.len(),
        6,
        "pods provided for more than once: {planned:?}"
    );
    clean_up(&client, "restart-test", "restart-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_node_removes_its_claim_through_the_finalizer() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&node_pool("node-delete-pool", "{}"));
    apply(&deployment(
        "node-delete-test",
        "one",
        "node-delete-pool",
        1,
        "1",
    ));
    let claim = wait_for("a ready claim", Duration::from_secs(60), || async {
        pool_claims(&client, "node-delete-pool")
            .await
            .into_iter()
            .find(|c| c.is_true("Initialized"))
    })
    .await;
    let node_name = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("node");
    rig().kubectl_ok(&["delete", "node", &node_name, "--wait=false"]);
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(
        "the claim and the node to be gone",
        Duration::from_secs(60),
        || async {
            let claim_gone = claims.get_opt(&claim.name_any()).await.ok()?.is_none();
            let node_gone = nodes.get_opt(&node_name).await.ok()?.is_none();
            (claim_gone && node_gone).then_some(())
        },
    )
    .await;
    clean_up(&client, "node-delete-test", "node-delete-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_no_claim_owns_is_garbage_collected() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let agent = Agent::start().await;
    // What a crash between launching and recording the launch leaves behind: a simulated
    // instance tagged for a claim that does not exist.
    let orphan = r#"
apiVersion: v1
kind: Node
metadata:
  name: orphan-instance
  labels:
    kwok.x-k8s.io/node: fake
    karpenter.kwok.sh/nodeclaim: never-created
    karpenter.sh/nodepool: gone
spec:
  providerID: kwok://orphan-instance
"#;
    apply(orphan);
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(
        "the orphan to be deleted",
        Duration::from_secs(30),
        || async {
            nodes
                .get_opt("orphan-instance")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        agent
            .metrics
            .encode()
            .expect("metrics")
            .contains("karpenter_instances_garbage_collected_total 1")
    );
}

/// A pod planned onto an in-flight claim whose room goes to another pod first gets a claim of its
/// own on a later round, although nothing about the pod changes to wake the agent (its status
/// stays PodScheduled=False/Unschedulable). A startup taint holds the planned pod off the new
/// node while a competitor is bound there, as the kube-scheduler may bind others first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_whose_planned_room_went_to_another_pod_gets_a_new_claim() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(
        r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: room-pool}
spec: {}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: room-pool}
spec:
  template:
    metadata:
      labels: {test-pool: room-pool}
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [t3.medium]}
      startupTaints:
        - {key: example.com/booting, effect: NoSchedule}
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: room-pool}
"#,
    );
    apply(&deployment("room-test", "planned", "room-pool", 1, "1"));
    let claim = wait_for(
        "a registered claim for the pod",
        Duration::from_secs(60),
        || async {
            pool_claims(&client, "room-pool")
                .await
                .into_iter()
                .find(|c| c.is_true("Registered"))
        },
    )
    .await;
    let node_name = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("node");
    // 1.5 of the t3.medium's ~1.93 allocatable CPUs go to a pod bound straight to the node.
    apply(&format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: taker, namespace: room-test}}
spec:
  nodeName: {node_name}
  tolerations: [{{operator: Exists}}]
  containers:
    - name: pause
      image: registry.k8s.io/pause:3.10
      resources: {{requests: {{cpu: 1500m}}}}
"#
    ));
    rig().kubectl_ok(&[
        "taint",
        "node",
        &node_name,
        "example.com/booting:NoSchedule-",
    ]);
    wait_for(
        "a second claim for the pod that lost its room",
        Duration::from_secs(60),
        || async { (pool_claims(&client, "room-pool").await.len() >= 2).then_some(()) },
    )
    .await;
    wait_for(
        "the planned pod running",
        Duration::from_secs(60),
        || async {
            // The new node boots with the startup taint too; lift it as its CNI would.
            let _ = rig()
                .kubectl()
                .args([
                    "taint",
                    "nodes",
                    "-l",
                    "test-pool=room-pool",
                    "example.com/booting:NoSchedule-",
                ])
                .output();
            running_pods(&client, "room-test")
                .await
                .iter()
                .any(|p| p.name_any().starts_with("planned-"))
                .then_some(())
        },
    )
    .await;
    clean_up(&client, "room-test", "room-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaled_deployment_is_provisioned_as_soon_as_all_its_pods_are_judged() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    // An idle window longer than the wait below: only a batch closed as complete can make the
    // claim in time, and a batch closed early must still hold the whole scale-up.
    let agent = Agent::start_with(Settings {
        batch_idle: Duration::from_secs(300),
        batch_max: Duration::from_secs(600),
        ..Settings::default()
    })
    .await;
    apply(&node_pool("burst-pool", "{}"));
    // Six small pods fit one node: planned together they get a single claim.
    apply(&deployment("burst-test", "burst", "burst-pool", 6, "250m"));
    let claims = wait_for(
        "a claim for the deployment",
        Duration::from_secs(120),
        || async {
            let claims = pool_claims(&client, "burst-pool").await;
            (!claims.is_empty()).then_some(claims)
        },
    )
    .await;
    let planned: Vec<Vec<String>> = claims
        .iter()
        .map(|c| {
            c.annotations()
                .get(labels::PROVISIONED_FOR)
                .and_then(|pods| serde_json::from_str(pods).ok())
                .unwrap_or_default()
        })
        .collect();
    assert!(
        planned.len() == 1 && planned[0].len() == 6,
        "one claim should hold the whole scale-up, got {planned:?}"
    );
    let encoded = agent.metrics.encode().expect("metrics");
    assert!(
        encoded
            .lines()
            .any(|l| l.starts_with("karpenter_provisioner_batches_total{closed_by=\"complete\"}")),
        "the batch should have closed as complete:\n{encoded}"
    );
    // Each pod's wait for its first decision is timed once, as upstream's histogram.
    let decided: f64 = encoded
        .lines()
        .find_map(|l| l.strip_prefix("karpenter_pods_scheduling_decision_duration_seconds_count "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(
        decided >= 6.0,
        "each of the 6 pods should have had its scheduling decision timed:\n{encoded}"
    );
    wait_for("6 running pods", Duration::from_secs(90), || async {
        (running_pods(&client, "burst-test").await.len() == 6).then_some(())
    })
    .await;
    clean_up(&client, "burst-test", "burst-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_created_while_the_agent_runs_is_reserved_on_the_next_claim() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&node_pool("ds-pool", "{}"));
    // Created after the agent started: only its DaemonSet watch can tell the next round.
    apply(
        r#"
apiVersion: v1
kind: Namespace
metadata: {name: ds-test}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-agent, namespace: ds-test}
spec:
  selector: {matchLabels: {app: node-agent}}
  template:
    metadata: {labels: {app: node-agent}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {test-pool: ds-pool}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {requests: {cpu: 1500m}}
"#,
    );
    // The DaemonSet controller has acted on it: the watch has had the same time to see it.
    let daemon_sets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(client.clone(), "ds-test");
    wait_for(
        "the DaemonSet to be observed",
        Duration::from_secs(30),
        || async {
            let ds = daemon_sets.get_opt("node-agent").await.ok()??;
            (ds.status?.observed_generation? >= 1).then_some(())
        },
    )
    .await;
    apply(&deployment("ds-test", "app", "ds-pool", 1, "1"));
    let claim = wait_for("a claim for the pod", Duration::from_secs(60), || async {
        pool_claims(&client, "ds-pool").await.into_iter().next()
    })
    .await;
    let cpu = claim
        .spec
        .resources
        .requests
        .get("cpu")
        .map(|q| karpenter_core::resources::parse_milli(&q.0).expect("a quantity"));
    assert_eq!(
        cpu,
        Some(2500),
        "the claim should request the pod's 1 CPU plus the DaemonSet pod's 1.5"
    );
    clean_up(&client, "ds-test", "ds-pool").await;
}
