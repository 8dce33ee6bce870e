//! From the watched stores to the scheduler's [`Input`]: which pods are ours to provision for,
//! which Nodes and in-flight NodeClaims already hold capacity (with the pods bound to them),
//! each live NodePool with its catalogue and what it already uses against its limits, and the
//! DaemonSets' overhead on every new node.
//!
//! This is the first half of a scheduling round (upstream's `Provisioner.Schedule` reading
//! `state.Cluster`); the round fetches the catalogues and lists the DaemonSets, then hands
//! everything here as plain slices.

use super::node_cache::CachedNode;
use super::pod_cache::CachedPod;
use super::usage::usage_by_pool;
use crate::apis::{NodeClaim, NodeClassReference, NodePool, labels};
use crate::resources::{NODES, ResourceList};
use crate::scheduling::PodView;
use crate::scheduling::{
    ExistingNode, InFlightClaim, Input, InstanceType, NamespaceLabels, PoolInput, VolumeTopology,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::debug;

/// Whether the kube-scheduler gave up on a pod, so it is ours to provision for.
pub fn is_provisionable(pod: &CachedPod) -> bool {
    let unschedulable = pod
        .scheduled_condition()
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    pod.node_name.is_none()
        && unschedulable
        && !pod.is_daemon_set_pod()
        && pod.metadata.deletion_timestamp.is_none()
}

/// The pods a round provisions for, in the store's order (the plan refers to them by index).
pub(crate) fn provisionable_pods(pods: &[Arc<CachedPod>]) -> Vec<&CachedPod> {
    pods.iter()
        .map(AsRef::as_ref)
        .filter(|p| is_provisionable(p))
        .collect()
}

/// The NodePools that may launch nodes: those not being deleted, by name, so every round
/// offers them to the scheduler in one order.
pub(crate) fn live_pools(pools: &[Arc<NodePool>]) -> Vec<&NodePool> {
    let mut live: Vec<&NodePool> = pools
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    live.sort_by_key(|p| p.name_any());
    live
}

/// The node classes a round needs the catalogue of: every live pool's and every claim's.
pub(crate) fn node_classes<'a>(
    pools: &'a [Arc<NodePool>],
    claims: &'a [Arc<NodeClaim>],
) -> impl Iterator<Item = &'a NodeClassReference> {
    live_pools(pools)
        .into_iter()
        .map(|p| &p.spec.template.spec.node_class_ref)
        .chain(claims.iter().map(|c| &c.spec.node_class_ref))
}

/// The instance types of each node class, as the provider listed them for this round.
#[derive(Clone, Debug, Default)]
pub struct Catalogues(BTreeMap<(String, String, String), Arc<[InstanceType]>>);

impl Catalogues {
    fn key(class: &NodeClassReference) -> (String, String, String) {
        (class.group.clone(), class.kind.clone(), class.name.clone())
    }

    /// Whether the class's catalogue is known.
    pub fn contains(&self, class: &NodeClassReference) -> bool {
        self.0.contains_key(&Self::key(class))
    }

    /// Records the class's catalogue.
    pub fn insert(&mut self, class: &NodeClassReference, types: Arc<[InstanceType]>) {
        self.0.insert(Self::key(class), types);
    }

    /// The class's instance types; none when the provider could not list them.
    pub fn of(&self, class: &NodeClassReference) -> &[InstanceType] {
        self.0.get(&Self::key(class)).map_or(&[], AsRef::as_ref)
    }
}

/// One pod per DaemonSet, built from its template: what every new node it runs on must hold
/// besides the pods it is launched for.
pub fn daemon_set_pods<'a>(daemon_sets: impl IntoIterator<Item = &'a DaemonSet>) -> Vec<Pod> {
    daemon_sets
        .into_iter()
        .filter_map(|ds| ds.spec.as_ref())
        .map(|spec| Pod {
            metadata: spec.template.metadata.clone().unwrap_or_default(),
            spec: spec.template.spec.clone(),
            status: None,
        })
        .collect()
}

