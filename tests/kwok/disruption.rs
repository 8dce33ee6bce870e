//! The disruption controller on the rig: nodes that are no longer needed, or cost more than
//! their pods need, are given back, within the pools' budgets, replacements first.

use super::{Agent, apply, clean_up, exclusive, kwok_pool, pool_claims, running_pods, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use karpenter_core::apis::NodeClaim;
use karpenter_core::controllers::Settings;
use karpenter_test_support::rig::rig;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// An agent that decides every 2 s and re-checks after 2 s (upstream: 10 s and 15 s), so the
/// tests wait for behaviour, not for timers.
pub(super) async fn quick_agent() -> Agent {
    Agent::start_with(Settings {
        garbage_collection_interval: Duration::from_secs(2),
        garbage_collection_grace: Duration::from_secs(2),
        disruption_poll: Duration::from_secs(2),
        disruption_validation: Duration::from_secs(2),
        ..Settings::default()
    })
    .await
}

/// An on-demand pool (see [`kwok_pool`]) named `name` with the given `disruption` block (a YAML
/// flow map).
pub(super) fn pool(name: &str, disruption: &str) -> String {
    kwok_pool(
        name,
        &format!("  disruption: {disruption}"),
        "        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}",
    )
}

pub(super) fn scale(namespace: &str, name: &str, replicas: u32) {
    let out = rig()
        .kubectl()
        .args([
            "-n",
            namespace,
            "scale",
            "deployment",
            name,
            &format!("--replicas={replicas}"),
        ])
        .output()
        .expect("kubectl scale");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn live_claims(client: &kube::Client, pool: &str) -> Vec<NodeClaim> {
    pool_claims(client, pool)
        .await
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .collect()
}

pub(super) async fn events_with_reason(client: &kube::Client, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_to_zero_gives_the_empty_node_back_after_consolidate_after() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = quick_agent().await;
    apply(&pool("empty-pool", "{consolidateAfter: 10s}"));
    apply(&super::deployment(
        "empty-test",
        "inflate",
        "empty-pool",
        4,
        "1",
    ));
    wait_for("4 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, "empty-test").await.len() == 4).then_some(())
    })
    .await;
    assert!(!live_claims(&client, "empty-pool").await.is_empty());
    scale("empty-test", "inflate", 0);
    wait_for(
        "the empty nodes to be gone",
        Duration::from_secs(120),
        || async {
            pool_claims(&client, "empty-pool")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let left = nodes
        .list(&ListParams::default().labels("test-pool=empty-pool"))
        .await
        .expect("nodes");
    assert!(
        left.items.is_empty(),
        "nodes left: {:?}",
        left.items.iter().map(|n| n.name_any()).collect::<Vec<_>>()
    );
    assert!(
        !events_with_reason(&client, "DisruptionTerminating")
            .await
            .is_empty(),
        "the claims say why they went"
    );
    clean_up(&client, "empty-test", "empty-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_node_left_with_one_small_pod_is_replaced_by_a_cheaper_one() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let agent = quick_agent().await;
    apply(&pool("shrink-pool", "{consolidateAfter: 5s}"));
    // A big pod and a small one, pending together: one node holds both.
    apply(&super::deployment(
        "shrink-test",
        "big",
        "shrink-pool",
        1,
        "6",
    ));
    apply(&super::deployment(
        "shrink-test",
        "small",
        "shrink-pool",
        1,
        "500m",
    ));
    wait_for("2 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, "shrink-test").await.len() == 2).then_some(())
    })
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let price_of_pool = || async {
        let list = nodes
            .list(&ListParams::default().labels("test-pool=shrink-pool"))
            .await
            .expect("nodes");
        list.items.iter().map(super::hourly_price).sum::<f64>()
    };
    let before = price_of_pool().await;
    let first: BTreeSet<String> = live_claims(&client, "shrink-pool")
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(first.len(), 1, "both pods were planned onto one node");
    let out = rig()
        .kubectl()
        .args([
            "-n",
            "shrink-test",
            "delete",
            "deployment",
            "big",
            "--wait=true",
        ])
        .output()
        .expect("kubectl delete");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = wait_for(
        "the small pod to run alone on a new, cheaper node",
        Duration::from_secs(240),
        || async {
            let claims = live_claims(&client, "shrink-pool").await;
            let replaced = claims.iter().all(|c| !first.contains(&c.name_any()));
            let running = running_pods(&client, "shrink-test").await;
            let small_runs = running.len() == 1
                && running[0]
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .is_some_and(|a| a == "small");
            let price = price_of_pool().await;
            (claims.len() == 1 && replaced && small_runs && price < before).then_some(price)
        },
    )
    .await;
    assert!(after < before, "${after:.4}/h is not below ${before:.4}/h");
    let metrics = agent.metrics.encode().expect("metrics");
    assert!(
        metrics.contains("karpenter_voluntary_disruption_decisions_total{decision=\"replace\",reason=\"underutilized\",consolidation_type=\"single\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("karpenter_consolidation_moves_total{decision=\"approved\",nodepool=\"shrink-pool\",policy=\"WhenEmptyOrUnderutilized\"} 1"),
        "{metrics}"
    );
    for reason in [
        "DisruptionLaunching",
        "DisruptionWaitingReadiness",
        "DisruptionTerminating",
    ] {
        assert!(
            !events_with_reason(&client, reason).await.is_empty(),
            "no {reason} event"
        );
    }
    clean_up(&client, "shrink-test", "shrink-pool").await;
}

/// A budget schedule (cron, UTC) that fires once a month at 00:00 on a day two weeks from
/// today, for a minute: never active while a test runs.
fn a_closed_window() -> String {
    let today = k8s_openapi::jiff::Timestamp::now()
        .to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC)
        .day();
    let day = (i32::from(today) + 13) % 28 + 1;
    format!("0 0 {day} * *")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_blocked_pool_keeps_its_empty_node_and_says_why_while_others_let_go() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = quick_agent().await;
    // Pool name, its disruption block, and what its DisruptionBlocked event must say (empty:
    // the pool is not blocked and its empty node must go).
    let closed = a_closed_window();
    let pools = [
        (
            "frozen-pool",
            r#"{consolidateAfter: 0s, budgets: [{nodes: "0"}]}"#.to_owned(),
            "budget",
        ),
        (
            "window-pool",
            r#"{consolidateAfter: 0s, budgets: [{nodes: "0", schedule: "* * * * *", duration: 1h}]}"#
                .to_owned(),
            "budget",
        ),
        (
            "never-pool",
            "{consolidateAfter: Never}".to_owned(),
            "consolidateAfter: Never",
        ),
        // Minute 61 passes the CRD's pattern (as an older CRD let it through) but is no time.
        (
            "badcron-pool",
            r#"{consolidateAfter: 0s, budgets: [{nodes: "10", schedule: "61 * * * *", duration: 1h}]}"#
                .to_owned(),
            "schedule that cannot be read",
        ),
        (
            "closed-pool",
            format!(
                r#"{{consolidateAfter: 0s, budgets: [{{nodes: "0", schedule: "{closed}", duration: 1m}}]}}"#
            ),
            "",
        ),
    ];
    for (name, disruption, _) in &pools {
        apply(&pool(name, disruption));
        apply(&super::deployment("blocked-test", name, name, 1, "1"));
    }
    wait_for("5 running pods", Duration::from_secs(180), || async {
        (running_pods(&client, "blocked-test").await.len() == pools.len()).then_some(())
    })
    .await;
    for (name, _, _) in &pools {
        scale("blocked-test", name, 0);
    }
    wait_for(
        "the empty node of the pool whose zero budget is outside its window to go",
        Duration::from_secs(120),
        || async {
            live_claims(&client, "closed-pool")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    for (name, _, says) in pools.iter().filter(|(_, _, says)| !says.is_empty()) {
        let notes = wait_for(
            &format!("a DisruptionBlocked event for {name} saying {says:?}"),
            Duration::from_secs(60),
            || async {
                let notes = events_with_reason(&client, "DisruptionBlocked").await;
                notes
                    .iter()
                    .any(|n| n.contains(name) && n.contains(says))
                    .then_some(notes)
            },
        )
        .await;
        assert_eq!(
            live_claims(&client, name).await.len(),
            1,
            "{name} keeps its node: {notes:?}"
        );
    }
    for (name, _, _) in &pools {
        clean_up(&client, "blocked-test", name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_half_empty_nodes_become_fewer_cheaper_nodes_with_every_pod_running_again() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = quick_agent().await;
    apply(&pool("half-pool", "{consolidateAfter: Never}"));
    // Four 2-CPU pods that refuse to share a node make four nodes; a 1-CPU pod then lands
    // beside each; when the 2-CPU pods go, four nodes are left half empty.
    apply(&spread_n("half-test", "wide", "half-pool", 4, "2"));
    wait_for("4 running wide pods", Duration::from_secs(180), || async {
        (running_pods(&client, "half-test").await.len() == 4).then_some(())
    })
    .await;
    apply(&super::deployment("half-test", "stay", "half-pool", 4, "1"));
    wait_for("8 running pods", Duration::from_secs(180), || async {
        (running_pods(&client, "half-test").await.len() == 8).then_some(())
    })
    .await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pool_price = || async {
        let list = nodes
            .list(&ListParams::default().labels("test-pool=half-pool"))
            .await
            .expect("nodes");
        list.items.iter().map(super::hourly_price).sum::<f64>()
    };
    let claims_before = live_claims(&client, "half-pool").await.len();
    assert_eq!(claims_before, 4, "one node per wide pod");
    let out = rig()
        .kubectl()
        .args([
            "-n",
            "half-test",
            "delete",
            "deployment",
            "wide",
            "--wait=true",
        ])
        .output()
        .expect("kubectl delete");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = pool_price().await;
    rig()
        .kubectl()
        .args([
            "patch",
            "nodepool",
            "half-pool",
            "--type=merge",
            "-p",
            r#"{"spec":{"disruption":{"consolidateAfter":"0s"}}}"#,
        ])
        .output()
        .expect("kubectl patch");
    let (claims, after) = wait_for(
        "fewer, cheaper nodes with the four pods running",
        Duration::from_secs(300),
        || async {
            let claims = pool_claims(&client, "half-pool").await;
            let settled = claims
                .iter()
                .all(|c| c.metadata.deletion_timestamp.is_none());
            let running = running_pods(&client, "half-test").await.len();
            let price = pool_price().await;
            (settled && claims.len() < claims_before && running == 4 && price < before - 1e-9)
                .then_some((claims.len(), price))
        },
    )
    .await;
    assert!(
        claims < 4 && after < before,
        "{claims} nodes at ${after:.4}/h, was 4 at ${before:.4}/h"
    );
    clean_up(&client, "half-test", "half-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_of_one_never_lets_two_nodes_go_at_once() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = quick_agent().await;
    apply(&pool(
        "one-pool",
        r#"{consolidateAfter: 0s, budgets: [{nodes: "1"}]}"#,
    ));
    // Required hostname anti-affinity: one pod per node, three nodes.
    apply(&spread("one-test", "one-pool"));
    wait_for("3 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, "one-test").await.len() == 3).then_some(())
    })
    .await;
    // A watch, not polling: an empty node's claim is deleted and gone in well under a poll
    // interval, but the watch delivers the update that sets its deletionTimestamp.
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let config = watcher::Config::default().labels("karpenter.sh/nodepool=one-pool");
    let mut events = watcher(claims, config).boxed();
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut deleting: BTreeSet<String> = BTreeSet::new();
    let mut most_at_once = 0;
    let mut scaled = false;
    tokio::time::timeout(Duration::from_secs(240), async {
        while let Some(event) = events.next().await {
            match event.expect("watch nodeclaims") {
                watcher::Event::InitApply(c) | watcher::Event::Apply(c) => {
                    if c.metadata.deletion_timestamp.is_some() {
                        deleting.insert(c.name_any());
                    }
                    live.insert(c.name_any());
                }
                watcher::Event::Delete(c) => {
                    deleting.remove(&c.name_any());
                    live.remove(&c.name_any());
                }
                watcher::Event::InitDone if !scaled => {
                    assert_eq!(live.len(), 3, "one node per pod before the scale-down");
                    scale("one-test", "spread", 0);
                    scaled = true;
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
            most_at_once = most_at_once.max(deleting.len());
            if scaled && live.is_empty() {
                return;
            }
        }
    })
    .await
    .expect("the three nodes to be gone within 4 minutes");
    assert_eq!(most_at_once, 1, "the budget allows one node at a time");
    clean_up(&client, "one-test", "one-pool").await;
}

/// Three pods that each need a node of their own (required hostname anti-affinity).
fn spread(namespace: &str, pool: &str) -> String {
    spread_n(namespace, "spread", pool, 3, "1")
}

/// A Deployment whose `replicas` pods of `cpu` each refuse to share a node.
fn spread_n(namespace: &str, name: &str, pool: &str, replicas: u32, cpu: &str) -> String {
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
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {{matchLabels: {{app: {name}}}}}
              topologyKey: kubernetes.io/hostname
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: "{cpu}"}}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_a_pools_template_labels_replaces_its_nodes_one_by_one() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = quick_agent().await;
    apply(&pool(
        "drift-pool",
        r#"{consolidateAfter: Never, budgets: [{nodes: "1"}]}"#,
    ));
    apply(&spread("drift-test", "drift-pool"));
    wait_for("3 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, "drift-test").await.len() == 3).then_some(())
    })
    .await;
    let first: BTreeSet<String> = live_claims(&client, "drift-pool")
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(first.len(), 3);
    super::set_template_label("drift-pool", "release", "two");
    // A watch counts the claims being deleted at once: a poll could miss a deletion that
    // starts and ends between two reads.
    let most_at_once = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = tokio::spawn({
        let most = most_at_once.clone();
        let claims: Api<NodeClaim> = Api::all(client.clone());
        async move {
            let config = watcher::Config::default().labels("karpenter.sh/nodepool=drift-pool");
            let mut events = watcher(claims, config).boxed();
            let mut deleting: BTreeSet<String> = BTreeSet::new();
            while let Some(Ok(event)) = events.next().await {
                match event {
                    watcher::Event::InitApply(c) | watcher::Event::Apply(c) => {
                        if c.metadata.deletion_timestamp.is_some() {
                            deleting.insert(c.name_any());
                        }
                    }
                    watcher::Event::Delete(c) => {
                        deleting.remove(&c.name_any());
                    }
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
                most.fetch_max(deleting.len(), Ordering::SeqCst);
            }
        }
    });
    wait_for(
        "every node replaced by one with the new label, pods running",
        Duration::from_secs(420),
        || {
            let client = client.clone();
            let first = first.clone();
            async move {
                let claims = pool_claims(&client, "drift-pool").await;
                let all_new = claims.iter().all(|c| !first.contains(&c.name_any()));
                let nodes: Api<Node> = Api::all(client.clone());
                let relabelled = nodes
                    .list(&ListParams::default().labels("test-pool=drift-pool,release=two"))
                    .await
                    .ok()?
                    .items
                    .len();
                let running = running_pods(&client, "drift-test").await.len();
                (all_new && claims.len() == 3 && relabelled == 3 && running == 3).then_some(())
            }
        },
    )
    .await;
    counter.abort();
    assert_eq!(
        most_at_once.load(Ordering::SeqCst),
        1,
        "the budget lets one drifted node go at a time"
    );
    clean_up(&client, "drift-test", "drift-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_disruption_budget_made_while_the_agent_runs_keeps_its_pods_node_and_says_so() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = quick_agent().await;
    apply(&pool("pdb-pool", "{consolidateAfter: 0s}"));
    apply(&super::deployment(
        "pdb-test", "guarded", "pdb-pool", 1, "500m",
    ));
    wait_for("the pod to run", Duration::from_secs(120), || async {
        (running_pods(&client, "pdb-test").await.len() == 1).then_some(())
    })
    .await;
    let before: BTreeSet<String> = live_claims(&client, "pdb-pool")
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    // Made after the agent started: only its PodDisruptionBudget watch tells the disruption
    // pass about it.
    apply(
        r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: guard, namespace: pdb-test}
spec:
  maxUnavailable: 0
  selector: {matchLabels: {app: guarded}}
"#,
    );
    wait_for(
        "a DisruptionBlocked event naming the budget",
        Duration::from_secs(120),
        || async {
            events_with_reason(&client, "DisruptionBlocked")
                .await
                .iter()
                .any(|note| {
                    note.contains("PodDisruptionBudget pdb-test/guard allows 0 disruptions")
                })
                .then_some(())
        },
    )
    .await;
    let after: BTreeSet<String> = live_claims(&client, "pdb-pool")
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(after, before, "the guarded pod's node should stay");
    clean_up(&client, "pdb-test", "pdb-pool").await;
}

/// One pod of `cpu`, annotated `karpenter.sh/do-not-disrupt: "{protected_for}"`.
fn protected_deployment(namespace: &str, pool: &str, protected_for: &str, cpu: &str) -> String {
    super::deployment(namespace, "keeper", pool, 1, cpu).replace(
        "    metadata: {labels: {app: keeper}}",
        &format!(
            "    metadata: {{labels: {{app: keeper}}, annotations: {{karpenter.sh/do-not-disrupt: \"{protected_for}\"}}}}"
        ),
    )
}

/// Records every node of `pool` that ever carries `karpenter.sh/disrupted`, from a watch (a
/// taint can come and go between two polls).
pub(super) fn record_disrupted_taints(
    client: &kube::Client,
    pool: &str,
) -> (
    std::sync::Arc<std::sync::Mutex<BTreeSet<String>>>,
    tokio::task::JoinHandle<()>,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(BTreeSet::new()));
    let nodes: Api<Node> = Api::all(client.clone());
    let config = watcher::Config::default().labels(&format!("test-pool={pool}"));
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher(nodes, config).boxed();
        while let Some(Ok(event)) = events.next().await {
            if let watcher::Event::Apply(n) | watcher::Event::InitApply(n) = event {
                let tainted = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| ts.iter().any(|t| t.key == "karpenter.sh/disrupted"));
                if tainted {
                    record.lock().expect("lock").insert(n.name_any());
                }
            }
        }
    });
    (seen, task)
}

/// The demo's bad day: a pod annotated `karpenter.sh/do-not-disrupt: "1h"` shares a big node
/// with a pod that goes away, beside two nodes that empty. The pool lets one node go at a time. The
/// empty nodes go; the protected pod's node, now far too big for it, is never tainted nor
/// replaced, the pod is never evicted, and the node's claim says which pod holds it and until
/// when.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_protected_for_an_hour_keeps_its_node_untainted_while_empty_nodes_around_it_go() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = quick_agent().await;
    apply(&pool(
        "protect-pool",
        r#"{consolidateAfter: 0s, budgets: [{nodes: "1"}]}"#,
    ));
    apply(&spread_n("protect-test", "spread", "protect-pool", 3, "3"));
    wait_for("3 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, "protect-test").await.len() == 3).then_some(())
    })
    .await;
    // Created once the nodes run, the small pod fits beside a big one: the kube-scheduler
    // binds it there and no node is launched for it.
    apply(&protected_deployment(
        "protect-test",
        "protect-pool",
        "1h",
        "500m",
    ));
    wait_for("4 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, "protect-test").await.len() == 4).then_some(())
    })
    .await;
    assert_eq!(live_claims(&client, "protect-pool").await.len(), 3);
    let keeper = running_pods(&client, "protect-test")
        .await
        .into_iter()
        .find(|p| p.name_any().starts_with("keeper-"))
        .expect("the protected pod");
    let keeper_node = keeper
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("bound");
    let (tainted, watch) = record_disrupted_taints(&client, "protect-pool");
    scale("protect-test", "spread", 0);
    let nodes: Api<Node> = Api::all(client.clone());
    let pool_nodes = || async {
        nodes
            .list(&ListParams::default().labels("test-pool=protect-pool"))
            .await
            .expect("nodes")
            .items
            .iter()
            .map(|n| n.name_any())
            .collect::<Vec<_>>()
    };
    wait_for(
        "the nodes around the protected pod to go",
        Duration::from_secs(240),
        || async { (pool_nodes().await == [keeper_node.clone()]).then_some(()) },
    )
    .await;
    // Ten more disruption passes (2 s each): consolidation would now replace the protected
    // pod's node with a much smaller one, if it were a candidate.
    tokio::time::sleep(Duration::from_secs(20)).await;
    watch.abort();
    assert_eq!(pool_nodes().await, std::slice::from_ref(&keeper_node));
    assert_eq!(
        live_claims(&client, "protect-pool").await.len(),
        1,
        "no replacement was launched for the protected pod's node"
    );
    assert!(
        !tainted.lock().expect("lock").contains(&keeper_node),
        "the protected pod's node was tainted karpenter.sh/disrupted"
    );
    let still = running_pods(&client, "protect-test").await;
    assert_eq!(still.len(), 1);
    assert_eq!(
        still[0].uid(),
        keeper.uid(),
        "the protected pod was evicted"
    );
    let blocked = events_with_reason(&client, "DisruptionBlocked").await;
    let says = format!(
        "pod protect-test/{} has karpenter.sh/do-not-disrupt: \"1h\", which protects it until ",
        keeper.name_any()
    );
    assert!(
        blocked.iter().any(|note| note.contains(&says)),
        "no DisruptionBlocked Event says {says:?}: {blocked:?}"
    );
    clean_up(&client, "protect-test", "protect-pool").await;
}

