//! `kubectl karpenter status` on a big cluster: fills a rig of its own with 1,000 kwok Nodes and
//! their NodeClaims (in our shape, Ready), 10,000 pods bound to them via `spec.nodeName`, and 50
//! pending pods, then times the built binary and counts its API calls two ways: the plugin's own
//! count (`-v`) and the API server's `apiserver_request_total` for LISTs.
//!
//! A figure, not a gate on every run (it takes minutes): `plugin/tests/status-scale` runs it.
//! `KUBECTL_KARPENTER_BIN` times another binary (e.g. a release build); `SCALE_NODES` and
//! `SCALE_PODS_PER_NODE` change the size; `SCALE_SETTLE_SECS` (90) is the pause between every
//! pod Running and the first measurement. Past a couple of thousand Nodes, also set
//! `RIG_NODE_LEASE_SECONDS=300` (tests/rig/README.md): with 40 s Leases kwok cannot renew them
//! all on two cores, and Nodes lapsing to NotReady would be measured instead.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_test_support::rig::rig;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn create_all<K>(api: &Api<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let results: Vec<_> = futures::stream::iter(objects.into_iter().map(|o| {
        let api = api.clone();
        async move { api.create(&PostParams::default(), &o).await }
    }))
    .buffer_unordered(32)
    .collect()
    .await;
    for r in results {
        if let Err(e) = r {
            assert!(
                matches!(&e, kube::Error::Api(s) if s.code == 409),
                "create failed: {e}"
            );
        }
    }
}

fn object<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("object")
}

