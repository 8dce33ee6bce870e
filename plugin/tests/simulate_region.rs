//! `kubectl karpenter simulate --region`: the plan moves to the region's zones and takes its
//! on-demand prices from the AWS Pricing API (the project's fault proxy answers GetProducts as
//! AWS does; nothing else is called).

#![cfg(not(target_os = "windows"))]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, dead_code)]

#[path = "../../tests/aws/proxy.rs"]
mod proxy;

use serde_json::{Value, json};
use std::process::{Command, Output};

const MANIFESTS: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: web}
spec:
  template:
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: web, resources: {requests: {cpu: 1500m}}}]
"#;

fn product(region: &str, instance_type: &str, usd: &str) -> Value {
    json!({
        "serviceCode": "AmazonEC2",
        "product": {"productFamily": "Compute Instance", "attributes": {
            "regionCode": region, "instanceType": instance_type, "operatingSystem": "Linux",
            "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used", "marketoption": "OnDemand"}},
        "terms": {"OnDemand": {"T": {"priceDimensions": {"T.D": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}},
    })
}

async fn simulate(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.yaml");
    std::fs::write(&file, MANIFESTS).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"));
    command
        .args([
            "simulate",
            "-f",
            file.to_str().unwrap(),
            "--provider",
            "aws",
            "-o",
            "json",
        ])
        .args(args)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env_remove("AWS_PROFILE");
    // The proxy serves from this runtime while the binary runs.
    let out = tokio::task::spawn_blocking(move || command.output().expect("run kubectl-karpenter"))
        .await
        .expect("join");
    drop(dir);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_in_another_region_uses_its_zones_and_its_on_demand_prices() {
    // GetProducts is answered by the proxy itself; anything forwarded would fail.
    let proxy = proxy::Proxy::start("http://127.0.0.1:9").await;
    proxy.price_list(vec![
        product("eu-west-1", "m5.large", "0.1070000000"),
        product("us-west-2", "m5.large", "0.0960000000"),
    ]);
    let out = simulate(&["--region", "eu-west-1", "--endpoint-url", &proxy.url]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("are eu-west-1's (AWS Pricing API)"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let claims = report["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 2, "{report}");
    for claim in claims {
        assert_eq!(claim["instanceType"], "m5.large");
        assert!(
            claim["zone"].as_str().unwrap().starts_with("eu-west-1"),
            "{claim}"
        );
        assert_eq!(claim["pricePerHour"], 0.107);
    }

    // Without pricing:GetProducts: the shipped prices, and a note that says so.
    proxy.deny("GetProducts");
    let out = simulate(&["--region", "eu-west-1", "--endpoint-url", &proxy.url]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the AWS Pricing API could not be read")
            && stderr.contains("prices are us-west-2's"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["claims"][0]["pricePerHour"], 0.096);
    assert!(
        report["claims"][0]["zone"]
            .as_str()
            .unwrap()
            .starts_with("eu-west-1")
    );

    // GovCloud has a shipped table of its own: its prices, not us-west-2's.
    let out = simulate(&["--region", "us-gov-west-1", "--endpoint-url", &proxy.url]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("on-demand prices are the shipped table's for us-gov-west-1"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["claims"][0]["pricePerHour"], 0.121);
}

#[test]
fn a_plan_in_another_google_cloud_region_takes_that_regions_prices_from_the_shipped_table() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.yaml");
    std::fs::write(
        &file,
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: web}
spec:
  template:
    spec:
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [e2-standard-2]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      nodeClassRef: {group: karpenter.k8s.gcp, kind: GCENodeClass, name: default}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: shop}
spec:
  containers: [{name: web, image: web, resources: {requests: {cpu: 500m}}}]
"#,
    )
    .unwrap();
    let run = |region: &str| {
        Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
            .args([
                "simulate",
                "-f",
                file.to_str().unwrap(),
                "--provider",
                "gcp",
            ])
            .args(["--region", region, "-o", "json"])
            .output()
            .expect("run kubectl-karpenter")
    };
    let out = run("europe-west4");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("are europe-west4's (shipped table)"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let claim = &report["claims"][0];
    assert_eq!(claim["instanceType"], "e2-standard-2");
    assert!(
        claim["zone"].as_str().unwrap().starts_with("europe-west4-"),
        "{claim}"
    );
    // More than in us-central1 (0.06701142): Compute Engine charges more in the Netherlands.
    assert_eq!(claim["pricePerHour"], 0.07377204);
}
