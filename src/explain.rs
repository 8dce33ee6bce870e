//! The facts behind `kubectl karpenter status` and `kubectl karpenter explain nodeclaim`: what
//! each NodeClaim costs, what state its conditions put it in, why it exists, which instance types
//! it could have been and why this one won, what happened to it and when, and whether it can be
//! disrupted now (and if not, what blocks it).
//!
//! Everything here is a pure function over API objects and an injected clock, so the plugin, the
//! agent's Events and the tests compute the same answer from the same objects. Nothing here talks
//! to the API server; the caller lists what [`Cluster`] holds.
//!
//! Claims created by this project's agent carry two annotations
//! ([`labels::PROVISIONED_FOR`], [`labels::INSTANCE_TYPE_OPTIONS`]); claims created by upstream
//! Karpenter (or by hand) do not, and every answer says what can be derived from the object alone.

use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{
    Budget, ConsolidationPolicy, DisruptionReason, NodeClaim, NodePool, RequirementOperator, labels,
};
use crate::resources::{self, ResourceList};
use crate::scheduling::selector::Selector;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Hours in an average month (8,760 / 12), the factor from $/hour to $/month, as eks-node-viewer uses.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// The API objects an answer is computed from. The caller decides how much to list: `status`
/// lists every pool, claim and node but only unbound pods; `explain` lists one claim's
/// surroundings.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub node_pools: Vec<NodePool>,
    pub node_claims: Vec<NodeClaim>,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub events: Vec<Event>,
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
}

// ------------------------------------------------------------------------------------------------
// Small facts about single objects
// ------------------------------------------------------------------------------------------------

/// One instance type a claim could launch as, as the agent records it in
/// [`labels::INSTANCE_TYPE_OPTIONS`] (cheapest first).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeOption {
    pub name: String,
    /// Hourly price of its cheapest offering within the claim's requirements.
    pub price: f64,
    #[serde(default)]
    pub zone: String,
    #[serde(default)]
    pub capacity_type: String,
}

/// The options the agent recorded on a claim; `None` when it recorded none (a claim created by
/// upstream Karpenter or by hand) or the annotation is unreadable.
pub fn instance_type_options(claim: &NodeClaim) -> Option<Vec<InstanceTypeOption>> {
    let text = claim
        .metadata
        .annotations
        .as_ref()?
        .get(labels::INSTANCE_TYPE_OPTIONS)?;
    serde_json::from_str(text).ok()
}

/// The pods (`namespace/name`) the agent created a claim for; `None` when not recorded.
pub fn provisioned_for(claim: &NodeClaim) -> Option<Vec<String>> {
    let text = claim
        .metadata
        .annotations
        .as_ref()?
        .get(labels::PROVISIONED_FOR)?;
    serde_json::from_str(text).ok()
}

fn label<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        name_of(&pod.metadata)
    )
}

/// Where an hourly price came from.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum PriceSource {
    /// The node's `eks-node-viewer/instance-price` label.
    NodeLabel,
    /// The matching entry of the claim's recorded instance type options.
    InstanceTypeOptions,
}

/// An hourly price and where it came from.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Price {
    pub per_hour: f64,
    pub source: PriceSource,
}

/// A node's price from its `eks-node-viewer/instance-price` label.
pub fn node_price(node: &Node) -> Option<f64> {
    label(&node.metadata, labels::INSTANCE_PRICE)?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|p| p.is_finite() && *p >= 0.0)
}

/// What a claim costs per hour: its node's price label if present, else the price of its
/// launched instance type among the recorded options, else unknown.
pub fn claim_price(claim: &NodeClaim, node: Option<&Node>) -> Option<Price> {
    if let Some(per_hour) = node.and_then(node_price) {
        return Some(Price {
            per_hour,
            source: PriceSource::NodeLabel,
        });
    }
    let launched = label(&claim.metadata, labels::INSTANCE_TYPE)?;
    let zone = label(&claim.metadata, labels::ZONE);
    let capacity_type = label(&claim.metadata, labels::CAPACITY_TYPE);
    let options = instance_type_options(claim)?;
    let exact = options.iter().find(|o| {
        o.name == launched
            && Some(o.zone.as_str()) == zone
            && Some(o.capacity_type.as_str()) == capacity_type
    });
    let option = exact.or_else(|| options.iter().find(|o| o.name == launched))?;
    Some(Price {
        per_hour: option.price,
        source: PriceSource::InstanceTypeOptions,
    })
}

/// Where a claim is in its life, from its conditions (and its node's readiness).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClaimPhase {
    /// Created; no controller has reported on it yet.
    Pending,
    /// Waiting for the instance.
    Launching,
    /// Launched; waiting for its Node to join.
    Registering,
    /// Registered; waiting for the Node to be Ready without startup taints.
    Initializing,
    /// Initialized and Ready.
    Ready,
    /// Initialized, but it or its Node is no longer Ready.
    NotReady,
    /// Being deleted.
    Terminating,
}

impl ClaimPhase {
    /// How many of the three launch steps (Launched, Registered, Initialized) are done.
    pub fn steps_done(self) -> u64 {
        match self {
            Self::Pending | Self::Launching => 0,
            Self::Registering => 1,
            Self::Initializing => 2,
            Self::Ready | Self::NotReady | Self::Terminating => 3,
        }
    }
}

/// A claim's state for a STATE column: its phase, why it is stuck if a condition says so, and
/// whether it drifted.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimState {
    pub phase: ClaimPhase,
    /// The reason of the condition holding it back, when it is not the usual "waiting" one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub drifted: bool,
}

impl std::fmt::Display for ClaimState {
    /// `Ready`, `Ready,Drifted`, `Launching(NodeClassNotReady)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.phase)?;
        if let Some(detail) = &self.detail {
            write!(f, "({detail})")?;
        }
        if self.drifted {
            f.write_str(",Drifted")?;
        }
        Ok(())
    }
}

/// Reasons controllers give a False/Unknown condition while simply waiting: not worth a mention.
const WAITING_REASONS: &[&str] = &[
    "",
    "AwaitingReconciliation",
    "NotLaunched",
    "NotRegistered",
    "NodeNotFound",
    "NotInitialized",
    "Unknown",
];

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The state of a claim, from its conditions and its Node. `node` is `None` only when the caller
/// looked for the Node and found none: an initialized claim whose Node is gone is `NotReady`
/// (`NodeDeleted`).
pub fn claim_state(claim: &NodeClaim, node: Option<&Node>) -> ClaimState {
    let drifted = claim.is_true(cond::DRIFTED);
    let detail_of = |type_: &str| {
        claim
            .condition(type_)
            .filter(|c| c.status != "True" && !WAITING_REASONS.contains(&c.reason.as_str()))
            .map(|c| c.reason.clone())
    };
    let (phase, detail) = if claim.metadata.deletion_timestamp.is_some() {
        (ClaimPhase::Terminating, None)
    } else if claim
        .status
        .as_ref()
        .is_none_or(|s| s.conditions.is_empty())
    {
        (ClaimPhase::Pending, None)
    } else if !claim.is_true(cond::LAUNCHED) {
        (ClaimPhase::Launching, detail_of(cond::LAUNCHED))
    } else if !claim.is_true(cond::REGISTERED) {
        (ClaimPhase::Registering, detail_of(cond::REGISTERED))
    } else if !claim.is_true(cond::INITIALIZED) {
        (ClaimPhase::Initializing, detail_of(cond::INITIALIZED))
    } else {
        let claim_not_ready = claim
            .condition(cond::READY)
            .is_some_and(|c| c.status != "True");
        let node_not_ready = node.is_some_and(|n| !node_is_ready(n));
        let node_deleted =
            node.is_none() && claim.status.as_ref().is_some_and(|s| s.node_name.is_some());
        if node_deleted {
            (ClaimPhase::NotReady, Some("NodeDeleted".to_owned()))
        } else if claim_not_ready || node_not_ready {
            (
                ClaimPhase::NotReady,
                detail_of(cond::READY)
                    .or_else(|| node_not_ready.then(|| "NodeNotReady".to_owned())),
            )
        } else {
            (ClaimPhase::Ready, None)
        }
    };
    ClaimState {
        phase,
        detail,
        drifted,
    }
}

