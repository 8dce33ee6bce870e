//! The built `kubectl karpenter migrate cluster-autoscaler` on the rig, reading node groups from
//! the Nodes' labels (the fallback that needs no cloud API): two EKS managed node groups (one
//! on-demand amd64 group labelled for a team, one tainted spot arm64 group) run as kwok nodes
//! with a workload, a DaemonSet and a Cluster Autoscaler Deployment. It writes a NodePool per
//! group that the API server accepts, prices today's nodes against the plan, prints the steps,
//! and with `--yes` applies the objects, scales Cluster Autoscaler to zero and cordons the nodes.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use karpenter_test_support::rig::rig;
use serde_json::{Value, json};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const NAMESPACE: &str = "migrate-test";
const NODES: [&str; 3] = ["ng-general-1", "ng-general-2", "ng-batch-1"];

fn migrate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args([
            "migrate",
            "cluster-autoscaler",
            "--cluster",
            "demo",
            "--from-nodes",
        ])
        .args(args)
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("NO_COLOR", "1")
        .output()
        .expect("run kubectl-karpenter")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn node(
    name: &str,
    group: &str,
    capacity: &str,
    instance_type: &str,
    zone: &str,
    arch: &str,
    extra: &str,
) -> String {
    format!(
        r#"
apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations: {{kwok.x-k8s.io/node: fake}}
  labels:
    kwok.x-k8s.io/node: fake
    kubernetes.io/hostname: {name}
    kubernetes.io/os: linux
    kubernetes.io/arch: {arch}
    node.kubernetes.io/instance-type: {instance_type}
    topology.kubernetes.io/zone: {zone}
    eks.amazonaws.com/nodegroup: {group}
    eks.amazonaws.com/capacityType: {capacity}
    {extra}
status:
  allocatable: {{cpu: "2", memory: 7Gi, pods: "29"}}
  capacity: {{cpu: "2", memory: 8Gi, pods: "29"}}
"#
    )
}

/// Removes what the test made, also when it fails half-way.
struct CleanUp;

