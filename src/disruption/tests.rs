//! Disruption passes over small clusters: what a user would see the agent do.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use super::static_scale::StaticScale;
use super::*;
use crate::apis::CapacityType;
use crate::apis::{NodeClaim, NodePool};
use crate::resources::ResourceList;
use crate::scheduling::{InstanceType, Offering};
use crate::state::{CachedNode, CachedPod, Catalogues, Snapshot};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{Value, json};
use std::sync::Arc;

const NOW: &str = "2026-03-02T10:00:00Z";
const CLASS: &str = r#"{"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}"#;

fn class() -> Value {
    serde_json::from_str(CLASS).unwrap()
}

/// c-1, c-2, c-4, c-8, c-16: n vCPU, 4n GiB, $0.05·n on demand and $0.02·n spot, zone-a.
fn catalogue() -> Vec<InstanceType> {
    [1, 2, 4, 8, 16]
        .into_iter()
        .map(|n| {
            let mut it = InstanceType::new(
                &format!("c-{n}"),
                ResourceList::parse([
                    ("cpu", n.to_string().as_str()),
                    ("memory", format!("{}Gi", 4 * n).as_str()),
                    ("pods", "110"),
                ])
                .unwrap(),
            );
            it.offerings.push(Offering::new(
                "zone-a",
                CapacityType::OnDemand,
                0.05 * f64::from(n),
            ));
            it.offerings.push(Offering::new(
                "zone-a",
                CapacityType::Spot,
                0.02 * f64::from(n),
            ));
            it
        })
        .collect()
}

fn pool(disruption: Value, requirements: Value) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default", "uid": "pool-uid"},
        "spec": {"disruption": disruption,
                 "template": {"spec": {"requirements": requirements, "nodeClassRef": class()}}},
    }))
    .unwrap()
}

fn on_demand_pool(disruption: Value) -> NodePool {
    pool(
        disruption,
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]),
    )
}

fn claim(name: &str, size: u32, capacity_type: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "creationTimestamp": "2026-03-02T09:00:00Z",
            "labels": {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": format!("c-{size}"),
                       "karpenter.sh/capacity-type": capacity_type, "topology.kubernetes.io/zone": "zone-a"}},
        "spec": {"requirements": [], "nodeClassRef": class()},
        "status": {"nodeName": name, "providerID": format!("kwok://{name}"),
            "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                            "lastTransitionTime": "2026-03-02T09:01:00Z"}]},
    }))
    .unwrap()
}

fn node(name: &str, size: u32, capacity_type: &str) -> CachedNode {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": format!("c-{size}"),
            "karpenter.sh/capacity-type": capacity_type, "topology.kubernetes.io/zone": "zone-a", "kubernetes.io/hostname": name}},
        "spec": {"providerID": format!("kwok://{name}")},
        "status": {"allocatable": {"cpu": size.to_string(), "memory": format!("{}Gi", 4 * size), "pods": "110"}},
    }))
    .unwrap()
}

fn pod(name: &str, node: &str, cpu: &str, extra: Value) -> CachedPod {
    let mut value = json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"},
    });
    for part in ["metadata", "status"] {
        if let (Some(m), Some(extra)) = (value[part].as_object_mut(), extra.get(part)) {
            for (k, v) in extra.as_object().unwrap() {
                m.insert(k.clone(), v.clone());
            }
        }
    }
    let pod: Pod = serde_json::from_value(value).unwrap();
    CachedPod::from(pod)
}

/// A pass's command, each claim's blockers, and the claims consolidation kept with why.
type Passed = (
    Option<Command>,
    Vec<(String, Vec<BlockerKind>)>,
    std::collections::BTreeMap<String, String>,
);

struct World {
    pools: Vec<Arc<NodePool>>,
    claims: Vec<Arc<NodeClaim>>,
    nodes: Vec<Arc<CachedNode>>,
    pods: Vec<Arc<CachedPod>>,
    pdbs: Vec<PodDisruptionBudget>,
    catalogues: Catalogues,
    repair_policies: Vec<crate::cloud::RepairPolicy>,
    namespace_labels: crate::scheduling::NamespaceLabels,
    volumes: crate::scheduling::VolumeTopology,
}

