//! The built `kubectl karpenter convert` on manifests as walkthroughs of each era wrote them
//! (`tests/fixtures/convert/`): v1alpha5 Provisioners and an AWSNodeTemplate from a directory,
//! v1beta1 objects from stdin. The v1 it prints is accepted by the real API server (server-side
//! dry run on the rig, with this project's CRDs), reads back into the project's types, and says
//! on stderr what it could not carry over.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use karpenter_core::apis::{EC2NodeClass, NodePool};
use karpenter_test_support::rig::rig;
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/convert")
}

fn convert(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .arg("convert")
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl-karpenter");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the output"))
}

#[test]
fn manifests_of_every_era_convert_to_v1_that_the_api_server_accepts_with_a_warning_for_what_changed()
 {
    let v1beta1 = std::fs::read_to_string(fixtures().join("v1beta1.yaml")).unwrap();
    let dir = fixtures();
    let out = convert(
        &[
            "-f",
            dir.join("provisioners.yaml").to_str().unwrap(),
            "-f",
            dir.join("awsnodetemplate.yaml").to_str().unwrap(),
            "-f",
            "-",
        ],
        &v1beta1,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let objects: Vec<Value> = serde_saphyr::from_multiple(&stdout).expect("YAML on stdout");
    let ids: Vec<String> = objects
        .iter()
        .map(karpenter_core::convert::describe)
        .collect();
    assert_eq!(
        ids,
        [
            "NodePool default",
            "EC2NodeClass inline",
            "NodePool inline",
            "EC2NodeClass default",
            "NodePool beta",
            "EC2NodeClass beta",
            "EC2NodeClass beta-beta",
            "NodePool already-v1",
        ],
        "{stdout}"
    );

    // The Provisioner, field by field as the v1beta1 and v1 guides map it.
    let pool = find(&objects, "NodePool", "default");
    let template = &pool["spec"]["template"];
    assert_eq!(template["metadata"]["labels"], json!({"team": "team-a"}));
    assert_eq!(template["spec"]["expireAfter"], "720h");
    assert_eq!(
        template["spec"]["nodeClassRef"],
        json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"})
    );
    assert_eq!(
        pool["spec"]["disruption"],
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"})
    );
    assert_eq!(
        pool["spec"]["limits"],
        json!({"cpu": "1000", "memory": "1000Gi"})
    );
    assert_eq!(pool["spec"]["weight"], 10);
    let keys: Vec<&str> = template["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&"karpenter.k8s.aws/instance-category"),
        "{keys:?}"
    );
    // Its kubelet moved into the class it uses, without the runtime.
    let class = find(&objects, "EC2NodeClass", "default");
    assert_eq!(
        class["spec"]["kubelet"],
        json!({"maxPods": 20, "systemReserved": {"cpu": "100m", "memory": "100Mi"}})
    );
    assert_eq!(
        class["spec"]["subnetSelectorTerms"],
        json!([{"id": "subnet-0123456789abcdef0"}, {"id": "subnet-0fedcba9876543210"}])
    );
    assert_eq!(
        class["spec"]["amiSelectorTerms"],
        json!([{"name": "my-ami-*", "owner": "123456789012"}])
    );
    assert_eq!(class["spec"]["amiFamily"], "AL2");
    // The inline provider became a class of the Provisioner's name.
    let inline = find(&objects, "EC2NodeClass", "inline");
    assert_eq!(
        inline["spec"]["amiSelectorTerms"],
        json!([{"alias": "bottlerocket@latest"}])
    );
    assert_eq!(
        find(&objects, "NodePool", "inline")["spec"]["disruption"],
        json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"})
    );
    // The v1beta1 pool shares its class with a v1 pool that has no kubelet: it gets a copy.
    assert_eq!(
        find(&objects, "NodePool", "beta")["spec"]["template"]["spec"]["nodeClassRef"]["name"],
        "beta-beta"
    );
    assert_eq!(
        find(&objects, "EC2NodeClass", "beta-beta")["spec"]["kubelet"],
        json!({"maxPods": 30})
    );
    assert!(
        find(&objects, "EC2NodeClass", "beta")["spec"]
            .get("kubelet")
            .is_none()
    );

    // What changed is said, naming the object and the field.
    for expected in [
        "warning: Provisioner default: spec.kubeletConfiguration.containerRuntime: dropped",
        "warning: Machine default-abcde: skipped",
        "warning: NodePool default: spec.template.metadata.labels: k8s.io/cluster-autoscaler/enabled: dropped, the k8s.io domain is restricted in v1",
        "warning: ConfigMap unrelated: skipped: v1 ConfigMap",
        "warning: NodePool beta: spec.template.metadata.annotations: karpenter.sh/do-not-consolidate was removed in v1",
        "warning: NodePool beta: spec.template.spec.kubelet: its kubelet settings differ",
        "spec.metadataOptions.httpPutResponseHopLimit: kept v1beta1's default of 2",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }

    // Objects already at v1 pass through unchanged.
    let original: Vec<Value> = serde_saphyr::from_multiple(&v1beta1).unwrap();
    assert_eq!(find(&objects, "NodePool", "already-v1"), &original[2]);

    // The project's types read every object back.
    for object in &objects {
        match object["kind"].as_str().unwrap() {
            "NodePool" => {
                serde_json::from_value::<NodePool>(object.clone())
                    .unwrap_or_else(|e| panic!("{object}: {e}"));
            }
            _ => {
                serde_json::from_value::<EC2NodeClass>(object.clone())
                    .unwrap_or_else(|e| panic!("{object}: {e}"));
            }
        }
    }

    // And the API server accepts them, with its defaults and CEL rules.
    let applied = rig().kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], &stdout);
    assert!(
        applied.status.success(),
        "the API server refused the output:\n{}\n{stdout}",
        text(&applied.stderr)
    );
}

#[test]
fn two_inputs_that_make_one_object_and_a_document_that_does_not_parse_are_errors_naming_them() {
    let conflict = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: default}\nspec: {providerRef: {name: default}}\n---\napiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: default}\nspec: {}\n";
    let out = convert(&[], conflict);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr).trim(),
        "error: stdin, document 1 and stdin, document 2 both make NodePool default: keep one of them"
    );
    assert!(out.stdout.is_empty());

    let broken =
        "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: karpenter.sh/v1beta1\nkind: [NodePool\n";
    let out = convert(&[], broken);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("error: stdin, document 2 (from line 4): not valid YAML"),
        "{stderr}"
    );
}
