//! The plugin on claims the agent made: the agent runs in this process with the kwok provider
//! (`karpenter_core::controllers::run`, as `tests/kwok` runs it) on a rig of this test binary's
//! own, a Deployment goes pending, and `status -w`, `status` and `explain` report what happens.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use karpenter_core::apis::{NodeClaim, labels};
use karpenter_core::cloud::kwok::KwokProvider;
use karpenter_core::controllers::{self, Settings};
use karpenter_core::metrics::Metrics;
use karpenter_test_support::rig::rig;
use kube::api::{Api, ListParams};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn apply(yaml: &str) {
    let out = rig().kubectl_with_input(&["apply", "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn plugin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"));
    c.env("KUBECONFIG", &rig().kubeconfig).env("NO_COLOR", "1");
    c
}

fn stdout_ok(args: &[&str]) -> String {
    let out = plugin().args(args).output().expect("run kubectl-karpenter");
    assert!(
        out.status.success(),
        "kubectl-karpenter {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

const POOL: &str = r#"
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: plugin-e2e}
spec: {}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: plugin-e2e}
spec:
  limits: {cpu: "64"}
  template:
    metadata: {labels: {test-pool: plugin-e2e}}
    spec:
      requirements: [{key: kubernetes.io/os, operator: In, values: [linux]}]
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: plugin-e2e}
"#;

const PODS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: e2e}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: e2e}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {test-pool: plugin-e2e}
      containers: [{name: pause, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "1"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: huge, namespace: e2e}
spec:
  nodeSelector: {test-pool: plugin-e2e}
  containers: [{name: pause, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "500"}}}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_status_and_explain_follow_the_claims_the_agent_makes() {
    let client = rig().client().await;
    apply(POOL);
    // `status -w` before the pods, so it sees the claims appear and come up.
    let mut watch = plugin()
        .args(["status", "-w", "--nodepool", "plugin-e2e"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start status -w");
    let stdout = watch.stdout.take().expect("stdout");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });

    let agent = tokio::spawn({
        let client = client.clone();
        async move {
            let provider = Arc::new(KwokProvider::new(client.clone()));
            let _ = controllers::run(
                client,
                provider,
                Settings::default(),
                Arc::new(Metrics::new()),
            )
            .await;
        }
    });
    apply(PODS);

    // The watch prints a row per state change; wait for a claim of the pool to reach Ready.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut seen: Vec<String> = Vec::new();
    while !seen
        .iter()
        .any(|l| l.starts_with("plugin-e2e-") && l.contains(" Ready "))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(e) => panic!(
                "no Ready row from status -w within 90s ({e}); saw:\n{}",
                seen.join("\n")
            ),
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        seen.iter().any(|l| l.starts_with("plugin-e2e-")
            && (l.contains("Launching")
                || l.contains("Registering")
                || l.contains("Initializing")
                || l.contains("Pending"))),
        "the watch showed the claim coming up, not only the end:\n{}",
        seen.join("\n")
    );

    // Wait until every web pod runs and a claim is initialized, then read the screen.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "e2e");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .expect("pods");
        if list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count()
            == 3
        {
            break;
        }
        assert!(Instant::now() < deadline, "web pods did not run");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let claims: Api<NodeClaim> = Api::all(client.clone());
    // Initialized can trail the pods by a moment (it waits for the node's not-ready taint to go).
    let deadline = Instant::now() + Duration::from_secs(60);
    let claim = loop {
        let ours = claims
            .list(&ListParams::default().labels(&format!("{}=plugin-e2e", labels::NODE_POOL)))
            .await
            .expect("claims")
            .items;
        if let Some(claim) = ours.into_iter().find(|c| c.is_true("Initialized")) {
            break claim;
        }
        assert!(Instant::now() < deadline, "no claim was initialized");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let name = claim.metadata.name.clone().expect("name");
    // Read once the claim is initialized: a row shows the claim's conditions, which can trail
    // the pods (above), and read earlier it can say Initializing.
    let table = stdout_ok(&["status", "--nodepool", "plugin-e2e"]);
    let huge = table
        .lines()
        .find(|l| l.contains(" huge "))
        .unwrap_or_else(|| panic!("the huge pod is listed as pending:\n{table}"));
    assert!(
        huge.contains("FailedScheduling") || huge.contains("Unschedulable"),
        "{huge}"
    );
    let row = table
        .lines()
        .find(|l| l.starts_with(&name))
        .unwrap_or_else(|| panic!("{name} missing:\n{table}"));
    assert!(
        row.contains("Ready") && row.contains('$'),
        "a ready, priced row: {row}"
    );

    let text = stdout_ok(&["explain", "nodeclaim", &name]);
    assert!(text.contains("created by karpenter-agent for"), "{text}");
    assert!(
        text.contains("e2e         web-"),
        "names the web pods it was made for:\n{text}"
    );
    let launched = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::INSTANCE_TYPE))
        .expect("instance type");
    let option_row = text
        .lines()
        .find(|l| l.trim_start().starts_with('*'))
        .unwrap_or_else(|| panic!("no launched option:\n{text}"));
    assert!(
        option_row.contains(launched.as_str()) && option_row.contains("launched"),
        "{option_row}"
    );
    assert!(
        text.contains("Launched=True") && text.contains("Initialized=True"),
        "{text}"
    );

    agent.abort();
}
