//! Termination on the rig: what a user sees after `kubectl delete nodeclaim`, or when an
//! instance disappears. A `do-not-disrupt` pod and a PodDisruptionBudget each hold the drain
//! until lifted, `terminationGracePeriod` bounds it, and a node whose instance vanished is
//! cleaned up without a drain, its pods running again elsewhere.
//!
//! Each pool has `consolidateAfter: Never`, so the disruption controller leaves its nodes alone
//! and only the deletions these tests make terminate them.

use super::{Agent, apply, clean_up, exclusive, kwok_pool, pool_claims, running_pods, wait_for};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_test_support::rig::rig;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::time::{Duration, Instant};

/// A pool (see [`kwok_pool`]) that consolidation leaves alone; `template_spec` adds lines to the
/// template's spec (indented by six spaces).
fn pool(name: &str, template_spec: &str) -> String {
    kwok_pool(
        name,
        "  disruption: {consolidateAfter: Never}",
        template_spec,
    )
}

/// A Deployment of `replicas` one-CPU pods on `pool`, with the given pod annotations (a YAML
/// flow map) and `terminationGracePeriodSeconds`.
fn workload(
    namespace: &str,
    name: &str,
    pool: &str,
    replicas: u32,
    annotations: &str,
    grace_seconds: u32,
) -> String {
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
    metadata: {{labels: {{app: {name}}}, annotations: {annotations}}}
    spec:
      terminationGracePeriodSeconds: {grace_seconds}
      nodeSelector: {{test-pool: {pool}}}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: "1"}}}}
"#
    )
}

/// Waits until the pool has an initialized claim and `replicas` pods of `namespace` run;
/// returns the claim and its node's name.
async fn running_claim(
    client: &kube::Client,
    pool: &str,
    namespace: &str,
    replicas: usize,
) -> (NodeClaim, String) {
    let claim = wait_for(
        "an initialized claim with the pods running",
        Duration::from_secs(120),
        || async {
            let claim = pool_claims(client, pool)
                .await
                .into_iter()
                .find(|c| c.is_true("Initialized"))?;
            (running_pods(client, namespace).await.len() == replicas).then_some(claim)
        },
    )
    .await;
    let node = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("an initialized claim names its node");
    (claim, node)
}

/// The notes of the Events with `reason` about the object named `name`.
async fn notes(client: &kube::Client, name: &str, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::all(client.clone());
    let list = events
        .list(&ListParams::default())
        .await
        .expect("list events");
    list.items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .filter_map(|e| e.note)
        .collect()
}

/// Whether the node and the claim are both gone.
async fn both_gone(client: &kube::Client, node: &str, claim: &str) -> bool {
    let nodes: Api<Node> = Api::all(client.clone());
    let claims: Api<NodeClaim> = Api::all(client.clone());
    matches!(nodes.get_opt(node).await, Ok(None)) && matches!(claims.get_opt(claim).await, Ok(None))
}

/// Whether the pods of `namespace` on `node` include a running one, and the node still exists
/// with the drain's taint.
async fn still_held(client: &kube::Client, namespace: &str, node: &str) -> bool {
    let nodes: Api<Node> = Api::all(client.clone());
    let Ok(Some(held)) = nodes.get_opt(node).await else {
        return false;
    };
    let tainted = held
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY));
    let running_there = running_pods(client, namespace)
        .await
        .iter()
        .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
    tainted && running_there
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_do_not_disrupt_pod_keeps_a_deleted_nodeclaim_until_the_annotation_is_removed() {
    let _lock = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&pool("dnd-pool", ""));
    apply(&workload(
        "dnd-test",
        "batch",
        "dnd-pool",
        1,
        r#"{karpenter.sh/do-not-disrupt: "true"}"#,
        0,
    ));
    let (claim, node) = running_claim(&client, "dnd-pool", "dnd-test", 1).await;
    rig().kubectl_ok(&["delete", "nodeclaim", &claim.name_any(), "--wait=false"]);

    let waiting = wait_for(
        "a FailedDraining event on the node",
        Duration::from_secs(60),
        || async { notes(&client, &node, "FailedDraining").await.pop() },
    )
    .await;
    assert!(
        waiting.contains("1 pods are waiting to be evicted"),
        "{waiting}"
    );
    // Long enough for an unguarded drain to have finished many times over.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        still_held(&client, "dnd-test", &node).await,
        "the do-not-disrupt pod must keep running on its tainted node"
    );
    let claims: Api<NodeClaim> = Api::all(client.clone());
    assert!(
        claims
            .get_opt(&claim.name_any())
            .await
            .expect("get claim")
            .is_some(),
        "the claim must wait for its node"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "dnd-test");
    for pod in pods.list(&ListParams::default()).await.expect("pods").items {
        rig().kubectl_ok(&[
            "annotate",
            "pod",
            "-n",
            "dnd-test",
            &pod.name_any(),
            &format!("{}-", labels::DO_NOT_DISRUPT),
        ]);
    }
    wait_for(
        "the node and the claim to be gone",
        Duration::from_secs(120),
        || async {
            both_gone(&client, &node, &claim.name_any())
                .await
                .then_some(())
        },
    )
    .await;
    clean_up(&client, "dnd-test", "dnd-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_disruption_budget_holds_the_drain_until_it_is_deleted() {
    let _lock = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&pool("pdb-pool", ""));
    apply(&workload("pdb-test", "web", "pdb-pool", 1, "{}", 0));
    apply(
        r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: pdb-test}