/// LIST requests the API server counted, by resource.
fn list_counts() -> BTreeMap<String, f64> {
    let metrics = rig().kubectl_ok(&["get", "--raw", "/metrics"]);
    let mut counts = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("verb=\"LIST\""))
    {
        let resource = line
            .split("resource=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_default()
            .to_owned();
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_default();
        *counts.entry(resource).or_insert(0.0) += value;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fills a rig with 11,000 objects; run by plugin/tests/status-scale"]
async fn status_on_a_thousand_nodes_and_ten_thousand_pods() {
    let nodes_wanted = env_or("SCALE_NODES", 1000);
    let pods_per_node = env_or("SCALE_PODS_PER_NODE", 10);
    let client = rig().client().await;
    let filled = Instant::now();

    let pools = ["alpha", "beta", "gamma", "delta"];
    for pool in pools {
        let yaml = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {pool}}}\nspec:\n  limits: {{cpu: '10000', memory: 40000Gi}}\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}\n"
        );
        let out = rig().kubectl_with_input(&["apply", "-f", "-"], &yaml);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let options = r#"[{"name":"m5.xlarge","price":0.192,"zone":"us-west-2a","capacityType":"on-demand"},{"name":"c5.2xlarge","price":0.34,"zone":"us-west-2a","capacityType":"on-demand"}]"#;
    let name = |i: usize| format!("{}-{i:05}", pools[i % pools.len()]);
    let nodes: Vec<Node> = (0..nodes_wanted)
        .map(|i| {
            object(json!({
                "metadata": {"name": name(i), "annotations": {labels::KWOK_NODE: labels::KWOK_NODE_FAKE},
                    "labels": {labels::KWOK_NODE: labels::KWOK_NODE_FAKE, labels::INSTANCE_PRICE: "0.1920", labels::NODE_POOL: pools[i % pools.len()],
                               labels::INSTANCE_TYPE: "m5.xlarge", labels::ZONE: "us-west-2a", labels::CAPACITY_TYPE: "on-demand"}},
                "spec": {"providerID": format!("kwok://{}", name(i))},
                "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}, "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "110"}},
            }))
        })
        .collect();
    create_all(&Api::<Node>::all(client.clone()), nodes).await;
    let claims: Vec<NodeClaim> = (0..nodes_wanted)
        .map(|i| {
            object(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name(i),
                    "labels": {labels::NODE_POOL: pools[i % pools.len()], labels::INSTANCE_TYPE: "m5.xlarge", labels::ZONE: "us-west-2a", labels::CAPACITY_TYPE: "on-demand"},
                    "annotations": {labels::PROVISIONED_FOR: format!("[\"load/p-{i}-0\"]"), labels::INSTANCE_TYPE_OPTIONS: options}},
                "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
            }))
        })
        .collect();
    let claims_api: Api<NodeClaim> = Api::all(client.clone());
    create_all(&claims_api, claims).await;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let condition = |t: &str| json!({"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": now});
    let patched: Vec<_> = futures::stream::iter((0..nodes_wanted).map(|i| {
        let api = claims_api.clone();
        let status = json!({"status": {"nodeName": name(i), "providerID": format!("kwok://{}", name(i)), "capacity": {"cpu": "4", "memory": "16Gi"},
            "conditions": [condition("Launched"), condition("Registered"), condition("Initialized"), condition("Ready")]}});
        async move { api.patch_status(&name(i), &PatchParams::default(), &Patch::Merge(&status)).await }
    }))
    .buffer_unordered(32)
    .collect()
    .await;
    assert!(patched.iter().all(Result::is_ok), "status patches failed");

    let namespace: Namespace = object(json!({"metadata": {"name": "load"}}));
    create_all(&Api::<Namespace>::all(client.clone()), vec![namespace]).await;
    let pod = |name: String, node: Option<String>| -> Pod {
        let mut spec = json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}],
                              "tolerations": [{"operator": "Exists"}]});
        match node {
            Some(n) => spec["nodeName"] = json!(n),
            None => spec["nodeSelector"] = json!({"no-such-label": "true"}),
        }
        object(
            json!({"metadata": {"name": name, "namespace": "load", "labels": {"app": "load"}}, "spec": spec}),
        )
    };
    let mut pods: Vec<Pod> = (0..nodes_wanted)
        .flat_map(|i| (0..pods_per_node).map(move |j| (i, j)))
        .map(|(i, j)| pod(format!("p-{i}-{j}"), Some(name(i))))
        .collect();
    pods.extend((0..50).map(|i| pod(format!("pending-{i}"), None)));
    create_all(&Api::<Pod>::namespaced(client.clone(), "load"), pods).await;
    println!("filled the rig in {:.1}s", filled.elapsed().as_secs_f64());
    // Measure a settled cluster, not one still starting: wait until kwok has every bound pod
    // Running (about 50 s for 10,000 pods on 2 cores), then until the API server and the
    // controllers have worked off the follow-up writes. On the 2-core rig the median was
    // 320 ms 20 s after the last pod ran, 189 ms after 90 s: the difference is the rig, not status.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "load");
    let bound = nodes_wanted * pods_per_node;
    let waiting = Instant::now();
    loop {
        let running = pods_api
            .list_metadata(&ListParams::default().fields("status.phase=Running"))
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if running >= bound || waiting.elapsed() > Duration::from_secs(600) {
            println!(
                "{running} of {bound} bound pods Running after {:.1}s",
                waiting.elapsed().as_secs_f64()
            );
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(env_or("SCALE_SETTLE_SECS", 90) as u64)).await;

    let binary = std::env::var("KUBECTL_KARPENTER_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kubectl-karpenter").to_owned());
    let run = || {
        let started = Instant::now();
        let out = std::process::Command::new(&binary)
            .args(["status", "-v"])
            .env("KUBECONFIG", &rig().kubeconfig)
            .output()
            .expect("run kubectl-karpenter");
        let elapsed = started.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            elapsed,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    run(); // warm the API server's caches and the page cache
    let before = list_counts();
    let (_, stdout, stderr) = run();
    let after = list_counts();
    let lists: BTreeMap<&String, f64> = after
        .iter()
        .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    let mut times: Vec<Duration> = (0..7).map(|_| run().0).collect();
    times.sort();
    let median = times[times.len() / 2];
    // The floor, measured alongside: the API server serving the same five lists to the rig's
    // own kubectl (`get --raw`, concurrently, no decoding), as a ratio, since absolute times
    // swing with whatever else the machine runs.
    let floor = || {
        let started = Instant::now();
        // The requests status makes: from the watch cache, events only in the one namespace
        // whose pods wait.
        let urls = [
            "/apis/karpenter.sh/v1/nodepools?resourceVersion=0",
            "/apis/karpenter.sh/v1/nodeclaims?resourceVersion=0",
            "/api/v1/nodes?resourceVersion=0",
            "/api/v1/pods?fieldSelector=spec.nodeName%3D&resourceVersion=0",
            "/api/v1/namespaces/load/events?fieldSelector=reason%3DFailedScheduling&resourceVersion=0",
        ];
        let children: Vec<_> = urls
            .iter()
            .map(|u| {
                rig()
                    .kubectl()
                    .args(["get", "--raw", u])
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .expect("kubectl get --raw")
            })
            .collect();
        for mut child in children {
            assert!(child.wait().expect("kubectl").success());
        }
        started.elapsed()
    };
    let mut floors: Vec<Duration> = (0..7).map(|_| floor()).collect();
    floors.sort();
    let floor_median = floors[floors.len() / 2];
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let calls = stderr
        .lines()
        .find(|l| l.contains("API calls in"))
        .unwrap_or_default()
        .to_owned();
    let total = stdout
        .lines()
        .find(|l| l.starts_with("TOTAL"))
        .unwrap_or_default()
        .to_owned();
    println!("binary: {binary}");
    println!(
        "cluster: {nodes_wanted} nodes and nodeclaims, {} bound pods, 50 pending",
        nodes_wanted * pods_per_node
    );
    println!(
        "status wall time over 7 runs: min {} ms, median {} ms, max {} ms",
        times[0].as_millis(),
        median.as_millis(),
        times[6].as_millis()
    );
    println!(
        "the same five lists through kubectl get --raw (the floor): median {} ms; status / floor = {:.2}",
        floor_median.as_millis(),
        median.as_secs_f64() / floor_median.as_secs_f64()
    );
    println!(
        "load average while measuring: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("plugin's count: {calls}");
    println!("API server LISTs during one run (other clients included): {lists:?}");
    println!("{total}");
    assert!(
        calls.starts_with("5 API calls"),
        "one list per kind: {calls}"
    );
    let claims: usize = total
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_default();
    assert!(
        claims >= nodes_wanted,
        "status counted {claims} nodeclaims: {total}"
    );
    if let Some(budget) = std::env::var("SCALE_BUDGET_MS")
        .ok()
        .and_then(|v| v.parse::<u128>().ok())
    {
        assert!(
            median.as_millis() <= budget,
            "median {} ms over the {budget} ms budget",
            median.as_millis()
        );
    }
}