impl World {
    fn new(pool: NodePool) -> Self {
        let mut catalogues = Catalogues::default();
        catalogues.insert(&pool.spec.template.spec.node_class_ref, catalogue().into());
        Self {
            pools: vec![Arc::new(pool)],
            claims: Vec::new(),
            nodes: Vec::new(),
            pods: Vec::new(),
            pdbs: Vec::new(),
            catalogues,
            repair_policies: Vec::new(),
            namespace_labels: Default::default(),
            volumes: Default::default(),
        }
    }

    fn with_node(
        mut self,
        name: &str,
        size: u32,
        capacity_type: &str,
        pods: &[(&str, &str)],
    ) -> Self {
        self.claims.push(Arc::new(claim(name, size, capacity_type)));
        self.nodes.push(Arc::new(node(name, size, capacity_type)));
        for (pod_name, cpu) in pods {
            self.pods
                .push(Arc::new(pod(pod_name, name, cpu, json!({}))));
        }
        self
    }

    /// Turns repair on with the kwok provider's policies (Ready False or Unknown for 10 min).
    fn with_repair(mut self) -> Self {
        self.repair_policies = crate::cloud::repair::kubelet_not_ready(10).to_vec();
        self
    }

    /// Sets the node's Ready condition to `status` since `since`.
    fn ready(mut self, name: &str, status: &str, since: &str) -> Self {
        let node = self.nodes.iter_mut().find(|n| n.name == name).unwrap();
        Arc::make_mut(node).conditions = vec![crate::state::NodeConditionState {
            type_: "Ready".into(),
            status: status.into(),
            last_transition_time: Some(serde_json::from_value(json!(since)).unwrap()),
        }];
        self
    }

    /// The pass's input: the world at [`NOW`], no DaemonSets, default options.
    fn input<'a>(&'a self, daemon_set_pods: &'a [Pod]) -> Input<'a> {
        Input {
            snapshot: Snapshot {
                pods: &self.pods,
                nodes: &self.nodes,
                claims: &self.claims,
                pools: &self.pools,
                catalogues: &self.catalogues,
                daemon_set_pods,
                namespace_labels: &self.namespace_labels,
                volumes: &self.volumes,
            },
            pdbs: &self.pdbs,
            now: NOW.parse().unwrap(),
            options: Options::default(),
            repair_policies: &self.repair_policies,
        }
    }

    fn validate(&self, command: &Command) -> Result<Command, String> {
        validate(&self.input(&[]), command)
    }

    fn decide(&self) -> Passed {
        let input = self.input(&[]);
        let decision = decide(&input);
        let blockers = decision
            .candidates
            .iter()
            .map(|c| {
                (
                    c.name().to_owned(),
                    c.disruptability.blockers.iter().map(|b| b.kind).collect(),
                )
            })
            .collect();
        (decision.command, blockers, decision.kept)
    }
}

fn names(command: &Command) -> Vec<&str> {
    command
        .candidates
        .iter()
        .map(|c| c.claim.as_str())
        .collect()
}

fn replacement_types(command: &Command) -> Vec<&str> {
    command
        .replacements
        .iter()
        .filter_map(|r| r.claim.instance_types.first())
        .map(|o| o.name.as_str())
        .collect()
}

/// Consolidates at once, every node at a time (the default budget, 10%, would let one go).
fn consolidating() -> Value {
    json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "100%"}]})
}

#[test]
fn an_empty_node_is_deleted_by_emptiness() {
    let world = World::new(on_demand_pool(consolidating()))
        .with_node("a", 4, "on-demand", &[])
        .with_node("b", 4, "on-demand", &[("web-1", "3")]);
    let (command, _, _) = world.decide();
    let command = command.expect("a command");
    assert_eq!(command.method, Method::Emptiness);
    assert_eq!(names(&command), ["a"]);
    assert!(command.replacements.is_empty());
}