spec:
  maxUnavailable: 0
  selector: {matchLabels: {app: web}}
"#,
    );
    let (claim, node) = running_claim(&client, "pdb-pool", "pdb-test", 1).await;
    rig().kubectl_ok(&["delete", "nodeclaim", &claim.name_any(), "--wait=false"]);

    let refused = wait_for(
        "a FailedDraining event naming the budget",
        Duration::from_secs(60),
        || async {
            notes(&client, &node, "FailedDraining")
                .await
                .into_iter()
                .find(|n| n.contains("violates a PDB"))
        },
    )
    .await;
    assert!(refused.contains("pdb-test/web-"), "{refused}");
    let waiting = notes(&client, &node, "FailedDraining").await;
    assert!(
        waiting
            .iter()
            .any(|n| n.contains("1 pods are waiting to be evicted")),
        "{waiting:?}"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        still_held(&client, "pdb-test", &node).await,
        "the budget must keep the pod running on its tainted node"
    );

    rig().kubectl_ok(&["delete", "pdb", "-n", "pdb-test", "web"]);
    wait_for(
        "the node and the claim to be gone",
        Duration::from_secs(120),
        || async {
            both_gone(&client, &node, &claim.name_any())
                .await
                .then_some(())
        },
    )
    .await;
    clean_up(&client, "pdb-test", "pdb-pool").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_termination_grace_period_a_do_not_disrupt_pod_is_deleted_and_the_claim_goes() {
    let _lock = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&pool("tgp-pool", "      terminationGracePeriod: 15s"));
    apply(&workload(
        "tgp-test",
        "batch",
        "tgp-pool",
        1,
        r#"{karpenter.sh/do-not-disrupt: "true"}"#,
        0,
    ));
    let (claim, node) = running_claim(&client, "tgp-pool", "tgp-test", 1).await;
    let pod = running_pods(&client, "tgp-test")
        .await
        .pop()
        .expect("the running pod")
        .name_any();
    let deleted = Instant::now();
    rig().kubectl_ok(&["delete", "nodeclaim", &claim.name_any(), "--wait=false"]);

    let claims: Api<NodeClaim> = Api::all(client.clone());
    let deadline = wait_for(
        "the claim to record its termination deadline",
        Duration::from_secs(30),
        || async {
            let current = claims.get_opt(&claim.name_any()).await.ok()??;
            current
                .annotations()
                .get(labels::NODE_CLAIM_TERMINATION_TIMESTAMP)
                .cloned()
        },
    )
    .await;
    // The Event follows the annotation's write: wait for it rather than read at once.
    let expected = format!("All pods will be deleted by {deadline}");
    let expiring = wait_for(
        "the claim's TerminationGracePeriodExpiring Event",
        Duration::from_secs(30),
        || async {
            let notes = notes(&client, &claim.name_any(), "TerminationGracePeriodExpiring").await;
            notes.contains(&expected).then_some(notes)
        },
    )
    .await;
    assert!(
        expiring
            .iter()
            .any(|n| *n == format!("All pods will be deleted by {deadline}")),
        "{expiring:?}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        still_held(&client, "tgp-test", &node).await,
        "before the deadline the do-not-disrupt pod keeps running"
    );

    wait_for(
        "the node and the claim to be gone",
        Duration::from_secs(120),
        || async {
            both_gone(&client, &node, &claim.name_any())
                .await
                .then_some(())
        },
    )
    .await;
    assert!(
        deleted.elapsed() >= Duration::from_secs(13),
        "the claim went after {:?}, before its 15 s termination grace period",
        deleted.elapsed()
    );
    let disrupted = notes(&client, &pod, "Disrupted").await;
    assert!(
        disrupted
            .iter()
            .any(|n| n.contains("bypasses the PDB of the pod and the do-not-disrupt annotation")),
        "{disrupted:?}"
    );
    clean_up(&client, "tgp-test", "tgp-pool").await;
}

