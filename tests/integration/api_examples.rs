//! The manifests in `examples/` are what users copy: they must apply to a real API server as
//! they are, read back with nothing pruned or changed, and survive a trip through our types.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use crate::rig::{read_repo_file, rig};
use karpenter_core::apis::{EC2NodeClass, GCENodeClass, KWOKNodeClass, NodePool};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Fails unless every field of `expected` is in `actual` with the same value.
fn assert_contained(expected: &Value, actual: &Value, path: &str) {
    match (expected, actual) {
        (Value::Object(want), Value::Object(got)) => {
            for (key, value) in want {
                let child = format!("{path}.{key}");
                let found = got
                    .get(key)
                    .unwrap_or_else(|| panic!("{child} was dropped by the API server"));
                assert_contained(value, found, &child);
            }
        }
        (Value::Array(want), Value::Array(got)) => {
            assert_eq!(want.len(), got.len(), "{path} changed length");
            for (i, (w, g)) in want.iter().zip(got).enumerate() {
                assert_contained(w, g, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(expected, actual, "{path} changed"),
    }
}

/// Our types read the server's object and write it back without losing or changing a field.
fn assert_round_trips<T: DeserializeOwned + Serialize>(server: &Value, kind: &str) {
    let typed: T = serde_json::from_value(server.clone())
        .unwrap_or_else(|e| panic!("{kind} does not parse: {e}"));
    let again = serde_json::to_value(&typed).expect("serialize");
    assert_contained(
        &server["spec"],
        &again["spec"],
        &format!("{kind} (typed).spec"),
    );
    assert_contained(
        &again["spec"],
        &server["spec"],
        &format!("{kind} (server).spec"),
    );
}

fn apply_and_read_back(file: &str) -> (Value, Value) {
    let rig = rig();
    let text = read_repo_file(file);
    let applied = rig.kubectl_with_input(&["apply", "-f", "-"], &text);
    assert!(
        applied.status.success(),
        "{file} was rejected: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let sent: Value = serde_saphyr::from_str(&text).expect("example parses as YAML");
    let kind = sent["kind"].as_str().expect("kind").to_lowercase();
    let name = sent["metadata"]["name"].as_str().expect("name");
    let namespace = sent["metadata"]["namespace"].as_str();
    let mut args = vec!["get", kind.as_str(), name, "-o", "json"];
    if let Some(ns) = namespace {
        args.extend(["-n", ns]);
    }
    let server: Value = serde_json::from_str(&rig.kubectl_ok(&args)).expect("kubectl get -o json");
    assert_contained(&sent["spec"], &server["spec"], &format!("{file}: spec"));
    assert_contained(
        &sent["metadata"],
        &server["metadata"],
        &format!("{file}: metadata"),
    );
    (sent, server)
}

fn delete(file: &str) {
    let text = read_repo_file(file);
    let deleted = rig().kubectl_with_input(&["delete", "--wait", "-f", "-"], &text);
    assert!(
        deleted.status.success(),
        "deleting {file}: {}",
        String::from_utf8_lossy(&deleted.stderr)
    );
}

#[test]
fn every_example_applies_and_reads_back_unchanged() {
    // The three example sets reuse the name `default`, as a user's cluster would: apply one set
    // at a time, in one test, so they never race.
    for (pool, class) in [
        (
            "examples/kwok/nodepool.yaml",
            "examples/kwok/kwoknodeclass.yaml",
        ),
        (
            "examples/aws/nodepool.yaml",
            "examples/aws/ec2nodeclass.yaml",
        ),
        (
            "examples/gcp/nodepool.yaml",
            "examples/gcp/gcenodeclass.yaml",
        ),
    ] {
        let (_, server_class) = apply_and_read_back(class);
        match server_class["kind"].as_str() {
            Some("KWOKNodeClass") => {
                assert_round_trips::<KWOKNodeClass>(&server_class, "KWOKNodeClass")
            }
            Some("EC2NodeClass") => {
                assert_round_trips::<EC2NodeClass>(&server_class, "EC2NodeClass")
            }
            Some("GCENodeClass") => {
                assert_round_trips::<GCENodeClass>(&server_class, "GCENodeClass")
            }
            other => panic!("unexpected node class kind {other:?}"),
        }
        let (_, server_pool) = apply_and_read_back(pool);
        assert_round_trips::<NodePool>(&server_pool, "NodePool");
        delete(pool);
        delete(class);
    }
    let (_, inflate) = apply_and_read_back("examples/inflate.yaml");
    assert_eq!(
        inflate["spec"]["replicas"], 0,
        "inflate starts scaled to zero"
    );
    delete("examples/inflate.yaml");
}

#[test]
fn the_api_server_fills_in_upstream_defaults() {
    let rig = rig();
    let minimal = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: defaults-check
spec:
  template:
    spec:
      requirements: []
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
"#;
    let out = rig.kubectl_with_input(
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        minimal,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pool: NodePool = serde_json::from_slice(&out.stdout).expect("NodePool");
    assert_eq!(pool.spec.template.spec.expire_after.0, "720h");
    assert_eq!(pool.spec.disruption.consolidate_after.0, "0s");
    assert_eq!(
        pool.spec.disruption.consolidation_policy,
        karpenter_core::apis::ConsolidationPolicy::WhenEmptyOrUnderutilized
    );
    assert_eq!(pool.spec.disruption.budgets.len(), 1);
    assert_eq!(pool.spec.disruption.budgets[0].nodes, "10%");

    let class = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: defaults-check
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
"#;
    let out = rig.kubectl_with_input(
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        class,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let class: EC2NodeClass = serde_json::from_slice(&out.stdout).expect("EC2NodeClass");
    assert_eq!(class.spec.metadata_options.http_tokens, "required");
    assert_eq!(class.spec.metadata_options.http_put_response_hop_limit, 1);
}
