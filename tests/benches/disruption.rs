//! `cargo bench --bench disruption`: one disruption pass
//! ([`karpenter_core::disruption::decide`]: emptiness, drift, multi-node and single-node
//! consolidation) over 1,000 nodes and 10,000 pods, for a few cluster shapes, printed as a table.
//! A figure, not a test: nothing here asserts a time.
//!
//! The nodes come from the scheduling benchmark's catalogue (`fake.rs`, upstream's
//! `fake.InstanceTypes(400)`) and look as the agent's stores hold them: initialized NodeClaims
//! (`Launched`/`Registered`/`Initialized`, provider id, node name, capacity, allocatable, the
//! nodepool/instance-type/zone/capacity-type labels) with matching Nodes, and running pods of
//! three Deployments bound to them by `spec.nodeName`. One NodePool, `consolidateAfter: 0s`,
//! `WhenEmptyOrUnderutilized`, upstream's default budget (10% of the nodes). Nodes are 4, 8 and
//! 16 vCPU in turn, on-demand, spread over the three zones; the 16-vCPU Deployment spreads over
//! zones (`ScheduleAnyway`).
//!
//! Shapes:
//!
//! * `packed`: every node's pods fill its allocatable CPU. Nothing can go (the catalogue's price
//!   is linear in size, so no merge is strictly cheaper): the worst case, where multi-node
//!   consolidation binary-searches its 100 candidates and single-node consolidation simulates
//!   all 100 it may, and both find nothing.
//! * `scaled-down`: the Deployments went from 20,000 to 10,000 replicas and the ReplicaSet
//!   controller took the pods off the most crowded nodes first, so every node is half full.
//! * `uneven`: the same scale-down with a third of the nodes still full and the rest about a
//!   quarter full.
//! * `some-empty`: a tenth of the nodes are empty, the rest packed.
//!
//! Each shape runs until at least `--seconds` (default 3) have passed, at least once. `--shapes
//! packed,uneven` picks shapes; `--profile` adds where a pass's time goes (judging the claims,
//! one simulation of each size the methods try).
//!
//! `--round N` prints instead the time of one provisioning round (the scheduler's input from the
//! stores, and its plan) for N pending pods over 5,000 nodes holding 20,000 pods (`--nodes`,
//! `--pods-per-node`): a round at issue 18's scale, without the rig's load. `--unshared` gives
//! every pod its own spec and labels, as the agent cached pods before they shared them.
//! `--node-vcpu 2 --max-vcpu 2` makes every node, and every type the pool may launch, 2 vCPUs
//! (the scale rig's `INSTANCE_TYPES=m5.large`: each pending pod needs room on a new small claim),
//! and `--in-flight M` adds M empty claims launched without a Node yet, as the previous rounds'
//! claims are while their pods wait; the line then also gives the input's share of the round.
//!
//! `--plan N --cpu 250m --memory 128Mi` prints instead the hourly price of the scheduler's plan
//! for N such pods from scratch, with the kwok provider's catalogue and
//! `examples/kwok/nodepool.yaml` (limits raised as `tests/kwok/scale.sh` raises them): what that
//! script compares a settled fleet with.

mod fake;

