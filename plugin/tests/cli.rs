//! The built `kubectl-karpenter` against a real control plane (the rig), on objects created
//! directly: in upstream Karpenter's shape (no annotations of ours, a hand-written status) and in
//! ours (the annotations the agent writes). No agent runs here: `plugin/tests/kwok.rs` runs one.
//!
//! Tests share one rig and run in parallel, so each creates objects under its own names and looks
//! only at those.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use k8s_openapi::api::core::v1::Node;
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_test_support::rig::rig;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

/// Runs the plugin against the rig.
fn plugin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args(args)
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("NO_COLOR", "1")
        .output()
        .expect("run kubectl-karpenter")
}

fn stdout_ok(args: &[&str]) -> String {
    let out = plugin(args);
    assert!(
        out.status.success(),
        "kubectl-karpenter {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn apply(yaml: &str) {
    let out = rig().kubectl_with_input(&["apply", "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn set_claim_status(name: &str, status: Value) {
    let api: Api<NodeClaim> = Api::all(rig().client().await);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": status})),
    )
    .await
    .expect("patch nodeclaim status");
}

fn pool_yaml(name: &str, disruption: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  limits: {{cpu: "64", memory: 256Gi}}
  disruption: {disruption}
  template:
    spec:
      requirements: [{{key: kubernetes.io/os, operator: In, values: [linux]}}]
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
"#
    )
}

/// A Ready NodeClaim as upstream Karpenter leaves it (its labels, no annotation of ours, a status
/// written by hand), its Node with upstream's labels (priced by eks-node-viewer's label) and a
/// pod on it.
async fn upstream_claim(pool: &str, claim: &str, node: &str, pod_annotations: &str) {
    upstream_claim_in(
        pool,
        "{consolidateAfter: 0s, budgets: [{nodes: '10%'}]}",
        claim,
        node,
        pod_annotations,
        "{}",
    )
    .await;
}

async fn upstream_claim_in(
    pool: &str,
    disruption: &str,
    claim: &str,
    node: &str,
    pod_annotations: &str,
    pod_labels: &str,
) {
    apply(&pool_yaml(pool, disruption));
    apply(&format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: {claim}
  labels: {{karpenter.sh/nodepool: {pool}, node.kubernetes.io/instance-type: m5.large, karpenter.sh/capacity-type: spot, topology.kubernetes.io/zone: us-west-2b}}
spec:
  requirements:
    - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge]}}
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
---
apiVersion: v1
kind: Node
metadata:
  name: {node}
  labels:
    kwok.x-k8s.io/node: fake
    eks-node-viewer/instance-price: "0.0350"
    karpenter.sh/nodepool: {pool}
    karpenter.sh/registered: "true"
    karpenter.sh/initialized: "true"
    karpenter.sh/capacity-type: spot
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-west-2b
  annotations: {{kwok.x-k8s.io/node: fake}}
spec:
  providerID: aws:///us-west-2b/i-{node}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {pool}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: api-0
  namespace: {pool}
  annotations: {pod_annotations}
  labels: {pod_labels}
spec:
  nodeName: {node}
  containers: [{{name: app, image: registry.k8s.io/pause:3.10}}]
"#
    ));
    // A moment after the objects were created, as a controller would write it.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let t = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |type_: &str| json!({"type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": t});
    set_claim_status(
        claim,
        json!({
            "nodeName": node, "providerID": format!("aws:///us-west-2b/i-{node}"),
            "capacity": {"cpu": "2", "memory": "8Gi"},
            "conditions": [condition("Launched"), condition("Registered"), condition("Initialized"), condition("Ready")],
        }),
    )
    .await;
}