#[test]
fn the_default_budget_lets_one_of_two_nodes_go_at_a_time() {
    let world = World::new(on_demand_pool(json!({"consolidateAfter": "0s"})))
        .with_node("a", 4, "on-demand", &[("web-1", "1")])
        .with_node("b", 4, "on-demand", &[("web-2", "1")]);
    let command = world.decide().0.expect("a command");
    assert_eq!(command.method, Method::SingleNodeConsolidation);
    assert_eq!(command.candidates.len(), 1);
}

#[test]
fn two_half_empty_nodes_become_one_cheaper_node() {
    let world = World::new(on_demand_pool(consolidating()))
        .with_node("a", 4, "on-demand", &[("web-1", "1")])
        .with_node("b", 4, "on-demand", &[("web-2", "1")]);
    let command = world.decide().0.expect("a command");
    assert_eq!(command.method, Method::MultiNodeConsolidation);
    assert_eq!(names(&command), ["a", "b"]);
    assert_eq!(replacement_types(&command), ["c-2"]);
    assert!(
        command.savings().is_some_and(|s| s > 0.29),
        "{}",
        command.describe()
    );
}

#[test]
fn a_small_pod_on_a_large_node_moves_to_a_cheaper_one() {
    let world = World::new(on_demand_pool(consolidating())).with_node(
        "big",
        16,
        "on-demand",
        &[("web-1", "500m")],
    );
    let command = world.decide().0.expect("a command");
    assert_eq!(command.method, Method::SingleNodeConsolidation);
    assert_eq!(replacement_types(&command), ["c-1"]);
    let options = &command.replacements[0].claim.instance_types;
    assert!(
        options.iter().all(|o| o.price < 0.8),
        "every option is cheaper than c-16"
    );
}

#[test]
fn a_pod_that_fits_on_another_node_lets_its_node_go_without_a_replacement() {
    // The default budget (10% of 3, rounded up) lets one node go at a time.
    let world = World::new(on_demand_pool(json!({"consolidateAfter": "0s"})))
        .with_node("a", 4, "on-demand", &[("web-1", "1")])
        .with_node("b", 4, "on-demand", &[("web-2", "2")])
        .with_node("c", 8, "on-demand", &[("web-3", "7")]);
    let command = world.decide().0.expect("a command");
    assert!(command.replacements.is_empty(), "{}", command.describe());
    assert_eq!(names(&command), ["a"], "{}", command.describe());
}

#[test]
fn a_cheapest_fleet_is_left_alone() {
    let world = World::new(on_demand_pool(consolidating()))
        .with_node("a", 2, "on-demand", &[("web-1", "1500m")])
        .with_node("b", 2, "on-demand", &[("web-2", "1500m")]);
    let (command, _, kept) = world.decide();
    assert!(command.is_none(), "{:?}", command.map(|c| c.describe()));
    assert!(kept.contains_key("a"), "{kept:?}");
}

#[test]
fn a_zero_budget_blocks_consolidation_and_says_so() {
    let world = World::new(on_demand_pool(
        json!({"consolidateAfter": "0s", "budgets": [{"nodes": "0"}]}),
    ))
    .with_node("a", 4, "on-demand", &[]);
    let (command, blockers, _) = world.decide();
    assert!(command.is_none());
    assert_eq!(blockers, [("a".to_owned(), vec![BlockerKind::Budget])]);
}

#[test]
fn consolidate_after_never_keeps_even_empty_nodes() {
    let world = World::new(on_demand_pool(json!({"consolidateAfter": "Never"}))).with_node(
        "a",
        4,
        "on-demand",
        &[],
    );
    let (command, blockers, _) = world.decide();
    assert!(command.is_none());
    assert_eq!(blockers[0].1, [BlockerKind::ConsolidationDisabled]);
}

#[test]
fn a_do_not_disrupt_pod_keeps_its_node() {
    let mut world =
        World::new(on_demand_pool(consolidating())).with_node("big", 16, "on-demand", &[]);
    world.pods.push(Arc::new(pod(
        "web-1",
        "big",
        "500m",
        json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
    )));
    let (command, blockers, _) = world.decide();
    assert!(command.is_none());
    assert_eq!(blockers[0].1, [BlockerKind::DoNotDisruptPod]);
}

