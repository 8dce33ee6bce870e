//! `cargo bench --bench scheduling`: upstream Karpenter's scheduling benchmark workload, run
//! through [`karpenter_core::scheduling::schedule`], printed as a table.
//!
//! The workload mirrors `scheduling_benchmark_test.go` (build tag `test_performance`) in
//! `sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling`:
//!
//! * 400 instance types from `fake.InstanceTypes(400)` (see `fake.rs`, shared with the
//!   disruption benchmark);
//! * one NodePool without requirements, limits cpu=10000000 and memory=10000000Gi;
//! * `makeDiversePods(n)`: fifths of generic pods, zonal topology spread, hostname topology
//!   spread, zonal self-affinity and hostname anti-affinity; CPU from {100, 250, 500, 1000,
//!   1500}m and memory from {100, 256, 512, 1024, 2048, 4096}Mi, labels from seven values —
//!   drawn from a fixed-seed generator (upstream uses Go's `math/rand` seeded 42, so the
//!   individual draws differ but the distribution is the same).
//!
//! Timing covers the whole `schedule()` call (parsing pods, building indexes, packing,
//! explanations); upstream's covers only `Solve` (its topology set-up runs before the timer).
//! Each size runs until at least one second has passed. `--machine` prints one `RESULT` line
//! per size for `tests/benches/compare-upstream`; `--sizes 1,50,...` picks sizes.

mod fake;

use fake::{Rng, catalogue};
use k8s_openapi::api::core::v1::Pod;
use karpenter_core::apis::NodePool;
use karpenter_core::scheduling::InstanceType;
use karpenter_core::scheduling::{Input, PoolInput, schedule};
use serde_json::json;
use std::time::{Duration, Instant};

const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];
const CPU_MILLIS: [u32; 5] = [100, 250, 500, 1000, 1500];
const MEMORY_MIB: [u32; 6] = [100, 256, 512, 1024, 2048, 4096];

fn node_pool() -> NodePool {
    let value = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {
            "limits": {"cpu": "10000000", "memory": "10000000Gi"},
            "template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.test.sh", "kind": "TestNodeClass", "name": "default"}}}
        }
    });
    serde_json::from_value(value)
        .unwrap_or_else(|e| unreachable!("the benchmark NodePool is valid: {e}"))
}

fn pod(rng: &mut Rng, i: usize, labels: serde_json::Value, spec: serde_json::Value) -> Pod {
    let cpu = *rng.pick(&CPU_MILLIS);
    let mem = *rng.pick(&MEMORY_MIB);
    let mut value = json!({
        "metadata": {"name": format!("pod-{i}"), "namespace": "default", "labels": labels, "uid": format!("uid-{i}")},
        "spec": {"containers": [{"name": "app", "image": "nginx",
            "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": format!("{mem}Mi")}}}]},
        "status": {"phase": "Pending"}
    });
    if let Some(extra) = spec.as_object() {
        for (k, v) in extra {
            value["spec"][k] = v.clone();
        }
    }
    serde_json::from_value(value).unwrap_or_else(|e| unreachable!("benchmark pods are valid: {e}"))
}

/// `makeDiversePods(count)`.
fn diverse_pods(count: usize, rng: &mut Rng) -> Vec<Pod> {
    let fifth = count / 5;
    let mut pods = Vec::with_capacity(count);
    let generic = |pods: &mut Vec<Pod>, n: usize, rng: &mut Rng| {
        for _ in 0..n {
            let labels = json!({"my-label": rng.pick(&LABEL_VALUES)});
            let i = pods.len();
            pods.push(pod(rng, i, labels, json!({})));
        }
    };
    generic(&mut pods, fifth, rng);
    for key in ["topology.kubernetes.io/zone", "kubernetes.io/hostname"] {
        for _ in 0..fifth {
            let labels = json!({"my-label": rng.pick(&LABEL_VALUES)});
            let selector = json!({"my-label": rng.pick(&LABEL_VALUES)});
            let spec = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": selector}}]});
            let i = pods.len();
            pods.push(pod(rng, i, labels, spec));
        }
    }
    for _ in 0..fifth {
        let labels = json!({"my-affininity": rng.pick(&LABEL_VALUES)});
        let spec = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels.clone()}, "topologyKey": "topology.kubernetes.io/zone"}]}}});
        let i = pods.len();
        pods.push(pod(rng, i, labels, spec));
    }
    for _ in 0..fifth {
        let labels = json!({"app": "nginx"});
        let spec = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels.clone()}, "topologyKey": "kubernetes.io/hostname"}]}}});
        let i = pods.len();
        pods.push(pod(rng, i, labels, spec));
    }
    let rest = count - pods.len();
    generic(&mut pods, rest, rng);
    pods
}

struct Row {
    pods: usize,
    iterations: u32,
    per_op: Duration,
    nodes: usize,
    price: f64,
    unschedulable: usize,
}

fn measure(count: usize, np: &NodePool, types: &[InstanceType]) -> Row {
    let mut rng = Rng(42);
    let pods = diverse_pods(count, &mut rng);
    let input = Input {
        pods: pods.iter().collect(),
        node_pools: vec![PoolInput::new(np, types)],
        ..Input::default()
    };
    let plan = schedule(&input);
    let (mut iterations, started) = (0_u32, Instant::now());
    while iterations == 0 || (started.elapsed() < Duration::from_secs(1) && iterations < 10_000) {
        std::hint::black_box(schedule(std::hint::black_box(&input)));
        iterations += 1;
    }
    Row {
        pods: count,
        iterations,
        per_op: started.elapsed() / iterations,
        nodes: plan.new_claims.len(),
        price: plan.total_price(),
        unschedulable: plan.unschedulable.len(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let machine = args.iter().any(|a| a == "--machine");
    let sizes: Vec<usize> = args
        .iter()
        .position(|a| a == "--sizes")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000]);
    let np = node_pool();
    let types = catalogue();
    if !machine {
        println!(
            "kubectl-karpenter scheduling benchmark: upstream's makeDiversePods workload, 400 fake instance types, 1 NodePool"
        );
        println!(
            "{:>7}  {:>6}  {:>12}  {:>12}  {:>7}  {:>12}  {:>6}",
            "PODS", "RUNS", "TIME/RUN", "PODS/S", "NODES", "PRICE/H", "UNSCHED"
        );
    }
    for n in sizes {
        let r = measure(n, &np, &types);
        let pods_per_sec = r.pods as f64 / r.per_op.as_secs_f64();
        if machine {
            println!(
                "RESULT pods={} runs={} ns_per_run={} pods_per_sec={:.0} nodes={} price={:.4} unschedulable={}",
                r.pods,
                r.iterations,
                r.per_op.as_nanos(),
                pods_per_sec,
                r.nodes,
                r.price,
                r.unschedulable
            );
        } else {
            println!(
                "{:>7}  {:>6}  {:>12}  {:>12.0}  {:>7}  {:>12.2}  {:>6}",
                r.pods,
                r.iterations,
                format!("{:.3?}", r.per_op),
                pods_per_sec,
                r.nodes,
                r.price,
                r.unschedulable
            );
        }
    }
}