#[tokio::test]
async fn status_shows_an_upstream_claim_priced_by_its_node_label() {
    upstream_claim("up-status", "up-status-x1", "up-status-node", "{}").await;
    let table = stdout_ok(&["status", "--nodepool", "up-status"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("up-status-x1"))
        .unwrap_or_else(|| panic!("no claim row:\n{table}"));
    for want in [
        "m5.large",
        "spot",
        "us-west-2b",
        "Ready",
        "up-status-node",
        "$0.0350",
    ] {
        assert!(row.contains(want), "{want:?} missing from {row:?}");
    }
    let pool_row = table
        .lines()
        .find(|l| l.starts_with("up-status "))
        .unwrap_or_else(|| panic!("no pool row:\n{table}"));
    assert!(
        pool_row.contains("2/64 (3%)") && pool_row.contains("8Gi/256Gi (3%)"),
        "{pool_row}"
    );
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NODEPOOL", "NODES", "CPU", "MEMORY", "$/HOUR", "AGE"]
    );
    assert!(table.contains("TOTAL"), "{table}");

    let json: Value = serde_json::from_str(&stdout_ok(&[
        "status",
        "-o",
        "json",
        "--nodepool",
        "up-status",
        "-v",
    ]))
    .expect("stdout is only JSON, even with -v");
    assert_eq!(json["kind"], "Status");
    let claim = json["nodeClaims"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "up-status-x1"))
        .expect("claim in JSON");
    assert_eq!(
        claim["price"],
        json!({"perHour": 0.035, "source": "nodeLabel"})
    );
    assert_eq!(claim["state"]["phase"], "Ready");
}

#[tokio::test]
async fn status_prices_an_upstream_claim_that_recorded_no_price_from_the_shipped_list_prices() {
    upstream_claim("up-list", "up-list-x1", "up-list-node", "{}").await;
    // Upstream Karpenter records no price anywhere: no label on the node, no options on the claim.
    let unlabelled = rig()
        .kubectl()
        .args([
            "label",
            "node",
            "up-list-node",
            "eks-node-viewer/instance-price-",
        ])
        .output()
        .expect("kubectl label");
    assert!(unlabelled.status.success());
    let json: Value = serde_json::from_str(&stdout_ok(&[
        "status",
        "-o",
        "json",
        "--nodepool",
        "up-list",
    ]))
    .expect("JSON");
    let claim = json["nodeClaims"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "up-list-x1"))
        .expect("claim in JSON");
    assert_eq!(claim["price"]["source"], "listPrice", "{claim}");
    // An m5.large at spot: priced, and below its on-demand $0.096.
    let per_hour = claim["price"]["perHour"].as_f64().unwrap();
    assert!(per_hour > 0.0 && per_hour < 0.096, "{per_hour}");
    let table = stdout_ok(&["explain", "nodeclaim", "up-list-x1"]);
    assert!(
        table.contains("from the shipped list prices (nothing recorded one)"),
        "{table}"
    );
}

#[tokio::test]
async fn explain_says_what_upstream_did_not_record_and_what_blocks_disruption() {
    upstream_claim(
        "up-explain",
        "up-explain-x1",
        "up-explain-node",
        &format!("{{{}: \"true\"}}", labels::DO_NOT_DISRUPT),
    )
    .await;
    let text = stdout_ok(&["explain", "nodeclaim", "up-explain-x1"]);
    assert!(text.contains("not recorded"), "{text}");
    assert!(
        text.contains("up-explain   api-0   on this node"),
        "the pods on its node are listed:\n{text}"
    );
    assert!(
        text.contains("allowed by its requirements: m5.large, m5.xlarge"),
        "{text}"
    );
    assert!(text.contains("Can it be disrupted now? no"), "{text}");
    assert!(
        text.contains("pod up-explain/api-0 has karpenter.sh/do-not-disrupt"),
        "{text}"
    );
    let lifecycle = text
        .split("Lifecycle:")
        .nth(1)
        .expect("a lifecycle section");
    let order: Vec<usize> = ["Created", "Launched=True", "Registered=True", "Ready=True"]
        .iter()
        .map(|w| lifecycle.find(w).unwrap_or(usize::MAX))
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "the timeline is out of order:\n{lifecycle}"
    );

    let yaml = stdout_ok(&["explain", "nodeclaim/up-explain-x1", "-o", "yaml"]);
    assert!(
        yaml.contains("kind: NodeClaimExplanation")
            && yaml.contains("recordedByAgent: false")
            && yaml.contains("kind: DoNotDisruptPod"),
        "{yaml}"
    );

    let by_node = stdout_ok(&["explain", "node", "up-explain-node"]);
    assert!(
        by_node.starts_with("Name:        up-explain-x1"),
        "explain node NAME explains its claim:\n{by_node}"
    );
}

