//! Scheduling and bin-packing: decide where pending pods go and which nodes to launch.
//!
//! A pure, synchronous, deterministic library: no clock, no client, no randomness. The same
//! [`Input`] always gives the same [`Plan`]. The provisioning controller turns the plan's new
//! claims into NodeClaims, `kubectl karpenter explain` prints its reasons, and `simulate`
//! runs it on recorded snapshots.
//!
//! # Input and output
//!
//! [`schedule`] takes the pending pods, the NodePools (each with its instance-type catalogue and
//! what it already uses against its limits), DaemonSet pods (their requests are overhead on every
//! new node they would run on), existing nodes with their pods and in-flight NodeClaims. It
//! returns a [`Plan`]: pods placed on existing nodes and in-flight claims; new claims, each with
//! its NodePool, requirements, pods, summed requests and cheapest-first instance-type options
//! with prices; and an [`Unschedulable`] explanation for every pod it could not place.
//!
//! ```
//! use karpenter_core::apis::{CapacityType, NodePool};
//! use karpenter_core::resources::ResourceList;
//! use karpenter_core::scheduling::{schedule, Input, InstanceType, Offering, PoolInput};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool: NodePool = serde_json::from_value(serde_json::json!({
//!     "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
//!     "spec": {"template": {"spec": {"requirements": [],
//!         "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}
//! }))?;
//! let mut small = InstanceType::new("m5.large", ResourceList::parse([("cpu", "2"), ("memory", "8Gi"), ("pods", "29")])?);
//! small.offerings.push(Offering::new("us-west-2a", CapacityType::OnDemand, 0.096));
//! let mut big = InstanceType::new("m5.xlarge", ResourceList::parse([("cpu", "4"), ("memory", "16Gi"), ("pods", "58")])?);
//! big.offerings.push(Offering::new("us-west-2a", CapacityType::OnDemand, 0.192));
//! let catalogue = vec![small, big];
//! let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "web", "namespace": "default"},
//!     "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}}]}
//! }))?;
//! let input = Input {
//!     pods: vec![&pod],
//!     node_pools: vec![PoolInput::new(&pool, &catalogue)],
//!     ..Input::default()
//! };
//! let plan = schedule(&input);
//! let claim = &plan.new_claims[0];
//! assert_eq!(claim.instance_types[0].name, "m5.large");
//! let spec = claim.to_node_claim_spec(&pool); // ready for a NodeClaim object
//! assert!(spec.requirements.iter().any(|r| r.key == "node.kubernetes.io/instance-type"));
//! # Ok(()) }
//! ```
//!
//! # The algorithm
//!
//! Upstream Karpenter (`pkg/controllers/provisioning/scheduling`) sorts pods by CPU then memory,
//! descending; tries each on existing nodes, then on the claims it has opened so far (fewest
//! pods first), then on a new claim per NodePool in weight order; relaxes preferences when a
//! pod fails and retries until a pass makes no progress. This module keeps that shape, the same
//! constraint semantics (requirements, taints, topology spread, pod (anti-)affinity, host
//! ports, limits, minValues, offerings) and the same relaxation order, and changes how a claim
//! is chosen and sized:
//!
//! * **Pods that need a node to themselves go first.** Pods with required hostname
//!   anti-affinity open nodes that are paid for anyway; placing them before the rest (then CPU,
//!   then memory, descending, as upstream) lets every later pod fill their rounding slack.
//!   On upstream's benchmark this alone cuts the price by 5–8%.
//! * **Price-aware placement.** Every open claim knows the cheapest instance type that holds what
//!   it has so far. A pod goes to a claim whose current type still has room for it (no price
//!   increase; smallest CPU slack first, i.e. best fit); failing that, to the claim whose price
//!   rises least, unless a fresh node for the pod alone would cost less. Upstream's "fewest pods
//!   first" spreads pods thinly and leaves rounding waste on every node; filling the slack of the
//!   types already paid for is what makes the plan cheaper.
//! * **Equal weights are settled by price.** Weights come first, as upstream: a pod goes to
//!   the heaviest NodePool that can take it, even when a lighter one is cheaper. Among pools of
//!   the same weight upstream takes the first by name; here the batch is also solved with each
//!   other pool of a shared weight tried first in its class, and the cheapest plan that places
//!   as many pods wins (with an AWS-shaped and a GCP-shaped pool of the kwok catalogue, 15
//!   1-CPU pods take one e2-standard-16 spot at $0.1608/h, not 15 t3.medium at $0.1875/h).
//! * **Fresh claims are sized for the copies to come.** A claim opened for a pod starts at the
//!   type with the lowest price per copy of that pod still to place (a Deployment's replicas),
//!   so the copies fill one well-sized node instead of each opening the smallest one.
//! * **Each claim is sized when it closes.** Upstream keeps every type that fits (up to 600),
//!   including ones many times larger than needed. Here the options are the types that fit the
//!   packed pods, cheapest first, cut at [`Options::max_price_ratio`] times the cheapest (extended
//!   when a requirement's `minValues` needs more), then truncated to 600.
//! * **Exact limits.** A claim is charged the capacity of the type it will most likely launch
//!   (its cheapest option), and its options are capped so that even the most expensive one stays
//!   within the NodePool's limits; upstream charges the largest option up front, which stops a
//!   pool early.
//! * **Deferred topology counts.** A pod placed on a claim whose zone is still open is counted in
//!   the zone once a later pod pins it, and a zone is chosen with those pods in mind; upstream
//!   never counts them.
//! * **Determinism.** Every tie (zones with equal counts, equally cheap types, equally good
//!   claims) is broken by name or order, never by map iteration or a random pick.
//! * **A cheaper single node is never missed** on small batches (at most 16 new claims and 256
//!   pods): the batch is also packed onto one new node, and that plan wins if it places as many
//!   pods for less (greedy packing can split pods that one bigger type holds for less).
//!
//! Limits of the model: a topology key other than `kubernetes.io/hostname` keeps at most 128
//! domains; spread constraints ignore `nodeTaintsPolicy`; CSI attach limits, DRA and reserved
//! capacity are not modelled; `minValues` is always strict.
//!
//! # Speed
//!
//! Identical pods (a Deployment's replicas) share one parsed, memoized description; requirement
//! sets are interned and their intersections memoized, so a compatibility check is a hash
//! lookup; each requirement state keeps its compatible types sorted by price with a suffix
//! maximum of allocatable, so finding the cheapest type that fits is a short forward scan from
//! the claim's current type (types only get bigger as pods are added); open claims are indexed
//! by CPU slack per requirement state, so a pod looks at a handful of claims rather than all of
//! them; pods with hostname anti-affinity or hostname spread look only at claims still eligible
//! for their group (one list per group for owners it selects, owners it does not, and pods an
//! anti-affinity term selects, pruned lazily since counts only grow). The benchmark in `tests/benches/` compares the result with upstream's own.

