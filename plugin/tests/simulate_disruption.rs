//! `simulate --from-cluster --disruption` on nodes the agent made: the agent runs in this
//! process with the kwok provider on a rig of this test binary's own, launches a node per pod
//! of a Deployment, and the Deployment shrinks. Its NodePool waits an hour before
//! consolidating, so the simulation says nothing goes yet and why; the same NodePool with
//! `consolidateAfter: 0s`, passed as a what-if, shows the empty nodes going and what that saves,
//! while the cluster itself stays as it was.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use karpenter_core::apis::{NodeClaim, labels};
use karpenter_core::cloud::kwok::KwokProvider;
use karpenter_core::controllers::{self, Settings};
use karpenter_core::metrics::Metrics;
use karpenter_test_support::rig::rig;
use kube::api::{Api, ListParams};
use serde_json::Value;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const POOL: &str = "sim-disrupt";
const NAMESPACE: &str = "sim-disrupt";

fn apply(yaml: &str) {
    let out = rig().kubectl_with_input(&["apply", "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The NodePool: m5.large on demand only, consolidating `consolidate_after` after a pod event.
fn pool(consolidate_after: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {POOL}}}
spec:
  disruption: {{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: {consolidate_after}}}
  template:
    metadata: {{labels: {{test-pool: {POOL}}}}}
    spec:
      requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: {POOL}}}
"#
    )
}

fn deployment(replicas: u32) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {NAMESPACE}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{test-pool: {POOL}}}
      containers: [{{name: pause, image: registry.k8s.io/pause:3.10, resources: {{requests: {{cpu: 1500m}}}}}}]
"#
    )
}

fn simulate(extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"))
        .args(["simulate", "--from-cluster", "--disruption"])
        .args(extra)
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("NO_COLOR", "1")
        .output()
        .expect("run kubectl-karpenter")
}

fn report(extra: &[&str]) -> Value {
    let out = simulate(&[extra, &["-o", "json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

async fn initialized_claims(claims: &Api<NodeClaim>) -> usize {
    claims
        .list(&ListParams::default().labels(&format!("{}={POOL}", labels::NODE_POOL)))
        .await
        .expect("claims")
        .items
        .iter()
        .filter(|c| c.is_true("Initialized") && c.metadata.deletion_timestamp.is_none())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disruption_shows_what_consolidation_would_remove_and_save_without_touching_the_cluster() {
    let client = rig().client().await;
    apply(&format!(
        "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {{name: {POOL}}}\nspec: {{}}\n---\n{}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {NAMESPACE}}}\n---\n{}",
        pool("1h"),
        deployment(4)
    ));
    let _agent = tokio::spawn({
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

    // One m5.large (2 CPUs) per 1.5-CPU pod: four nodes.
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(120);
    while initialized_claims(&claims).await < 4 {
        assert!(
            Instant::now() < deadline,
            "four claims were not initialized"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Three pods go: three empty nodes, which the pool keeps for an hour.
    apply(&deployment(1));
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(60);
    while pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("pods")
        .items
        .len()
        > 1
    {
        assert!(Instant::now() < deadline, "the Deployment did not shrink");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let waiting = report(&[]);
    let plan = &waiting["disruption"];
    assert_eq!(plan["steps"].as_array().unwrap().len(), 0, "{plan:#}");
    let ours: Vec<&Value> = plan["kept"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["nodePool"] == POOL)
        .collect();
    assert_eq!(ours.len(), 4, "{plan:#}");
    let waiting_out = ours
        .iter()
        .filter(|k| {
            k["why"]
                .as_str()
                .unwrap()
                .contains("consolidateAfter is 1h")
        })
        .count();
    assert!(
        waiting_out >= 3,
        "the empty nodes wait out the hour: {plan:#}"
    );

    // What if the pool consolidated at once: the three empty nodes go, one pass at a time as
    // the default budget (10%) allows, and save three m5.large's on-demand price.
    let dir = tempfile::tempdir().unwrap();
    let what_if = dir.path().join("now.yaml");
    std::fs::write(&what_if, pool("0s")).unwrap();
    let what_if = what_if.to_str().unwrap();
    let now = report(&["--nodepool", what_if]);
    let plan = &now["disruption"];
    let steps = plan["steps"].as_array().unwrap();
    let removed: Vec<&Value> = steps
        .iter()
        .filter(|s| s["method"] == "Emptiness")
        .flat_map(|s| s["removed"].as_array().unwrap())
        .filter(|r| r["nodePool"] == POOL)
        .collect();
    assert_eq!(removed.len(), 3, "{plan:#}");
    assert!(
        removed.iter().all(|r| r["instanceType"] == "m5.large"),
        "{plan:#}"
    );
    let saved = plan["savingsPerHour"].as_f64().unwrap();
    assert!((saved - 3.0 * 0.096).abs() < 1e-6, "{plan:#}");

    // The table says the same.
    let out = simulate(&["--nodepool", what_if]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("Emptiness"), "{table}");
    assert!(
        table.contains("SAVES   3 nodes removed, 0 launched   $0.2880/hour"),
        "{table}"
    );

    // Nothing was disrupted: the simulation read the cluster and wrote nothing.
    assert_eq!(initialized_claims(&claims).await, 4);
}