/// When an Event last happened, whichever API wrote it.
pub fn event_time(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

fn is_daemon_or_mirror(pod: &Pod) -> bool {
    let daemon = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    daemon || annotation(&pod.metadata, "kubernetes.io/config.mirror").is_some()
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn node_name_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// `kubectl`'s AGE notation (`45s`, `5m`, `3h`, `2d`, `4m10s` when it matters), as
/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration` prints it.
pub fn human_duration(duration: SignedDuration) -> String {
    let seconds = duration.as_secs();
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of something created at `at`, kubectl style; `<unknown>` without a time.
pub fn age(at: Option<Timestamp>, now: Timestamp) -> String {
    at.map_or_else(
        || "<unknown>".to_owned(),
        |at| human_duration(now.duration_since(at)),
    )
}

// ------------------------------------------------------------------------------------------------
// Indexes
// ------------------------------------------------------------------------------------------------

/// Finds a claim's Node: by provider id, else by `status.nodeName`.
struct NodeIndex<'a> {
    by_provider_id: HashMap<&'a str, &'a Node>,
    by_name: HashMap<&'a str, &'a Node>,
}

impl<'a> NodeIndex<'a> {
    fn new(nodes: &'a [Node]) -> Self {
        let mut by_provider_id = HashMap::new();
        let mut by_name = HashMap::new();
        for node in nodes {
            if let Some(id) = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
                by_provider_id.insert(id, node);
            }
            if let Some(name) = node.metadata.name.as_deref() {
                by_name.insert(name, node);
            }
        }
        Self {
            by_provider_id,
            by_name,
        }
    }

    fn of(&self, claim: &NodeClaim) -> Option<&'a Node> {
        let status = claim.status.as_ref()?;
        status
            .provider_id
            .as_deref()
            .and_then(|id| self.by_provider_id.get(id).copied())
            .or_else(|| {
                status
                    .node_name
                    .as_deref()
                    .and_then(|n| self.by_name.get(n).copied())
            })
    }
}

// ------------------------------------------------------------------------------------------------
// status
// ------------------------------------------------------------------------------------------------

/// How much of a resource a pool holds against its limit.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LimitUsage {
    /// What the pool's claims add up to (their capacity; requests before launch), a quantity.
    pub used: String,
    /// The pool's limit, a quantity; absent when unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// `used` in the resource's unit (milli-cores, bytes).
    #[serde(skip)]
    pub used_amount: u64,
    /// `limit` in the resource's unit.
    #[serde(skip)]
    pub limit_amount: Option<u64>,
}

impl LimitUsage {
    fn new(resource: &str, used: &ResourceList, limits: &ResourceList, has_limit: bool) -> Self {
        let used_amount = used.get(resource);
        let limit_amount = has_limit.then(|| limits.get(resource));
        Self {
            used: resources::format(resource, used_amount),
            limit: limit_amount.map(|l| resources::format(resource, l)),
            used_amount,
            limit_amount,
        }
    }
}

/// One NodePool in `status`.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolSummary {
    pub name: String,
    /// Claims of the pool (each is, or will be, one node).
    pub nodes: usize,
    pub cpu: LimitUsage,
    pub memory: LimitUsage,
    /// `limits.nodes`, if set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_limit: Option<u64>,
    /// Hourly price of the claims whose price is known.
    pub price_per_hour: f64,
    /// Claims whose price is unknown.
    pub unpriced: usize,
    /// The pool's weight, if set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
}

/// Pod usage on a claim's node (only when every pod was listed).
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeUsage {
    /// Pods on the node that are not terminal.
    pub pods: usize,
    /// Their CPU requests, a quantity.
    pub cpu_requests: String,
    /// Their memory requests, a quantity.
    pub memory_requests: String,
}

/// One NodeClaim in `status`.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSummary {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    pub state: ClaimState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// `status.capacity` cpu and memory, as quantities.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<NodeUsage>,
}

/// A pod that waits for a node, and why.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PendingPod {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    /// A word: `WaitingForNodeClaim`, `FailedProvisioning`, `Unschedulable`, `SchedulingGated`...
    pub reason: String,
    /// The sentence behind it.
    pub message: String,
    /// The claim being launched for it, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
}

/// Cluster-wide sums.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    pub node_claims: usize,
    /// Every Node in the cluster, with or without a claim.
    pub nodes: usize,
    /// Nodes no NodeClaim accounts for (static node groups, the control plane...).
    pub other_nodes: usize,
    pub pending_pods: usize,
    /// Claims plus other nodes, where their price is known.
    pub price_per_hour: f64,
    /// `price_per_hour` × 730.
    pub price_per_month: f64,
    /// Claims and other nodes whose price is unknown.
    pub unpriced: usize,
}

/// Everything `kubectl karpenter status` shows.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub node_pools: Vec<PoolSummary>,
    pub node_claims: Vec<ClaimSummary>,
    pub pending_pods: Vec<PendingPod>,
    pub totals: Totals,
}

/// What to put in a [`StatusReport`].
#[derive(Clone, Debug, Default)]
pub struct StatusOptions {
    /// Only this NodePool's pools and claims (pending pods and totals stay cluster-wide).
    pub node_pool: Option<String>,
    /// `Cluster::pods` holds every pod, so per-node usage can be computed.
    pub all_pods_listed: bool,
}

fn requests_of_claim(claim: &NodeClaim) -> ResourceList {
    let capacity = claim
        .status
        .as_ref()
        .filter(|s| !s.capacity.is_empty())
        .map(|s| ResourceList::from_quantities(&s.capacity));
    capacity
        .unwrap_or_else(|| ResourceList::from_quantities(&claim.spec.resources.requests))
        .unwrap_or_default()
}

/// One claim's row in `status`, given its Node if known (usage left out).
pub fn claim_summary(claim: &NodeClaim, node: Option<&Node>) -> ClaimSummary {
    let capacity = claim
        .status
        .as_ref()
        .map(|s| {
            s.capacity
                .iter()
                .filter(|(k, _)| k.as_str() == resources::CPU || k.as_str() == resources::MEMORY)
                .map(|(k, v)| (k.clone(), v.0.clone()))
                .collect()
        })
        .unwrap_or_default();
    ClaimSummary {
        name: name_of(&claim.metadata),
        node_pool: label(&claim.metadata, labels::NODE_POOL).map(str::to_owned),
        instance_type: label(&claim.metadata, labels::INSTANCE_TYPE).map(str::to_owned),
        capacity_type: label(&claim.metadata, labels::CAPACITY_TYPE).map(str::to_owned),
        zone: label(&claim.metadata, labels::ZONE).map(str::to_owned),
        state: claim_state(claim, node),
        node_name: node
            .and_then(|n| n.metadata.name.clone())
            .or_else(|| claim.status.as_ref().and_then(|s| s.node_name.clone())),
        provider_id: claim.status.as_ref().and_then(|s| s.provider_id.clone()),
        created_at: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
        price: claim_price(claim, node),
        capacity,
        usage: None,
    }
}

/// Builds the report `status` prints.
pub fn status_report(cluster: &Cluster, options: &StatusOptions) -> StatusReport {
    let nodes = NodeIndex::new(&cluster.nodes);
    let mut claimed_nodes = std::collections::HashSet::new();
    let pods_by_node: HashMap<&str, Vec<&Pod>> = if options.all_pods_listed {
        let mut map: HashMap<&str, Vec<&Pod>> = HashMap::new();
        for pod in cluster.pods.iter().filter(|p| !is_terminal(p)) {
            if let Some(node) = node_name_of(pod) {
                map.entry(node).or_default().push(pod);
            }
        }
        map
    } else {
        HashMap::new()
    };

    let mut claims: Vec<ClaimSummary> = Vec::new();
    let mut unpriced_total = 0;
    let mut price_total = 0.0;
    for claim in &cluster.node_claims {
        let node = nodes.of(claim);
        if let Some(node) = node {
            claimed_nodes.insert(name_of(&node.metadata));
        }
        let price = claim_price(claim, node);
        match price {
            Some(p) => price_total += p.per_hour,
            None => unpriced_total += 1,
        }
        let pool = label(&claim.metadata, labels::NODE_POOL);
        if options
            .node_pool
            .as_deref()
            .is_some_and(|wanted| pool != Some(wanted))
        {
            continue;
        }
        let mut summary = claim_summary(claim, node);
        summary.usage = options.all_pods_listed.then(|| {
            let pods = summary
                .node_name
                .as_deref()
                .and_then(|n| pods_by_node.get(n))
                .map(Vec::as_slice)
                .unwrap_or_default();
            let requested = pods.iter().fold(ResourceList::new(), |sum, p| {
                p.spec
                    .as_ref()
                    .and_then(|s| crate::scheduling::pod_requests(s).ok())
                    .map_or(sum.clone(), |r| sum.saturating_add(&r))
            });
            NodeUsage {
                pods: pods.len(),
                cpu_requests: resources::format(resources::CPU, requested.get(resources::CPU)),
                memory_requests: resources::format(
                    resources::MEMORY,
                    requested.get(resources::MEMORY),
                ),
            }
        });
        claims.push(summary);
    }
    claims.sort_by(|a, b| {
        a.node_pool
            .cmp(&b.node_pool)
            .then_with(|| a.created_at.cmp(&b.created_at))
            .then_with(|| a.name.cmp(&b.name))
    });

    let mut pools: Vec<PoolSummary> = cluster
        .node_pools
        .iter()
        .filter(|p| {
            options
                .node_pool
                .as_ref()
                .is_none_or(|wanted| *wanted == name_of(&p.metadata))
        })
        .map(|pool| {
            let name = name_of(&pool.metadata);
            let members: Vec<&NodeClaim> = cluster
                .node_claims
                .iter()
                .filter(|c| label(&c.metadata, labels::NODE_POOL) == Some(name.as_str()))
                .collect();
            let used = members.iter().fold(ResourceList::new(), |sum, c| {
                sum.saturating_add(&requests_of_claim(c))
            });
            let limits = ResourceList::from_quantities(&pool.spec.limits).unwrap_or_default();
            let has = |r: &str| pool.spec.limits.contains_key(r);
            let (mut price, mut unpriced) = (0.0, 0);
            for claim in &members {
                match claim_price(claim, nodes.of(claim)) {
                    Some(p) => price += p.per_hour,
                    None => unpriced += 1,
                }
            }
            PoolSummary {
                nodes: members.len(),
                cpu: LimitUsage::new(resources::CPU, &used, &limits, has(resources::CPU)),
                memory: LimitUsage::new(resources::MEMORY, &used, &limits, has(resources::MEMORY)),
                node_limit: has(resources::NODES).then(|| limits.get(resources::NODES)),
                price_per_hour: price,
                unpriced,
                weight: pool.spec.weight,
                created_at: pool.metadata.creation_timestamp.as_ref().map(|t| t.0),
                name,
            }
        })
        .collect();
    pools.sort_by(|a, b| a.name.cmp(&b.name));

    let mut other_nodes = 0;
    for node in &cluster.nodes {
        if claimed_nodes.contains(&name_of(&node.metadata)) {
            continue;
        }
        other_nodes += 1;
        match node_price(node) {
            Some(p) => price_total += p,
            None => unpriced_total += 1,
        }
    }

    let pending_pods = pending_pods(cluster);
    StatusReport {
        totals: Totals {
            node_claims: cluster.node_claims.len(),
            nodes: cluster.nodes.len(),
            other_nodes,
            pending_pods: pending_pods.len(),
            price_per_hour: price_total,
            price_per_month: price_total * HOURS_PER_MONTH,
            unpriced: unpriced_total,
        },
        node_pools: pools,
        node_claims: claims,
        pending_pods,
    }
}

/// Whether a pod waits for a node: unbound, not terminal, not being deleted.
pub fn is_pending(pod: &Pod) -> bool {
    node_name_of(pod).is_none() && !is_terminal(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// Pods that wait for a node, with the reason each waits, oldest first.
pub fn pending_pods(cluster: &Cluster) -> Vec<PendingPod> {
    // Claims still coming up, by the pods they were made for.
    let mut nominated: HashMap<String, (&NodeClaim, ClaimState)> = HashMap::new();
    let nodes = NodeIndex::new(&cluster.nodes);
    for claim in &cluster.node_claims {
        let state = claim_state(claim, nodes.of(claim));
        if matches!(
            state.phase,
            ClaimPhase::Ready | ClaimPhase::NotReady | ClaimPhase::Terminating
        ) {
            continue;
        }
        for pod in provisioned_for(claim).unwrap_or_default() {
            nominated.insert(pod, (claim, state.clone()));
        }
    }
    // The newest FailedProvisioning event per pod.
    let mut failed: HashMap<String, (Option<Timestamp>, &Event)> = HashMap::new();
    for event in &cluster.events {
        let object = &event.involved_object;
        if event.reason.as_deref() != Some("FailedProvisioning")
            || object.kind.as_deref() != Some("Pod")
        {
            continue;
        }
        let key = format!(
            "{}/{}",
            object.namespace.as_deref().unwrap_or_default(),
            object.name.as_deref().unwrap_or_default()
        );
        let at = event_time(event);
        if failed.get(&key).is_none_or(|(seen, _)| at > *seen) {
            failed.insert(key, (at, event));
        }
    }
    let mut out: Vec<PendingPod> = cluster
        .pods
        .iter()
        .filter(|p| is_pending(p))
        .map(|pod| {
            let key = pod_key(pod);
            let created_at = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let scheduled = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| {
                    c.iter()
                        .find(|c| c.type_ == "PodScheduled" && c.status != "True")
                });
            let gates: Vec<&str> = pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .into_iter()
                .flatten()
                .map(|g| g.name.as_str())
                .collect();
            let (reason, message, node_claim) = if !gates.is_empty() {
                (
                    "SchedulingGated".to_owned(),
                    format!("waiting for scheduling gates: {}", gates.join(", ")),
                    None,
                )
            } else if let Some((claim, state)) = nominated.get(&key) {
                let name = name_of(&claim.metadata);
                let what = label(&claim.metadata, labels::INSTANCE_TYPE)
                    .map(|t| format!(" ({t})"))
                    .unwrap_or_default();
                (
                    "WaitingForNodeClaim".to_owned(),
                    format!("nodeclaim {name}{what} is {state}"),
                    Some(name),
                )
            } else if let Some((_, event)) = failed.get(&key).filter(|(at, _)| {
                scheduled.is_some() && at.is_some_and(|at| Some(at) >= created_at)
            }) {
                (
                    "FailedProvisioning".to_owned(),
                    event.message.clone().unwrap_or_default(),
                    None,
                )
            } else if let Some(condition) = scheduled {
                (
                    condition
                        .reason
                        .clone()
                        .filter(|r| !r.is_empty())
                        .unwrap_or_else(|| "Unscheduled".to_owned()),
                    condition.message.clone().unwrap_or_default(),
                    None,
                )
            } else {
                (
                    "Pending".to_owned(),
                    "not seen by the scheduler yet".to_owned(),
                    None,
                )
            };
            PendingPod {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: name_of(&pod.metadata),
                created_at,
                reason,
                message,
                node_claim,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

// ------------------------------------------------------------------------------------------------
// explain nodeclaim
// ------------------------------------------------------------------------------------------------

/// A NodeClaim that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nodeclaim {name:?} not found")]
pub struct NotFound {
    /// The name asked for.
    pub name: String,
    /// The names that do exist, sorted.
    pub existing: Vec<String>,
}

/// Everything `explain nodeclaim NAME` shows.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimExplanation {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    pub state: ClaimState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// Whether this project's agent recorded why it made the claim (its annotations are there).
    pub recorded_by_agent: bool,
    pub why: WhyItExists,
    pub choice: InstanceChoice,
    pub timeline: Vec<TimelineEntry>,
    pub disruption: Disruptability,
}

/// Why a claim exists: the pods it was made for.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WhyItExists {
    /// The agent recorded the pods; otherwise `pods` are the pods on its node now.
    pub recorded: bool,
    pub summary: String,
    pub pods: Vec<PodWhereabouts>,
}

/// A pod and where it is now.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodWhereabouts {
    pub namespace: String,
    pub name: String,
    /// `on this node`, `on node X`, `pending`, `gone`...
    pub now: String,
}

/// What the claim could have been and why it is what it is.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceChoice {
    /// The agent recorded the options that fitted.
    pub recorded: bool,
    pub summary: String,
    /// Recorded options, cheapest first, with what became of each.
    pub options: Vec<ChoiceOption>,
    /// For claims without recorded options: the instance types its requirements allow (empty when
    /// they allow any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_instance_types: Vec<String>,
}

/// One option and its fate.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChoiceOption {
    #[serde(flatten)]
    pub option: InstanceTypeOption,
    /// `launched`, `no capacity: ...`, `cheaper, not launched: ...`, or empty for the options
    /// behind the launched one.
    pub outcome: String,
    /// Whether this is the launched type.
    pub launched: bool,
}

/// One moment in a claim's life.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
    /// `Object`, `Condition` or `Event` (or `Warning` for a warning Event).
    pub source: String,
    /// What happened: `Created`, `Launched=True`, the Event's reason...
    pub what: String,
    pub detail: String,
}

/// Whether a claim can be disrupted now.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Disruptability {
    /// Nothing found blocks every way of disrupting it. Whether consolidation then removes it
    /// depends on whether its pods fit elsewhere for less, which this does not simulate.
    pub disruptable_now: bool,
    pub blockers: Vec<Blocker>,
    pub notes: Vec<String>,
}

/// Something that keeps a claim's node from being disrupted.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    pub kind: BlockerKind,
    pub message: String,
}

/// The kinds of [`Blocker`].
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockerKind {
    /// Already being deleted.
    Terminating,
    /// Not initialized yet: disruption only considers initialized nodes.
    NotInitialized,
    /// `karpenter.sh/do-not-disrupt` on the node or the claim.
    DoNotDisruptNode,
    /// `karpenter.sh/do-not-disrupt` on a pod of the node.
    DoNotDisruptPod,
    /// A PodDisruptionBudget covering a pod of the node allows no disruption.
    PodDisruptionBudget,
    /// The NodePool's disruption budgets allow no more disruptions now.
    Budget,
    /// `consolidateAfter` has not passed since the last pod event.
    ConsolidateAfter,
    /// `consolidateAfter: Never`.
    ConsolidationDisabled,
    /// `consolidationPolicy: WhenEmpty` and pods run on it.
    NotEmpty,
    /// Its NodePool does not exist.
    NoNodePool,
}

/// Explains the claim called `name`. `cluster` should hold the claim, its NodePool, its Node, the
/// pods on its node and the pods it was made for, the other claims of its pool (for budgets),
/// Events on NodeClaims (for its timeline and for InsufficientCapacity on earlier claims) and
/// PodDisruptionBudgets.
pub fn explain_node_claim(
    cluster: &Cluster,
    name: &str,
    now: Timestamp,
) -> Result<ClaimExplanation, NotFound> {
    let Some(claim) = cluster
        .node_claims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
    else {
        let mut existing: Vec<String> = cluster
            .node_claims
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        existing.sort();
        return Err(NotFound {
            name: name.to_owned(),
            existing,
        });
    };
    let nodes = NodeIndex::new(&cluster.nodes);
    let node = nodes.of(claim);
    let node_name = node
        .and_then(|n| n.metadata.name.clone())
        .or_else(|| claim.status.as_ref().and_then(|s| s.node_name.clone()));
    let pool_name = label(&claim.metadata, labels::NODE_POOL).map(str::to_owned);
    let pool = pool_name.as_deref().and_then(|p| {
        cluster
            .node_pools
            .iter()
            .find(|np| np.metadata.name.as_deref() == Some(p))
    });
    let pods_on_node: Vec<&Pod> = match node_name.as_deref() {
        Some(n) => cluster
            .pods
            .iter()
            .filter(|p| node_name_of(p) == Some(n) && !is_terminal(p))
            .collect(),
        None => Vec::new(),
    };
    let state = claim_state(claim, node);
    let claim_events: Vec<&Event> = cluster
        .events
        .iter()
        .filter(|e| {
            let o = &e.involved_object;
            let same_uid = match (o.uid.as_deref(), claim.metadata.uid.as_deref()) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            o.kind.as_deref() == Some("NodeClaim") && o.name.as_deref() == Some(name) && same_uid
        })
        .collect();
    let node_events: Vec<&Event> = match node_name.as_deref() {
        Some(n) => cluster
            .events
            .iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Node")
                    && e.involved_object.name.as_deref() == Some(n)
            })
            .collect(),
        None => Vec::new(),
    };
    let recorded = provisioned_for(claim).is_some() || instance_type_options(claim).is_some();

    Ok(ClaimExplanation {
        name: name.to_owned(),
        node_pool: pool_name.clone(),
        instance_type: label(&claim.metadata, labels::INSTANCE_TYPE).map(str::to_owned),
        capacity_type: label(&claim.metadata, labels::CAPACITY_TYPE).map(str::to_owned),
        zone: label(&claim.metadata, labels::ZONE).map(str::to_owned),
        node_name: node_name.clone(),
        provider_id: claim.status.as_ref().and_then(|s| s.provider_id.clone()),
        created_at: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
        price: claim_price(claim, node),
        recorded_by_agent: recorded,
        why: why_it_exists(claim, cluster, node_name.as_deref(), &pods_on_node),
        choice: instance_choice(claim, &cluster.events, now),
        timeline: timeline(claim, node, &claim_events, &node_events),
        disruption: disruptability(
            claim,
            &state,
            pool,
            pool_name.as_deref(),
            node,
            &pods_on_node,
            cluster,
            now,
        ),
        state,
    })
}

fn why_it_exists(
    claim: &NodeClaim,
    cluster: &Cluster,
    node_name: Option<&str>,
    pods_on_node: &[&Pod],
) -> WhyItExists {
    let where_is = |pod: &Pod| match node_name_of(pod) {
        Some(n) if Some(n) == node_name => {
            match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some(phase) if phase != "Running" => format!("on this node ({phase})"),
                _ => "on this node".to_owned(),
            }
        }
        Some(n) => format!("on node {n}"),
        None if is_terminal(pod) => "finished".to_owned(),
        None => "pending".to_owned(),
    };
    match provisioned_for(claim) {
        Some(keys) => {
            let by_key: HashMap<String, &Pod> =
                cluster.pods.iter().map(|p| (pod_key(p), p)).collect();
            let pods: Vec<PodWhereabouts> = keys
                .iter()
                .map(|key| {
                    let (namespace, name) = key.split_once('/').unwrap_or(("", key.as_str()));
                    let now = by_key.get(key).map_or_else(
                        || "gone (deleted, or replaced by a new pod)".to_owned(),
                        |p| where_is(p),
                    );
                    PodWhereabouts {
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                        now,
                    }
                })
                .collect();
            let still_here = pods
                .iter()
                .filter(|p| p.now.starts_with("on this node"))
                .count();
            let summary = format!(
                "created by karpenter-agent for {} pending {}; {} of them {} on its node now",
                pods.len(),
                plural(pods.len(), "pod", "pods"),
                still_here,
                if still_here == 1 { "is" } else { "are" }
            );
            WhyItExists {
                recorded: true,
                summary,
                pods,
            }
        }
        None => {
            let mut pods: Vec<PodWhereabouts> = pods_on_node
                .iter()
                .filter(|p| !is_daemon_or_mirror(p))
                .map(|p| PodWhereabouts {
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    name: name_of(&p.metadata),
                    now: where_is(p),
                })
                .collect();
            pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            let summary = match node_name {
                Some(_) => format!(
                    "not recorded: the pods it was created for are not on the claim (it was not created by karpenter-agent, e.g. by upstream Karpenter); {} {} on its node now",
                    pods.len(),
                    plural(pods.len(), "pod runs", "pods run")
                ),
                None => "not recorded: the pods it was created for are not on the claim (it was not created by karpenter-agent, e.g. by upstream Karpenter), and it has no node yet".to_owned(),
            };
            WhyItExists {
                recorded: false,
                summary,
                pods,
            }
        }
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// Whether `text` names `word` as a whole token (instance type names contain dots and dashes).
fn mentions(text: &str, word: &str) -> bool {
    text.split(|c: char| {
        c.is_whitespace()
            || c == ','
            || c == ';'
            || c == '('
            || c == ')'
            || c == '"'
            || c == '['
            || c == ']'
    })
    .any(|token| token.trim_end_matches(['.', ':']) == word)
}

fn instance_choice(claim: &NodeClaim, events: &[Event], now: Timestamp) -> InstanceChoice {
    let launched = label(&claim.metadata, labels::INSTANCE_TYPE);
    let launched_at = claim
        .condition(cond::LAUNCHED)
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.0);
    let Some(options) = instance_type_options(claim) else {
        let allowed: Vec<String> = claim
            .spec
            .requirements
            .iter()
            .filter(|r| {
                labels::normalize(&r.key) == labels::INSTANCE_TYPE
                    && r.operator == RequirementOperator::In
            })
            .flat_map(|r| r.values.iter().map(|v| v.as_str().to_owned()))
            .collect();
        let summary = match (launched, allowed.len()) {
            (Some(t), 0) => format!(
                "not recorded: its requirements allow any instance type; the cloud provider launched {t}"
            ),
            (Some(t), n) => format!(
                "not recorded: its requirements allow {n} instance {} (prices not recorded); the cloud provider launched {t}",
                plural(n, "type", "types")
            ),
            (None, 0) => "not recorded, and it has not launched yet".to_owned(),
            (None, n) => format!(
                "not recorded: its requirements allow {n} instance {}; it has not launched yet",
                plural(n, "type", "types")
            ),
        };
        return InstanceChoice {
            recorded: false,
            summary,
            options: Vec::new(),
            allowed_instance_types: allowed,
        };
    };

    let launched_index = launched.and_then(|t| options.iter().position(|o| o.name == t));
    // InsufficientCapacity events (on any NodeClaim: a claim that got none is deleted and its
    // pods provisioned again) from before this claim launched.
    let cutoff = launched_at.unwrap_or(now);
    let no_capacity = |name: &str| -> Option<String> {
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("InsufficientCapacity"))
            .filter(|e| event_time(e).is_none_or(|at| at <= cutoff))
            .filter(|e| e.message.as_deref().is_some_and(|m| mentions(m, name)))
            .max_by_key(|e| event_time(e))
            .map(|e| {
                let on = e.involved_object.name.as_deref().unwrap_or("?");
                let when = event_time(e)
                    .map(|at| {
                        format!(
                            ", {} before launch",
                            human_duration(cutoff.duration_since(at))
                        )
                    })
                    .unwrap_or_default();
                format!("no capacity (InsufficientCapacity on nodeclaim {on}{when})")
            })
    };
    let mut outcomes: Vec<ChoiceOption> = Vec::new();
    for (i, option) in options.iter().enumerate() {
        let is_launched = Some(i) == launched_index;
        let outcome = if is_launched {
            "launched".to_owned()
        } else if launched_index.is_none_or(|l| i < l) && launched.is_some() {
            no_capacity(&option.name).unwrap_or_else(|| {
                "cheaper, not launched: no InsufficientCapacity event recorded for it (Events expire after an hour)".to_owned()
            })
        } else {
            String::new()
        };
        outcomes.push(ChoiceOption {
            option: option.clone(),
            outcome,
            launched: is_launched,
        });
    }
    let n = options.len();
    let fitted = format!(
        "{n} instance {} fitted its pods",
        plural(n, "type", "types")
    );
    let summary = match (launched, launched_index) {
        (None, _) => match options.first() {
            Some(first) => format!(
                "{fitted}; not launched yet, the cheapest is {} at ${:.4}/hour",
                first.name, first.price
            ),
            None => format!("{fitted}; not launched yet"),
        },
        (Some(t), Some(0)) => format!("{fitted}; it launched the cheapest, {t}"),
        (Some(t), Some(i)) => {
            let skipped: Vec<String> = outcomes[..i]
                .iter()
                .map(|o| {
                    if o.outcome.starts_with("no capacity") {
                        format!("{} had no capacity", o.option.name)
                    } else {
                        format!("{} was not launched (no record why)", o.option.name)
                    }
                })
                .collect();
            format!(
                "{fitted}; it launched {t}, option {} of {n}, because {}",
                i + 1,
                skipped.join(", ")
            )
        }
        (Some(t), None) => format!("{fitted}; it launched {t}, which is not among them"),
    };
    let mut summary = summary;
    if let (Some(i), Some(zone), Some(ct)) = (
        launched_index,
        label(&claim.metadata, labels::ZONE),
        label(&claim.metadata, labels::CAPACITY_TYPE),
    ) {
        let option = &options[i];
        if (!option.zone.is_empty() && option.zone != zone)
            || (!option.capacity_type.is_empty() && option.capacity_type != ct)
        {
            summary.push_str(&format!(
                " (as {ct} in {zone}; its cheapest offering was {} in {})",
                option.capacity_type, option.zone
            ));
        }
    }
    InstanceChoice {
        recorded: true,
        summary,
        options: outcomes,
        allowed_instance_types: Vec::new(),
    }
}

/// The usual order of a claim's conditions, for entries at the same instant.
const CONDITION_ORDER: &[&str] = &[
    cond::LAUNCHED,
    cond::REGISTERED,
    cond::INITIALIZED,
    cond::READY,
];

fn timeline(
    claim: &NodeClaim,
    node: Option<&Node>,
    claim_events: &[&Event],
    node_events: &[&Event],
) -> Vec<TimelineEntry> {
    let mut entries: Vec<(usize, TimelineEntry)> = Vec::new();
    if let Some(t) = &claim.metadata.creation_timestamp {
        entries.push((
            0,
            TimelineEntry {
                at: Some(t.0),
                source: "Object".to_owned(),
                what: "Created".to_owned(),
                detail: String::new(),
            },
        ));
    }
    for c in claim.status.iter().flat_map(|s| s.conditions.iter()) {
        let order = CONDITION_ORDER
            .iter()
            .position(|t| *t == c.type_)
            .map_or(20, |p| p + 1);
        let detail = match (c.reason.is_empty(), c.message.is_empty()) {
            (true, true) => String::new(),
            (false, true) => c.reason.clone(),
            (true, false) => c.message.clone(),
            (false, false) => format!("{}: {}", c.reason, c.message),
        };
        entries.push((
            order,
            TimelineEntry {
                at: Some(c.last_transition_time.0),
                source: "Condition".to_owned(),
                what: format!("{}={}", c.type_, c.status),
                detail,
            },
        ));
    }
    if let Some((node, t)) = node.and_then(|n| Some((n, n.metadata.creation_timestamp.as_ref()?))) {
        entries.push((
            1,
            TimelineEntry {
                at: Some(t.0),
                source: "Object".to_owned(),
                what: "NodeCreated".to_owned(),
                detail: format!("node {}", name_of(&node.metadata)),
            },
        ));
    }
    for (event, on) in claim_events
        .iter()
        .map(|e| (e, ""))
        .chain(node_events.iter().map(|e| (e, "node: ")))
    {
        let warning = event.type_.as_deref() == Some("Warning");
        let count = event
            .series
            .as_ref()
            .and_then(|s| s.count)
            .or(event.count)
            .filter(|c| *c > 1);
        let mut detail = format!("{on}{}", event.message.clone().unwrap_or_default());
        if let Some(count) = count {
            detail.push_str(&format!(" (x{count})"));
        }
        entries.push((
            30,
            TimelineEntry {
                at: event_time(event),
                source: if warning { "Warning" } else { "Event" }.to_owned(),
                what: event.reason.clone().unwrap_or_default(),
                detail,
            },
        ));
    }
    if let Some(t) = &claim.metadata.deletion_timestamp {
        entries.push((
            40,
            TimelineEntry {
                at: Some(t.0),
                source: "Object".to_owned(),
                what: "DeletionRequested".to_owned(),
                detail: String::new(),
            },
        ));
    }
    // Stable: entries at the same instant keep the lifecycle order.
    entries.sort_by(|(oa, a), (ob, b)| match (a.at, b.at) {
        (Some(x), Some(y)) => x.cmp(&y).then(oa.cmp(ob)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => oa.cmp(ob),
    });
    entries.into_iter().map(|(_, e)| e).collect()
}

fn duration_of(text: &str) -> Option<SignedDuration> {
    let d = crate::apis::parse_duration(text).ok()?;
    SignedDuration::try_from(d).ok()
}

#[allow(clippy::too_many_arguments)]
fn disruptability(
    claim: &NodeClaim,
    state: &ClaimState,
    pool: Option<&NodePool>,
    pool_name: Option<&str>,
    node: Option<&Node>,
    pods_on_node: &[&Pod],
    cluster: &Cluster,
    now: Timestamp,
) -> Disruptability {
    let mut blockers = Vec::new();
    let mut notes = Vec::new();
    let block = |blockers: &mut Vec<Blocker>, kind, message: String| {
        blockers.push(Blocker { kind, message })
    };

    if state.phase == ClaimPhase::Terminating {
        block(
            &mut blockers,
            BlockerKind::Terminating,
            "it is already being deleted".to_owned(),
        );
        return Disruptability {
            disruptable_now: false,
            blockers,
            notes,
        };
    }
    if !claim.is_true(cond::INITIALIZED) {
        block(
            &mut blockers,
            BlockerKind::NotInitialized,
            format!("it is not initialized yet ({state}); only initialized nodes are disrupted"),
        );
        return Disruptability {
            disruptable_now: false,
            blockers,
            notes,
        };
    }
    let node_says = node
        .and_then(|n| annotation(&n.metadata, labels::DO_NOT_DISRUPT))
        .map(|v| ("node", v));
    let claim_says = annotation(&claim.metadata, labels::DO_NOT_DISRUPT).map(|v| ("nodeclaim", v));
    if let Some((on, _)) = node_says.or(claim_says).filter(|(_, v)| *v == "true") {
        block(
            &mut blockers,
            BlockerKind::DoNotDisruptNode,
            format!("the {on} has {}: \"true\"", labels::DO_NOT_DISRUPT),
        );
    }
    let workload: Vec<&Pod> = pods_on_node
        .iter()
        .copied()
        .filter(|p| !is_daemon_or_mirror(p) && !is_terminal(p))
        .collect();
    for pod in &workload {
        if annotation(&pod.metadata, labels::DO_NOT_DISRUPT) == Some("true") {
            block(
                &mut blockers,
                BlockerKind::DoNotDisruptPod,
                format!(
                    "pod {} has {}: \"true\"",
                    pod_key(pod),
                    labels::DO_NOT_DISRUPT
                ),
            );
        }
    }
    for pdb in &cluster.pod_disruption_budgets {
        let Some(allowed) = pdb.status.as_ref().map(|s| s.disruptions_allowed) else {
            continue;
        };
        if allowed > 0 {
            continue;
        }
        let selector = Selector::from_api(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()));
        let covered: Vec<String> = workload
            .iter()
            .filter(|p| p.metadata.namespace == pdb.metadata.namespace)
            .filter(|p| selector.matches(p.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())))
            .map(|p| pod_key(p))
            .collect();
        if !covered.is_empty() {
            block(
                &mut blockers,
                BlockerKind::PodDisruptionBudget,
                format!(
                    "PodDisruptionBudget {}/{} allows 0 disruptions and covers {} {}",
                    pdb.metadata.namespace.as_deref().unwrap_or_default(),
                    name_of(&pdb.metadata),
                    plural(covered.len(), "pod", "pods"),
                    covered.join(", ")
                ),
            );
        }
    }
    let common_blocked = !blockers.is_empty();

    let Some(pool) = pool else {
        let message = match pool_name {
            Some(p) => format!("its NodePool {p} does not exist, so no disruption method applies"),
            None => format!(
                "it has no {} label, so no disruption method applies",
                labels::NODE_POOL
            ),
        };
        block(&mut blockers, BlockerKind::NoNodePool, message);
        return Disruptability {
            disruptable_now: false,
            blockers,
            notes,
        };
    };
    let pool_name = name_of(&pool.metadata);
    let disruption = &pool.spec.disruption;

    // Budgets: how many of the pool's nodes may be disrupted now, for a reason.
    let members: Vec<&NodeClaim> = cluster
        .node_claims
        .iter()
        .filter(|c| label(&c.metadata, labels::NODE_POOL) == Some(pool_name.as_str()))
        .collect();
    let counted = members
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .count();
    let disrupting = members.len() - counted;
    let budget_allows =
        |reason: DisruptionReason, notes: &mut Vec<String>| -> (u64, Option<String>) {
            let mut tightest: Option<(u64, String)> = None;
            for (i, budget) in disruption.budgets.iter().enumerate() {
                if budget
                    .reasons
                    .as_ref()
                    .is_some_and(|r| !r.contains(&reason))
                {
                    continue;
                }
                let active = match budget_active(budget, now) {
                    Ok(active) => active,
                    Err(e) => {
                        notes.push(format!(
                            "budget {} of NodePool {pool_name}: {e}; counted as active",
                            i + 1
                        ));
                        true
                    }
                };
                if !active {
                    continue;
                }
                let Some(allowed) = budget_nodes(&budget.nodes, counted) else {
                    notes.push(format!(
                        "budget {} of NodePool {pool_name}: nodes {:?} not understood; ignored",
                        i + 1,
                        budget.nodes
                    ));
                    continue;
                };
                if tightest.as_ref().is_none_or(|(a, _)| allowed < *a) {
                    tightest = Some((allowed, describe_budget(i, budget)));
                }
            }
            match tightest {
                Some((allowed, which)) => (allowed.saturating_sub(disrupting as u64), Some(which)),
                None => (u64::MAX, None),
            }
        };
    let budget_blocker = |reason: DisruptionReason, notes: &mut Vec<String>| -> Option<Blocker> {
        let (allowed, which) = budget_allows(reason, notes);
        (allowed == 0).then(|| Blocker {
            kind: BlockerKind::Budget,
            message: format!(
                "NodePool {pool_name} allows no more {reason:?} disruptions now under {}; it has {counted} {}, {disrupting} being disrupted",
                which.unwrap_or_default(),
                plural(counted, "node", "nodes")
            ),
        })
    };

    // Consolidation.
    let reason = if workload.is_empty() {
        DisruptionReason::Empty
    } else {
        DisruptionReason::Underutilized
    };
    let mut consolidation: Vec<Blocker> = Vec::new();
    let consolidate_after = match disruption.consolidate_after.to_duration() {
        Ok(Some(d)) => SignedDuration::try_from(d).ok(),
        Ok(None) => {
            consolidation.push(Blocker {
                kind: BlockerKind::ConsolidationDisabled,
                message: format!("NodePool {pool_name} has consolidateAfter: Never"),
            });
            None
        }
        Err(_) => None,
    };
    if disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty && !workload.is_empty() {
        consolidation.push(Blocker {
            kind: BlockerKind::NotEmpty,
            message: format!(
                "NodePool {pool_name} consolidates only empty nodes (WhenEmpty) and {} {} on it",
                workload.len(),
                plural(workload.len(), "pod runs", "pods run")
            ),
        });
    }
    if let Some(after) = consolidate_after {
        let last_pod_event = claim
            .status
            .as_ref()
            .and_then(|s| s.last_pod_event_time.as_ref())
            .map(|t| t.0);
        let initialized = claim
            .condition(cond::INITIALIZED)
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.0);
        if last_pod_event.is_none() && initialized.is_some() {
            notes.push("lastPodEventTime is not set; consolidateAfter is counted from when it was initialized".to_owned());
        }
        if let Some(since) = last_pod_event.or(initialized) {
            let ready_at = since.checked_add(after).unwrap_or(since);
            if ready_at > now {
                consolidation.push(Blocker {
                    kind: BlockerKind::ConsolidateAfter,
                    message: format!(
                        "consolidateAfter is {}: the last pod event was {} ago, so consolidation considers it in {}",
                        disruption.consolidate_after.0,
                        human_duration(now.duration_since(since)),
                        human_duration(ready_at.duration_since(now))
                    ),
                });
            }
        }
    }
    if consolidation.is_empty()
        && let Some(b) = budget_blocker(reason, &mut notes)
    {
        consolidation.push(b);
    }
    let consolidation_ok = consolidation.is_empty();
    blockers.extend(consolidation);

    // Drift.
    let drifted = claim.is_true(cond::DRIFTED);
    let mut drift_ok = false;
    if drifted {
        match budget_blocker(DisruptionReason::Drifted, &mut notes) {
            Some(b) => blockers.push(b),
            None => {
                drift_ok = true;
                notes.push(
                    "it has drifted: it can be replaced regardless of consolidation".to_owned(),
                );
            }
        }
    }

    if consolidation_ok && !common_blocked {
        notes.push(format!(
            "consolidation may consider it ({reason:?}); whether it is removed depends on whether its pods fit elsewhere for less"
        ));
    }
    if let Ok(Some(expire)) = claim.spec.expire_after.to_duration() {
        let expires = claim.metadata.creation_timestamp.as_ref().and_then(|t| {
            SignedDuration::try_from(expire)
                .ok()
                .and_then(|d| t.0.checked_add(d).ok())
        });
        if let Some(at) = expires {
            notes.push(if at > now {
                format!(
                    "it expires in {} (expireAfter {}); expiry does not wait for budgets",
                    human_duration(at.duration_since(now)),
                    claim.spec.expire_after.0
                )
            } else {
                format!(
                    "it expired {} ago (expireAfter {})",
                    human_duration(now.duration_since(at)),
                    claim.spec.expire_after.0
                )
            });
        }
    }
    Disruptability {
        disruptable_now: !common_blocked && (consolidation_ok || drift_ok),
        blockers,
        notes,
    }
}

fn describe_budget(index: usize, budget: &Budget) -> String {
    let mut text = format!("budget {} (nodes {:?}", index + 1, budget.nodes);
    if let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) {
        text.push_str(&format!(
            ", schedule {schedule:?} for {duration}, active now"
        ));
    }
    if let Some(reasons) = &budget.reasons {
        let reasons: Vec<String> = reasons.iter().map(|r| format!("{r:?}")).collect();
        text.push_str(&format!(", reasons {}", reasons.join(",")));
    }
    text.push(')');
    text
}

/// How many nodes a budget's `nodes` allows out of `count`: an integer, or a percentage rounded up.
pub fn budget_nodes(nodes: &str, count: usize) -> Option<u64> {
    match nodes.strip_suffix('%') {
        Some(pct) => {
            let pct: u64 = pct.parse().ok()?;
            Some((pct * count as u64).div_ceil(100))
        }
        None => nodes.parse().ok(),
    }
}

/// Whether a budget applies at `now`: always without a schedule; with one, when the schedule hit
/// within the last `duration` (upstream: the next hit after `now - duration` is not after `now`).
pub fn budget_active(budget: &Budget, now: Timestamp) -> Result<bool, String> {
    let (Some(schedule), Some(duration)) = (&budget.schedule, &budget.duration) else {
        return Ok(true);
    };
    let schedule = cron::Schedule::parse(schedule)?;
    let duration =
        duration_of(duration).ok_or_else(|| format!("duration {duration:?} not understood"))?;
    let start = now.checked_sub(duration).map_err(|e| e.to_string())?;
    Ok(schedule.hits_between(start, now))
}

/// A small cron matcher for budget schedules: five fields (minute hour day-of-month month
/// day-of-week) in UTC with `*`, lists, ranges, steps and names, or `@yearly` and friends, as
/// upstream's robfig/cron parser reads them.
pub mod cron {
    use k8s_openapi::jiff::tz::TimeZone;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    /// A parsed schedule: the allowed values of each field as a bit set.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Schedule {
        minutes: u64,
        hours: u64,
        days_of_month: u64,
        months: u64,
        days_of_week: u64,
        /// Day-of-month or day-of-week is `*`: both must match (else either may).
        day_star: bool,
    }

    const MONTHS: &[&str] = &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

    fn field(
        text: &str,
        min: u32,
        max: u32,
        names: &[&str],
        name_base: u32,
    ) -> Result<(u64, bool), String> {
        let mut bits = 0_u64;
        let mut star = false;
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => (
                    r,
                    s.parse::<u32>()
                        .map_err(|_| format!("bad step in {part:?}"))?,
                ),
                None => (part, 1),
            };
            if step == 0 {
                return Err(format!("zero step in {part:?}"));
            }
            let value = |v: &str| -> Result<u32, String> {
                if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
                    return Ok(i as u32 + name_base);
                }
                v.parse::<u32>()
                    .map_err(|_| format!("{v:?} is not a number"))
            };
            let (lo, hi) = if range == "*" || range == "?" {
                star = step == 1;
                (min, max)
            } else if let Some((a, b)) = range.split_once('-') {
                (value(a)?, value(b)?)
            } else {
                let v = value(range)?;
                (v, if part.contains('/') { max } else { v })
            };
            if lo < min || hi > max || lo > hi {
                return Err(format!("{part:?} is outside {min}-{max}"));
            }
            let mut v = lo;
            while v <= hi {
                bits |= 1 << v;
                v += step;
            }
        }
        Ok((bits, star))
    }

    impl Schedule {
        /// Parses a schedule.
        pub fn parse(text: &str) -> Result<Self, String> {
            let text = text.trim();
            let expanded = match text {
                "@yearly" | "@annually" => "0 0 1 1 *",
                "@monthly" => "0 0 1 * *",
                "@weekly" => "0 0 * * 0",
                "@daily" | "@midnight" => "0 0 * * *",
                "@hourly" => "0 * * * *",
                other => other,
            };
            let fields: Vec<&str> = expanded.split_whitespace().collect();
            let [minute, hour, dom, month, dow] = fields.as_slice() else {
                return Err(format!("schedule {text:?} does not have five fields"));
            };
            let (minutes, _) = field(minute, 0, 59, &[], 0)?;
            let (hours, _) = field(hour, 0, 23, &[], 0)?;
            let (days_of_month, dom_star) = field(dom, 1, 31, &[], 0)?;
            let (months, _) = field(month, 1, 12, MONTHS, 1)?;
            let (mut days_of_week, dow_star) = field(dow, 0, 7, DAYS, 0)?;
            // 7 is Sunday too.
            if days_of_week & (1 << 7) != 0 {
                days_of_week |= 1;
            }
            Ok(Self {
                minutes,
                hours,
                days_of_month,
                months,
                days_of_week,
                day_star: dom_star || dow_star,
            })
        }

        /// Whether the schedule fires in the minute holding `at` (UTC).
        pub fn matches(&self, at: Timestamp) -> bool {
            let t = TimeZone::UTC.to_datetime(at);
            let bit = |set: u64, v: i8| v >= 0 && set & (1 << v) != 0;
            let dom = bit(self.days_of_month, t.day());
            let dow = bit(self.days_of_week, t.weekday().to_sunday_zero_offset());
            let day = if self.day_star {
                dom && dow
            } else {
                dom || dow
            };
            bit(self.minutes, t.minute())
                && bit(self.hours, t.hour())
                && bit(self.months, t.month())
                && day
        }

        /// Whether it fires in some minute after `start` and no later than `end`.
        pub fn hits_between(&self, start: Timestamp, end: Timestamp) -> bool {
            // The first whole minute after `start`.
            let secs = start.as_second().div_euclid(60) * 60 + 60;
            let Ok(mut t) = Timestamp::from_second(secs) else {
                return false;
            };
            // At most a year of minutes; budget windows are hours or days.
            for _ in 0..(366 * 24 * 60) {
                if t > end {
                    return false;
                }
                if self.matches(t) {
                    return true;
                }
                match t.checked_add(SignedDuration::from_mins(1)) {
                    Ok(next) => t = next,
                    Err(_) => return false,
                }
            }
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    const NOW: &str = "2026-03-02T10:00:00Z"; // a Monday

    fn claim(value: serde_json::Value) -> NodeClaim {
        let mut base = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abcde", "uid": "uid-1", "creationTimestamp": "2026-03-02T09:00:00Z",
                         "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
        });
        merge(&mut base, value);
        serde_json::from_value(base).expect("nodeclaim")
    }

    fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
        match (base, patch) {
            (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (b, p) => *b = p,
        }
    }

    fn ready_conditions(at: &str) -> serde_json::Value {
        json!([
            {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": at},
            {"type": "Registered", "status": "True", "reason": "Registered", "message": "", "lastTransitionTime": at},
            {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": at},
            {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": at},
        ])
    }

    /// A launched, ready claim of ours on node `n1`, with recorded options.
    fn ours(launched: &str) -> NodeClaim {
        claim(json!({
            "metadata": {
                "labels": {"node.kubernetes.io/instance-type": launched, "karpenter.sh/capacity-type": "on-demand", "topology.kubernetes.io/zone": "zone-a"},
                "annotations": {
                    labels::PROVISIONED_FOR: "[\"default/web-1\",\"default/web-2\"]",
                    labels::INSTANCE_TYPE_OPTIONS: "[{\"name\":\"m.small\",\"price\":0.1,\"zone\":\"zone-a\",\"capacityType\":\"on-demand\"},{\"name\":\"m.large\",\"price\":0.2,\"zone\":\"zone-a\",\"capacityType\":\"on-demand\"}]",
                },
            },
            "status": {"nodeName": "n1", "providerID": "kwok://n1", "conditions": ready_conditions("2026-03-02T09:01:00Z")},
        }))
    }

    fn node(name: &str, price: Option<&str>) -> Node {
        let mut labels = serde_json::Map::new();
        if let Some(p) = price {
            labels.insert(labels::INSTANCE_PRICE.to_owned(), json!(p));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-03-02T09:00:30Z"},
            "spec": {"providerID": format!("kwok://{name}")},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("node")
    }

    fn pod(name: &str, node: Option<&str>, extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "labels": {"app": "web"},
                         "creationTimestamp": "2026-03-02T08:59:00Z"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]},
            "status": {"phase": if node.is_some() { "Running" } else { "Pending" }},
        });
        if let Some(n) = node {
            base["spec"]["nodeName"] = json!(n);
        }
        merge(&mut base, extra);
        serde_json::from_value(base).expect("pod")
    }

    fn pool(disruption: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default", "creationTimestamp": "2026-03-01T10:00:00Z"},
            "spec": {
                "limits": {"cpu": "100", "memory": "400Gi"},
                "disruption": disruption,
                "template": {"spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}},
            },
        }))
        .expect("nodepool")
    }

    fn event(kind: &str, name: &str, reason: &str, message: &str, when: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{name}.{reason}"), "namespace": "default"},
            "involvedObject": {"kind": kind, "name": name, "namespace": if kind == "Pod" { "default" } else { "" }},
            "reason": reason, "message": message, "type": "Warning", "lastTimestamp": when,
        }))
        .expect("event")
    }

    fn consolidatable_pool() -> NodePool {
        pool(
            json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized", "budgets": [{"nodes": "10%"}]}),
        )
    }

    fn explained(cluster: &Cluster) -> ClaimExplanation {
        explain_node_claim(cluster, "default-abcde", at(NOW)).expect("claim exists")
    }

    fn kinds(e: &ClaimExplanation) -> Vec<BlockerKind> {
        e.disruption.blockers.iter().map(|b| b.kind).collect()
    }

    #[test]
    fn ages_print_as_kubectl_prints_them() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (150, "2m30s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 600, "3h10m"),
            (30 * 3600, "30h"),
            (50 * 3600, "2d2h"),
            (10 * 86400, "10d"),
            (800 * 86400, "2y70d"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(SignedDuration::from_secs(secs)),
                want,
                "{secs}s"
            );
        }
    }

    #[test]
    fn a_claim_costs_its_node_label_else_its_recorded_option_else_unknown() {
        let c = ours("m.large");
        assert_eq!(
            claim_price(&c, Some(&node("n1", Some("0.25")))),
            Some(Price {
                per_hour: 0.25,
                source: PriceSource::NodeLabel
            })
        );
        assert_eq!(
            claim_price(&c, Some(&node("n1", None))),
            Some(Price {
                per_hour: 0.2,
                source: PriceSource::InstanceTypeOptions
            })
        );
        let upstream =
            claim(json!({"metadata": {"labels": {"node.kubernetes.io/instance-type": "m.large"}}}));
        assert_eq!(claim_price(&upstream, None), None);
    }

    #[test]
    fn the_state_comes_from_the_first_condition_not_yet_true() {
        assert_eq!(claim_state(&claim(json!({})), None).to_string(), "Pending");
        let launching = claim(
            json!({"status": {"conditions": [{"type": "Launched", "status": "False", "reason": "NodeClassNotReady", "message": "", "lastTransitionTime": NOW}]}}),
        );
        assert_eq!(
            claim_state(&launching, None).to_string(),
            "Launching(NodeClassNotReady)"
        );
        let registering = claim(json!({"status": {"conditions": [
            {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": NOW},
            {"type": "Registered", "status": "False", "reason": "NotRegistered", "message": "", "lastTransitionTime": NOW}]}}));
        assert_eq!(claim_state(&registering, None).to_string(), "Registering");
        let mut drifted = ours("m.small");
        if let Some(s) = drifted.status.as_mut() {
            s.conditions.push(serde_json::from_value(json!({"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "message": "", "lastTransitionTime": NOW})).expect("condition"));
        }
        assert_eq!(
            claim_state(&drifted, Some(&node("n1", None))).to_string(),
            "Ready,Drifted"
        );
        let mut not_ready = node("n1", None);
        not_ready.status =
            serde_json::from_value(json!({"conditions": [{"type": "Ready", "status": "False"}]}))
                .expect("status");
        assert_eq!(
            claim_state(&ours("m.small"), Some(&not_ready)).to_string(),
            "NotReady(NodeNotReady)"
        );
    }

    #[test]
    fn pending_pods_say_what_they_wait_for() {
        let mut coming = ours("m.small");
        coming.status = serde_json::from_value(json!({"conditions": [{"type": "Launched", "status": "False", "reason": "NotLaunched", "message": "", "lastTransitionTime": NOW}]})).expect("status");
        let unschedulable = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}]}});
        let cluster = Cluster {
            node_claims: vec![coming],
            pods: vec![
                pod("web-1", None, unschedulable.clone()),
                pod("huge", None, unschedulable.clone()),
                pod("plain", None, unschedulable),
                pod(
                    "gated",
                    None,
                    json!({"spec": {"schedulingGates": [{"name": "example.com/wait"}]}}),
                ),
                pod("running", Some("n1"), json!({})),
            ],
            events: vec![event(
                "Pod",
                "huge",
                "FailedProvisioning",
                "no NodePool fits: cpu 500 > 64",
                NOW,
            )],
            ..Cluster::default()
        };
        let reasons: Vec<(String, String)> = pending_pods(&cluster)
            .into_iter()
            .map(|p| (p.name, p.reason))
            .collect();
        let reason = |name: &str| {
            reasons
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, r)| r.as_str())
        };
        assert_eq!(reason("web-1"), Some("WaitingForNodeClaim"));
        assert_eq!(reason("huge"), Some("FailedProvisioning"));
        assert_eq!(reason("plain"), Some("Unschedulable"));
        assert_eq!(reason("gated"), Some("SchedulingGated"));
        assert_eq!(reason("running"), None);
    }

    #[test]
    fn status_sums_pools_against_limits_and_prices_the_cluster() {
        let cluster = Cluster {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![claim(json!({
                "metadata": {"labels": {"node.kubernetes.io/instance-type": "m.large"}},
                "status": {"nodeName": "n1", "providerID": "kwok://n1", "capacity": {"cpu": "4", "memory": "16Gi"}, "conditions": ready_conditions(NOW)},
            }))],
            nodes: vec![
                node("n1", Some("0.5")),
                node("static-1", Some("0.25")),
                node("static-2", None),
            ],
            ..Cluster::default()
        };
        let report = status_report(&cluster, &StatusOptions::default());
        let p = &report.node_pools[0];
        assert_eq!(
            (
                p.nodes,
                p.cpu.used.as_str(),
                p.cpu.limit.as_deref(),
                p.memory.used.as_str()
            ),
            (1, "4", Some("100"), "16Gi")
        );
        assert_eq!(report.totals.other_nodes, 2);
        assert_eq!(report.totals.unpriced, 1);
        assert!((report.totals.price_per_hour - 0.75).abs() < 1e-9);
        assert!((report.totals.price_per_month - 0.75 * 730.0).abs() < 1e-9);
    }

    #[test]
    fn an_unknown_name_lists_the_names_that_exist() {
        let cluster = Cluster {
            node_claims: vec![ours("m.small")],
            ..Cluster::default()
        };
        let err = explain_node_claim(&cluster, "nope", at(NOW)).expect_err("unknown");
        assert_eq!(err.existing, vec!["default-abcde".to_owned()]);
    }

    #[test]
    fn a_claim_of_ours_names_its_pods_and_why_its_type_won() {
        let cluster = Cluster {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![ours("m.large")],
            nodes: vec![node("n1", Some("0.2"))],
            pods: vec![
                pod("web-1", Some("n1"), json!({})),
                pod("web-2", None, json!({})),
            ],
            events: vec![event(
                "NodeClaim",
                "default-zzzzz",
                "InsufficientCapacity",
                "no capacity for m.small; the pods will be provisioned again",
                "2026-03-02T08:59:30Z",
            )],
            ..Cluster::default()
        };
        let e = explained(&cluster);
        assert!(e.recorded_by_agent);
        assert_eq!(
            e.why
                .pods
                .iter()
                .map(|p| p.now.as_str())
                .collect::<Vec<_>>(),
            ["on this node", "pending"]
        );
        assert!(
            e.choice.summary.contains("m.small had no capacity"),
            "{}",
            e.choice.summary
        );
        assert!(
            e.choice.options[0]
                .outcome
                .contains("nodeclaim default-zzzzz"),
            "{:?}",
            e.choice.options[0]
        );
        assert!(e.choice.options[1].launched);
    }

    #[test]
    fn a_cheaper_option_skipped_without_an_event_is_said_to_have_no_record() {
        let cluster = Cluster {
            node_claims: vec![ours("m.large")],
            ..Cluster::default()
        };
        let e = explained(&cluster);
        assert!(
            e.choice
                .summary
                .contains("m.small was not launched (no record why)"),
            "{}",
            e.choice.summary
        );
    }

    #[test]
    fn a_claim_upstream_made_is_explained_from_the_object_alone() {
        let upstream = claim(json!({
            "metadata": {"labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]}]},
            "status": {"nodeName": "n1", "providerID": "kwok://n1", "conditions": ready_conditions("2026-03-02T09:01:00Z")},
        }));
        let cluster = Cluster {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![upstream],
            nodes: vec![node("n1", None)],
            pods: vec![pod("api-0", Some("n1"), json!({}))],
            ..Cluster::default()
        };
        let e = explained(&cluster);
        assert!(!e.recorded_by_agent);
        assert!(
            e.why.summary.starts_with("not recorded"),
            "{}",
            e.why.summary
        );
        assert_eq!(e.why.pods.len(), 1);
        assert_eq!(e.choice.allowed_instance_types, ["m5.large", "m5.xlarge"]);
        assert_eq!(e.price, None);
        let what: Vec<&str> = e.timeline.iter().map(|t| t.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "Created",
                "NodeCreated",
                "Launched=True",
                "Registered=True",
                "Initialized=True",
                "Ready=True"
            ]
        );
    }

    #[test]
    fn nothing_blocks_an_initialized_claim_in_a_consolidating_pool() {
        let cluster = Cluster {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            ..Cluster::default()
        };
        let e = explained(&cluster);
        assert!(e.disruption.disruptable_now, "{:?}", e.disruption);
    }

    #[test]
    fn do_not_disrupt_pods_and_exhausted_pdbs_block_disruption() {
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
        }))
        .expect("pdb");
        let cluster = Cluster {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            pods: vec![pod(
                "web-1",
                Some("n1"),
                json!({"metadata": {"annotations": {labels::DO_NOT_DISRUPT: "true"}}}),
            )],
            pod_disruption_budgets: vec![pdb],
            ..Cluster::default()
        };
        let e = explained(&cluster);
        assert!(!e.disruption.disruptable_now);
        assert_eq!(
            kinds(&e),
            [
                BlockerKind::DoNotDisruptPod,
                BlockerKind::PodDisruptionBudget
            ]
        );
    }

    #[test]
    fn a_zero_budget_blocks_and_a_percentage_rounds_up() {
        let zero = pool(json!({"consolidateAfter": "0s", "budgets": [{"nodes": "0"}]}));
        let cluster = Cluster {
            node_pools: vec![zero],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            ..Cluster::default()
        };
        assert_eq!(kinds(&explained(&cluster)), [BlockerKind::Budget]);
        assert_eq!(budget_nodes("10%", 1), Some(1));
        assert_eq!(budget_nodes("10%", 11), Some(2));
        assert_eq!(budget_nodes("3", 100), Some(3));
    }

    #[test]
    fn a_scheduled_budget_counts_only_inside_its_window() {
        // Monday 10:00 UTC: inside "09:00 on weekdays for 8h", outside "Sundays for 8h".
        let weekdays = pool(
            json!({"consolidateAfter": "0s", "budgets": [{"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h"}]}),
        );
        let sundays = pool(
            json!({"consolidateAfter": "0s", "budgets": [{"nodes": "0", "schedule": "0 0 * * sun", "duration": "8h"}]}),
        );
        let base = Cluster {
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            ..Cluster::default()
        };
        let weekday_cluster = Cluster {
            node_pools: vec![weekdays],
            ..base.clone()
        };
        let e = explained(&weekday_cluster);
        assert_eq!(kinds(&e), [BlockerKind::Budget]);
        assert!(
            e.disruption.blockers[0].message.contains("active now"),
            "{}",
            e.disruption.blockers[0].message
        );
        let sunday_cluster = Cluster {
            node_pools: vec![sundays],
            ..base
        };
        assert!(explained(&sunday_cluster).disruption.disruptable_now);
    }

    #[test]
    fn when_empty_pools_keep_nodes_with_pods_and_consolidate_after_makes_it_wait() {
        let when_empty =
            pool(json!({"consolidateAfter": "0s", "consolidationPolicy": "WhenEmpty"}));
        let mut cluster = Cluster {
            node_pools: vec![when_empty],
            node_claims: vec![ours("m.small")],
            nodes: vec![node("n1", None)],
            pods: vec![pod("web-1", Some("n1"), json!({}))],
            ..Cluster::default()
        };
        assert_eq!(kinds(&explained(&cluster)), [BlockerKind::NotEmpty]);
        cluster.node_pools = vec![pool(json!({"consolidateAfter": "2h"}))];
        let e = explained(&cluster);
        assert_eq!(kinds(&e), [BlockerKind::ConsolidateAfter]);
        assert!(
            e.disruption.blockers[0].message.contains("in 61m"),
            "{}",
            e.disruption.blockers[0].message
        );
        cluster.node_pools = vec![pool(json!({"consolidateAfter": "Never"}))];
        assert_eq!(
            kinds(&explained(&cluster)),
            [BlockerKind::ConsolidationDisabled]
        );
    }

    #[test]
    fn cron_schedules_match_like_upstream() {
        let s = cron::Schedule::parse("*/15 9-17 * * mon-fri").expect("parse");
        assert!(s.matches(at("2026-03-02T09:15:00Z")));
        assert!(!s.matches(at("2026-03-02T09:16:00Z")));
        assert!(!s.matches(at("2026-03-01T09:15:00Z")), "a Sunday");
        // Day-of-month and day-of-week both restricted: either matches.
        let either = cron::Schedule::parse("0 0 1 * sun").expect("parse");
        assert!(
            either.matches(at("2026-03-01T00:00:00Z"))
                && either.matches(at("2026-04-01T00:00:00Z"))
                && either.matches(at("2026-03-08T00:00:00Z"))
        );
        assert!(
            cron::Schedule::parse("@daily")
                .expect("parse")
                .matches(at("2026-03-02T00:00:00Z"))
        );
        assert!(cron::Schedule::parse("0 0 * *").is_err());
        assert!(cron::Schedule::parse("61 * * * *").is_err());
        let daily = cron::Schedule::parse("@daily").expect("parse");
        assert!(daily.hits_between(at("2026-03-01T23:00:00Z"), at("2026-03-02T00:30:00Z")));
        assert!(
            !daily.hits_between(at("2026-03-02T00:00:00Z"), at("2026-03-02T10:00:00Z")),
            "the hit at the start is not after it"
        );
    }
}