mod explain;
mod instance_type;
mod label_set;
mod pod;
pub mod requirements;
pub mod selector;
mod solver;
mod static_claim;
pub mod taints;
mod topology;
pub(crate) mod volume_topology;

pub use explain::PoolReason;
pub use explain::PoolRejection;
pub use explain::Unschedulable;
pub use explain::{Closest, Shortfall};
pub use instance_type::Overhead;
// Read only by the cloud providers' catalogues.
#[cfg_attr(not(any(feature = "aws", feature = "gcp")), allow(unused_imports))]
pub(crate) use instance_type::UNKNOWN_PRICE;
pub use instance_type::{InstanceType, Offering, known_price};
pub use label_set::LabelSet;
pub use pod::PodView;
pub(crate) use pod::{ShapeKey, pod_requests};
pub use requirements::Incompatibility;
pub use requirements::RequirementError;
pub use requirements::{Requirement, Requirements};
pub(crate) use static_claim::static_claim;
pub use volume_topology::VolumeTopology;
pub use volume_topology::{VolumeError, VolumeObjects};

use crate::apis::{CapacityType, NodeClaim, NodeClaimSpec, NodePool, ResourceRequirements, labels};
use crate::resources::ResourceList;
use k8s_openapi::api::core::v1::{Pod, Taint};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Each namespace's labels, by name.
pub(crate) type NamespaceLabels = BTreeMap<String, BTreeMap<String, String>>;