#[test]
fn a_spot_node_is_not_replaced_by_spot_while_the_gate_is_off() {
    let world = World::new(pool(consolidating(), json!([]))).with_node(
        "big",
        16,
        "spot",
        &[("web-1", "500m")],
    );
    let (command, _, kept) = world.decide();
    assert!(command.is_none(), "{:?}", command.map(|c| c.describe()));
    assert!(kept["big"].contains("spot-to-spot"), "{kept:?}");
}

#[test]
fn a_budget_of_one_lets_one_empty_node_go_per_pass() {
    let world = World::new(on_demand_pool(
        json!({"consolidateAfter": "0s", "budgets": [{"nodes": "1"}]}),
    ))
    .with_node("a", 4, "on-demand", &[])
    .with_node("b", 4, "on-demand", &[])
    .with_node("c", 4, "on-demand", &[]);
    let command = world.decide().0.expect("a command");
    assert_eq!(command.candidates.len(), 1);
}

#[test]
fn when_empty_pools_delete_empty_nodes_only() {
    let world = World::new(on_demand_pool(
        json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmpty"}),
    ))
    .with_node("big", 16, "on-demand", &[("web-1", "500m")]);
    assert!(world.decide().0.is_none());
}

#[test]
fn an_empty_node_that_gets_a_pod_before_the_check_is_kept() {
    let mut world = World::new(on_demand_pool(consolidating())).with_node("a", 4, "on-demand", &[]);
    let command = world.decide().0.expect("a command");
    assert!(world.validate(&command).is_ok(), "nothing changed");
    world.pods.push(Arc::new(pod("late", "a", "1", json!({}))));
    let why = world.validate(&command).expect_err("a pod arrived");
    assert!(why.contains('a'), "{why}");
}

#[test]
fn a_replacement_is_computed_afresh_when_the_decision_is_checked_again() {
    let world = World::new(on_demand_pool(consolidating())).with_node(
        "big",
        16,
        "on-demand",
        &[("web-1", "500m")],
    );
    let command = world.decide().0.expect("a command");
    let checked = world.validate(&command).expect("still holds");
    assert_eq!(replacement_types(&checked), ["c-1"]);
}

/// A pool where moving the eight pods of `x` (a c-8) onto a new c-4 saves an eighth of the
/// pool's price but disrupts most of its pods: worth it by cost alone, not by Balanced's score.
/// The other nodes are full, so nothing else can move.
fn a_busy_pool_with_an_oversized_node(disruption: Value) -> World {
    let small: Vec<(String, &str)> = (0..8).map(|i| (format!("x-{i}"), "450m")).collect();
    let small: Vec<(&str, &str)> = small.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    World::new(on_demand_pool(disruption))
        .with_node("x", 8, "on-demand", &small)
        .with_node("a", 8, "on-demand", &[("a-1", "7900m")])
        .with_node("big", 16, "on-demand", &[("big-1", "15900m")])
}

#[test]
fn under_when_empty_or_underutilized_any_saving_replaces_the_oversized_node() {
    let world = a_busy_pool_with_an_oversized_node(consolidating());
    let (command, _, kept) = world.decide();
    let command = command.unwrap_or_else(|| panic!("no command: {kept:?}"));
    assert_eq!(names(&command), ["x"]);
    assert_eq!(replacement_types(&command), ["c-4"]);
}

#[test]
fn balanced_keeps_a_node_whose_move_disrupts_more_than_it_saves_and_says_by_how_much() {
    let world = a_busy_pool_with_an_oversized_node(
        json!({"consolidateAfter": "0s", "consolidationPolicy": "Balanced", "budgets": [{"nodes": "100%"}]}),
    );
    let (command, _, kept) = world.decide();
    assert!(command.is_none(), "{command:?}");
    // Even deleted outright, x saves $0.40 of $1.60 (25%) for 9 of 13 disruption (69.2%):
    // score 0.36, so its replacement by a c-4 (score 0.18) is never simulated.
    assert_eq!(
        kept["x"],
        "not worth disrupting under consolidationPolicy Balanced, even deleted outright: score \
         0.36 < threshold 0.50 (consolidationThreshold: 2.0, savings 25.0%, disruption 69.2%)"
    );
}

