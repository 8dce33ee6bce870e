//! The built `kubectl karpenter init aws` end to end against moto (behind the project's
//! fault-injecting proxy) and a real control plane (the rig): it refuses without a flag or a
//! confirmation it cannot ask for, a dry run changes nothing, a run that fails half-way names the
//! missing permission and completes when re-run, and a run after that finds everything in place.
//!
//! moto, the proxy and the account set-up are the root AWS tests' own (`tests/aws`).

#![cfg(not(target_os = "windows"))]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic, dead_code)]

#[path = "../../tests/aws/env.rs"]
mod env;
#[path = "../../tests/aws/moto.rs"]
mod moto;
#[path = "../../tests/aws/proxy.rs"]
mod proxy;

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use karpenter_test_support::rig::{self, rig};
use kube::Api;
use kube::api::PostParams;
use std::process::{Command, Output, Stdio};

const CLUSTER: &str = "plugin-init";
const NAMESPACE: &str = "plugin-init-system";

fn init_aws(proxy: &proxy::Proxy, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args([
            "init",
            "aws",
            "--region",
            env::REGION,
            "--endpoint-url",
            &proxy.url,
            "-n",
            NAMESPACE,
            "--image",
            "karpenter-agent:test",
        ])
        .args(extra)
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("NO_COLOR", "1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_ENDPOINT_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl-karpenter")
}

/// An entry some other node group already has in aws-auth; init must keep it as it is.
const EXISTING_MAPPING: &str = "- rolearn: arn:aws:iam::123456789012:role/existing-node-group-plugin-init\n  username: system:node:{{EC2PrivateDNSName}}\n  groups:\n    - system:bootstrappers\n    - system:nodes\n";

/// Puts [`EXISTING_MAPPING`] into `kube-system/aws-auth` (made if missing; other tests on the
/// rig may edit it too, hence the conflict retry).
async fn seed_aws_auth() {
    let api: Api<ConfigMap> = Api::namespaced(rig().client().await, "kube-system");
    loop {
        let result = match api.get_opt("aws-auth").await.expect("read aws-auth") {
            Some(mut cm) => {
                let data = cm.data.get_or_insert_with(Default::default);
                let roles = data.entry("mapRoles".to_owned()).or_default();
                if roles.contains(EXISTING_MAPPING) {
                    return;
                }
                roles.push_str(EXISTING_MAPPING);
                api.replace("aws-auth", &PostParams::default(), &cm)
                    .await
                    .map(drop)
            }
            None => {
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "aws-auth", "namespace": "kube-system"}, "data": {"mapRoles": EXISTING_MAPPING},
                }))
                .unwrap();
                api.create(&PostParams::default(), &cm).await.map(drop)
            }
        };
        match result {
            Ok(()) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("seeding aws-auth: {e}"),
        }
    }
}