#[tokio::test]
async fn a_claim_in_our_shape_is_explained_from_its_annotations() {
    apply(&pool_yaml("ours", "{consolidateAfter: 0s}"));
    apply(&format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: ours}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web-0, namespace: ours}}
spec:
  nodeSelector: {{no-such-label: "true"}}
  containers: [{{name: app, image: registry.k8s.io/pause:3.10}}]
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: ours-abcde
  labels: {{karpenter.sh/nodepool: ours}}
  annotations:
    {}: '["ours/web-0","ours/gone-0"]'
    {}: '[{{"name":"t3.small","price":0.0208,"zone":"us-west-2a","capacityType":"on-demand"}},{{"name":"t3.medium","price":0.0416,"zone":"us-west-2a","capacityType":"on-demand"}}]'
spec:
  requirements: [{{key: node.kubernetes.io/instance-type, operator: In, values: [t3.small, t3.medium]}}]
  resources: {{requests: {{cpu: 500m}}}}
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
"#,
        labels::PROVISIONED_FOR,
        labels::INSTANCE_TYPE_OPTIONS
    ));
    let text = stdout_ok(&["explain", "nodeclaim", "ours-abcde"]);
    assert!(
        text.contains("created by karpenter-agent for 2 pending pods"),
        "{text}"
    );
    assert!(text.contains("ours        web-0    pending"), "{text}");
    assert!(text.contains("gone-0   gone"), "{text}");
    assert!(
        text.contains("not launched yet, the cheapest is t3.small at $0.0208/hour"),
        "{text}"
    );
    assert!(
        text.contains("it is not initialized yet (Pending)"),
        "{text}"
    );

    let table = stdout_ok(&["status", "--nodepool", "ours", "-n", "ours"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("ours-abcde"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("Pending"), "{row}");
    let pod = table
        .lines()
        .find(|l| l.contains("web-0"))
        .unwrap_or_else(|| panic!("the pending pod is listed:\n{table}"));
    assert!(
        pod.contains("WaitingForNodeClaim") && pod.contains("nodeclaim ours-abcde is Pending"),
        "{pod}"
    );
}

/// Waits (bounded) until `kubectl get` of `what` prints `want` with `jsonpath`.
fn wait_for_jsonpath(what: &[&str], jsonpath: &str, want: &str) {
    for _ in 0..120 {
        let out = rig()
            .kubectl()
            .args(["get"])
            .args(what)
            .arg(format!("-o=jsonpath={jsonpath}"))
            .output()
            .expect("kubectl get");
        if String::from_utf8_lossy(&out.stdout).trim() == want {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("{} never showed {jsonpath} = {want}", what.join(" "));
}

fn blocker_kinds(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|l| l.trim().trim_start_matches("- ").strip_prefix("kind: "))
        .filter(|k| *k != "NodeClaimExplanation")
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn explain_names_a_pdb_and_a_zero_budget_as_blockers_of_an_upstream_claim() {
    upstream_claim_in(
        "up-budget",
        "{consolidateAfter: 0s, budgets: [{nodes: '0'}]}",
        "up-budget-x1",
        "up-budget-node",
        "{}",
        "{app: api}",
    )
    .await;
    apply(
        r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: api, namespace: up-budget}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: api}}
"#,
    );
    // The disruption controller fills in the PDB's status; explain reads it.
    wait_for_jsonpath(
        &["pdb", "api", "-n", "up-budget"],
        "{.status.observedGeneration}",
        "1",
    );
    let text = stdout_ok(&["explain", "nodeclaim", "up-budget-x1"]);
    assert!(text.contains("Can it be disrupted now? no"), "{text}");
    assert!(
        text.contains(
            "PodDisruptionBudget up-budget/api allows 0 disruptions and covers pod up-budget/api-0"
        ),
        "{text}"
    );
    assert!(text.contains("NodePool up-budget allows no more Underutilized disruptions now under budget 1 (nodes \"0\")"), "{text}");
    let yaml = stdout_ok(&["explain", "nodeclaim", "up-budget-x1", "-o", "yaml"]);
    assert_eq!(
        blocker_kinds(&yaml),
        ["PodDisruptionBudget", "Budget"],
        "{yaml}"
    );
}