/// What the stores held when a round began.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot<'a> {
    /// Every pod the pod watch holds.
    pub pods: &'a [Arc<CachedPod>],
    /// Every Node.
    pub nodes: &'a [Arc<CachedNode>],
    /// Every NodeClaim, those just created that the watch has not delivered yet included.
    pub claims: &'a [Arc<NodeClaim>],
    /// Every NodePool, those being deleted included.
    pub pools: &'a [Arc<NodePool>],
    /// The catalogue of each node class of [`node_classes`].
    pub catalogues: &'a Catalogues,
    /// One pod per DaemonSet (see [`daemon_set_pods`]).
    pub daemon_set_pods: &'a [Pod],
    /// Each namespace's labels (pod-affinity terms with a `namespaceSelector`).
    pub namespace_labels: &'a NamespaceLabels,
    /// The volume topology of the pods with persistent volume claims.
    pub volumes: &'a VolumeTopology,
}

/// The scheduler's input for one round: the provisionable pods (in [`provisionable_pods`]'s
/// order, which the plan's pod indices refer to), the schedulable Nodes, the NodeClaims still in
/// flight, the live pools with their catalogues and usage, and the DaemonSets' pods.
pub fn scheduling_input<'a>(snapshot: &Snapshot<'a>) -> Input<'a, CachedPod> {
    let claims = snapshot.claims;
    let capacity = existing_capacity(snapshot.nodes, claims, pods_by_node(snapshot.pods));
    Input {
        pods: provisionable_pods(snapshot.pods),
        node_pools: pool_inputs(snapshot.pools, claims, snapshot.catalogues),
        in_flight: in_flight_claims(
            claims,
            snapshot.catalogues,
            &capacity.registered,
            capacity.pods_of_in_flight,
        ),
        nodes: capacity.nodes,
        daemon_set_pods: snapshot.daemon_set_pods.iter().collect(),
        namespace_labels: Cow::Borrowed(snapshot.namespace_labels),
        volume_topology: Cow::Borrowed(snapshot.volumes),
        ..Input::default()
    }
}

/// The pods bound to each Node that still use its resources (not finished).
///
/// The maps here are keyed by node names and provider ids, thousands of them each round, and
/// hashed with Fx: the standard SipHash was, with the solver's map of pod shapes, a sixth of a
/// round's CPU at 20,000 pods (`cargo bench --bench disruption -- --round 3000 --node-vcpu 2
/// --max-vcpu 2 --in-flight 600 --nodes 4400` under `perf`). The keys are names the API server
/// and the provider gave, so nobody gains from choosing them to collide.
fn pods_by_node(pods: &[Arc<CachedPod>]) -> FxHashMap<&str, Vec<&CachedPod>> {
    let mut by_node: FxHashMap<&str, Vec<&CachedPod>> = FxHashMap::default();
    for pod in pods.iter().map(AsRef::as_ref) {
        if pod.is_terminal() {
            continue;
        }
        if let Some(node) = pod.node_name.as_deref() {
            by_node.entry(node).or_default().push(pod);
        }
    }
    by_node
}

/// The Nodes pods can go to, and what that leaves for the in-flight claims.
struct ExistingCapacity<'a> {
    nodes: Vec<ExistingNode<'a, CachedPod>>,
    /// The provider ids of the claims whose Node stands in for them.
    registered: FxHashSet<&'a str>,
    /// Pods already bound to the Node of a claim that still counts as in flight.
    pods_of_in_flight: FxHashMap<&'a str, Vec<&'a CachedPod>>,
}

