//! The built `kubectl karpenter simulate` on a small shop (`tests/fixtures/simulate/shop.yaml`):
//! what it would launch and what that costs, the pod no node can hold with the scheduler's
//! reason, and the what-ifs (more replicas, another NodePool). Offline: no cluster, no cloud.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/simulate")
        .join(name)
        .display()
        .to_string()
}

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .arg("simulate")
        .args(args)
        .env("NO_COLOR", "1")
        // Offline: no kubeconfig is read.
        .env("KUBECONFIG", "/nonexistent")
        .output()
        .expect("run kubectl-karpenter")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_report(args: &[&str]) -> (Value, String) {
    let out = simulate(&[args, &["-o", "json"]].concat());
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    (serde_json::from_slice(&out.stdout).expect("JSON"), stderr)
}

fn pods_of(report: &Value) -> Vec<String> {
    report["claims"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            c["pods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn a_shop_is_planned_onto_priced_nodes_with_the_pod_that_fits_nowhere_named() {
    let shop = fixture("shop.yaml");
    let (report, stderr) = json_report(&["-f", &shop, "--provider", "aws"]);
    assert!(
        stderr.contains("note: no NodePool among the manifests"),
        "{stderr}"
    );
    assert!(
        stderr.contains("note: v1 Service web: skipped, it makes no pods"),
        "{stderr}"
    );
    assert_eq!(report["kind"], "Simulation");
    assert_eq!(report["pods"], 18);
    let placed = pods_of(&report);
    assert_eq!(placed.len(), 17, "{placed:?}");
    assert_eq!(report["unplaced"][0]["pod"], "shop/huge");
    assert!(
        report["unplaced"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("cpu"),
        "{report}"
    );
    // Each database replica on a node of its own.
    let db_nodes: BTreeSet<usize> = report["claims"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c["pods"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p.as_str().unwrap().starts_with("shop/db-"))
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(db_nodes.len(), 3);
    let hourly = report["pricePerHour"].as_f64().unwrap();
    let summed: f64 = report["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["pricePerHour"].as_f64().unwrap())
        .sum();
    assert!(hourly > 0.0 && (hourly - summed).abs() < 1e-9);
    assert!((report["pricePerMonth"].as_f64().unwrap() - hourly * 730.0).abs() < 1e-6);
    // AWS's catalogue, in AWS's zones.
    for claim in report["claims"].as_array().unwrap() {
        assert!(
            claim["zone"].as_str().unwrap().starts_with("us-west-2"),
            "{claim}"
        );
    }

    // The table says the same, with the total.
    let out = simulate(&["-f", &shop, "--provider", "aws"]);
    let table = text(&out.stdout);
    assert!(table.starts_with("NODEPOOL"), "{table}");
    assert!(table.contains("shop/huge"), "{table}");
    assert!(
        table.contains(&format!("nodes for 17 of 18 pods   ${hourly:.4}/hour")),
        "{table}"
    );
}

#[test]
fn what_ifs_change_the_replicas_and_the_node_pool_and_cost_what_they_cost() {
    let shop = fixture("shop.yaml");
    let (base, _) = json_report(&["-f", &shop, "--provider", "aws"]);
    let (more, _) = json_report(&[
        "-f",
        &shop,
        "--provider",
        "aws",
        "--replicas",
        "shop/web=50",
    ]);
    assert_eq!(more["pods"], 58);
    assert_eq!(pods_of(&more).len(), 57);
    assert!(more["pricePerHour"].as_f64().unwrap() > base["pricePerHour"].as_f64().unwrap());

    let (spot, _) = json_report(&[
        "-f",
        &shop,
        "--provider",
        "aws",
        "--nodepool",
        &fixture("spot-only.yaml"),
    ]);
    for claim in spot["claims"].as_array().unwrap() {
        assert_eq!(claim["nodePool"], "spot-only");
        assert_eq!(claim["capacityType"], "spot");
    }

    let (gcp, _) = json_report(&["-f", &shop, "--provider", "gcp"]);
    for claim in gcp["claims"].as_array().unwrap() {
        assert!(
            claim["zone"].as_str().unwrap().starts_with("us-central1"),
            "{claim}"
        );
    }

    let out = simulate(&["-f", &shop, "--replicas", "shop/nothing=3"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr).trim(),
        "error: --replicas shop/nothing: no Deployment, ReplicaSet or StatefulSet of that namespace/name among the manifests"
    );
}

mod from_cluster {
    //! `simulate --from-cluster` on the rig: a NodePool with one node of its own (kwok), and a
    //! Deployment bigger than that node. The pods the kube-scheduler left pending are planned as
    //! the agent's next round would plan them, today's nodes are priced, and `--replicas` adds
    //! what-if pods to a Deployment of the cluster.

    use super::text;
    use karpenter_test_support::rig::rig;
    use serde_json::Value;
    use std::time::{Duration, Instant};

    const NAMESPACE: &str = "simulate-test";

    struct CleanUp;

    impl Drop for CleanUp {
        fn drop(&mut self) {
            for args in [
                vec!["delete", "namespace", NAMESPACE, "--wait=false"],
                vec![
                    "delete",
                    "nodepool",
                    "sim",
                    "--ignore-not-found",
                    "--wait=false",
                ],
                vec![
                    "delete",
                    "kwoknodeclass",
                    "sim",
                    "--ignore-not-found",
                    "--wait=false",
                ],
                vec!["delete", "node", "sim-node-1", "--ignore-not-found"],
            ] {
                let _ = rig().kubectl().args(args).output();
            }
        }
    }

    fn simulate_cluster(extra: &[&str]) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
            .args(["simulate", "--from-cluster"])
            .args(extra)
            .env("KUBECONFIG", &rig().kubeconfig)
            .env("NO_COLOR", "1")
            .output()
            .expect("run kubectl-karpenter")
    }

    fn cluster_report(extra: &[&str]) -> Value {
        let out = simulate_cluster(&[extra, &["-o", "json"]].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    }

    fn planned_of(report: &Value, prefix: &str) -> usize {
        report["claims"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|c| c["pods"].as_array().unwrap().iter())
            .filter(|p| p.as_str().unwrap().starts_with(prefix))
            .count()
    }

    #[test]
    fn the_pending_pods_of_a_cluster_are_planned_as_the_agents_next_round_and_todays_nodes_priced()
    {
        let _clean = CleanUp;
        let setup = format!(
            r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {{name: sim}}
spec: {{}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: sim}}
spec:
  template:
    metadata: {{labels: {{sim-pool: "yes"}}}}
    spec:
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge, m5.2xlarge]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: sim}}
---
apiVersion: v1
kind: Node
metadata:
  name: sim-node-1
  annotations: {{kwok.x-k8s.io/node: fake}}
  labels:
    kwok.x-k8s.io/node: fake
    kubernetes.io/hostname: sim-node-1
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: m5.large
    karpenter.sh/capacity-type: on-demand
    karpenter.sh/nodepool: sim
    sim-pool: "yes"
status:
  allocatable: {{cpu: "2", memory: 7Gi, pods: "29"}}
  capacity: {{cpu: "2", memory: 8Gi, pods: "29"}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {NAMESPACE}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {NAMESPACE}}}
spec:
  replicas: 4
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{sim-pool: "yes"}}
      containers: [{{name: c, image: registry.invalid/web:1, resources: {{requests: {{cpu: 900m, memory: 1Gi}}}}}}]
"#
        );
        let applied = rig().kubectl_with_input(&["apply", "-f", "-"], &setup);
        assert!(applied.status.success(), "{}", text(&applied.stderr));
        // The kube-scheduler puts two on the node and gives up on the other two. Both halves are
        // waited for: while kwok has not yet made the node Ready, all four can be Unschedulable,
        // and a pod not yet looked at has no condition at all.
        let started = Instant::now();
        loop {
            let bound = rig().kubectl_ok(&[
                "-n",
                NAMESPACE,
                "get",
                "pods",
                "--field-selector=spec.nodeName=sim-node-1",
                "-o",
                "name",
            ]);
            let pending = rig().kubectl_ok(&[
                "-n",
                NAMESPACE,
                "get",
                "pods",
                "--field-selector=spec.nodeName=",
                "-o",
                "jsonpath={.items[*].status.conditions[0].reason}",
            ]);
            if pending
                .split_whitespace()
                .filter(|r| *r == "Unschedulable")
                .count()
                == 2
                && bound.lines().count() == 2
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "pods not judged: {pending}; bound: {bound}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }

        let report = cluster_report(&[]);
        assert_eq!(
            planned_of(&report, &format!("{NAMESPACE}/web-")),
            2,
            "{report}"
        );
        for claim in report["claims"].as_array().unwrap() {
            if claim["nodePool"] == "sim" {
                assert!(
                    claim["instanceType"].as_str().unwrap().starts_with("m5."),
                    "{claim}"
                );
            }
        }
        let today = &report["current"];
        assert!(today["nodes"].as_u64().unwrap() >= 1, "{report}");
        // At least the m5.large on-demand node.
        assert!(today["pricePerHour"].as_f64().unwrap() >= 0.09, "{report}");

        // What if the Deployment had 6: two more pods, planned too.
        let more = cluster_report(&["--replicas", &format!("{NAMESPACE}/web=6")]);
        assert_eq!(planned_of(&more, &format!("{NAMESPACE}/web-")), 4, "{more}");

        // The table says the same, with today's fleet.
        let out = simulate_cluster(&[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let table = text(&out.stdout);
        assert!(table.contains("TODAY"), "{table}");
    }
}