#[test]
fn a_higher_consolidation_threshold_lets_balanced_take_the_same_move() {
    let world = a_busy_pool_with_an_oversized_node(json!({
        "consolidateAfter": "0s", "consolidationPolicy": "Balanced", "consolidationThreshold": 6,
        "budgets": [{"nodes": "100%"}]}));
    let command = world.decide().0.expect("a command");
    assert_eq!(command.method, Method::SingleNodeConsolidation);
    assert_eq!(names(&command), ["x"]);
    assert_eq!(replacement_types(&command), ["c-4"]);
    let (pool, score) = &command.scores[0];
    assert_eq!(pool, "default");
    assert!(score.approved(), "the command carries its approved score");
    assert!(
        score.approved_note().starts_with("score ") && score.approved_note().contains("(k: 6,"),
        "{}",
        score.approved_note()
    );
}

#[test]
fn a_rejected_balanced_move_is_counted_with_its_score() {
    let world = a_busy_pool_with_an_oversized_node(json!({
        "consolidateAfter": "0s", "consolidationPolicy": "Balanced", "consolidationThreshold": 4,
        "budgets": [{"nodes": "100%"}]}));
    let input = world.input(&[]);
    let decision = decide(&input);
    assert!(
        decision
            .rejected_scores
            .iter()
            .any(|(pool, s)| pool == "default" && !s.approved()),
        "{:?}",
        decision.rejected_scores
    );
}

#[test]
fn balanced_still_deletes_empty_nodes_and_clearly_oversized_ones() {
    let world = World::new(on_demand_pool(
        json!({"consolidateAfter": "0s", "consolidationPolicy": "Balanced", "budgets": [{"nodes": "100%"}]}),
    ))
    .with_node("empty", 4, "on-demand", &[])
    .with_node("a", 4, "on-demand", &[("a-1", "3")]);
    let command = world.decide().0.expect("a command");
    assert_eq!(command.method, Method::Emptiness);
    assert_eq!(names(&command), ["empty"]);

    let world = World::new(on_demand_pool(
        json!({"consolidateAfter": "0s", "consolidationPolicy": "Balanced", "budgets": [{"nodes": "100%"}]}),
    ))
    .with_node("huge", 16, "on-demand", &[("tiny", "500m")])
    .with_node("a", 16, "on-demand", &[("a-1", "15900m")]);
    let command = world.decide().0.expect("a command");
    assert_eq!(names(&command), ["huge"]);
    assert_eq!(replacement_types(&command), ["c-1"]);
}

#[test]
fn a_node_unhealthy_past_its_toleration_is_repaired_before_anything_else() {
    let world = World::new(on_demand_pool(consolidating()))
        .with_node("sick", 4, "on-demand", &[("web-1", "3")])
        .with_node("empty", 4, "on-demand", &[])
        .ready("sick", "Unknown", "2026-03-02T09:45:00Z")
        .with_repair();
    let command = world.decide().0.expect("a command");
    assert_eq!(command.method, Method::Repair);
    assert_eq!(command.reason, crate::apis::DisruptionReason::Unhealthy);
    assert_eq!(names(&command), ["sick"]);
}

#[test]
fn repair_waits_out_the_toleration_and_is_off_without_the_gate() {
    let within = World::new(on_demand_pool(consolidating()))
        .with_node("sick", 4, "on-demand", &[("web-1", "3")])
        .with_node("empty", 4, "on-demand", &[])
        .ready("sick", "False", "2026-03-02T09:55:00Z")
        .with_repair();
    assert_eq!(
        within.decide().0.expect("a command").method,
        Method::Emptiness
    );
    let gate_off = World::new(on_demand_pool(consolidating()))
        .with_node("sick", 4, "on-demand", &[("web-1", "3")])
        .with_node("empty", 4, "on-demand", &[])
        .ready("sick", "Unknown", "2026-03-02T09:00:00Z");
    assert_eq!(
        gate_off.decide().0.expect("a command").method,
        Method::Emptiness
    );
}