fn existing_capacity<'a>(
    nodes: &'a [Arc<CachedNode>],
    claims: &'a [Arc<NodeClaim>],
    mut pods_by_node: FxHashMap<&str, Vec<&'a CachedPod>>,
) -> ExistingCapacity<'a> {
    let claim_by_provider_id: FxHashMap<&str, &NodeClaim> = claims
        .iter()
        .filter_map(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .map(|id| (id, c.as_ref()))
        })
        .collect();
    let mut capacity = ExistingCapacity {
        nodes: Vec::new(),
        registered: FxHashSet::default(),
        pods_of_in_flight: FxHashMap::default(),
    };
    for node in nodes
        .iter()
        .map(AsRef::as_ref)
        .filter(|n| schedulable_node(n))
    {
        let pods = pods_by_node.remove(node.name.as_str()).unwrap_or_default();
        let provider_id = node.provider_id.as_deref();
        if !node.allocatable.is_reported() {
            // A Node that has not reported what it holds yet (just created) would stand in for
            // its claim as an empty node; its claim keeps counting as in flight instead.
            if let Some(id) = provider_id.filter(|id| claim_by_provider_id.contains_key(id)) {
                capacity.pods_of_in_flight.insert(id, pods);
            }
            continue;
        }
        let Some(mut candidate) = existing_node(node, pods) else {
            continue;
        };
        if let Some(claim) = provider_id.and_then(|id| claim_by_provider_id.get(id)) {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            capacity.registered.extend(provider_id);
            // Taints that go away once a Karpenter node finishes starting do not keep pods off
            // it: without this, a round right after launch would plan new claims for pods
            // that already have room on the just-registered node.
            let starting = !claim.is_true("Initialized");
            candidate.taints.retain(|t| {
                let startup = claim
                    .spec
                    .startup_taints
                    .iter()
                    .any(|s| s.key == t.key && s.effect == t.effect);
                t.key != labels::UNREGISTERED_TAINT_KEY
                    && !startup
                    && !(starting && crate::scheduling::taints::is_known_ephemeral(t))
            });
            // Until it is initialized a node holds what its claim was launched with (upstream's
            // `StateNode.Allocatable`): its kubelet reports a GPU as zero until the device
            // plugin registers it, and the GPU pod waiting for it must not look unplaced.
            if starting
                && let Some(launched) = claim
                    .status
                    .as_ref()
                    .map(|s| &s.allocatable)
                    .filter(|a| !a.is_empty())
                    .and_then(|a| ResourceList::from_quantities(a).ok())
            {
                candidate.allocatable = candidate.allocatable.max_by_resource(&launched);
            }
        }
        capacity.nodes.push(candidate);
    }
    capacity
}

/// The claims not being deleted whose Node does not stand in for them yet, each with the pods
/// already bound to its Node.
fn in_flight_claims<'a>(
    claims: &'a [Arc<NodeClaim>],
    catalogues: &'a Catalogues,
    registered: &FxHashSet<&str>,
    mut pods_of_in_flight: FxHashMap<&str, Vec<&'a CachedPod>>,
) -> Vec<InFlightClaim<'a, CachedPod>> {
    let mut in_flight = Vec::new();
    for claim in claims
        .iter()
        .map(AsRef::as_ref)
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.as_deref());
        if provider_id.is_some_and(|id| registered.contains(id)) {
            continue;
        }
        let bound = provider_id
            .and_then(|id| pods_of_in_flight.remove(id))
            .unwrap_or_default();
        match InFlightClaim::from_node_claim(
            claim,
            catalogues.of(&claim.spec.node_class_ref),
            bound,
        ) {
            Ok(mut flight) => {
                // Before launch the claim holds at least what it was sized for.
                let launched = claim
                    .status
                    .as_ref()
                    .is_some_and(|s| !s.allocatable.is_empty());
                if !launched
                    && let Ok(requests) =
                        ResourceList::from_quantities(&claim.spec.resources.requests)
                {
                    flight.allocatable = flight.allocatable.max_by_resource(&requests);
                }
                in_flight.push(flight);
            }
            Err(e) => {
                debug!(nodeclaim = %claim.name_any(), error = %e, "in-flight claim left out of the simulation")
            }
        }
    }
    in_flight
}