/// Drift under a budget of three: the three drifted nodes are replaced side by side, each
/// command waiting for its own replacement (upstream's orchestration queue), not one after the
/// other. Launches take 8 s (the node class's registration delay), so commands run one at a
/// time would never have two nodes tainted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drifted_nodes_are_replaced_side_by_side_as_far_as_the_budget_allows() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = quick_agent().await;
    apply(
        &pool(
            "parallel-pool",
            r#"{consolidateAfter: Never, budgets: [{nodes: "3"}]}"#,
        )
        .replacen("spec: {}", "spec: {nodeRegistrationDelay: 8s}", 1),
    );
    apply(&spread("parallel-test", "parallel-pool"));
    wait_for("3 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, "parallel-test").await.len() == 3).then_some(())
    })
    .await;
    let first: BTreeSet<String> = live_claims(&client, "parallel-pool")
        .await
        .iter()
        .map(|c| c.name_any())
        .collect();
    // A watch on the pool's nodes counts how many carry the disruption taint at once.
    let most_at_once = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = tokio::spawn({
        let most = most_at_once.clone();
        let nodes: Api<Node> = Api::all(client.clone());
        async move {
            let config = watcher::Config::default().labels("test-pool=parallel-pool");
            let mut events = watcher(nodes, config).boxed();
            let mut tainted: BTreeSet<String> = BTreeSet::new();
            while let Some(Ok(event)) = events.next().await {
                match event {
                    watcher::Event::InitApply(n) | watcher::Event::Apply(n) => {
                        let on = n
                            .spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .is_some_and(|ts| ts.iter().any(|t| t.key == "karpenter.sh/disrupted"));
                        if on {
                            tainted.insert(n.name_any());
                        } else {
                            tainted.remove(&n.name_any());
                        }
                    }
                    watcher::Event::Delete(n) => {
                        tainted.remove(&n.name_any());
                    }
                    watcher::Event::Init | watcher::Event::InitDone => {}
                }
                most.fetch_max(tainted.len(), Ordering::SeqCst);
            }
        }
    });
    super::set_template_label("parallel-pool", "release", "two");
    wait_for(
        "every node replaced by one with the new label, pods running",
        Duration::from_secs(240),
        || {
            let client = client.clone();
            let first = first.clone();
            async move {
                let claims = pool_claims(&client, "parallel-pool").await;
                let all_new = claims.iter().all(|c| !first.contains(&c.name_any()));
                let nodes: Api<Node> = Api::all(client.clone());
                let relabelled = nodes
                    .list(&ListParams::default().labels("test-pool=parallel-pool,release=two"))
                    .await
                    .ok()?
                    .items
                    .len();
                let running = running_pods(&client, "parallel-test").await.len();
                (all_new && claims.len() == 3 && relabelled == 3 && running == 3).then_some(())
            }
        },
    )
    .await;
    counter.abort();
    let most = most_at_once.load(Ordering::SeqCst);
    assert!(
        (2..=3).contains(&most),
        "the budget of three lets the drifted nodes go side by side, never more than three: {most} at once"
    );
    clean_up(&client, "parallel-test", "parallel-pool").await;
}