#[test]
fn an_unhealthy_budget_of_zero_holds_repair_back() {
    let world = World::new(on_demand_pool(json!({
        "consolidateAfter": "Never",
        "budgets": [{"nodes": "0", "reasons": ["Unhealthy"]}]})))
    .with_node("sick", 4, "on-demand", &[("web-1", "3")])
    .ready("sick", "Unknown", "2026-03-02T09:00:00Z")
    .with_repair();
    assert!(world.decide().0.is_none());
}

#[test]
fn balanced_judges_the_move_itself_when_deleting_the_node_would_be_worth_it() {
    let world = a_busy_pool_with_an_oversized_node(json!({
        "consolidateAfter": "0s", "consolidationPolicy": "Balanced", "consolidationThreshold": 4,
        "budgets": [{"nodes": "100%"}]}));
    let (command, _, kept) = world.decide();
    assert!(command.is_none(), "{command:?}");
    assert_eq!(
        kept["x"],
        "its move is not worth it under consolidationPolicy Balanced: score 0.18 < threshold 0.25 \
         (consolidationThreshold: 4.0, savings 12.5%, disruption 69.2%)"
    );
}

#[test]
fn a_full_node_is_ruled_out_before_any_simulation_and_says_why() {
    let world = World::new(on_demand_pool(consolidating()))
        .with_node("a", 4, "on-demand", &[("a-1", "4")])
        .with_node("b", 4, "on-demand", &[("b-1", "4")]);
    let (command, _, kept) = world.decide();
    assert!(command.is_none(), "{command:?}");
    assert_eq!(
        kept["a"],
        "its pods need more room than the rest of the cluster has free plus any instance type cheaper than it"
    );
}

/// A static pool of `replicas` on demand, with extra spec fields.
fn static_pool(replicas: i64, extra: Value) -> NodePool {
    let mut pool = on_demand_pool(consolidating());
    pool.spec.replicas = Some(replicas);
    if let Some(limits) = extra.get("limits") {
        pool.spec.limits = serde_json::from_value(limits.clone()).unwrap();
    }
    pool
}

impl World {
    /// Marks a claim Drifted.
    fn drifted(mut self, name: &str) -> Self {
        let claim = self
            .claims
            .iter_mut()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap();
        let drifted: k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition =
            serde_json::from_value(
                json!({"type": "Drifted", "status": "True", "reason": "NodePoolDrifted",
                "message": "", "lastTransitionTime": "2026-03-02T09:30:00Z"}),
            )
            .unwrap();
        Arc::make_mut(claim)
            .status
            .get_or_insert_default()
            .conditions
            .push(drifted);
        self
    }

    fn scale(&self, unseen: u64) -> StaticScale {
        let judged = judge(&self.input(&[]).snapshot, &[], NOW.parse().unwrap());
        static_scale(&self.pools[0], &judged, unseen)
    }
}

#[test]
fn an_empty_node_of_a_static_pool_is_neither_emptied_nor_consolidated() {
    let world = World::new(static_pool(2, json!({})))
        .with_node("a", 4, "on-demand", &[])
        .with_node("b", 4, "on-demand", &[("web-1", "1")]);
    let (command, blockers, _) = world.decide();
    assert!(command.is_none(), "{command:?}");
    assert!(
        blockers
            .iter()
            .all(|(_, kinds)| kinds.contains(&BlockerKind::StaticNodePool)),
        "{blockers:?}"
    );
}

#[test]
fn a_drifted_node_of_a_static_pool_is_replaced_by_a_bare_claim_of_the_pool() {
    let world = World::new(static_pool(2, json!({})))
        .with_node("a", 4, "on-demand", &[("web-1", "3")])
        .with_node("b", 4, "on-demand", &[("web-2", "1")])
        .drifted("a");
    let command = world.decide().0.expect("a command");
    assert_eq!(command.method, Method::StaticDrift);
    assert_eq!(names(&command), ["a"]);
    assert_eq!(
        replacement_types(&command),
        ["c-1"],
        "the cheapest type the pool allows, whatever ran on the node"
    );
    assert!(command.replacements[0].pods.is_empty());
}

