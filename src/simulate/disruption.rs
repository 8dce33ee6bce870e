//! `simulate --from-cluster --disruption`: what the agent's disruption loop would do to a
//! cluster now, and what it would save. The passes are the agent's own
//! ([`crate::disruption::decide`]: repair is left out, the rest in upstream's order), run one
//! after another over a copy of the cluster, each command carried out on the copy before the
//! next pass, as the agent acts on one command at a time
//! (`pkg/controllers/disruption/controller.go`):
//!
//! * the candidates' claims and Nodes go;
//! * a replacement becomes a claim and a Node of its cheapest option, initialized now, with the
//!   pods consolidation planned for it (its allocatable less what the DaemonSets will take);
//! * the candidates' other pods go where the scheduler puts them on the nodes that remain.
//!
//! A pod arriving on a node is a pod event (upstream's `lastPodEventTime`), so a node that
//! takes pods is not consolidatable again until its pool's `consolidateAfter` has passed:
//! the result is what happens without waiting, not where the cluster ends up in an hour.
//! Budgets are read afresh each pass, as each command has finished by then; they slow the
//! agent down but do not change what it does.

use crate::apis::{CapacityType, NodeClaim, NodeClaimStatus, NodePool, labels};
use crate::disruption::{self, Options, Replacement};
use crate::scheduling::LabelSet;
use crate::scheduling::{self, InstanceType, Requirements, Target};
use crate::state::input::scheduling_input;
use crate::state::{CachedNode, CachedPod, NodeConditionState, Snapshot};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// The most commands one simulation carries out: well past any real cluster's claims, so the
/// bound only guards against a pass that would undo the one before it.
const MAX_COMMANDS: usize = 1000;

/// A node a command takes away.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Removed {
    pub node_claim: String,
    pub node: String,
    pub node_pool: String,
    pub instance_type: String,
    pub capacity_type: String,
    /// Hourly price, if the catalogue lists its type.
    pub price_per_hour: Option<f64>,
}

/// A node a command launches in place of those it removes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Launched {
    pub node_pool: String,
    pub instance_type: String,
    pub capacity_type: CapacityType,
    pub zone: String,
    /// Hourly price, unless no price is known for it.
    pub price_per_hour: Option<f64>,
    /// How many pods move onto it.
    pub pods: usize,
}

/// One command of the agent's disruption loop.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Upstream's method name (`Emptiness`, `Drift`, `MultiNodeConsolidation`, …).
    pub method: String,
    /// `delete` or `replace`.
    pub decision: String,
    /// `empty`, `drifted`, `underutilized`.
    pub reason: String,
    pub removed: Vec<Removed>,
    pub launched: Vec<Launched>,
    /// The removed nodes' price less the launched ones' (negative when drift replaces a node
    /// with a dearer one); unknown when a launched one's price is.
    pub savings_per_hour: Option<f64>,
}

/// A node the loop leaves, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    pub node_claim: String,
    pub node_pool: String,
    pub why: String,
}

/// What disruption would do now.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionPlan {
    pub steps: Vec<Step>,
    /// The nodes left afterwards, each with what keeps it.
    pub kept: Vec<Kept>,
    /// What the steps whose savings are known save.
    pub savings_per_hour: f64,
    pub savings_per_month: f64,
    /// The simulation stopped at its bound of commands rather than running out of them.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// The parts of the cluster that commands change; the rest is borrowed from the snapshot.
struct World {
    pods: Vec<Arc<CachedPod>>,
    nodes: Vec<Arc<CachedNode>>,
    claims: Vec<Arc<NodeClaim>>,
}

