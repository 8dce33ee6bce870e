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