#[tokio::test]
async fn explain_says_when_consolidate_after_lets_an_upstream_claim_be_considered() {
    upstream_claim_in(
        "up-after",
        "{consolidateAfter: 1h}",
        "up-after-x1",
        "up-after-node",
        "{}",
        "{}",
    )
    .await;
    let text = stdout_ok(&["explain", "nodeclaim", "up-after-x1"]);
    assert!(text.contains("Can it be disrupted now? no"), "{text}");
    assert!(
        text.contains("consolidateAfter is 1h: the last pod event was"),
        "{text}"
    );
    let yaml = stdout_ok(&["explain", "nodeclaim", "up-after-x1", "-o", "yaml"]);
    assert_eq!(blocker_kinds(&yaml), ["ConsolidateAfter"], "{yaml}");

    // Nothing blocks the same claim in a pool that consolidates at once with room in its budget.
    upstream_claim("up-free", "up-free-x1", "up-free-node", "{}").await;
    let free = stdout_ok(&["explain", "nodeclaim", "up-free-x1"]);
    assert!(free.contains("Can it be disrupted now? yes"), "{free}");
}

#[tokio::test]
async fn name_output_prints_nodeclaims_as_kubectl_names_them() {
    upstream_claim("up-name", "up-name-x1", "up-name-node", "{}").await;
    assert_eq!(
        stdout_ok(&["status", "--nodepool", "up-name", "-o", "name"]),
        "nodeclaim.karpenter.sh/up-name-x1\n"
    );
    assert_eq!(
        stdout_ok(&["explain", "node", "up-name-node", "-o", "name"]),
        "nodeclaim.karpenter.sh/up-name-x1\n"
    );
}