/// Everything one scheduling round looks at.
#[derive(Clone, Debug, Default)]
pub struct Input<'a, P = Pod> {
    /// The pods to place.
    pub pods: Vec<&'a P>,
    /// The NodePools that may launch nodes, each with its catalogue and current usage.
    pub node_pools: Vec<PoolInput<'a>>,
    /// Nodes already in the cluster, with the pods bound to them.
    pub nodes: Vec<ExistingNode<'a, P>>,
    /// NodeClaims created earlier whose nodes have not registered yet.
    pub in_flight: Vec<InFlightClaim<'a, P>>,
    /// One pod per DaemonSet (e.g. built from its template): its requests are overhead on every
    /// new node it would run on, and its host ports are taken there.
    pub daemon_set_pods: Vec<&'a Pod>,
    /// Namespace labels, for pod-affinity terms with a `namespaceSelector`.
    pub namespace_labels: Cow<'a, NamespaceLabels>,
    /// The volume topology of the pods to place that have persistent volume claims.
    pub volume_topology: Cow<'a, VolumeTopology>,
    /// Tuning.
    pub options: Options,
}

/// A NodePool with what it can launch and what it already uses.
#[derive(Clone, Debug)]
pub struct PoolInput<'a> {
    /// The NodePool.
    pub node_pool: &'a NodePool,
    /// Its instance types, unavailable offerings included.
    pub instance_types: &'a [InstanceType],
    /// What its nodes and in-flight NodeClaims already count against `spec.limits`: their
    /// capacity summed, plus `nodes`.
    pub usage: ResourceList,
    /// Why the pool may not launch now (its `Ready` condition is False, e.g. its node class
    /// is missing or not ready), if so: it gets no new claims, and pods it could otherwise
    /// hold are told why.
    pub not_ready: Option<String>,
    /// Whether the pool's recent launches failed (its `NodeRegistrationHealthy` is False and
    /// failed lately): it is tried after every other pool, whatever its weight.
    pub deprioritized: bool,
}

impl<'a> PoolInput<'a> {
    /// A pool with nothing in use yet.
    pub fn new(node_pool: &'a NodePool, instance_types: &'a [InstanceType]) -> Self {
        Self {
            node_pool,
            instance_types,
            usage: ResourceList::new(),
            not_ready: None,
            deprioritized: false,
        }
    }
}

/// A node in the cluster.
#[derive(Clone, Debug, Default)]
pub struct ExistingNode<'a, P = Pod> {
    /// The node's name.
    pub name: String,
    /// Its labels, borrowed from the cached Node where there is one: a round reads every Node,
    /// and copying their labels was the largest part of a round's memory (5.5 MiB at 1,250
    /// Nodes, measured with `tests/kwok/heap.sh`).
    pub labels: Cow<'a, LabelSet>,
    /// Taints pods must tolerate. Leave out startup taints and the known ephemeral taints of a
    /// Karpenter node that is still initializing: they are about to go away.
    pub taints: Vec<Taint>,
    /// `status.allocatable`.
    pub allocatable: ResourceList,
    /// Pods bound to it (DaemonSet pods included), which use its resources and count for
    /// topology.
    pub pods: Vec<&'a P>,
}

/// A NodeClaim that has no Node yet. Its requirements can no longer change, so a pod may join it
/// only if every node the claim could become satisfies the pod.
#[derive(Clone, Debug, Default)]
pub struct InFlightClaim<'a, P = Pod> {
    /// The NodeClaim's name.
    pub name: String,
    /// Its NodePool.
    pub node_pool: String,
    /// `spec.requirements`.
    pub requirements: Requirements,
    /// `spec.taints` (startup taints never block).
    pub taints: Vec<Taint>,
    /// What pods will be able to use: `status.allocatable` once launched, else the smallest
    /// allocatable among the types it may become.
    pub allocatable: ResourceList,
    /// Pods already expected to land on it.
    pub pods: Vec<&'a P>,
}