/// Runs the agent's disruption passes over `snapshot` until one finds nothing to do, carrying
/// out each command on a copy of the cluster. `now` is the clock every pass reads.
pub fn plan(
    snapshot: &Snapshot<'_>,
    pdbs: &[PodDisruptionBudget],
    now: Timestamp,
    options: Options,
) -> DisruptionPlan {
    let mut world = World {
        pods: snapshot.pods.to_vec(),
        nodes: snapshot.nodes.to_vec(),
        claims: snapshot.claims.to_vec(),
    };
    let mut steps = Vec::new();
    let mut launched_count = 0;
    loop {
        let current = Snapshot {
            pods: &world.pods,
            nodes: &world.nodes,
            claims: &world.claims,
            ..*snapshot
        };
        let input = disruption::Input {
            snapshot: current,
            pdbs,
            now,
            options,
            repair_policies: &[],
        };
        let decision = disruption::decide(&input);
        let command = match decision.command {
            Some(command) if steps.len() < MAX_COMMANDS => command,
            Some(_) => {
                let kept = kept(&decision);
                return finish(steps, kept, true);
            }
            None => {
                let kept = kept(&decision);
                return finish(steps, kept, false);
            }
        };
        let step = Step {
            method: format!("{:?}", command.method),
            decision: command.decision().to_owned(),
            reason: disruption::reason_name(command.reason).to_owned(),
            removed: command
                .candidates
                .iter()
                .map(|c| Removed {
                    node_claim: c.claim.clone(),
                    node: c.node.clone(),
                    node_pool: c.pool.clone(),
                    instance_type: c.instance_type.clone(),
                    capacity_type: c.capacity_type.clone(),
                    price_per_hour: c.price,
                })
                .collect(),
            launched: command
                .replacements
                .iter()
                .filter_map(|r| {
                    let option = r.claim.instance_types.first()?;
                    Some(Launched {
                        node_pool: r.claim.node_pool.clone(),
                        instance_type: option.name.clone(),
                        capacity_type: option.capacity_type,
                        zone: option.zone.clone(),
                        price_per_hour: option.known_price(),
                        pods: r.pods.len(),
                    })
                })
                .collect(),
            savings_per_hour: command.savings(),
        };
        let gone_claims: HashSet<String> =
            command.candidates.iter().map(|c| c.claim.clone()).collect();
        let gone_nodes: HashSet<String> =
            command.candidates.iter().map(|c| c.node.clone()).collect();
        let mut synthetic = Vec::new();
        for replacement in &command.replacements {
            let Some(pool) = snapshot
                .pools
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(&replacement.claim.node_pool))
            else {
                continue;
            };
            let catalogue = snapshot
                .catalogues
                .of(&pool.spec.template.spec.node_class_ref);
            launched_count += 1;
            if let Some(made) = launch(replacement, pool, catalogue, now, launched_count) {
                synthetic.push(made);
            }
        }
        world = carry_out(snapshot, world, &gone_claims, &gone_nodes, synthetic, now);
        steps.push(step);
    }
}

fn finish(steps: Vec<Step>, kept: Vec<Kept>, truncated: bool) -> DisruptionPlan {
    // A fold from 0.0: an empty f64 sum is -0.0, which prints as "$-0.0000".
    let savings_per_hour = steps
        .iter()
        .filter_map(|s| s.savings_per_hour)
        .fold(0.0, |a, b| a + b);
    DisruptionPlan {
        steps,
        kept,
        savings_per_hour,
        savings_per_month: savings_per_hour * super::HOURS_PER_MONTH,
        truncated,
    }
}

/// Every claim of the last pass with what keeps it: the reason a method gave for leaving it,
/// else its first blocker, else that no cheaper arrangement holds its pods.
fn kept(decision: &disruption::Decision<'_>) -> Vec<Kept> {
    decision
        .candidates
        .iter()
        .map(|c| Kept {
            node_claim: c.name().to_owned(),
            node_pool: c.pool_name().to_owned(),
            why: decision
                .kept
                .get(c.name())
                .cloned()
                .or_else(|| c.disruptability.blockers.first().map(|b| b.message.clone()))
                .unwrap_or_else(|| {
                    "consolidation found no cheaper way to hold its pods".to_owned()
                }),
        })
        .collect()
}

/// A claim and Node launched for `replacement`, and the pods it is for.
struct Made {
    claim: NodeClaim,
    node: CachedNode,
    pods: Vec<String>,
}