#[tokio::test]
async fn selector_sort_by_and_no_headers_work_as_in_kubectl_get() {
    // b first, so that age order and name order differ.
    upstream_claim("up-sel-b", "up-sel-b-x1", "up-sel-b-node", "{}").await;
    upstream_claim("up-sel-a", "up-sel-a-x1", "up-sel-a-node", "{}").await;
    assert_eq!(
        stdout_ok(&[
            "status",
            "-l",
            "karpenter.sh/nodepool=up-sel-b",
            "-o",
            "name"
        ]),
        "nodeclaim.karpenter.sh/up-sel-b-x1\n",
        "-l selects the claims"
    );
    let rows = |sort_by: &str| -> Vec<String> {
        let out = stdout_ok(&[
            "status",
            "--selector",
            "karpenter.sh/nodepool in (up-sel-a, up-sel-b)",
            "--no-headers",
            "--sort-by",
            sort_by,
        ]);
        assert!(
            !out.lines().any(|l| l.starts_with("NODECLAIM")
                || l.starts_with("NODEPOOL")
                || l.starts_with("TOTAL")),
            "--no-headers prints rows only:\n{out}"
        );
        out.lines()
            .filter(|l| l.starts_with("up-sel-"))
            .filter(|l| l.contains("-x1"))
            .map(|l| l.split_whitespace().next().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(rows("age"), ["up-sel-b-x1", "up-sel-a-x1"], "oldest first");
    assert_eq!(rows(".metadata.name"), ["up-sel-a-x1", "up-sel-b-x1"]);
}

#[tokio::test]
async fn status_nodes_shows_each_nodes_pods_and_requests_and_sums_them_per_pool() {
    upstream_claim("up-nodes", "up-nodes-x1", "up-nodes-node", "{}").await;
    let json: Value = serde_json::from_str(&stdout_ok(&[
        "status",
        "nodes",
        "--nodepool",
        "up-nodes",
        "-o",
        "json",
    ]))
    .expect("json");
    assert_eq!(json["kind"], "Nodes", "{json}");
    let node = &json["nodes"][0];
    assert_eq!(node["name"], "up-nodes-node", "{json}");
    assert_eq!(node["nodeClaim"], "up-nodes-x1", "{json}");
    assert_eq!(node["usage"]["pods"], 1, "the pod bound to it: {json}");
    assert_eq!(node["price"]["perHour"], 0.035, "its price label: {json}");
    assert_eq!(json["groups"][0]["nodePool"], "up-nodes", "{json}");
    let table = stdout_ok(&["status", "nodes", "-l", "karpenter.sh/nodepool=up-nodes"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NODE "), "{table}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("up-nodes-node ") && l.contains("m5.large")),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("up-nodes ") && l.contains("$0.0350")),
        "the pool's total: {table}"
    );
    assert!(
        !table.contains('█'),
        "piped, the view prints numbers, not bars: {table}"
    );
}

/// A kubeconfig naming a server nothing listens on: a command that reaches for the cluster fails
/// with "listing ..." or "connecting ...", one that is refused first never gets that far.
fn unreachable_kubeconfig(dir: &std::path::Path) -> String {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .expect("write kubeconfig");
    kubeconfig.to_str().expect("utf-8 path").to_owned()
}

#[test]
fn bad_arguments_are_refused_before_any_request_naming_what_would_do() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    for (args, says) in [
        (
            vec!["status", "--sort-by", "colour"],
            "nodeclaim, nodepool, type",
        ),
        (vec!["status", "-l", "app in web"], "parentheses"),
        (vec!["status", "-l", "Bad.Prefix/app=x"], "DNS subdomain"),
        (vec!["status", "--request-timeout", "soon"], "30s"),
        (
            vec!["status", "-o", "xml"],
            "one of: table, wide, json, yaml, name",
        ),
        (
            vec!["explain", "pod", "web-0"],
            "nodeclaim NAME or node NAME",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
            .args(&args)
            .args(["--kubeconfig", &kubeconfig])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error: ") && first.contains(says),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("listing") && !stderr.contains("127.0.0.1"),
            "{args:?} reached for the cluster: {stderr}"
        );
    }
}

#[test]
fn every_verbosity_form_kubectl_users_type_is_taken() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = unreachable_kubeconfig(dir.path());
    for form in [
        vec!["-v=6"],
        vec!["--v=6"],
        vec!["-v", "6"],
        vec!["--v", "2"],
        vec!["-v6"],
        vec!["-v"],
        vec!["-vv"],
        vec!["--verbose"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
            .arg("status")
            .args(&form)
            .args(["--kubeconfig", &kubeconfig, "--request-timeout", "5s"])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{form:?}: {stderr}");
        assert!(
            !stderr.contains("unexpected argument") && stderr.contains("error: listing"),
            "{form:?}: {stderr}"
        );
        assert!(stderr.lines().count() > 1, "{form:?} adds detail: {stderr}");
    }
}