impl<'a, P> InFlightClaim<'a, P> {
    /// Reads a NodeClaim; without `status.allocatable`, assumes the smallest allocatable among
    /// the catalogue types its requirements allow.
    pub(crate) fn from_node_claim(
        claim: &NodeClaim,
        catalogue: &[InstanceType],
        pods: Vec<&'a P>,
    ) -> Result<Self, RequirementError> {
        let requirements = Requirements::from_api(&claim.spec.requirements)?;
        let status_alloc = claim
            .status
            .as_ref()
            .map(|s| ResourceList::from_quantities(&s.allocatable));
        let allocatable = match status_alloc {
            Some(Ok(a)) if !a.is_empty() => a,
            _ => {
                let mut min: Option<ResourceList> = None;
                for it in catalogue.iter().filter(|it| {
                    it.requirements_with_offerings()
                        .intersects(&requirements)
                        .is_ok()
                }) {
                    let a = it.allocatable();
                    min = Some(match min {
                        None => a,
                        Some(m) => m
                            .iter()
                            .map(|(k, v)| (k.to_owned(), v.min(a.get(k))))
                            .collect(),
                    });
                }
                min.unwrap_or_default()
            }
        };
        Ok(Self {
            name: claim.metadata.name.clone().unwrap_or_default(),
            node_pool: claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::NODE_POOL))
                .cloned()
                .unwrap_or_default(),
            requirements,
            taints: claim.spec.taints.clone(),
            allocatable,
            pods,
        })
    }
}

/// Whether preferences (preferred affinities, `ScheduleAnyway` spreads) shape the plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PreferencePolicy {
    /// Honour them, relaxing one at a time only for pods that cannot otherwise be placed.
    #[default]
    Respect,
    /// Ignore them from the start.
    Ignore,
}

/// Tuning for [`schedule`].
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The most instance types a new claim lists (upstream's `MaxInstanceTypes`, 600).
    pub max_instance_types: usize,
    /// Keep only options priced at most this many times the cheapest one (extended as
    /// `minValues` requires). `None` keeps every type that fits, as upstream does.
    pub max_price_ratio: Option<f64>,
    /// See [`PreferencePolicy`].
    pub preference_policy: PreferencePolicy,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_instance_types: 600,
            max_price_ratio: Some(1.5),
            preference_policy: PreferencePolicy::Respect,
        }
    }
}

/// What [`schedule`] decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Pods placed on existing nodes and in-flight claims, one entry per target that got any.
    pub existing: Vec<ExistingPlacement>,
    /// Nodes to launch.
    pub new_claims: Vec<NewClaim>,
    /// Pods that could not be placed, with the reason.
    pub unschedulable: Vec<Unschedulable>,
    /// Pods that were placed only after some of their preferences were dropped.
    pub relaxed: Vec<usize>,
}

impl Plan {
    /// The summed hourly price of the new claims (each at its cheapest option), for comparing
    /// plans: an unpriced claim counts [`UNKNOWN_PRICE`], so fewer of them always wins.
    pub fn total_price(&self) -> f64 {
        self.new_claims.iter().map(NewClaim::price).sum()
    }

    /// How many pods the plan placed somewhere.
    pub fn placed_pods(&self) -> usize {
        self.existing.iter().map(|e| e.pods.len()).sum::<usize>()
            + self.new_claims.iter().map(|c| c.pods.len()).sum::<usize>()
    }
}

/// Pods placed on one existing node or in-flight claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingPlacement {
    /// Whether the target is a node or an in-flight NodeClaim.
    pub target: Target,
    /// Its name.
    pub name: String,
    /// Indexes into [`Input::pods`].
    pub pods: Vec<usize>,
}

/// What kind of capacity an [`ExistingPlacement`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A registered node.
    Node,
    /// A NodeClaim without a node yet.
    InFlightClaim,
}