#[test]
fn static_drift_waits_while_the_pool_has_more_nodes_than_replicas_or_no_room_under_its_node_limit()
{
    let over = World::new(static_pool(1, json!({})))
        .with_node("a", 4, "on-demand", &[("web-1", "1")])
        .with_node("b", 4, "on-demand", &[("web-2", "1")])
        .drifted("a");
    let (command, _, kept) = over.decide();
    assert!(command.is_none(), "{command:?}");
    assert!(kept["a"].contains("scale-down goes first"), "{kept:?}");

    let full = World::new(static_pool(2, json!({"limits": {"nodes": "2"}})))
        .with_node("a", 4, "on-demand", &[("web-1", "1")])
        .with_node("b", 4, "on-demand", &[("web-2", "1")])
        .drifted("a");
    let (command, _, kept) = full.decide();
    assert!(command.is_none(), "{command:?}");
    assert!(kept["a"].contains("node limit"), "{kept:?}");
}

#[test]
fn a_static_pool_launches_its_shortfall_within_its_node_limit() {
    let world = World::new(static_pool(5, json!({"limits": {"nodes": "3"}}))).with_node(
        "a",
        4,
        "on-demand",
        &[],
    );
    assert_eq!(
        world.scale(0),
        StaticScale {
            launch: 2,
            held_by_limit: 2,
            remove: Vec::new()
        }
    );
    assert_eq!(
        world.scale(2).launch,
        0,
        "claims just created count before the watch delivers them"
    );
}

#[test]
fn a_scaled_down_static_pool_removes_empty_nodes_before_busy_ones() {
    let world = World::new(static_pool(1, json!({})))
        .with_node("busy", 4, "on-demand", &[("web-1", "1")])
        .with_node("empty", 4, "on-demand", &[])
        .with_node("busier", 4, "on-demand", &[("web-2", "1"), ("web-3", "1")]);
    assert_eq!(world.scale(0).remove, ["empty", "busy"]);
}

#[test]
fn do_not_repair_on_the_node_keeps_repair_off_it_and_says_so() {
    let mut world = World::new(on_demand_pool(consolidating()))
        .with_node("sick", 4, "on-demand", &[("web-1", "3")])
        .with_node("well", 4, "on-demand", &[("web-2", "3")])
        .ready("sick", "Unknown", "2026-03-02T09:00:00Z")
        .with_repair();
    Arc::make_mut(&mut world.nodes[0])
        .annotations
        .insert("karpenter.sh/do-not-repair".to_owned(), "true".to_owned());
    let input = world.input(&[]);
    let decision = decide(&input);
    assert!(
        decision
            .command
            .as_ref()
            .is_none_or(|c| c.method != Method::Repair),
        "{:?}",
        decision.command
    );
    let (reason, message) = &decision.repair_blocked["sick"];
    assert_eq!(*reason, "DisruptionBlocked");
    assert!(
        message.contains("repair is blocked through the \"karpenter.sh/do-not-repair\" annotation"),
        "{message}"
    );
}

#[test]
fn a_pool_with_more_than_a_fifth_of_its_nodes_unhealthy_is_not_repaired() {
    let world = World::new(on_demand_pool(json!({"consolidateAfter": "Never"})))
        .with_node("a", 4, "on-demand", &[("web-1", "3")])
        .with_node("b", 4, "on-demand", &[("web-2", "3")])
        .ready("a", "Unknown", "2026-03-02T09:00:00Z")
        .ready("b", "False", "2026-03-02T09:58:00Z")
        .with_repair();
    let input = world.input(&[]);
    let decision = decide(&input);
    assert!(decision.command.is_none(), "{:?}", decision.command);
    let (reason, message) = &decision.repair_blocked["a"];
    assert_eq!(*reason, "NodeRepairBlocked");
    assert_eq!(
        message,
        "more than 20% of nodes in nodepool \"default\" are unhealthy"
    );
}

