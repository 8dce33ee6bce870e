//! The built `kubectl karpenter init gcp` end to end against the project's GCP fake (`gcp-fake`)
//! and a real control plane (the rig), in both auth modes: a dry run changes nothing, a run that
//! fails half-way names the missing permission and completes when re-run (through policy-write
//! races, which it retries), a run after that finds everything in place, and with `--auth key`
//! the key lands in a Secret and nowhere else.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    clippy::await_holding_lock
)]

use gcp_fake::FakeGcp;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use karpenter_test_support::rig::rig;
use kube::Api;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const PROJECT: &str = "init-demo";

/// Both tests apply the cluster-wide RBAC of the agent; one at a time, so each sees its own.
static EXCLUSIVE: std::sync::Mutex<()> = std::sync::Mutex::new(());

async fn init_gcp(fake: &FakeGcp, cwd: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"));
    command
        .args([
            "init",
            "gcp",
            "--location",
            "us-central1",
            "--endpoint-url",
            &fake.endpoint(),
            "--image",
            "karpenter-agent:test",
        ])
        .args(args)
        .current_dir(cwd)
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("NO_COLOR", "1")
        .env_remove("CLOUDSDK_CORE_PROJECT")
        .stdin(Stdio::null());
    // The fake serves from this runtime while the binary runs.
    tokio::task::spawn_blocking(move || command.output().expect("run kubectl-karpenter"))
        .await
        .expect("join")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Requests after `before` that change something (reads and policy reads do not).
fn writes_since(fake: &FakeGcp, before: usize) -> Vec<String> {
    fake.state().requests[before..]
        .iter()
        .filter(|r| !r.starts_with("GET ") && !r.ends_with(":getIamPolicy"))
        .cloned()
        .collect()
}

fn plan_lines(stderr: &str) -> String {
    stderr
        .lines()
        .skip_while(|l| !l.starts_with("Plan for"))
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_gcp_with_workload_identity_dry_runs_fails_naming_the_permission_completes_through_policy_races_and_then_finds_everything_in_place()
 {
    let _guard = EXCLUSIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let fake = FakeGcp::start().await.expect("start the fake");
    fake.state()
        .resource_manager
        .seed_project(PROJECT, 123_456_789_012);
    fake.state()
        .container
        .seed_cluster(PROJECT, "us-central1", "wi-demo", true, "nodes");
    fake.state()
        .container
        .seed_cluster(PROJECT, "us-central1", "no-wi", false, "nodes");
    let cwd = tempfile::tempdir().expect("temp dir");
    let ns = "gcp-wi-system";
    let base = ["--cluster", "wi-demo", "-n", ns];
    let email = "karpenter-wi-demo@init-demo.iam.gserviceaccount.com";

    // No --project and no terminal to ask on: one line naming the flag.
    let out = init_gcp(&fake, cwd.path(), &base).await;
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr).trim(),
        "error: --project is required (stdin is not a terminal, so it cannot be asked for)"
    );

    // A project that does not exist (or may not be read) is named, with what to check.
    let out = init_gcp(
        &fake,
        cwd.path(),
        &[
            "--project",
            "no-such-project",
            "--cluster",
            "wi-demo",
            "-n",
            ns,
            "--dry-run",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr).lines().last().unwrap(),
        "error: step project failed: GCP project no-such-project does not exist: check --project, and that you may read it (resourcemanager.projects.get)"
    );
    assert!(out.stdout.is_empty());

    // Workload Identity auth on a cluster without a workload pool: one line saying how to turn it on.
    let out = init_gcp(
        &fake,
        cwd.path(),
        &[
            "--project",
            PROJECT,
            "--cluster",
            "no-wi",
            "-n",
            ns,
            "--dry-run",
        ],
    )
    .await;
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stderr).lines().last().unwrap(),
        "error: step gke-cluster failed: Workload Identity on GKE cluster no-wi does not exist: enable it with: gcloud container clusters update no-wi --location us-central1 --workload-pool=init-demo.svc.id.goog (or use --auth key)"
    );

    // A dry run: the plan, what would change, the scaffold on stdout, and no write.
    let args = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut all = vec![
            "--project",
            PROJECT,
            "--cluster",
            "wi-demo",
            "-n",
            "gcp-wi-system",
        ];
        all.extend_from_slice(extra);
        all
    };
    let out = init_gcp(&fake, cwd.path(), &args(&["--dry-run"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    insta::assert_snapshot!("init_gcp_plan", plan_lines(&stderr));
    assert!(
        stderr.contains(
            "~ apis: would change: enable compute.googleapis.com, container.googleapis.com, cloudbilling.googleapis.com"
        ),
        "{stderr}"
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
        ["GCENodeClass", "NodePool"],
        "stdout carries only the scaffold:\n{stdout}"
    );
    assert!(stderr.contains("✓ gke-cluster: in place (us-central1, subnetwork projects/init-demo/regions/us-central1/subnetworks/nodes, Workload Identity init-demo.svc.id.goog)"), "{stderr}");
    assert_eq!(
        documents[0]["spec"]["networkConfig"]["subnetwork"],
        "projects/init-demo/regions/us-central1/subnetworks/nodes",
        "{stdout}"
    );
    assert_eq!(documents[0]["spec"]["subnetRangeName"], "pods", "{stdout}");
    assert_eq!(
        documents[0]["spec"]["serviceAccount"],
        "karpenter-nodes-wi-demo@init-demo.iam.gserviceaccount.com",
        "{stdout}"
    );
    assert!(
        writes_since(&fake, 0).is_empty(),
        "the dry run wrote: {:?}",
        writes_since(&fake, 0)
    );

    // The caller may not create roles: the run stops at the custom role, naming the permission.
    fake.state()
        .resource_manager
        .denials
        .deny("iam.roles.create");
    let out = init_gcp(&fake, cwd.path(), &args(&["--yes"])).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.lines().last().unwrap().starts_with("error: step custom-role failed: permission denied: iam.roles.create on projects/init-demo"),
        "{stderr}"
    );
    {
        let state = fake.state();
        assert!(
            state
                .service_usage
                .is_enabled(PROJECT, "compute.googleapis.com"),
            "the steps before the failure were applied"
        );
        assert!(
            state
                .service_usage
                .is_enabled(PROJECT, "container.googleapis.com")
        );
        assert!(
            state
                .service_usage
                .is_enabled(PROJECT, "cloudbilling.googleapis.com"),
            "the agent reads its prices from the Cloud Billing Catalog"
        );
        assert!(state.iam.account(email).is_some());
    }

    // With the permission, and two other writers racing it on the IAM policies, a re-run completes.
    {
        let mut state = fake.state();
        state.resource_manager.denials.allow_all();
        state.resource_manager.concurrent_writes = 2;
    }
    let out = init_gcp(&fake, cwd.path(), &args(&["--yes"])).await;
    let stderr = text(&out.stderr);
    eprintln!("--- the completing run's stderr:\n{stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("✓ apis: in place") && stderr.contains("✓ service-account: in place"),
        "{stderr}"
    );
    assert!(
        stderr.contains("+ custom-role: done") && stderr.contains("+ workload-identity: done"),
        "{stderr}"
    );
    {
        let state = fake.state();
        assert_eq!(
            state.resource_manager.concurrent_writes, 0,
            "both races happened"
        );
        let role = &state.iam.roles["projects/init-demo/roles/kubectlKarpenterAgent"];
        let permissions = role["includedPermissions"].as_array().unwrap();
        assert!(permissions.iter().any(|p| p == "compute.instances.create"));
        assert!(
            !permissions.iter().any(|p| p == "iam.serviceAccounts.actAs"),
            "no actAs on every account of the project"
        );
        // The nodes run as their own account, with GKE's node roles, and the agent may act as
        // that account alone.
        let nodes = "karpenter-nodes-wi-demo@init-demo.iam.gserviceaccount.com";
        let node_account = state
            .iam
            .account(nodes)
            .expect("the nodes' service account");
        assert!(node_account.policy.has(
            "roles/iam.serviceAccountUser",
            &format!("serviceAccount:{email}")
        ));
        for role in [
            "roles/logging.logWriter",
            "roles/monitoring.metricWriter",
            "roles/monitoring.viewer",
            "roles/stackdriver.resourceMetadata.writer",
            "roles/artifactregistry.reader",
        ] {
            assert!(
                state
                    .resource_manager
                    .policy(PROJECT)
                    .has(role, &format!("serviceAccount:{nodes}")),
                "{role}"
            );
        }
        assert!(
            !permissions
                .iter()
                .any(|p| p.as_str().unwrap().ends_with(".setIamPolicy")),
            "no way to grant itself more"
        );
        let member = format!("serviceAccount:{email}");
        assert!(
            state
                .resource_manager
                .policy(PROJECT)
                .has("projects/init-demo/roles/kubectlKarpenterAgent", &member)
        );
        let account = state.iam.account(email).unwrap();
        assert!(account.policy.has(
            "roles/iam.workloadIdentityUser",
            "serviceAccount:init-demo.svc.id.goog[gcp-wi-system/karpenter]"
        ));
        assert!(account.keys.is_empty(), "Workload Identity needs no key");
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(rig().client().await, ns);
    let sa = accounts
        .get("karpenter")
        .await
        .expect("the agent's service account");
    assert_eq!(
        sa.metadata
            .annotations
            .unwrap_or_default()
            .get("iam.gke.io/gcp-service-account")
            .map(String::as_str),
        Some(email)
    );

    // Once more: everything in place, nothing written, and it says so; a dry run agrees.
    let before = fake.state().requests.len();
    let out = init_gcp(&fake, cwd.path(), &args(&["--yes"])).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Everything is already in place; nothing changed."),
        "{stderr}"
    );
    let out = init_gcp(&fake, cwd.path(), &args(&["--dry-run"])).await;
    assert!(
        text(&out.stderr).contains("everything is in place"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        writes_since(&fake, before).is_empty(),
        "{:?}",
        writes_since(&fake, before)
    );
    assert!(
        std::fs::read_dir(cwd.path()).unwrap().next().is_none(),
        "nothing written to disk"
    );

    rig().kubectl_ok(&["delete", "namespace", ns, "--wait=false"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_gcp_with_a_key_keeps_it_only_in_a_secret_and_a_rerun_makes_no_second_key() {
    let _guard = EXCLUSIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let fake = FakeGcp::start().await.expect("start the fake");
    fake.state()
        .resource_manager
        .seed_project(PROJECT, 123_456_789_012);
    fake.state()
        .container
        .seed_cluster(PROJECT, "us-central1", "key-demo", false, "default");
    let cwd = tempfile::tempdir().expect("temp dir");
    let ns = "gcp-key-system";
    let args = [
        "--project",
        PROJECT,
        "--cluster",
        "key-demo",
        "-n",
        ns,
        "--auth",
        "key",
        "--yes",
    ];
    let email = "karpenter-key-demo@init-demo.iam.gserviceaccount.com";

    // The caller may not create keys: the run stops at the last step, and a re-run completes it.
    fake.state()
        .resource_manager
        .denials
        .deny("iam.serviceAccountKeys.create");
    let out = init_gcp(&fake, cwd.path(), &args).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.lines().last().unwrap().contains(
            "step service-account-key failed: permission denied: iam.serviceAccountKeys.create"
        ),
        "{stderr}"
    );
    fake.state().resource_manager.denials.allow_all();

    let out = init_gcp(&fake, cwd.path(), &args).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("+ service-account-key: done"), "{stderr}");
    assert!(!stderr.contains("workload-identity"), "{stderr}");

    // The key file is in the Secret...
    let (key_id, key_file) = {
        let state = fake.state();
        let account = state.iam.account(email).expect("account");
        assert_eq!(account.keys.len(), 1);
        let (id, file) = account.keys.iter().next().unwrap();
        (id.clone(), file.clone())
    };
    let secrets: Api<Secret> = Api::namespaced(rig().client().await, ns);
    let secret = secrets
        .get("karpenter-gcp-credentials")
        .await
        .expect("the key's Secret");
    let stored: serde_json::Value =
        serde_json::from_slice(&secret.data.unwrap()["key.json"].0).expect("key.json is JSON");
    assert_eq!(stored, key_file);
    // ...and nowhere else: not on stdout, not on stderr, not on disk.
    let private_key = key_file["private_key"].as_str().unwrap();
    let secret_part = private_key.lines().nth(1).unwrap();
    for (name, output) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            !output.contains(secret_part)
                && !output.contains("PRIVATE KEY")
                && !output.contains(&key_id),
            "the key is on {name}:\n{output}"
        );
    }
    assert!(
        std::fs::read_dir(cwd.path()).unwrap().next().is_none(),
        "nothing written to disk"
    );
    let deployment = rig().kubectl_ok(&[
        "get",
        "deployment",
        "karpenter-agent",
        "-n",
        ns,
        "-o",
        "json",
    ]);
    assert!(
        deployment.contains("GOOGLE_APPLICATION_CREDENTIALS")
            && deployment.contains("karpenter-gcp-credentials"),
        "{deployment}"
    );

    // A re-run finds the key in place and makes no second one.
    let before = fake.state().requests.len();
    let out = init_gcp(&fake, cwd.path(), &args).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Everything is already in place; nothing changed."),
        "{stderr}"
    );
    assert_eq!(fake.state().iam.account(email).unwrap().keys.len(), 1);
    assert!(
        writes_since(&fake, before).is_empty(),
        "{:?}",
        writes_since(&fake, before)
    );

    // The key lives only in the cluster's Secret: --gitops, which writes files, refuses it
    // before touching anything.
    let before = fake.state().requests.len();
    let gitops = cwd.path().join("gitops");
    let gitops_args: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--gitops", "--output-dir", gitops.to_str().unwrap()])
        .collect();
    let out = init_gcp(&fake, cwd.path(), &gitops_args).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("use Workload Identity (the default) with --gitops"),
        "{stderr}"
    );
    assert!(!gitops.exists());
    assert_eq!(fake.state().requests.len(), before);

    rig().kubectl_ok(&["delete", "namespace", ns, "--wait=false"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_init_gcp_asks_for_a_missing_flag_and_changes_nothing_unless_confirmed() {
    // `script` (util-linux) gives the plugin a terminal; without it this cannot be tested.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to make a terminal with");
        return;
    }
    let _guard = EXCLUSIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let fake = FakeGcp::start().await.expect("start the fake");
    fake.state()
        .resource_manager
        .seed_project(PROJECT, 123_456_789_012);
    fake.state()
        .container
        .seed_cluster(PROJECT, "us-central1", "tty-demo", true, "default");
    let line = format!(
        "{} init gcp --cluster tty-demo --location us-central1 --endpoint-url {} -n gcp-tty-system --image karpenter-agent:test",
        env!("CARGO_BIN_EXE_kubectl-karpenter"),
        fake.endpoint()
    );
    let mut command = Command::new("script");
    command
        .args(["-qec", &line, "/dev/null"])
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("NO_COLOR", "1")
        .env_remove("CLOUDSDK_CORE_PROJECT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = command.spawn().expect("run script");
        // The project when asked, then "n" when asked to confirm.
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(format!("{PROJECT}\nn").as_bytes())
            .expect("type");
        child.wait_with_output().expect("wait")
    })
    .await
    .expect("join");
    let terminal = text(&out.stdout);
    assert!(terminal.contains("Google Cloud project id"), "{terminal}");
    assert!(
        terminal.contains("Plan for GKE cluster tty-demo in us-central1, project init-demo"),
        "{terminal}"
    );
    assert!(terminal.contains("Apply these 9 changes?"), "{terminal}");
    assert!(
        terminal.contains("error: not confirmed; nothing changed"),
        "{terminal}"
    );
    assert!(
        writes_since(&fake, 0).is_empty(),
        "{:?}",
        writes_since(&fake, 0)
    );
}