use fake::{RESERVED_CPU_MILLIS, RESERVED_MEMORY_MIB, Rng, ZONES, catalogue, price, type_name};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_core::apis::{DisruptionReason, NodeClaim, NodePool};
use karpenter_core::disruption::consolidation::{Outcome, consolidate};
use karpenter_core::disruption::{self, Candidate, Decision, Input, Options};
use karpenter_core::scheduling::{self, PoolInput};
use karpenter_core::state::{
    CachedNode, CachedPod, Catalogues, Gathered, ReplicaParts, WatchedPod, scheduling_input,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NODES: usize = 1000;
const REPAIR: [karpenter_core::cloud::RepairPolicy; 2] =
    karpenter_core::cloud::repair::kubelet_not_ready(10);
const PODS: usize = 10_000;
/// Node sizes, in vCPU, taken in turn.
const SIZES: [u64; 3] = [4, 8, 16];
const NOW: &str = "2026-03-02T12:00:00Z";
const NAME_ALPHABET: [char; 27] = [
    'b', 'c', 'd', 'f', 'g', 'h', 'j', 'k', 'l', 'm', 'n', 'p', 'q', 'r', 's', 't', 'v', 'w', 'x',
    'z', '2', '4', '5', '6', '7', '8', '9',
];
const CLASS: &str = r#"{"group": "karpenter.test.sh", "kind": "TestNodeClass", "name": "default"}"#;

/// One node of a shape: its size, how many of its Deployment's pods would fill it, and how many
/// run on it.
#[derive(Clone, Copy)]
struct Slot {
    vcpu: u64,
    fill: u64,
    pods: u64,
}

struct Shape {
    name: &'static str,
    slots: Vec<Slot>,
}

fn size_of(i: usize) -> u64 {
    SIZES[i % SIZES.len()]
}

/// The nodes of a shape: those `fixed` names as it says, the others sharing `pods` evenly, each
/// filled by `fill` pods (or by its share when `fill` is 0).
fn fill_in(
    pods: usize,
    nodes: usize,
    fixed: impl Fn(usize) -> Option<Slot>,
    fill: u64,
) -> Vec<Slot> {
    let mut shared = 0;
    (0..NODES)
        .map(|i| {
            fixed(i).unwrap_or_else(|| {
                let share = (pods / nodes + usize::from(shared < pods % nodes)) as u64;
                shared += 1;
                Slot {
                    vcpu: size_of(i),
                    fill: if fill == 0 { share } else { fill },
                    pods: share,
                }
            })
        })
        .collect()
}

fn shapes() -> Vec<Shape> {
    let packed = (0..NODES)
        .map(|i| Slot {
            vcpu: size_of(i),
            fill: 10,
            pods: 10,
        })
        .collect();
    let scaled_down = (0..NODES)
        .map(|i| Slot {
            vcpu: size_of(i),
            fill: 20,
            pods: 10,
        })
        .collect();
    // A third of the nodes (every size in every zone) keep 20 pods each; the other two thirds
    // share what is left.
    let is_full = |i: usize| matches!(i % 9, 0 | 4 | 8);
    let full = (0..NODES).filter(|&i| is_full(i)).count();
    let uneven = fill_in(
        PODS - full * 20,
        NODES - full,
        |i| {
            is_full(i).then_some(Slot {
                vcpu: size_of(i),
                fill: 20,
                pods: 20,
            })
        },
        20,
    );
    // Every tenth node is empty; the others hold 11 or 12 pods that fill them.
    let is_empty = |i: usize| i % 10 == 9;
    let empty = (0..NODES).filter(|&i| is_empty(i)).count();
    let some_empty = fill_in(
        PODS,
        NODES - empty,
        |i| {
            is_empty(i).then_some(Slot {
                vcpu: size_of(i),
                fill: 1,
                pods: 0,
            })
        },
        0,
    );
    vec![
        Shape {
            name: "packed",
            slots: packed,
        },
        Shape {
            name: "scaled-down",
            slots: scaled_down,
        },
        Shape {
            name: "uneven",
            slots: uneven,
        },
        Shape {
            name: "some-empty",
            slots: some_empty,
        },
    ]
}

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value)
        .unwrap_or_else(|e| unreachable!("benchmark objects are valid: {e}"))
}

fn class() -> Value {
    serde_json::from_str(CLASS).unwrap_or_else(|e| unreachable!("the class reference is JSON: {e}"))
}

fn node_pool() -> NodePool {
    from_json(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default", "uid": "pool-uid"},
        "spec": {
            "limits": {"cpu": "10000000", "memory": "10000000Gi"},
            "disruption": {"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized"},
            "template": {"spec": {"requirements": [], "nodeClassRef": class()}}
        }
    }))
}