/// A pod annotated `karpenter.sh/do-not-disrupt: "1h"`, started `started` (NOW is 10:00).
fn protected_for_an_hour(name: &str, node: &str, started: &str) -> Arc<CachedPod> {
    Arc::new(pod(
        name,
        node,
        "500m",
        json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "1h"}},
               "status": {"startTime": started}}),
    ))
}

/// The demo's bad day: a pool with one budget slot, a node with a pod protected for an hour
/// beside two empty nodes. The protected node is not chosen (its drain could not finish), so
/// the slot goes to an empty node.
#[test]
fn a_pod_protected_for_a_duration_keeps_its_node_and_empty_nodes_around_it_still_go() {
    let mut world = World::new(on_demand_pool(json!({
        "consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "1"}]})))
    .with_node("busy", 16, "on-demand", &[])
    .with_node("empty-1", 16, "on-demand", &[])
    .with_node("empty-2", 16, "on-demand", &[]);
    world.pods.push(protected_for_an_hour(
        "batch",
        "busy",
        "2026-03-02T09:30:00Z",
    ));
    let (command, blockers, _) = world.decide();
    let command = command.expect("an empty node goes");
    assert_eq!(command.method, Method::Emptiness);
    assert_ne!(names(&command), ["busy"]);
    let busy = blockers.iter().find(|(n, _)| n == "busy").unwrap();
    assert!(busy.1.contains(&BlockerKind::DoNotDisruptPod), "{busy:?}");
}

#[test]
fn an_underutilized_node_is_kept_while_its_pod_is_protected_and_replaced_after() {
    let world = |started: &str| {
        let mut world =
            World::new(on_demand_pool(consolidating())).with_node("busy", 16, "on-demand", &[]);
        world
            .pods
            .push(protected_for_an_hour("batch", "busy", started));
        world
    };
    let (command, blockers, _) = world("2026-03-02T09:30:00Z").decide();
    assert!(command.is_none(), "{command:?}");
    assert_eq!(blockers[0].1, [BlockerKind::DoNotDisruptPod]);
    let (command, blockers, _) = world("2026-03-02T08:30:00Z").decide();
    assert!(blockers[0].1.is_empty(), "{blockers:?}");
    assert_eq!(names(&command.expect("the big node is replaced")), ["busy"]);
}

/// Upstream's eventual disruption: drift is bounded by the claim's `terminationGracePeriod`
/// rather than blocked by its protected pods; without one, the pods hold it back.
#[test]
fn a_drifted_node_with_a_protected_pod_is_replaced_only_when_its_claim_bounds_the_drain() {
    let protected = |grace: Option<&str>| {
        let mut world = World::new(on_demand_pool(json!({"consolidateAfter": "Never"})))
            .with_node("old", 4, "on-demand", &[])
            .drifted("old");
        world.pods.push(Arc::new(pod(
            "batch",
            "old",
            "1",
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
        )));
        Arc::make_mut(&mut world.claims[0])
            .spec
            .termination_grace_period = grace.map(str::to_owned);
        world
    };
    let (command, blockers, _) = protected(None).decide();
    assert!(command.is_none(), "{command:?}");
    assert!(blockers[0].1.contains(&BlockerKind::DoNotDisruptPod));
    let (command, _, _) = protected(Some("1h")).decide();
    let command = command.expect("drift replaces it");
    assert_eq!(command.method, Method::Drift);
    assert_eq!(names(&command), ["old"]);
}

#[test]
fn a_pod_without_a_controller_is_named_as_lost_with_its_node() {
    let world = World::new(on_demand_pool(consolidating())).with_node(
        "big",
        16,
        "on-demand",
        &[("bare", "500m")],
    );
    let input = world.input(&[]);
    let decision = decide(&input);
    let notes = &decision.candidates[0].disruptability.notes;
    assert!(
        notes.iter().any(|n| n
            == "pod default/bare has no controller: disrupting this node deletes it and nothing recreates it"),
        "{notes:?}"
    );
}