#[test]
fn every_subcommand_shows_an_example_in_its_help() {
    for subcommand in [
        vec!["status"],
        vec!["explain"],
        vec!["init"],
        vec!["init", "aws"],
        vec!["init", "gcp"],
        vec!["convert"],
        vec!["simulate"],
        vec!["migrate"],
        vec!["migrate", "cluster-autoscaler"],
        vec!["completion"],
        vec!["version"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
            .args(&subcommand)
            .arg("--help")
            .output()
            .expect("run");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{subcommand:?}");
        assert!(
            help.contains("Examples:\n  kubectl karpenter "),
            "{subcommand:?} --help has no example:\n{help}"
        );
    }
}

#[tokio::test]
async fn status_watch_as_json_prints_a_document_per_change() {
    upstream_claim("up-wjson", "up-wjson-x1", "up-wjson-node", "{}").await;
    let mut watch = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args([
            "status",
            "-w",
            "-o",
            "json",
            "-l",
            "karpenter.sh/nodepool=up-wjson",
        ])
        .env("KUBECONFIG", &rig().kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start status -w -o json");
    let stdout = watch.stdout.take().expect("stdout");
    let (docs_tx, docs) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for doc in serde_json::Deserializer::from_reader(stdout).into_iter::<Value>() {
            let Ok(doc) = doc else { break };
            if docs_tx.send(doc).is_err() {
                break;
            }
        }
    });
    let next = || {
        docs.recv_timeout(std::time::Duration::from_secs(60))
            .expect("a document within a minute")
    };
    let first = next();
    assert_eq!(first["kind"], "Status", "{first}");
    let deleted = rig()
        .kubectl()
        .args(["delete", "nodeclaim", "up-wjson-x1", "--wait=false"])
        .output()
        .expect("kubectl delete");
    assert!(deleted.status.success());
    let change = loop {
        let doc = next();
        if doc["type"] == "DELETED" {
            break doc;
        }
    };
    assert_eq!(change["kind"], "NodeClaimChange", "{change}");
    assert_eq!(change["nodeClaim"]["name"], "up-wjson-x1", "{change}");
    let _ = watch.kill();
    let _ = watch.wait();
}

async fn set_node_ready(node: &str, ready: &str) {
    let api: Api<Node> = Api::all(rig().client().await);
    let t = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Test", "message": "", "lastHeartbeatTime": t, "lastTransitionTime": t}]}});
    api.patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch node status");
}