/// What the kubelet reports as allocatable for a node of `vcpu` vCPUs.
fn allocatable(vcpu: u64) -> Value {
    json!({
        "cpu": format!("{}m", vcpu * 1000 - RESERVED_CPU_MILLIS),
        "memory": format!("{}Mi", vcpu * 2048 - RESERVED_MEMORY_MIB),
        "pods": (vcpu * 10).to_string(),
    })
}

fn labels(name: &str, vcpu: u64, zone: &str) -> Value {
    json!({
        "karpenter.sh/nodepool": "default",
        "node.kubernetes.io/instance-type": type_name(vcpu),
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/capacity-type": "on-demand",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "karpenter.sh/initialized": "true",
        "karpenter.sh/registered": "true",
    })
}

fn claim(name: &str, vcpu: u64, zone: &str, created: &str) -> NodeClaim {
    let condition = |t: &str| json!({"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": created});
    from_json(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": created,
            "labels": labels(name, vcpu, zone),
            "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "name": "default", "uid": "pool-uid"}]},
        "spec": {"requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [type_name(vcpu)]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}],
            "resources": {"requests": {"cpu": format!("{}m", vcpu * 1000 - RESERVED_CPU_MILLIS), "pods": "1"}},
            "nodeClassRef": class()},
        "status": {"nodeName": name, "providerID": format!("fake://{name}"),
            "capacity": {"cpu": vcpu.to_string(), "memory": format!("{}Gi", 2 * vcpu), "pods": (vcpu * 10).to_string()},
            "allocatable": allocatable(vcpu),
            "conditions": [condition("Launched"), condition("Registered"), condition("Initialized")]},
    }))
}

fn node(name: &str, vcpu: u64, zone: &str, created: &str) -> CachedNode {
    from_json(json!({
        "metadata": {"name": name, "creationTimestamp": created, "labels": labels(name, vcpu, zone)},
        "spec": {"providerID": format!("fake://{name}")},
        "status": {"allocatable": allocatable(vcpu),
            "capacity": {"cpu": vcpu.to_string(), "memory": format!("{}Gi", 2 * vcpu), "pods": (vcpu * 10).to_string()},
            "conditions": [{"type": "Ready", "status": "True"}]},
    }))
}

/// A running replica of the Deployment that fills `fill` to a node of `vcpu` vCPUs: CPU
/// divides the node's allocatable, memory half of it.
fn pod(i: usize, node: &str, slot: Slot, rng: &mut Rng) -> WatchedPod {
    let app = format!("app-{}", slot.vcpu);
    let cpu = (slot.vcpu * 1000 - RESERVED_CPU_MILLIS) / slot.fill;
    let memory = (slot.vcpu * 2048 - RESERVED_MEMORY_MIB) / (2 * slot.fill);
    // The ReplicaSet controller's suffix: five characters from the apiserver's name alphabet.
    let suffix: String = (0..5).map(|_| *rng.pick(&NAME_ALPHABET)).collect();
    let mut spec = json!({
        "nodeName": node,
        "containers": [{"name": "app", "image": "nginx",
            "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": format!("{memory}Mi")}}}],
    });
    if slot.vcpu == 16 {
        spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": app}}}]);
    }
    from_json(json!({
        "metadata": {"name": format!("{app}-5d8f7c9b4-{suffix}{i}"), "namespace": "default", "uid": format!("pod-uid-{i}"),
            "labels": {"app": app, "pod-template-hash": "5d8f7c9b4"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-5d8f7c9b4"),
                "uid": format!("rs-uid-{app}-{}", slot.fill), "controller": true, "blockOwnerDeletion": true}]},
        "spec": spec,
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }))
}

/// The stores of a shape, as the agent's watches would hold them, gathered as a disruption
/// pass gathers them.
struct Cluster(Gathered);

impl std::ops::Deref for Cluster {
    type Target = Gathered;

    fn deref(&self) -> &Gathered {
        &self.0
    }
}

impl std::ops::DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut Gathered {
        &mut self.0
    }
}