/// The claim and Node the agent would have once `replacement` launched and initialized: its
/// cheapest option, labelled as the agent's registration labels a Node, allocatable less what
/// the DaemonSets' pods will take (the copy binds no DaemonSet pods to it).
fn launch(
    replacement: &Replacement,
    pool: &NodePool,
    catalogue: &[InstanceType],
    now: Timestamp,
    count: usize,
) -> Option<Made> {
    let plan = &replacement.claim;
    let option = plan.instance_types.first()?;
    let instance_type = catalogue.iter().find(|t| t.name == option.name)?;
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let name = format!("{pool_name}-simulated-{count}");
    let provider_id = format!("simulated:///{}/{name}", option.zone);
    let mut node_labels = plan.node_labels();
    node_labels.extend(single_values(&instance_type.requirements));
    node_labels.insert(labels::NODE_POOL.to_owned(), pool_name);
    node_labels.insert(labels::INSTANCE_TYPE.to_owned(), option.name.clone());
    node_labels.insert(labels::ZONE.to_owned(), option.zone.clone());
    node_labels.insert(
        labels::CAPACITY_TYPE.to_owned(),
        option.capacity_type.to_string(),
    );
    node_labels.insert(labels::HOSTNAME.to_owned(), name.clone());
    let capacity = instance_type.capacity.to_quantities();
    let allocatable = instance_type
        .allocatable()
        .saturating_sub(&plan.daemon_requests);
    let at = Time(now);
    let condition = |type_: &str| Condition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        reason: type_.to_owned(),
        message: String::new(),
        last_transition_time: at.clone(),
        observed_generation: None,
    };
    let metadata = ObjectMeta {
        name: Some(name.clone()),
        labels: Some(node_labels),
        creation_timestamp: Some(at.clone()),
        ..ObjectMeta::default()
    };
    let claim = NodeClaim {
        metadata: metadata.clone(),
        spec: plan.to_node_claim_spec(pool),
        status: Some(NodeClaimStatus {
            node_name: Some(name.clone()),
            provider_id: Some(provider_id.clone()),
            image_id: None,
            capacity,
            allocatable: allocatable.to_quantities(),
            conditions: ["Launched", "Registered", "Initialized"]
                .into_iter()
                .map(condition)
                .collect(),
            last_pod_event_time: Some(at.clone()),
        }),
    };
    let taints: Vec<Taint> = plan.taints.clone();
    let node = CachedNode {
        name: name.clone(),
        creation_timestamp: Some(at.clone()),
        labels: metadata
            .labels
            .as_ref()
            .map(LabelSet::from)
            .unwrap_or_default(),
        provider_id: Some(provider_id),
        taints,
        allocatable: allocatable.into(),
        conditions: vec![NodeConditionState {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(at),
        }],
        ..CachedNode::default()
    };
    Some(Made {
        claim,
        node,
        pods: replacement.pods.iter().map(pod_key).collect(),
    })
}

/// The labels an instance type fixes to one value (arch, os, family, …).
fn single_values(requirements: &Requirements) -> BTreeMap<String, String> {
    requirements
        .iter()
        .filter(|r| r.operator() == crate::apis::RequirementOperator::In)
        .filter_map(|r| {
            let mut values = r.values();
            match (values.next(), values.next()) {
                (Some(value), None) => Some((r.key().to_owned(), value.to_owned())),
                _ => None,
            }
        })
        .collect()
}

fn pod_key(pod: &CachedPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The cluster once a command is done: `gone` claims and nodes removed, `made` ones added with
/// the pods meant for them, and the removed nodes' other pods where the scheduler puts them
/// (left pending if it finds no room, which consolidation has ruled out). Each claim that takes
/// pods records the pod event.
fn carry_out(
    snapshot: &Snapshot<'_>,
    world: World,
    gone_claims: &HashSet<String>,
    gone_nodes: &HashSet<String>,
    made: Vec<Made>,
    now: Timestamp,
) -> World {
    let named = |meta: &ObjectMeta, set: &HashSet<String>| {
        meta.name.as_ref().is_some_and(|n| set.contains(n))
    };
    let mut claims: Vec<Arc<NodeClaim>> = world
        .claims
        .into_iter()
        .filter(|c| !named(&c.metadata, gone_claims))
        .collect();
    let mut nodes: Vec<Arc<CachedNode>> = world
        .nodes
        .into_iter()
        .filter(|n| !gone_nodes.contains(&n.name))
        .collect();
    let mut destination: HashMap<String, String> = HashMap::new();
    for m in made {
        let node_name = m.node.name.clone();
        for pod in m.pods {
            destination.insert(pod, node_name.clone());
        }
        claims.push(Arc::new(m.claim));
        nodes.push(Arc::new(m.node));
    }

    // The removed nodes' pods: those a replacement is for go there; the others (not DaemonSet
    // pods, which go with their node) are placed by the scheduler.
    let mut stay: Vec<Arc<CachedPod>> = Vec::new();
    let mut moving: Vec<CachedPod> = Vec::new();
    for pod in world.pods {
        let on_gone = pod
            .node_name
            .as_ref()
            .is_some_and(|n| gone_nodes.contains(n));
        if !on_gone {
            stay.push(pod);
        } else if let Some(node) = destination.get(&pod_key(&pod)) {
            let mut moved = pod.as_ref().clone();
            moved.node_name = Some(node.clone());
            stay.push(Arc::new(moved));
        } else if disruption::disruptability::is_reschedulable(&pod) {
            moving.push(pod.as_ref().clone());
        }
    }
    if !moving.is_empty() {
        let placed = {
            let now_there = Snapshot {
                pods: &stay,
                nodes: &nodes,
                claims: &claims,
                ..*snapshot
            };
            let mut input = scheduling_input(&now_there);
            let pending = input.pods.len();
            input.pods.extend(moving.iter());
            let plan = scheduling::schedule(&input);
            let mut placed: HashMap<usize, String> = HashMap::new();
            for placement in plan.existing {
                if placement.target != Target::Node {
                    continue;
                }
                for index in placement.pods {
                    if let Some(i) = index.checked_sub(pending) {
                        placed.insert(i, placement.name.clone());
                    }
                }
            }
            placed
        };
        for (i, mut pod) in moving.into_iter().enumerate() {
            pod.node_name = placed.get(&i).cloned();
            if let Some(node) = &pod.node_name {
                destination.insert(pod_key(&pod), node.clone());
            } else {
                pod.status = pending_status();
            }
            stay.push(Arc::new(pod));
        }
    }

    // A pod bound to a node is a pod event on its claim.
    let receiving: HashSet<&String> = destination.values().collect();
    let claims = claims
        .into_iter()
        .map(|claim| {
            let takes = claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| receiving.contains(n));
            if !takes {
                return claim;
            }
            let mut claim = claim.as_ref().clone();
            if let Some(status) = claim.status.as_mut() {
                status.last_pod_event_time = Some(Time(now));
            }
            Arc::new(claim)
        })
        .collect();
    World {
        pods: stay,
        nodes,
        claims,
    }
}