#[tokio::test]
async fn status_watch_reprints_a_claims_row_when_its_node_becomes_ready_and_when_it_is_deleted() {
    // A Node no kwok manages, so its Ready condition is what this test writes.
    apply(&pool_yaml("up-watch", "{consolidateAfter: 0s}"));
    apply(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: up-watch-x1
  labels: {karpenter.sh/nodepool: up-watch, node.kubernetes.io/instance-type: m5.large, karpenter.sh/capacity-type: on-demand, topology.kubernetes.io/zone: us-west-2a}
spec:
  requirements: []
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: v1
kind: Node
metadata:
  name: up-watch-node
  labels: {karpenter.sh/nodepool: up-watch, node.kubernetes.io/instance-type: m5.large}
spec:
  providerID: aws:///us-west-2a/i-up-watch-node
"#,
    );
    set_node_ready("up-watch-node", "False").await;
    let t = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |type_: &str| json!({"type": type_, "status": "True", "reason": type_, "message": "", "lastTransitionTime": t});
    set_claim_status(
        "up-watch-x1",
        json!({"nodeName": "up-watch-node", "providerID": "aws:///us-west-2a/i-up-watch-node",
               "conditions": [condition("Launched"), condition("Registered"), condition("Initialized"), condition("Ready")]}),
    )
    .await;

    let mut watch = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args(["status", "-w", "--nodepool", "up-watch"])
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start status -w");
    let stdout = watch.stdout.take().expect("stdout");
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen: Vec<String> = Vec::new();
    let mut wait_for_row = |state: &str| {
        let wanted =
            |l: &String| l.starts_with("up-watch-x1 ") && l.split_whitespace().any(|w| w == state);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !seen.iter().any(wanted) {
            match lines.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            {
                Ok(line) => seen.push(line),
                Err(e) => panic!(
                    "no {state} row for up-watch-x1 ({e}); saw:\n{}",
                    seen.join("\n")
                ),
            }
        }
        seen.clear();
    };
    wait_for_row("NotReady(NodeNotReady)");
    set_node_ready("up-watch-node", "True").await;
    wait_for_row("Ready");
    let deleted = rig()
        .kubectl()
        .args(["delete", "node", "up-watch-node", "--wait=false"])
        .output()
        .expect("kubectl delete");
    assert!(
        deleted.status.success(),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
    wait_for_row("NotReady(NodeDeleted)");
    let _ = watch.kill();
    let _ = watch.wait();
}

/// Runs the plugin on a terminal (util-linux `script` gives it a pty), as a person would.
fn plugin_on_a_terminal(args: &str, no_color: bool) -> String {
    let mut command = Command::new("script");
    command
        .args([
            "-qec",
            &format!("{} {args}", env!("CARGO_BIN_EXE_kubectl-karpenter")),
            "/dev/null",
        ])
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("TERM", "xterm")
        .env_remove("NO_COLOR");
    if no_color {
        command.env("NO_COLOR", "1");
    }
    let out = command.output().expect("run script");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_terminal_gets_colour_unless_no_color_is_set() {
    upstream_claim("up-color", "up-color-x1", "up-color-node", "{}").await;
    let coloured = plugin_on_a_terminal("status --nodepool up-color", false);
    assert!(coloured.contains("\x1b[32mReady\x1b[0m"), "{coloured:?}");
    let plain = plugin_on_a_terminal("status --nodepool up-color", true);
    assert!(
        plain.contains("Ready") && !plain.contains('\x1b'),
        "{plain:?}"
    );
    let explained = plugin_on_a_terminal("explain nodeclaim up-color-x1", true);
    assert!(
        explained.contains("Can it be disrupted now?") && !explained.contains('\x1b'),
        "{explained:?}"
    );
}

#[test]
fn an_unknown_nodeclaim_is_one_clear_line_naming_those_that_exist() {
    apply(&pool_yaml("names", "{consolidateAfter: 0s}"));
    apply(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: names-known, labels: {karpenter.sh/nodepool: names}}
spec:
  requirements: []
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#,
    );
    let out = plugin(&["explain", "nodeclaim", "no-such-claim"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing on stdout");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: nodeclaim \"no-such-claim\" not found; nodeclaims that exist:")
            && stderr.contains("names-known"),
        "{stderr}"
    );
}

#[test]
fn an_unreachable_cluster_is_one_line_and_exit_code_1_and_v_adds_the_chain() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .expect("write kubeconfig");
    let path = kubeconfig.to_str().expect("utf-8 path");
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args(["status", "--kubeconfig", path])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: listing "), "{stderr}");
    let verbose = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args(["status", "--kubeconfig", path, "-v"])
        .output()
        .expect("run");
    assert!(
        String::from_utf8_lossy(&verbose.stderr).lines().count() > 1,
        "-v shows the chain"
    );

    let missing = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args(["status", "--context", "nope", "--kubeconfig", path])
        .output()
        .expect("run");
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("nope"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

#[test]
fn usage_reads_kubectl_karpenter_and_bad_flags_fail_like_kubectl() {
    let help = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .arg("--help")
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("Usage: kubectl karpenter"), "{help}");
    let bad = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args(["status", "--bogus"])
        .output()
        .expect("run");
    assert_eq!(bad.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.starts_with("error: unexpected argument '--bogus'")
            && stderr.contains("kubectl karpenter --help"),
        "{stderr}"
    );
}

#[test]
fn completion_scripts_cover_the_subcommands_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
            .args(["completion", shell])
            .output()
            .expect("run");
        assert!(out.status.success());
        let script = String::from_utf8_lossy(&out.stdout);
        for word in ["status", "explain", "nodepool", "kubectl-karpenter"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
}

#[test]
fn kubectl_completes_the_plugin_with_nodeclaim_names_from_the_cluster() {
    apply(&pool_yaml("complete", "{consolidateAfter: 0s}"));
    apply(
        r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: complete-me, labels: {karpenter.sh/nodepool: complete}}
spec:
  requirements: []
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"#,
    );
    // What a user sets up (see README): the plugin, and kubectl's completion hook for it.
    let dir = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_kubectl-karpenter"),
        dir.path().join("kubectl-karpenter"),
    )
    .expect("symlink");
    let hook = dir.path().join("kubectl_complete-karpenter");
    std::fs::write(
        &hook,
        "#!/bin/sh\nexec kubectl-karpenter __complete \"$@\"\n",
    )
    .expect("write hook");
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let complete = |args: &[&str]| {
        let out = rig()
            .kubectl()
            .arg("__complete")
            .args(args)
            .env("PATH", &path)
            .output()
            .expect("kubectl __complete");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let subcommands = complete(&["karpenter", "st"]);
    assert!(
        subcommands.lines().next() == Some("status"),
        "{subcommands}"
    );
    let names = complete(&["karpenter", "explain", "nodeclaim", "complete-"]);
    assert!(names.lines().any(|l| l == "complete-me"), "{names}");
}