impl Drop for CleanUp {
    fn drop(&mut self) {
        let _ = rig()
            .kubectl()
            .args(["delete", "namespace", NAMESPACE, "--wait=false"])
            .output();
        let _ = rig()
            .kubectl()
            .args([
                "-n",
                "kube-system",
                "delete",
                "deployment",
                "cluster-autoscaler",
                "--ignore-not-found",
            ])
            .output();
        let _ = rig()
            .kubectl()
            .args([
                "delete",
                "nodepools",
                "general",
                "batch",
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
        let _ = rig()
            .kubectl()
            .args([
                "delete",
                "ec2nodeclass",
                "default",
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
        let _ = rig()
            .kubectl()
            .arg("delete")
            .arg("node")
            .args(NODES)
            .arg("--ignore-not-found")
            .output();
    }
}

#[test]
fn node_groups_become_node_pools_with_their_contract_the_price_and_the_steps_and_yes_takes_the_safe_ones()
 {
    let _clean = CleanUp;
    let nodes = [
        node(
            NODES[0],
            "general",
            "ON_DEMAND",
            "m5.large",
            "us-west-2a",
            "amd64",
            "team: web",
        ),
        node(
            NODES[1],
            "general",
            "ON_DEMAND",
            "m5.large",
            "us-west-2b",
            "amd64",
            "team: web",
        ),
        node(
            NODES[2],
            "batch",
            "SPOT",
            "m6g.large",
            "us-west-2a",
            "arm64",
            "",
        ),
    ]
    .join("---");
    let applied = rig().kubectl_with_input(&["apply", "-f", "-"], &nodes);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    rig().kubectl_ok(&[
        "taint",
        "node",
        NODES[2],
        "workload=batch:NoSchedule",
        "--overwrite",
    ]);
    let workloads = format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {NAMESPACE}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {NAMESPACE}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{team: web}}
      containers: [{{name: c, image: registry.invalid/web:1, resources: {{requests: {{cpu: 500m, memory: 512Mi}}}}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: batch, namespace: {NAMESPACE}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: batch}}}}
  template:
    metadata:
      labels: {{app: batch}}
      annotations: {{cluster-autoscaler.kubernetes.io/safe-to-evict: "false"}}
    spec:
      nodeSelector: {{eks.amazonaws.com/nodegroup: batch}}
      tolerations: [{{key: workload, value: batch, effect: NoSchedule}}]
      containers: [{{name: c, image: registry.invalid/batch:1, resources: {{requests: {{cpu: "1", memory: 1Gi}}}}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: logs, namespace: {NAMESPACE}}}
spec:
  selector: {{matchLabels: {{app: logs}}}}
  template:
    metadata: {{labels: {{app: logs}}}}
    spec:
      nodeSelector: {{kwok.x-k8s.io/node: fake}}
      tolerations: [{{operator: Exists}}]
      containers: [{{name: c, image: registry.invalid/logs:1, resources: {{requests: {{cpu: 100m, memory: 128Mi}}}}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: cluster-autoscaler, namespace: kube-system, labels: {{app.kubernetes.io/name: cluster-autoscaler}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: cluster-autoscaler}}}}
  template:
    metadata: {{labels: {{app: cluster-autoscaler}}}}
    spec:
      nodeSelector: {{team: web}}
      containers: [{{name: c, image: registry.invalid/cluster-autoscaler:1}}]
"#
    );
    let applied = rig().kubectl_with_input(&["apply", "-f", "-"], &workloads);
    assert!(applied.status.success(), "{}", text(&applied.stderr));
    let started = Instant::now();
    loop {
        let running = rig().kubectl_ok(&[
            "-n",
            NAMESPACE,
            "get",
            "pods",
            "--field-selector=status.phase=Running",
            "-o",
            "name",
        ]);
        // 3 web, 1 batch, 3 log agents.
        if running.lines().count() == 7 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "pods not Running:\n{running}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    let out = migrate(&[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    eprintln!("--- migrate's stderr:\n{stderr}");
    assert!(
        stderr.contains("Found 2 node groups, on 3 nodes"),
        "{stderr}"
    );
    assert!(stderr.contains("today $0.2"), "{stderr}");
    assert!(stderr.contains("the NodePools would launch"), "{stderr}");
    // The batch pods select their node group by its EKS label: said, with the pods left over.
    assert!(stderr.contains("note: ReplicaSet batch-"), "{stderr}");
    assert!(
        stderr.contains(
            "selects nodes by eks.amazonaws.com/nodegroup, which Karpenter's nodes do not carry"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("note: {NAMESPACE}/batch-")),
        "{stderr}"
    );
    assert!(
        stderr.contains("kubectl drain -l eks.amazonaws.com/nodegroup=general"),
        "{stderr}"
    );
    assert!(
        stderr
            .contains("aws eks update-nodegroup-config --cluster-name demo --nodegroup-name batch"),
        "{stderr}"
    );
    // The batch pod Cluster Autoscaler would not evict is named, with how to protect it.
    assert!(
        stderr.contains("1 pod says cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\""),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("  {NAMESPACE}/batch-")) && stderr.contains("(Deployment batch)"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("kubectl -n {NAMESPACE} annotate pod batch-"))
            && stderr.contains(&format!(
                "kubectl -n {NAMESPACE} patch deployment batch --type merge"
            )),
        "{stderr}"
    );
    let batch_protection = || {
        rig().kubectl_ok(&[
            "-n",
            NAMESPACE,
            "get",
            "pods",
            "-l",
            "app=batch",
            "-o",
            r#"jsonpath={.items[*].metadata.annotations.karpenter\.sh/do-not-disrupt}"#,
        ])
    };
    assert_eq!(batch_protection(), "", "nothing is annotated without --yes");
    let objects: Vec<Value> = serde_saphyr::from_multiple(&stdout).expect("YAML on stdout");
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in:\n{stdout}"))
            .clone()
    };
    let class = find("EC2NodeClass", "default");
    assert_eq!(class["spec"]["role"], "KarpenterNodeRole-demo");
    let general = find("NodePool", "general");
    let requirements = general["spec"]["template"]["spec"]["requirements"]
        .as_array()
        .unwrap();
    for expected in [
        json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a", "us-west-2b"]}),
        json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}),
        json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}),
        json!({"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}),
    ] {
        assert!(
            requirements.contains(&expected),
            "{expected} not in {requirements:?}"
        );
    }
    assert_eq!(
        general["spec"]["template"]["metadata"]["labels"],
        json!({"team": "web"})
    );
    let batch = find("NodePool", "batch");
    assert_eq!(
        batch["spec"]["template"]["spec"]["taints"],
        json!([{"key": "workload", "value": "batch", "effect": "NoSchedule"}])
    );
    let dry = rig().kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], &stdout);
    assert!(
        dry.status.success(),
        "the API server refused:\n{}",
        text(&dry.stderr)
    );
    // Nothing was changed without --yes.
    assert_eq!(
        rig().kubectl_ok(&[
            "-n",
            "kube-system",
            "get",
            "deployment",
            "cluster-autoscaler",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "1"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = migrate(&["--yes", "--output-dir", dir.path().to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(dir.path().join("nodepool-general.yaml").exists());
    assert!(
        stderr.contains("+ scaled Deployment kube-system/cluster-autoscaler to 0 replicas"),
        "{stderr}"
    );
    assert_eq!(
        rig().kubectl_ok(&[
            "-n",
            "kube-system",
            "get",
            "deployment",
            "cluster-autoscaler",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "0"
    );
    rig().kubectl_ok(&["get", "nodepool", "general", "-o", "name"]);
    assert!(
        stderr.contains(&format!("+ annotated pod {NAMESPACE}/batch-")),
        "{stderr}"
    );
    assert_eq!(
        batch_protection(),
        "true",
        "the running batch pod is protected as Cluster Autoscaler protected it"
    );
    for node in NODES {
        assert_eq!(
            rig().kubectl_ok(&["get", "node", node, "-o", "jsonpath={.spec.unschedulable}"]),
            "true",
            "{node} is not cordoned"
        );
    }
}