impl Cluster {
    fn build(shape: &Shape) -> Self {
        let pool = node_pool();
        let mut catalogues = Catalogues::default();
        catalogues.insert(&pool.spec.template.spec.node_class_ref, catalogue().into());
        let now: Timestamp = NOW
            .parse()
            .unwrap_or_else(|e| unreachable!("NOW is a time: {e}"));
        let created = (now - SignedDuration::from_hours(2)).to_string();
        let mut shared = ReplicaParts::default();
        let mut rng = Rng(42);
        let mut cluster = Self(Gathered {
            pods: Vec::with_capacity(PODS),
            nodes: Vec::with_capacity(NODES),
            claims: Vec::with_capacity(NODES),
            pools: vec![Arc::new(pool)],
            catalogues,
            ..Gathered::default()
        });
        for (i, slot) in shape.slots.iter().enumerate() {
            let name = format!("default-{i:04}");
            // Sizes go round every node, zones every three, so each zone gets every size.
            let zone = ZONES[(i / SIZES.len()) % ZONES.len()];
            cluster
                .claims
                .push(Arc::new(claim(&name, slot.vcpu, zone, &created)));
            cluster
                .nodes
                .push(Arc::new(node(&name, slot.vcpu, zone, &created)));
            for _ in 0..slot.pods {
                let pod = shared.cache(pod(cluster.pods.len(), &name, *slot, &mut rng));
                cluster.pods.push(Arc::new(pod));
            }
        }
        cluster
    }

    fn input(&self) -> Input<'_> {
        Input {
            snapshot: self.snapshot(),
            pdbs: &[],
            now: NOW
                .parse()
                .unwrap_or_else(|e| unreachable!("NOW is a time: {e}")),
            options: Options::default(),
            // NodeRepair on, as the kwok provider sets it: repair scans every node first.
            repair_policies: &REPAIR,
        }
    }

    /// The fleet's hourly price.
    fn price(&self) -> f64 {
        self.claims
            .iter()
            .filter_map(|c| {
                c.metadata
                    .labels
                    .as_ref()?
                    .get("node.kubernetes.io/instance-type")
            })
            .filter_map(|t| t.strip_prefix("fake-it-")?.parse::<u64>().ok())
            .map(|i| price(i + 1))
            .sum()
    }
}

struct Row {
    passes: u32,
    per_pass: Duration,
    eligible: usize,
    method: String,
    chosen: usize,
    replacements: usize,
    savings: f64,
}

fn summarize(decision: &Decision<'_>) -> (String, usize, usize, f64) {
    match &decision.command {
        Some(c) => (
            format!("{:?}/{}", c.method, c.decision()),
            c.candidates.len(),
            c.replacements.len(),
            c.savings().unwrap_or_default(),
        ),
        None => ("none".to_owned(), 0, 0, 0.0),
    }
}

fn measure(cluster: &Cluster, seconds: u64) -> Row {
    let input = cluster.input();
    let decision = disruption::decide(&input);
    let eligible = decision.eligible(DisruptionReason::Underutilized)
        + decision.eligible(DisruptionReason::Empty);
    let (method, chosen, replacements, savings) = summarize(&decision);
    drop(decision);
    let (mut passes, started) = (0_u32, Instant::now());
    while passes == 0 || started.elapsed() < Duration::from_secs(seconds) {
        std::hint::black_box(disruption::decide(std::hint::black_box(&input)));
        passes += 1;
    }
    Row {
        passes,
        per_pass: started.elapsed() / passes,
        eligible,
        method,
        chosen,
        replacements,
        savings,
    }
}

/// Times `f` over a few runs and returns the mean.
fn time<T>(runs: u32, mut f: impl FnMut() -> T) -> (Duration, T) {
    let started = Instant::now();
    let mut last = f();
    for _ in 1..runs {
        last = std::hint::black_box(f());
    }
    (started.elapsed() / runs, last)
}

fn verdict(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Delete => "delete".to_owned(),
        Outcome::Replace(r) => format!("replace with {}", r.len()),
        Outcome::Keep(why) => format!("keep: {}", why.chars().take(70).collect::<String>()),
    }
}