async fn map_roles() -> String {
    let api: Api<ConfigMap> = Api::namespaced(rig().client().await, "kube-system");
    api.get("aws-auth")
        .await
        .expect("aws-auth")
        .data
        .unwrap_or_default()
        .get("mapRoles")
        .cloned()
        .unwrap_or_default()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes the proxy saw after `before` (CreateRole, PutRolePolicy, TagResources...).
fn writes_since(proxy: &proxy::Proxy, before: usize) -> Vec<String> {
    proxy.actions()[before..]
        .iter()
        .filter(|a| {
            ["Create", "Put", "Attach", "Add", "Set", "Update", "Tag"]
                .iter()
                .any(|w| a.starts_with(w))
        })
        .cloned()
        .collect()
}

/// The plan section of stderr: the lines between `Plan for` and the blank line after it.
fn plan_lines(stderr: &str) -> String {
    stderr
        .lines()
        .skip_while(|l| !l.starts_with("Plan for"))
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_aws_asks_for_nothing_off_a_terminal_dry_runs_fails_naming_the_permission_completes_and_then_finds_everything_in_place()
 {
    let env = env::Env::new(CLUSTER, false).await;
    let proxy = &env.proxy;
    let node_role = format!("KarpenterNodeRole-{CLUSTER}");
    // moto's clusters report no authentication mode, so nodes join through aws-auth, where
    // another node group is already mapped.
    seed_aws_auth().await;
    let node_role_arn = format!("arn:aws:iam::123456789012:role/{node_role}");

    // No --cluster and no terminal to ask on: one line naming the flag.
    let out = init_aws(proxy, &[]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr).trim(),
        "error: --cluster is required (stdin is not a terminal, so it cannot be asked for)"
    );
    assert!(out.stdout.is_empty());

    // Changes to make, no --yes and no terminal to ask on: it says so and changes nothing.
    let before = proxy.actions().len();
    let out = init_aws(proxy, &["--cluster", CLUSTER]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.lines().last().unwrap().contains("pass --yes"),
        "{stderr}"
    );
    assert!(
        writes_since(proxy, before).is_empty(),
        "{:?}",
        writes_since(proxy, before)
    );

    // A dry run prints the plan and what it would change, the scaffold on stdout, and changes nothing.
    let out = init_aws(proxy, &["--cluster", CLUSTER, "--dry-run"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    insta::assert_snapshot!("init_aws_plan", plan_lines(&stderr));
    assert!(
        stderr.contains("~ node-role: would change: create role KarpenterNodeRole-plugin-init"),
        "{stderr}"
    );
    assert!(stderr.contains("~ node-access: would change: map KarpenterNodeRole-plugin-init as a node in kube-system/aws-auth, keeping its other entries"), "{stderr}");
    assert!(
        !map_roles().await.contains(&node_role_arn),
        "the dry run edited aws-auth"
    );
    assert!(stderr.contains("dry run: "), "{stderr}");
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_str_multiple(&stdout).expect("stdout is YAML");
    let kinds: Vec<&str> = documents
        .iter()
        .filter_map(|d| d["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        ["EC2NodeClass", "NodePool"],
        "stdout carries only the scaffold:\n{stdout}"
    );
    assert_eq!(documents[0]["spec"]["role"], node_role.as_str());
    assert!(
        env.iam
            .get_role()
            .role_name(&node_role)
            .send()
            .await
            .is_err(),
        "the dry run created the node role"
    );
    assert!(
        writes_since(proxy, before).is_empty(),
        "{:?}",
        writes_since(proxy, before)
    );

    // The caller may not put the controller's policy: the run stops there, naming the step, the
    // IAM action and the role, in one line.
    proxy.deny("PutRolePolicy");
    let out = init_aws(proxy, &["--cluster", CLUSTER, "--yes"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(
        last.starts_with("error: step controller-policy failed: permission denied: iam:PutRolePolicy on role KarpenterControllerRole-plugin-init"),
        "{stderr}"
    );
    assert!(
        env.iam
            .get_role()
            .role_name(&node_role)
            .send()
            .await
            .is_ok(),
        "the steps before the failure were applied"
    );

    // With the permission, a re-run completes: the earlier steps are found in place.
    proxy.allow_all();
    let dir = tempfile::tempdir().expect("temp dir");
    let dir_arg = dir.path().to_str().unwrap();
    let out = init_aws(
        proxy,
        &["--cluster", CLUSTER, "--yes", "--output-dir", dir_arg],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    eprintln!("--- the completing run's stderr:\n{stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.is_empty(),
        "with --output-dir the scaffold goes to files: {stdout}"
    );
    assert!(stderr.contains("✓ node-role: in place"), "{stderr}");
    assert!(stderr.contains("+ controller-policy: done"), "{stderr}");
    assert!(stderr.contains("+ kubernetes-agent: done"), "{stderr}");
    assert!(stderr.contains("+ node-access: done"), "{stderr}");
    assert!(stderr.contains("The agent runs image karpenter-agent:test; if the cluster cannot pull it, build it from a checkout (docker build -f agent/Dockerfile -t IMAGE .)"), "{stderr}");
    // The node role is mapped as a node, and the entry that was there is kept as it was.
    let roles = map_roles().await;
    assert!(roles.contains(EXISTING_MAPPING), "{roles}");
    let entries: Vec<serde_json::Value> = serde_saphyr::from_str(&roles).expect("mapRoles is YAML");
    let node = entries
        .iter()
        .find(|e| e["rolearn"] == node_role_arn.as_str())
        .unwrap_or_else(|| panic!("{roles}"));
    assert_eq!(node["username"], "system:node:{{EC2PrivateDNSName}}");
    assert_eq!(
        node["groups"],
        serde_json::json!(["system:bootstrappers", "system:nodes"])
    );
    let pool =
        std::fs::read_to_string(dir.path().join("nodepool-default.yaml")).expect("nodepool file");
    assert!(pool.contains("kind: NodePool"), "{pool}");
    assert!(dir.path().join("ec2nodeclass-default.yaml").exists());
    let accounts: Api<ServiceAccount> = Api::namespaced(rig().client().await, NAMESPACE);
    let sa = accounts
        .get("karpenter")
        .await
        .expect("the agent's service account");
    let annotation = sa
        .metadata
        .annotations
        .unwrap_or_default()
        .get("eks.amazonaws.com/role-arn")
        .cloned();
    assert_eq!(
        annotation.as_deref(),
        Some("arn:aws:iam::123456789012:role/KarpenterControllerRole-plugin-init")
    );
    rig().kubectl_ok(&["get", "deployment", "karpenter-agent", "-n", NAMESPACE]);

    // Once more: everything is in place, nothing is written, and it says so.
    let before = proxy.actions().len();
    let out = init_aws(
        proxy,
        &["--cluster", CLUSTER, "--yes", "--output-dir", dir_arg],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Everything is already in place; nothing changed."),
        "{stderr}"
    );
    assert!(
        !stderr.contains("would change") && !stderr.contains("done:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nodepool-default.yaml: in place"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "✓ node-access: in place (kube-system/aws-auth maps KarpenterNodeRole-plugin-init"
        ),
        "{stderr}"
    );
    assert!(
        writes_since(proxy, before).is_empty(),
        "{:?}",
        writes_since(proxy, before)
    );
    assert_eq!(
        map_roles().await.matches(&node_role_arn).count(),
        1,
        "the re-run added the node role again"
    );

    // And a dry run now finds nothing to do, and writes no scaffold either.
    let fresh = dir.path().join("fresh");
    let out = init_aws(
        proxy,
        &[
            "--cluster",
            CLUSTER,
            "--dry-run",
            "--output-dir",
            fresh.to_str().unwrap(),
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("everything is in place"), "{stderr}");
    assert!(
        stderr.contains("nodepool-default.yaml: would write NodePool/default"),
        "{stderr}"
    );
    assert!(!fresh.exists(), "the dry run wrote the scaffold");
    assert!(
        writes_since(proxy, before).is_empty(),
        "{:?}",
        writes_since(proxy, before)
    );

    // --gitops writes the agent's objects, rendered from its chart, for a GitOps repository,
    // and applies none of them.
    let gitops = dir.path().join("gitops");
    let out = init_aws(
        proxy,
        &[
            "--cluster",
            CLUSTER,
            "--yes",
            "--gitops",
            "--output-dir",
            gitops.to_str().unwrap(),
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("kubernetes-agent"), "{stderr}");
    assert!(
        stderr.contains("commit it where your GitOps tool applies it"),
        "{stderr}"
    );
    let file = |name: &str| -> serde_json::Value {
        let text =
            std::fs::read_to_string(gitops.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let deployment = file("deployment-karpenter-agent.yaml");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "karpenter-agent:test"
    );
    let account = file("serviceaccount-karpenter.yaml");
    assert_eq!(
        account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::123456789012:role/KarpenterControllerRole-plugin-init"
    );
    for name in [
        "customresourcedefinition-nodepools.karpenter.sh.yaml",
        "namespace-plugin-init-system.yaml",
        "clusterrole-karpenter-agent.yaml",
        "role-karpenter-agent.yaml",
        "poddisruptionbudget-karpenter-agent.yaml",
        "nodepool-default.yaml",
    ] {
        assert!(gitops.join(name).exists(), "{name} not written");
    }
    // Without a directory, --gitops prints the same objects as one YAML stream on stdout.
    let out = init_aws(proxy, &["--cluster", CLUSTER, "--dry-run", "--gitops"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let objects: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&stdout).expect("a YAML stream on stdout");
    let kinds: std::collections::BTreeSet<&str> =
        objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    for kind in [
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "Deployment",
        "NodePool",
        "EC2NodeClass",
    ] {
        assert!(kinds.contains(kind), "no {kind} in {kinds:?}");
    }

    rig().kubectl_ok(&["delete", "namespace", NAMESPACE, "--wait=false"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_aws_names_a_cluster_that_does_not_exist() {
    let env = env::Env::new("plugin-init-other", false).await;
    let out = init_aws(&env.proxy, &["--cluster", "no-such-cluster", "--dry-run"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(
        stderr.lines().last().unwrap(),
        "error: step eks-cluster failed: EKS cluster no-such-cluster in us-west-2 does not exist: check --cluster and --region, or create the cluster first"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout after a failed check"
    );
}