/// Each live pool with its catalogue and what its claims already count against its limits.
/// Static pools (`replicas`) are left out: they keep their count whatever is pending, so
/// neither provisioning nor a consolidation's simulation may plan new nodes in them (upstream's
/// `NewScheduler` skips `IsStatic` pools). Their nodes still hold pods like any other.
fn pool_inputs<'a>(
    pools: &'a [Arc<NodePool>],
    claims: &[Arc<NodeClaim>],
    catalogues: &'a Catalogues,
) -> Vec<PoolInput<'a>> {
    let usage = usage_by_pool(claims.iter().map(AsRef::as_ref));
    live_pools(pools)
        .into_iter()
        .filter(|pool| !pool.spec.is_static())
        .map(|pool| {
            let mut input =
                PoolInput::new(pool, catalogues.of(&pool.spec.template.spec.node_class_ref));
            // Upstream provisions only from Ready pools. A pool whose status was not written
            // yet is tried: its node class is checked again at launch.
            input.not_ready = pool
                .status
                .as_ref()
                .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                .filter(|c| c.status == "False")
                .map(|c| c.message.clone());
            if let Some((count, resources)) = usage.get(&pool.name_any()) {
                input.usage = resources
                    .clone()
                    .with(NODES, u64::try_from(*count).unwrap_or_default());
            }
            input
        })
        .collect()
}

/// Whether pods may be placed on a Node: not being deleted, not cordoned, not being disrupted.
fn schedulable_node(node: &CachedNode) -> bool {
    let disrupted = node
        .taints
        .iter()
        .any(|t| t.key == labels::DISRUPTED_TAINT_KEY);
    node.deletion_timestamp.is_none() && !node.unschedulable && !disrupted
}