/// Where a pass's time goes: what the methods do, step by step, through the public pieces
/// `decide` is made of.
fn profile(cluster: &Cluster) {
    let input = cluster.input();
    let (judging, judged) = time(3, || {
        disruption::judge(&input.snapshot, input.pdbs, input.now)
    });
    println!("    judging {} claims: {judging:.2?}", judged.len());
    let (building, _) = time(5, || scheduling_input(&input.snapshot).nodes.len());
    println!(
        "    scheduling input of the whole cluster (every simulation builds one): {building:.2?}"
    );
    // The methods' candidates: consolidatable, cheapest to disrupt first (then by name).
    let mut order: Vec<&Candidate<'_>> = judged
        .iter()
        .filter(|c| c.disruptability.consolidation.is_some())
        .collect();
    order.sort_by(|a, b| {
        a.disruption_cost
            .total_cmp(&b.disruption_cost)
            .then_with(|| a.name().cmp(b.name()))
    });
    let budget = (NODES as u64).div_ceil(10) as usize;
    let multi: Vec<&Candidate<'_>> = order.iter().copied().take(budget.min(100)).collect();
    if multi.len() >= 2 {
        // Multi-node consolidation's binary search, step by step.
        let (mut low, mut high, mut total) = (2, multi.len(), Duration::ZERO);
        let mut steps = 0;
        while low <= high {
            let mid = (low + high) / 2;
            let (took, outcome) = time(1, || {
                consolidate(&input.snapshot, &multi[..mid], false, true)
            });
            total += took;
            steps += 1;
            let pods: usize = multi[..mid].iter().map(|c| c.pods.len()).sum();
            println!(
                "    multi-node: {mid:3} candidates ({pods:4} pods): {took:8.2?}  {}",
                verdict(&outcome)
            );
            match outcome {
                Outcome::Keep(_) => high = mid - 1,
                _ => low = mid + 1,
            }
        }
        println!("    multi-node: {steps} simulations, {total:.2?}");
    }
    let singles: Vec<&Candidate<'_>> = order.iter().copied().take(100).collect();
    let (mut total, mut kept) = (Duration::ZERO, 0);
    for (n, c) in singles.iter().enumerate() {
        let (took, outcome) = time(1, || consolidate(&input.snapshot, &[c], false, false));
        total += took;
        if n < 3 {
            println!(
                "    single-node: {} ({} pods): {took:.2?}  {}",
                c.name(),
                c.pods.len(),
                verdict(&outcome)
            );
        }
        if !matches!(outcome, Outcome::Keep(_)) {
            break;
        }
        kept += 1;
    }
    println!(
        "    single-node: {} simulations until one did not keep ({kept} kept), {total:.2?}",
        singles.len().min(kept + 1)
    );
    if let Some(c) = singles.first() {
        let (whole, plan_pods) = time(3, || {
            let mut si = scheduling_input(&input.snapshot);
            si.pods.extend(c.pods.iter().copied());
            let n = si.pods.len();
            (scheduling::schedule(&si).placed_pods(), n)
        });
        println!(
            "    one simulation = scheduling input + schedule() of {} pods onto {} nodes: {whole:.2?}",
            plan_pods.1,
            cluster.nodes.len() - 1
        );
    }
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// `--plan`: the scheduler's plan for N pods of one shape from scratch, on the kwok catalogue.
fn plan(args: &[String]) {
    let count: usize = flag(args, "--plan")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| unreachable!("--plan takes a pod count"));
    let cpu = flag(args, "--cpu").unwrap_or("250m");
    let memory = flag(args, "--memory").unwrap_or("128Mi");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/kwok/nodepool.yaml");
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| unreachable!("{path} is in the repository: {e}"));
    let mut pool: Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| unreachable!("{path} is YAML: {e}"));
    // The limits tests/kwok/scale.sh sets, so that a large plan is not cut short by the example's.
    pool["spec"]["limits"] = json!({"cpu": "100000", "memory": "100000Gi"});
    let pool: NodePool = from_json(pool);
    let types = karpenter_core::cloud::kwok::catalogue::catalogue();
    let pods: Vec<Pod> = (0..count)
        .map(|i| {
            from_json(json!({
                "metadata": {"name": format!("inflate-{i}"), "namespace": "default", "labels": {"app": "inflate"}},
                "spec": {"containers": [{"name": "inflate", "image": "pause",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
                "status": {"phase": "Pending"},
            }))
        })
        .collect();
    let input = scheduling::Input {
        pods: pods.iter().collect(),
        node_pools: vec![PoolInput::new(&pool, &types)],
        ..scheduling::Input::default()
    };
    let plan = scheduling::schedule(&input);
    let mut types: Vec<&str> = plan
        .new_claims
        .iter()
        .filter_map(|c| c.instance_types.first())
        .map(|o| o.name.as_str())
        .collect();
    types.sort_unstable();
    types.dedup();
    println!(
        "PLAN pods={count} cpu={cpu} memory={memory} nodes={} price={:.4} unschedulable={} types={}",
        plan.new_claims.len(),
        plan.total_price(),
        plan.unschedulable.len(),
        types.join(",")
    );
}

/// `--round N`: one provisioning round's work (the scheduler's input from the stores, then the
/// plan) for N pending pods of a new Deployment, over `--nodes` (default 5,000) packed nodes with
/// `--pods-per-node` (default 4) bound pods each: the agent's round at item 5's 20,000 pods.
fn round(args: &[String]) {
    let pending: usize = flag(args, "--round")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| unreachable!("--round takes a pod count"));
    let nodes: usize = flag(args, "--nodes")
        .and_then(|n| n.parse().ok())
        .unwrap_or(5000);
    let per_node: u64 = flag(args, "--pods-per-node")
        .and_then(|n| n.parse().ok())
        .unwrap_or(4);
    let seconds: u64 = flag(args, "--seconds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    // `--node-vcpu V`: every node (and, with `--max-vcpu V`, every type the pool may launch)
    // has V vCPUs, as on the scale rig (`INSTANCE_TYPES=m5.large`), where each pending pod needs
    // a new small claim instead of sharing one of the catalogue's largest.
    let node_vcpu: Option<u64> = flag(args, "--node-vcpu").and_then(|n| n.parse().ok());
    let max_vcpu: Option<u64> = flag(args, "--max-vcpu").and_then(|n| n.parse().ok());
    // `--in-flight N`: N of the nodes are still claims (launched, no Node yet), empty, as the
    // claims of the previous rounds are while their pods wait for them.
    let in_flight: usize = flag(args, "--in-flight")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let shape = Shape {
        name: "round",
        slots: (0..nodes)
            .map(|i| Slot {
                vcpu: node_vcpu.unwrap_or_else(|| size_of(i)),
                fill: per_node,
                pods: per_node,
            })
            .collect(),
    };
    // `--unshared`: pods as the agent cached them before they shared their template, each
    // read on its own by the scheduler.
    let unshared = args.iter().any(|a| a == "--unshared");
    let mut cluster = Cluster::build(&shape);
    if let Some(max) = max_vcpu {
        let pool = node_pool();
        let types: Vec<_> = catalogue().into_iter().take(max as usize).collect();
        cluster
            .catalogues
            .insert(&pool.spec.template.spec.node_class_ref, types.into());
    }
    let now: Timestamp = NOW
        .parse()
        .unwrap_or_else(|e| unreachable!("NOW is a time: {e}"));
    let created = (now - SignedDuration::from_secs(30)).to_string();
    for i in 0..in_flight {
        let name = format!("default-flight-{i:04}");
        let vcpu = node_vcpu.unwrap_or_else(|| size_of(i));
        let mut claim = claim(&name, vcpu, ZONES[i % ZONES.len()], &created);
        if let Some(status) = claim.status.as_mut() {
            status.node_name = None;
            status.conditions.retain(|c| c.type_ == "Launched");
        }
        cluster.claims.push(Arc::new(claim));
    }
    if unshared {
        cluster.pods = cluster.pods.iter().map(|p| Arc::new(unshare(p))).collect();
    }
    let mut parts = ReplicaParts::default();
    for i in 0..pending {
        let pod: WatchedPod = from_json(json!({
            "metadata": {"name": format!("burst-7c9d8f6b5-{i}"), "namespace": "default", "uid": format!("burst-{i}"),
                "labels": {"app": "burst", "pod-template-hash": "7c9d8f6b5"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "burst-7c9d8f6b5",
                    "uid": "rs-uid-burst", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"containers": [{"name": "app", "image": "nginx",
                "resources": {"requests": {"cpu": "400m", "memory": "256Mi"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
        }));
        cluster.pods.push(Arc::new(if unshared {
            CachedPod::from(pod)
        } else {
            parts.cache(pod)
        }));
    }
    let snapshot = cluster.input().snapshot;
    let once = || {
        let input = scheduling_input(&snapshot);
        let plan = scheduling::schedule(&input);
        (input.pods.len(), plan.new_claims.len(), plan.placed_pods())
    };
    let (to_place, claims, placed) = once();
    let (input_time, _) = time(3, || scheduling_input(&snapshot).pods.len());
    let (mut rounds, started) = (0_u32, Instant::now());
    while rounds == 0 || started.elapsed() < Duration::from_secs(seconds) {
        std::hint::black_box(once());
        rounds += 1;
    }
    println!(
        "ROUND nodes={} in_flight={in_flight} bound_pods={} pending={to_place} placed={placed} new_claims={claims} shared={} rounds={rounds} input={:.1}ms time_per_round={:.1}ms",
        cluster.nodes.len(),
        cluster.pods.len() - pending,
        !unshared,
        input_time.as_secs_f64() * 1e3,
        (started.elapsed() / rounds).as_secs_f64() * 1e3
    );
}

/// A copy of `pod` holding its own spec and labels.
fn unshare(pod: &CachedPod) -> CachedPod {
    let mut copy = pod.clone();
    copy.spec = Arc::new((*pod.spec).clone());
    copy.metadata.labels = Arc::new((*pod.metadata.labels).clone());
    copy
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if flag(&args, "--plan").is_some() {
        plan(&args);
        return;
    }
    if flag(&args, "--round").is_some() {
        round(&args);
        return;
    }
    let wanted: Option<Vec<String>> =
        flag(&args, "--shapes").map(|s| s.split(',').map(|n| n.trim().to_owned()).collect());
    let seconds: u64 = flag(&args, "--seconds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let profiling = args.iter().any(|a| a == "--profile");
    println!(
        "kubectl-karpenter disruption benchmark: one pass over {NODES} nodes and {PODS} pods, 400 fake instance types, 1 NodePool (consolidateAfter 0s, budget 10%)"
    );
    println!(
        "{:<12}  {:>5}  {:>5}  {:>10}  {:>8}  {:>5}  {:>36}  {:>6}  {:>5}  {:>9}",
        "SHAPE",
        "NODES",
        "PODS",
        "FLEET $/H",
        "ELIGIBLE",
        "RUNS",
        "METHOD",
        "CHOSEN",
        "NEW",
        "TIME/PASS"
    );
    for shape in shapes() {
        if wanted
            .as_ref()
            .is_some_and(|w| !w.iter().any(|n| n == shape.name))
        {
            continue;
        }
        let cluster = Cluster::build(&shape);
        let r = measure(&cluster, seconds);
        println!(
            "{:<12}  {:>5}  {:>5}  {:>10.2}  {:>8}  {:>5}  {:>36}  {:>6}  {:>5}  {:>9}",
            shape.name,
            cluster.nodes.len(),
            cluster.pods.len(),
            cluster.price(),
            r.eligible,
            r.passes,
            if r.savings > 0.0 {
                format!("{} (saves ${:.2}/h)", r.method, r.savings)
            } else {
                r.method
            },
            r.chosen,
            r.replacements,
            format!("{:.1}ms", r.per_pass.as_secs_f64() * 1e3)
        );
        if profiling {
            profile(&cluster);
        }
    }
}
