//! `kubectl karpenter migrate cluster-autoscaler` reading GKE node pools from the GKE API (the
//! project's GCP fake) as well as from the rig's Nodes: a pool's autoscaling limits (per zone, or
//! total) become its NodePool's CPU limit, its configured labels, taints, zones and spot carry
//! over, a pool scaled to zero (no node to read) still gets its NodePool, a pool Cluster
//! Autoscaler does not resize is said to be one, and an API the caller may not read falls back
//! to the Nodes with a note naming the missing permission.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use gcp_fake::FakeGcp;
use gcp_fake::container::{Autoscaling, NodePoolSeed};
use karpenter_test_support::rig::rig;
use serde_json::{Value, json};
use std::process::{Command, Output};

const PROJECT: &str = "migrate-demo";
const LOCATION: &str = "us-central1";
const CLUSTER: &str = "migrate-gke";
const NODE: &str = "gke-migrate-gke-general-1";

async fn migrate(fake: &FakeGcp) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubectl-karpenter"));
    command
        .args(["migrate", "cluster-autoscaler", "--cluster", CLUSTER])
        .args(["--project", PROJECT, "--location", LOCATION])
        .args(["--endpoint-url", &fake.endpoint()])
        .env("KUBECONFIG", &rig().kubeconfig)
        .env("NO_COLOR", "1");
    // The fake serves from this runtime while the binary runs.
    tokio::task::spawn_blocking(move || command.output().expect("run kubectl-karpenter"))
        .await
        .expect("join")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct CleanUp;

impl Drop for CleanUp {
    fn drop(&mut self) {
        let _ = rig()
            .kubectl()
            .args(["delete", "node", NODE, "--ignore-not-found"])
            .output();
    }
}

fn pool<'a>(objects: &'a [Value], name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == "NodePool" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no NodePool {name}"))
}

fn requirement<'a>(pool: &'a Value, key: &str) -> &'a Value {
    pool["spec"]["template"]["spec"]["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no requirement {key} in {pool:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gke_node_pools_give_limits_from_their_autoscaling_and_pools_for_empty_ones() {
    let _clean = CleanUp;
    let fake = FakeGcp::start().await.expect("start the fake");
    {
        let mut state = fake.state();
        state
            .resource_manager
            .seed_project(PROJECT, 210_987_654_321);
        state
            .container
            .seed_cluster(PROJECT, LOCATION, CLUSTER, true, "nodes");
        state.container.seed_node_pool(
            PROJECT,
            LOCATION,
            CLUSTER,
            &NodePoolSeed {
                name: "general",
                machine_type: "e2-standard-4",
                locations: &[],
                node_count: 1,
                autoscaling: Autoscaling::PerZone { min: 0, max: 3 },
                spot: false,
                labels: &[("team", "web")],
                taints: &[("dedicated", "web", "NoSchedule")],
            },
        );
        state.container.seed_node_pool(
            PROJECT,
            LOCATION,
            CLUSTER,
            &NodePoolSeed {
                name: "spot-arm",
                machine_type: "t2a-standard-4",
                locations: &["us-central1-a", "us-central1-b"],
                node_count: 0,
                autoscaling: Autoscaling::Total { min: 0, max: 5 },
                spot: true,
                labels: &[],
                taints: &[],
            },
        );
        state.container.seed_node_pool(
            PROJECT,
            LOCATION,
            CLUSTER,
            &NodePoolSeed {
                name: "fixed",
                machine_type: "n2-standard-8",
                locations: &["us-central1-f"],
                node_count: 2,
                autoscaling: Autoscaling::Off,
                spot: false,
                labels: &[],
                taints: &[],
            },
        );
    }
    // The one node of "general" today, as its kubelet and GKE label it.
    let node = format!(
        r#"
apiVersion: v1
kind: Node
metadata:
  name: {NODE}
  labels:
    kubernetes.io/hostname: {NODE}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: e2-standard-4
    topology.kubernetes.io/zone: us-central1-a
    cloud.google.com/gke-nodepool: general
    cloud.google.com/machine-family: e2
    team: web
spec:
  taints: [{{key: dedicated, value: web, effect: NoSchedule}}]
status:
  capacity: {{cpu: "4", memory: 16Gi, pods: "110"}}
  allocatable: {{cpu: 3920m, memory: 13Gi, pods: "110"}}
"#
    );
    let applied = rig().kubectl_with_input(&["apply", "-f", "-"], &node);
    assert!(applied.status.success(), "{}", text(&applied.stderr));

    let out = migrate(&fake).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("read 3 node pools from the GKE API"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Found 3 node groups, on 1 nodes"),
        "{stderr}"
    );
    let objects: Vec<Value> = serde_saphyr::from_multiple(&stdout).expect("YAML");
    let general = pool(&objects, "general");
    // 3 nodes in each of the region's 3 zones, 4 CPUs each.
    assert_eq!(general["spec"]["limits"]["cpu"], "36");
    assert_eq!(
        general["spec"]["template"]["spec"]["taints"],
        json!([{"key": "dedicated", "value": "web", "effect": "NoSchedule"}])
    );
    assert_eq!(
        general["spec"]["template"]["metadata"]["labels"],
        json!({"team": "web"})
    );
    assert_eq!(
        requirement(general, "topology.kubernetes.io/zone")["values"],
        json!(["us-central1-a", "us-central1-b", "us-central1-c"])
    );
    let spot = pool(&objects, "spot-arm");
    // 5 nodes in all (a total limit), 4 vCPUs each, though none runs today.
    assert_eq!(spot["spec"]["limits"]["cpu"], "20");
    assert_eq!(
        requirement(spot, "kubernetes.io/arch")["values"],
        json!(["arm64"])
    );
    assert_eq!(
        requirement(spot, "karpenter.sh/capacity-type")["values"],
        json!(["spot"])
    );
    assert_eq!(
        requirement(spot, "topology.kubernetes.io/zone")["values"],
        json!(["us-central1-a", "us-central1-b"])
    );
    let fixed = pool(&objects, "fixed");
    assert_eq!(fixed["spec"]["limits"]["cpu"], "16");
    assert!(
        stderr.contains("GKE node pool fixed: autoscaling is off"),
        "{stderr}"
    );
    // GKE's Cluster Autoscaler is turned off in GKE, for the pools it scales.
    assert!(
        stderr.contains("gcloud container node-pools update general --cluster migrate-gke --location us-central1 --no-enable-autoscaling"),
        "{stderr}"
    );
    assert!(!stderr.contains("node-pools update fixed"), "{stderr}");
    assert!(
        !stderr.contains("scale deployment cluster-autoscaler"),
        "{stderr}"
    );
    let dry = rig().kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], &stdout);
    assert!(dry.status.success(), "{}", text(&dry.stderr));

    // Without container.clusters.get the Nodes are read alone, and the note says why.
    fake.state()
        .resource_manager
        .denials
        .deny("container.clusters.get");
    let out = migrate(&fake).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the GKE API could not be read (permission denied: container.clusters.get"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Found 1 node groups, on 1 nodes"),
        "{stderr}"
    );
}