/// A pod the kube-scheduler could not place, as the agent reads one.
fn pending_status() -> crate::state::CachedPodStatus {
    crate::state::CachedPodStatus {
        phase: Some("Pending".to_owned()),
        scheduled: Some(crate::state::ScheduledCondition {
            status: "False".to_owned(),
            reason: Some("Unschedulable".to_owned()),
        }),
        ready: false,
        start_time: None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::resources::ResourceList;
    use crate::scheduling::Offering;
    use crate::state::Catalogues;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    const NOW: &str = "2026-03-02T10:00:00Z";

    fn class() -> Value {
        json!({"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"})
    }

    /// c-1 … c-8: n vCPU, 4n GiB, $0.05·n on demand and $0.02·n spot, in zone-a.
    fn catalogue() -> Vec<InstanceType> {
        [1, 2, 4, 8]
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

    fn pool(consolidate_after: &str) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default", "uid": "u"},
            "spec": {"disruption": {"consolidateAfter": consolidate_after, "budgets": [{"nodes": "100%"}]},
                     "template": {"spec": {"requirements": [], "nodeClassRef": class()}}},
        }))
        .unwrap()
    }

    struct Cluster {
        pools: Vec<Arc<NodePool>>,
        claims: Vec<Arc<NodeClaim>>,
        nodes: Vec<Arc<CachedNode>>,
        pods: Vec<Arc<CachedPod>>,
        catalogues: Catalogues,
    }

    impl Cluster {
        fn new(consolidate_after: &str) -> Self {
            let pool = pool(consolidate_after);
            let mut catalogues = Catalogues::default();
            catalogues.insert(&pool.spec.template.spec.node_class_ref, catalogue().into());
            Self {
                pools: vec![Arc::new(pool)],
                claims: Vec::new(),
                nodes: Vec::new(),
                pods: Vec::new(),
                catalogues,
            }
        }

        /// An on-demand c-`size` node of the pool, initialized an hour ago, with pods of these
        /// CPUs.
        fn node(self, name: &str, size: u32, pods: &[&str]) -> Self {
            self.node_of(name, size, "on-demand", pods)
        }

        fn node_of(mut self, name: &str, size: u32, capacity_type: &str, pods: &[&str]) -> Self {
            let labels = json!({"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": format!("c-{size}"),
                "karpenter.sh/capacity-type": capacity_type, "topology.kubernetes.io/zone": "zone-a", "kubernetes.io/hostname": name});
            self.claims.push(Arc::new(serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": name, "creationTimestamp": "2026-03-02T09:00:00Z", "labels": labels},
                "spec": {"requirements": [], "nodeClassRef": class()},
                "status": {"nodeName": name, "providerID": format!("kwok://{name}"),
                    "conditions": [{"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                                    "lastTransitionTime": "2026-03-02T09:01:00Z"}]},
            })).unwrap()));
            self.nodes.push(Arc::new(serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
                "spec": {"providerID": format!("kwok://{name}")},
                "status": {"allocatable": {"cpu": size.to_string(), "memory": format!("{}Gi", 4 * size), "pods": "110"}},
            })).unwrap()));
            for (i, cpu) in pods.iter().enumerate() {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("{name}-pod-{i}"), "namespace": "default"},
                    "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
                    "status": {"phase": "Running"},
                }))
                .unwrap();
                self.pods.push(Arc::new(CachedPod::from(pod)));
            }
            self
        }

        fn plan(&self) -> DisruptionPlan {
            let namespace_labels = Default::default();
            let volumes = Default::default();
            let snapshot = Snapshot {
                pods: &self.pods,
                nodes: &self.nodes,
                claims: &self.claims,
                pools: &self.pools,
                catalogues: &self.catalogues,
                daemon_set_pods: &[],
                namespace_labels: &namespace_labels,
                volumes: &volumes,
            };
            plan(&snapshot, &[], NOW.parse().unwrap(), Options::default())
        }
    }

    fn removed(step: &Step) -> Vec<&str> {
        step.removed.iter().map(|r| r.node_claim.as_str()).collect()
    }

    #[test]
    fn an_empty_node_goes_then_two_half_empty_nodes_become_one_cheaper_node_and_the_savings_add_up()
    {
        let plan = Cluster::new("0s")
            .node("a", 4, &[])
            .node("b", 4, &["1"])
            .node("c", 4, &["1"])
            .plan();
        assert_eq!(plan.steps.len(), 2, "{plan:#?}");
        assert_eq!(plan.steps[0].method, "Emptiness");
        assert_eq!(removed(&plan.steps[0]), ["a"]);
        assert_eq!(plan.steps[1].decision, "replace");
        assert_eq!(removed(&plan.steps[1]), ["b", "c"]);
        let launched = &plan.steps[1].launched;
        assert_eq!(launched.len(), 1);
        // The pool allows spot, the cheapest way to hold two 1-CPU pods.
        assert_eq!(
            (
                launched[0].instance_type.as_str(),
                launched[0].capacity_type.as_str(),
                launched[0].pods
            ),
            ("c-2", "spot", 2)
        );
        // $0.20 for the empty node, then $0.40 less $0.04 for the pair.
        assert!((plan.savings_per_hour - 0.56).abs() < 1e-9, "{plan:#?}");
        assert!((plan.savings_per_month - 0.56 * 730.0).abs() < 1e-6);
        // The replacement is what is left, and it holds its pods as cheaply as anything can.
        assert_eq!(plan.kept.len(), 1, "{plan:#?}");
        assert!(plan.kept[0].node_claim.starts_with("default-simulated-"));
        assert!(!plan.truncated);
    }

    #[test]
    fn a_node_that_takes_another_nodes_pods_waits_out_consolidate_after_before_it_is_looked_at_again()
     {
        // Two spot nodes, each half full. Spot-to-spot is off, so neither can be replaced;
        // one's pod moves to the other and it goes. The other took a pod just now, so
        // consolidation leaves it until consolidateAfter has passed.
        let plan = Cluster::new("10m")
            .node_of("b", 4, "spot", &["2"])
            .node_of("c", 4, "spot", &["2"])
            .plan();
        assert_eq!(plan.steps.len(), 1, "{plan:#?}");
        assert_eq!(plan.steps[0].decision, "delete");
        assert!((plan.savings_per_hour - 0.08).abs() < 1e-9, "{plan:#?}");
        assert_eq!(plan.kept.len(), 1);
        assert_ne!(plan.kept[0].node_claim, plan.steps[0].removed[0].node_claim);
        assert!(
            plan.kept[0].why.contains("consolidateAfter is 10m"),
            "{}",
            plan.kept[0].why
        );
    }

    #[test]
    fn a_cluster_with_nothing_to_give_back_saves_nothing_and_says_what_keeps_each_node() {
        let plan = Cluster::new("Never").node("a", 4, &["3"]).plan();
        assert!(plan.steps.is_empty());
        assert_eq!(plan.savings_per_hour.to_string(), "0");
        assert_eq!(plan.kept.len(), 1);
        assert!(plan.kept[0].why.contains("Never"), "{}", plan.kept[0].why);
    }
}