/// kwok's "cloud" is the Node objects that carry its label, animated by kwok: removing the
/// label is the instance vanishing (the provider no longer finds it, and no kubelet keeps the
/// Node Ready or finishes its pods' termination), while the Node object stays behind as it
/// does when a real VM is terminated outside Karpenter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_instance_vanished_is_removed_and_its_pods_run_again_elsewhere() {
    let _lock = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&pool("vanish-pool", ""));
    // Pods with a grace period, as most are: on a node without a kubelet, an evicted pod
    // would stay Terminating for ever.
    apply(&workload("vanish-test", "web", "vanish-pool", 2, "{}", 30));
    let (claim, node) = running_claim(&client, "vanish-pool", "vanish-test", 2).await;

    rig().kubectl_ok(&["label", "node", &node, &format!("{}-", labels::KWOK_NODE)]);

    let pods: Api<Pod> = Api::namespaced(client.clone(), "vanish-test");
    wait_for(
        "the node and the claim to be gone, and two pods running elsewhere",
        Duration::from_secs(300),
        || async {
            if !both_gone(&client, &node, &claim.name_any()).await {
                return None;
            }
            let all = pods.list(&ListParams::default()).await.ok()?.items;
            let left_behind = all
                .iter()
                .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node));
            let running_elsewhere = all
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .count();
            (!left_behind && running_elsewhere == 2).then_some(())
        },
    )
    .await;
    clean_up(&client, "vanish-test", "vanish-pool").await;
}

/// A Deployment of one pod on `pool` whose volume is the PersistentVolume `volume`, through a
/// claim bound to it.
fn stateful_workload(namespace: &str, pool: &str, volume: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {volume}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: detach-test-manual
  claimRef: {{namespace: {namespace}, name: data}}
  csi: {{driver: csi.example.com, volumeHandle: {volume}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: {namespace}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: detach-test-manual
  volumeName: {volume}
  resources: {{requests: {{storage: 1Gi}}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: db, namespace: {namespace}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: db}}}}
  template:
    metadata: {{labels: {{app: db}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{test-pool: {pool}}}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: "1"}}}}
          volumeMounts: [{{name: data, mountPath: /data}}]
      volumes: [{{name: data, persistentVolumeClaim: {{claimName: data}}}}]
"#
    )
}

/// The volume attachment the attach-detach controller and a CSI attacher would keep for
/// `volume` on `node`; the rig runs no CSI driver, so the test plays their part.
fn attachment(name: &str, volume: &str, node: &str) -> String {
    format!(
        r#"
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata: {{name: {name}}}
spec:
  attacher: csi.example.com
  nodeName: {node}
  source: {{persistentVolumeName: {volume}}}
"#
    )
}

/// Upstream's order: the drained pod's volume must be detached before the instance goes, or
/// the pod's replacement stalls on a multi-attach error. The Node and its claim stay, saying
/// why, while the attachment does; once it is gone, both go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_pods_volume_attachment_holds_the_instance_until_it_is_gone() {
    const NS: &str = "detach-test";
    const POOL: &str = "detach-pool";
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&pool(POOL, ""));
    apply(&stateful_workload(NS, POOL, "detach-test-pv"));
    let (claim, node) = running_claim(&client, POOL, NS, 1).await;
    apply(&attachment("detach-test-va", "detach-test-pv", &node));

    rig().kubectl_ok(&["delete", "nodeclaim", &claim.name_any(), "--wait=false"]);
    // The pod is evicted and runs again elsewhere; the old node waits for the attachment.
    wait_for(
        "the pod to run on another node",
        Duration::from_secs(120),
        || async {
            let running = running_pods(&client, NS).await;
            (running.len() == 1
                && running[0].spec.as_ref()?.node_name.as_deref() != Some(node.as_str()))
            .then_some(())
        },
    )
    .await;
    let awaiting = wait_for(
        "an AwaitingVolumeDetachment Event on the node",
        Duration::from_secs(60),
        || async {
            notes(&client, &node, "AwaitingVolumeDetachment")
                .await
                .into_iter()
                .next()
        },
    )
    .await;
    assert_eq!(
        awaiting,
        "Awaiting deletion of bound volumeattachments (detach-test-va)"
    );
    // Held for a few more passes while the attachment stands.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let claims: Api<NodeClaim> = Api::all(client.clone());
    assert!(nodes.get_opt(&node).await.expect("node").is_some());
    assert!(
        claims
            .get_opt(&claim.name_any())
            .await
            .expect("claim")
            .is_some()
    );

    rig().kubectl_ok(&[
        "delete",
        "volumeattachment",
        "detach-test-va",
        "--wait=true",
    ]);
    wait_for(
        "the node and its claim to go once the volume is detached",
        Duration::from_secs(60),
        || async {
            both_gone(&client, &node, &claim.name_any())
                .await
                .then_some(())
        },
    )
    .await;
    clean_up(&client, NS, POOL).await;
    rig().kubectl_ok(&[
        "delete",
        "persistentvolume",
        "detach-test-pv",
        "--ignore-not-found",
    ]);
}