/// The scheduler's view of a Node: its name, labels (borrowed), taints and allocatable.
/// `None` for a Node whose allocatable does not parse.
fn existing_node<'a>(
    node: &'a CachedNode,
    pods: Vec<&'a CachedPod>,
) -> Option<ExistingNode<'a, CachedPod>> {
    Some(ExistingNode {
        name: node.name.clone(),
        labels: Cow::Borrowed(&node.labels),
        taints: node.taints.clone(),
        allocatable: node.allocatable.list()?.clone(),
        pods,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::CapacityType;
    use crate::resources::CPU;
    use crate::scheduling::Offering;
    use serde_json::{Value, json};

    fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
        serde_json::from_value(value).expect("a valid test object")
    }

    fn pod(name: &str, node: Option<&str>, unschedulable: bool) -> Arc<CachedPod> {
        let conditions = if unschedulable {
            json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])
        } else {
            json!([{"type": "PodScheduled", "status": "True"}])
        };
        Arc::new(from_json(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"nodeName": node, "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending", "conditions": conditions},
        })))
    }

    fn node(name: &str, provider_id: &str, allocatable_cpu: Option<&str>) -> Arc<CachedNode> {
        let status = allocatable_cpu.map_or(
            json!({}),
            |cpu| json!({"allocatable": {"cpu": cpu, "pods": "110"}}),
        );
        Arc::new(from_json(json!({
            "metadata": {"name": name},
            "spec": {"providerID": provider_id},
            "status": status,
        })))
    }

    fn claim(name: &str, pool: &str, provider_id: Option<&str>, cpu: &str) -> Arc<NodeClaim> {
        let status = provider_id.map_or(
            json!({}),
            |id| json!({"providerID": id, "capacity": {"cpu": cpu}, "allocatable": {"cpu": cpu}}),
        );
        Arc::new(from_json(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {labels::NODE_POOL: pool}},
            "spec": {
                "requirements": [],
                "resources": {"requests": {"cpu": cpu}},
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            },
            "status": status,
        })))
    }

    fn pool(name: &str, cpu_limit: &str) -> Arc<NodePool> {
        Arc::new(from_json(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {
                "limits": {"cpu": cpu_limit},
                "template": {"spec": {
                    "requirements": [],
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                }},
            },
        })))
    }

    fn catalogue() -> Catalogues {
        let mut small = InstanceType::new(
            "small",
            ResourceList::new()
                .with(CPU, 2000)
                .with(crate::resources::PODS, 110),
        );
        small.offerings = vec![Offering::new("zone-a", CapacityType::OnDemand, 0.1)];
        let mut catalogues = Catalogues::default();
        catalogues.insert(
            &pool("any", "1").spec.template.spec.node_class_ref,
            Arc::from(vec![small]),
        );
        catalogues
    }

    /// The input for these stores, handed to `check` (the input borrows from them).
    fn with_input(
        pods: &[Arc<CachedPod>],
        nodes: &[Arc<CachedNode>],
        claims: &[Arc<NodeClaim>],
        pools: &[Arc<NodePool>],
        check: impl FnOnce(Input<'_, CachedPod>),
    ) {
        let catalogues = catalogue();
        check(scheduling_input(&Snapshot {
            pods,
            nodes,
            claims,
            pools,
            catalogues: &catalogues,
            daemon_set_pods: &[],
            namespace_labels: &NamespaceLabels::new(),
            volumes: &VolumeTopology::default(),
        }));
    }

    fn names(pods: &[&CachedPod]) -> Vec<String> {
        pods.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn a_pod_bound_to_a_node_is_capacity_in_use_not_a_pod_to_provision_for() {
        let pods = [
            pod("waiting", None, true),
            pod("running", Some("node-a"), false),
        ];
        let nodes = [node("node-a", "kwok://node-a", Some("4"))];
        with_input(&pods, &nodes, &[], &[], |input| {
            assert_eq!(names(&input.pods), ["waiting"]);
            assert_eq!(input.nodes.len(), 1);
            assert_eq!(names(&input.nodes[0].pods), ["running"]);
        });
    }

    #[test]
    fn a_pod_the_kube_scheduler_has_not_given_up_on_is_not_provisioned_for() {
        let pods = [pod("judged-schedulable", None, false)];
        assert!(provisionable_pods(&pods).is_empty());
    }

    #[test]
    fn a_claim_without_a_node_is_in_flight_and_holds_at_least_what_it_was_sized_for() {
        let claims = [claim("pool-a-xyz", "pool-a", None, "3")];
        with_input(&[], &[], &claims, &[], |input| {
            assert!(input.nodes.is_empty());
            assert_eq!(input.in_flight.len(), 1);
            assert_eq!(input.in_flight[0].node_pool, "pool-a");
            assert!(
                input.in_flight[0].allocatable.get(CPU) >= 3000,
                "the claim's requests, not just the smallest type it could be"
            );
        });
    }

    #[test]
    fn a_claim_whose_node_has_not_reported_allocatable_stays_in_flight_with_the_pods_bound_there() {
        let pods = [pod("early", Some("node-a"), false)];
        let nodes = [node("node-a", "kwok://node-a", None)];
        let claims = [claim("pool-a-xyz", "pool-a", Some("kwok://node-a"), "4")];
        with_input(&pods, &nodes, &claims, &[], |input| {
            assert!(
                input.nodes.is_empty(),
                "an empty-looking node would hide the claim"
            );
            assert_eq!(input.in_flight.len(), 1);
            assert_eq!(names(&input.in_flight[0].pods), ["early"]);
        });
    }

    #[test]
    fn a_registered_claim_counts_once_as_its_node() {
        let nodes = [node("node-a", "kwok://node-a", Some("4"))];
        let claims = [claim("pool-a-xyz", "pool-a", Some("kwok://node-a"), "4")];
        with_input(&[], &nodes, &claims, &[], |input| {
            assert_eq!(input.nodes.len(), 1);
            assert!(input.in_flight.is_empty());
        });
    }

    #[test]
    fn a_cordoned_node_takes_no_pods() {
        let mut cordoned = (*node("node-a", "kwok://node-a", Some("4"))).clone();
        cordoned.unschedulable = true;
        with_input(&[], &[Arc::new(cordoned)], &[], &[], |input| {
            assert!(input.nodes.is_empty());
        });
    }

    #[test]
    fn a_node_pool_at_its_limit_contributes_its_usage() {
        let pools = [pool("pool-a", "4")];
        let claims = [
            claim("pool-a-1", "pool-a", Some("kwok://node-1"), "2"),
            claim("pool-a-2", "pool-a", None, "2"),
        ];
        with_input(&[], &[], &claims, &pools, |input| {
            assert_eq!(input.node_pools.len(), 1);
            let usage = &input.node_pools[0].usage;
            assert_eq!(
                (usage.get(CPU), usage.get(NODES)),
                (4000, 2),
                "launched and not yet launched claims both count"
            );
            assert_eq!(input.node_pools[0].instance_types.len(), 1);
        });
    }

    #[test]
    fn a_node_pool_being_deleted_launches_nothing() {
        let mut deleting = serde_json::to_value(&*pool("going", "10")).expect("a pool");
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let deleting: NodePool = from_json(deleting);
        let pools = [
            pool("staying", "10"),
            Arc::new(deleting),
            pool("also", "10"),
        ];
        with_input(&[], &[], &[], &pools, |input| {
            let offered: Vec<String> = input
                .node_pools
                .iter()
                .map(|p| p.node_pool.name_any())
                .collect();
            assert_eq!(offered, ["also", "staying"], "live pools, by name");
        });
    }

    #[test]
    fn replicas_sharing_their_template_each_count_against_required_anti_affinity() {
        // As the pod watch caches them: every replica shares one spec and one label map, so
        // the scheduler reads the template once (`PodView::shape_key`) but must still see a
        // replica on each node.
        let mut parts = crate::state::ReplicaParts::default();
        let mut replica = |name: &str, node: Option<&str>| {
            let scheduled = if node.is_some() { "True" } else { "False" };
            Arc::new(parts.cache(from_json(json!({
                "metadata": {"name": name, "namespace": "default", "uid": name,
                    "labels": {"app": "web"},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-web", "controller": true}]},
                "spec": {"nodeName": node, "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": labels::HOSTNAME}]}}},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": scheduled, "reason": "Unschedulable"}]},
            }))))
        };
        let pods = [
            replica("web-1", Some("node-a")),
            replica("web-2", Some("node-b")),
            replica("web-3", None),
        ];
        assert!(Arc::ptr_eq(&pods[0].spec, &pods[2].spec));
        let nodes = [
            node("node-a", "kwok://node-a", Some("4")),
            node("node-b", "kwok://node-b", Some("4")),
        ];
        with_input(&pods, &nodes, &[], &[pool("pool-a", "100")], |input| {
            assert_eq!(names(&input.pods), ["web-3"]);
            let plan = crate::scheduling::schedule(&input);
            assert!(
                plan.existing.is_empty(),
                "both nodes hold a replica already: {:?}",
                plan.existing
            );
            assert_eq!(plan.new_claims.len(), 1, "{:?}", plan.unschedulable);
            assert_eq!(plan.new_claims[0].pods, [0]);
        });
    }

    #[test]
    fn every_daemonset_adds_one_pod_from_its_template() {
        let daemon_sets: Vec<DaemonSet> = vec![from_json(json!({
            "metadata": {"name": "logs"},
            "spec": {
                "selector": {"matchLabels": {"app": "logs"}},
                "template": {
                    "metadata": {"labels": {"app": "logs"}},
                    "spec": {"containers": [{"name": "agent"}]},
                },
            },
        }))];
        let pods = daemon_set_pods(&daemon_sets);
        assert_eq!(pods.len(), 1);
        assert_eq!(
            pods[0].labels().get("app").map(String::as_str),
            Some("logs")
        );
    }
}