/// A node to launch.
#[derive(Clone, Debug, PartialEq)]
pub struct NewClaim {
    /// The NodePool it comes from.
    pub node_pool: String,
    /// What the node must satisfy: the NodePool's requirements and template labels, narrowed by
    /// its pods (node selectors, affinities, the zone their topology constraints chose) and
    /// `node.kubernetes.io/instance-type In [options]`.
    pub requirements: Requirements,
    /// The NodePool's taints.
    pub taints: Vec<Taint>,
    /// The NodePool's startup taints.
    pub startup_taints: Vec<Taint>,
    /// The NodePool's template labels plus `karpenter.sh/nodepool`.
    pub labels: BTreeMap<String, String>,
    /// Indexes into [`Input::pods`].
    pub pods: Vec<usize>,
    /// The pods' requests summed.
    pub pod_requests: ResourceList,
    /// What DaemonSets will request on the cheapest option.
    pub daemon_requests: ResourceList,
    /// Instance types that hold the pods, cheapest first.
    pub instance_types: Vec<InstanceTypeOption>,
}

/// One instance type a new claim may launch as.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceTypeOption {
    /// The type's name.
    pub name: String,
    /// Its cheapest available offering's hourly price within the claim's requirements, for
    /// ranking: [`instance_type::UNKNOWN_PRICE`] when unknown (shown through
    /// [`instance_type::known_price`]).
    pub price: f64,
    /// That offering's zone.
    pub zone: String,
    /// That offering's capacity type.
    pub capacity_type: CapacityType,
    /// What pods can use on it (before DaemonSets).
    pub allocatable: ResourceList,
}

impl InstanceTypeOption {
    /// The hourly price, if it is known.
    pub fn known_price(&self) -> Option<f64> {
        known_price(self.price)
    }
}

impl NewClaim {
    /// Pods plus DaemonSets: what goes into `spec.resources.requests`.
    pub fn requests(&self) -> ResourceList {
        self.pod_requests.saturating_add(&self.daemon_requests)
    }

    /// The labels the NodeClaim (and so its Node) carries: the pool's template labels and
    /// `karpenter.sh/nodepool`, plus a value for every other custom key the claim's
    /// requirements constrain (upstream's `resolveCustomLabelsFromRequirements`: a pool's
    /// `tenant In [acme]`, or a pod's `nodeSelector` narrowing a pool's `tenant Exists`), so
    /// pods that select on them can land. Well-known keys come from the launch (instance type,
    /// zone, capacity type...); `kubernetes.io/hostname` and Karpenter's lifecycle labels never
    /// come from requirements.
    pub fn node_labels(&self) -> BTreeMap<String, String> {
        let mut out = self.labels.clone();
        for requirement in self.requirements.iter() {
            let key = requirement.key();
            if requirements::is_well_known(key)
                || out.contains_key(key)
                || [
                    crate::apis::labels::HOSTNAME,
                    crate::apis::labels::NODE_REGISTERED,
                    crate::apis::labels::NODE_INITIALIZED,
                ]
                .contains(&key)
            {
                continue;
            }
            if let Some(value) = requirement.any_value() {
                out.insert(key.to_owned(), value);
            }
        }
        out
    }

    /// The hourly price of the cheapest option, for ranking ([`UNKNOWN_PRICE`] when not known).
    pub fn price(&self) -> f64 {
        self.instance_types.first().map_or(0.0, |o| o.price)
    }

    /// The spec of the NodeClaim to create, taking node class, expiry and termination grace
    /// period from the NodePool's template.
    pub fn to_node_claim_spec(&self, node_pool: &NodePool) -> NodeClaimSpec {
        let template = &node_pool.spec.template.spec;
        NodeClaimSpec {
            taints: self.taints.clone(),
            startup_taints: self.startup_taints.clone(),
            requirements: self.requirements.to_api(),
            resources: ResourceRequirements {
                requests: self.requests().to_quantities(),
            },
            node_class_ref: template.node_class_ref.clone(),
            termination_grace_period: template.termination_grace_period.clone(),
            expire_after: template.expire_after.clone(),
        }
    }
}

/// Plans with at most this many new claims (and pods) are also tried as a single new node.
const SINGLE_NODE_CHECK: (usize, usize) = (16, 256);