/// A stand-in for a corporate HTTPS proxy: answers `CONNECT` for names only it can resolve
/// (`*.rig.test`, which it sends to the rig on loopback) and refuses every other target, as a
/// proxy refuses what it cannot reach. Returns its address and the targets it was asked for.
fn connect_proxy() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = asked.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut client = client;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && client.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let target = head
                    .strip_prefix("CONNECT ")
                    .and_then(|rest| rest.split(' ').next())
                    .unwrap_or_default()
                    .to_owned();
                seen.lock().unwrap().push(target.clone());
                let upstream = target
                    .rsplit_once(':')
                    .filter(|(host, _)| host.ends_with(".rig.test"))
                    .and_then(|(_, port)| {
                        std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().ok()?)).ok()
                    });
                let Some(upstream) = upstream else {
                    let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n");
                    return;
                };
                let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
                let (mut up_read, mut up_write) = (upstream.try_clone().unwrap(), upstream);
                let (mut down_read, mut down_write) = (client.try_clone().unwrap(), client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut down_read, &mut up_write);
                    let _ = up_write.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut up_read, &mut down_write);
            });
        }
    });
    (address, asked)
}

#[test]
fn the_plugin_reaches_the_cluster_through_https_proxy_and_goes_direct_where_no_proxy_says() {
    // The rig under a name only the proxy can resolve; its certificate names `kubernetes`.
    let mut kubeconfig =
        kube::config::Kubeconfig::read_from(&rig().kubeconfig).expect("the rig's kubeconfig");
    let cluster = kubeconfig.clusters[0].cluster.as_mut().expect("cluster");
    let port = cluster
        .server
        .as_deref()
        .and_then(|s| s.rsplit(':').next())
        .expect("port")
        .trim_end_matches('/')
        .to_owned();
    cluster.server = Some(format!("https://kubernetes.rig.test:{port}"));
    cluster.tls_server_name = Some("kubernetes".to_owned());
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kubeconfig).expect("json")).expect("write");
    let (proxy, asked) = connect_proxy();
    let status = |no_proxy: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"));
        command
            .args(["status", "--kubeconfig", path.to_str().expect("utf-8")])
            .env("HTTPS_PROXY", format!("http://{proxy}"))
            .env_remove("https_proxy")
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env("NO_COLOR", "1");
        if let Some(list) = no_proxy {
            command.env("NO_PROXY", list);
        }
        command.output().expect("run")
    };

    let through = status(Some("localhost,10.0.0.0/8,.example.com"));
    assert!(
        through.status.success(),
        "{}",
        String::from_utf8_lossy(&through.stderr)
    );
    assert!(
        asked
            .lock()
            .unwrap()
            .contains(&format!("kubernetes.rig.test:{port}")),
        "the plugin went through the proxy"
    );

    let before = asked.lock().unwrap().len();
    let direct = status(Some("kubernetes.rig.test"));
    assert_eq!(
        direct.status.code(),
        Some(1),
        "no DNS name without the proxy"
    );
    assert_eq!(
        asked.lock().unwrap().len(),
        before,
        "NO_PROXY kept it off the proxy"
    );

    // The rig's own loopback address never goes through a proxy, not even a dead one.
    let loopback = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args(["status"])
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("HTTPS_PROXY", "http://127.0.0.1:1")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .output()
        .expect("run");
    assert!(
        loopback.status.success(),
        "{}",
        String::from_utf8_lossy(&loopback.stderr)
    );
}