/// The most NodePool orders one round tries (see [`pool_orders`]).
const MAX_POOL_ORDERS: usize = 8;

/// Places `input.pods`. See the module docs.
pub fn schedule<P: PodView>(input: &Input<'_, P>) -> Plan {
    let mut best: Option<Plan> = None;
    for order in pool_orders(input) {
        let plan = schedule_in_order(input, &order);
        if best.as_ref().is_none_or(|b| better(&plan, b)) {
            best = Some(plan);
        }
    }
    best.unwrap_or_default()
}

/// One greedy solve with NodePools tried in `order`, and for small plans the single-node check.
fn schedule_in_order<P: PodView>(input: &Input<'_, P>, order: &[usize]) -> Plan {
    let solver = solver::Solver::new(input, order, None);
    let hopeless = solver.single_node_hopeless();
    let plan = solver.run();
    // Greedy packing can split a small batch that one bigger node would hold for less (when a
    // catalogue's next size up is cheap). For small plans, also pack everything onto one new
    // node and keep that if it places as many pods for less.
    let (max_claims, max_pods) = SINGLE_NODE_CHECK;
    if !hopeless
        && plan.new_claims.len() > 1
        && plan.new_claims.len() <= max_claims
        && input.pods.len() <= max_pods
    {
        let single = solver::Solver::new(input, order, Some(1)).run();
        if better(&single, &plan) {
            return single;
        }
    }
    plan
}

/// Whether `candidate` beats `incumbent`: it places more pods, or as many with no more of them
/// relaxed, for less, or for the same price on fewer new nodes (one node's worth of DaemonSets
/// and one launch instead of several; upstream packs pods into an open claim while any type
/// holds them, and consolidation replaces with at most one node).
fn better(candidate: &Plan, incumbent: &Plan) -> bool {
    let (placed, placed_before) = (candidate.placed_pods(), incumbent.placed_pods());
    let (price, price_before) = (candidate.total_price(), incumbent.total_price());
    placed > placed_before
        || (placed == placed_before
            && candidate.relaxed.len() <= incumbent.relaxed.len()
            && (price < price_before - 1e-9
                || (price <= price_before + 1e-9
                    && candidate.new_claims.len() < incumbent.new_claims.len())))
}

/// The NodePool orders to try, as indexes into `input.node_pools`. First upstream's: weight
/// descending, so a heavier pool takes every pod it can even when a lighter one is cheaper (ties
/// by name ascending; upstream breaks them by name descending, an arbitrary choice either way).
/// Then, because a tie in weight says nothing about which pool a pod should prefer, that order
/// with each other pool of a shared weight moved to the front of its weight class: a greedy pass
/// opens each pod's first node in the first pool that accepts it, which can make every pod pay
/// for a small node in one pool (15 × t3.medium) when another pool of the same weight holds all
/// of them on one cheaper node (1 × e2-standard-16). [`schedule`] keeps the cheapest plan.
/// A deprioritized pool comes after every other, as if it weighed less than any.
fn pool_orders<P>(input: &Input<'_, P>) -> Vec<Vec<usize>> {
    let pools = &input.node_pools;
    let weight = |i: usize| {
        (
            !pools[i].deprioritized,
            pools[i].node_pool.spec.weight.unwrap_or(0),
        )
    };
    let name = |i: usize| {
        pools[i]
            .node_pool
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
    };
    let mut base: Vec<usize> = (0..pools.len()).collect();
    base.sort_by(|a, b| {
        weight(*b)
            .cmp(&weight(*a))
            .then_with(|| name(*a).cmp(name(*b)))
            .then(a.cmp(b))
    });
    let mut orders = vec![base.clone()];
    for (pos, &pool) in base.iter().enumerate() {
        let class_start = base
            .iter()
            .position(|p| weight(*p) == weight(pool))
            .unwrap_or(pos);
        if class_start == pos || orders.len() >= MAX_POOL_ORDERS {
            continue;
        }
        let mut order = base.clone();
        let moved = order.remove(pos);
        order.insert(class_start, moved);
        orders.push(order);
    }
    orders
}

#[cfg(test)]
mod tests;
