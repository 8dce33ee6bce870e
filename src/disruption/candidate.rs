//! A node the disruption methods may act on (upstream's `Candidate` in
//! `pkg/controllers/disruption/types.go`): its claim, Node, NodePool, the pods that would have to
//! move, what it costs per hour and what moving its pods costs (`disruption_cost`, upstream's
//! `disruptionutils.ReschedulingCost × LifetimeRemaining`, by which every method orders its
//! candidates, cheapest to disrupt first).

use super::disruptability::{
    ClaimView, Disruptability, disruptability, is_disrupting, is_reschedulable,
};
use crate::apis::{NodeClaim, NodePool, labels};
use crate::scheduling::PodView;
use crate::state::{CachedNode, CachedPod, Snapshot};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;

/// The annotation by which a pod says how much its deletion costs (`controller.kubernetes.io/
/// pod-deletion-cost`), read as upstream reads it.
pub(crate) const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// One judged claim.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub claim: &'a NodeClaim,
    pub node: Option<&'a CachedNode>,
    pub pool: Option<&'a NodePool>,
    /// The pods that would have to move (see [`is_reschedulable`]).
    pub pods: Vec<&'a CachedPod>,
    /// What blocks it, what it may be disrupted for.
    pub disruptability: Disruptability,
    /// Its type, zone and capacity type as its claim's (or Node's) labels say, empty when
    /// unlabelled: read from the objects, not a value the agent chose.
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
    /// Hourly price of its offering, if the catalogue still lists it.
    pub price: Option<f64>,
    /// How much disrupting it costs (lower goes first).
    pub disruption_cost: f64,
}

impl Candidate<'_> {
    /// The claim's name.
    pub fn name(&self) -> &str {
        self.claim.metadata.name.as_deref().unwrap_or_default()
    }

    /// Its NodePool's name.
    pub fn pool_name(&self) -> &str {
        self.pool
            .and_then(|p| p.metadata.name.as_deref())
            .unwrap_or_default()
    }

    /// Its Node's name.
    pub fn node_name(&self) -> &str {
        self.node.map(|n| n.name.as_str()).unwrap_or_default()
    }
}

/// What one pod's eviction costs: 1, plus its deletion cost over 2^27 and its priority over
/// 2^25, clamped to [-10, 10] (upstream's `EvictionCost`).
pub(crate) fn eviction_cost(pod: &CachedPod) -> f64 {
    let mut cost = 1.0;
    if let Some(deletion_cost) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST))
        .and_then(|v| v.parse::<f64>().ok())
    {
        cost += deletion_cost / 2f64.powi(27);
    }
    if let Some(priority) = pod.spec.priority {
        cost += f64::from(priority) / 2f64.powi(25);
    }
    cost.clamp(-10.0, 10.0)
}

/// The share of the claim's `expireAfter` still ahead of it, in [0, 1]; 1 when it never
/// expires (upstream's `LifetimeRemaining`): a node about to expire is cheap to disrupt.
pub(crate) fn lifetime_remaining(claim: &NodeClaim, now: Timestamp) -> f64 {
    let Ok(Some(total)) = claim.spec.expire_after.to_duration() else {
        return 1.0;
    };
    let Some(created) = claim.metadata.creation_timestamp.as_ref() else {
        return 1.0;
    };
    let age = now.duration_since(created.0).as_secs_f64();
    let total = total.as_secs_f64();
    if total <= 0.0 {
        return 0.0;
    }
    ((total - age) / total).clamp(0.0, 1.0)
}

fn label(claim: &NodeClaim, node: Option<&CachedNode>, key: &str) -> String {
    node.and_then(|n| n.label(key))
        .or_else(|| claim.metadata.labels.as_ref()?.get(key).map(String::as_str))
        .unwrap_or_default()
        .to_owned()
}

/// Judges every claim of the snapshot: its node and pods, what blocks it, its price and
/// disruption cost. Claims come in the snapshot's order.
pub fn candidates<'a>(
    snapshot: &Snapshot<'a>,
    pdbs: &[PodDisruptionBudget],
    now: Timestamp,
) -> Vec<Candidate<'a>> {
    let nodes_by_provider_id: HashMap<&str, &CachedNode> = snapshot
        .nodes
        .iter()
        .filter_map(|n| Some((n.provider_id.as_deref()?, n.as_ref())))
        .collect();
    let mut pods_by_node: HashMap<&str, Vec<&CachedPod>> = HashMap::new();
    for pod in snapshot.pods.iter() {
        if let Some(node) = pod.node_name.as_deref() {
            pods_by_node.entry(node).or_default().push(pod);
        }
    }
    let pools: HashMap<&str, &NodePool> = snapshot
        .pools
        .iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, p.as_ref())))
        .collect();
    let node_of = |claim: &NodeClaim| -> Option<&'a CachedNode> {
        let id = claim.status.as_ref()?.provider_id.as_deref()?;
        nodes_by_provider_id.get(id).copied()
    };
    let mut claims_by_pool: HashMap<&str, Vec<&NodeClaim>> = HashMap::new();
    for claim in snapshot.claims.iter() {
        if let Some(pool) = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODE_POOL))
        {
            claims_by_pool.entry(pool).or_default().push(claim);
        }
    }
    let disrupting = |claim: &NodeClaim| node_of(claim).is_some_and(is_disrupting);
    let unbound: std::collections::HashSet<String> = snapshot
        .pods
        .iter()
        .filter(|p| p.node_name.is_none() && !p.is_terminal())
        .map(|p| {
            format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default()
            )
        })
        .collect();
    let pending = |key: &str| unbound.contains(key);
    let no_claims: Vec<&NodeClaim> = Vec::new();
    snapshot
        .claims
        .iter()
        .map(|claim| {
            let claim = claim.as_ref();
            let node = node_of(claim);
            let pool_name = claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::NODE_POOL))
                .map(String::as_str);
            let pool = pool_name.and_then(|p| pools.get(p).copied());
            let all_pods: &[&CachedPod] = node
                .and_then(|n| pods_by_node.get(n.name.as_str()))
                .map_or(&[], Vec::as_slice);
            let pool_claims = pool_name
                .and_then(|p| claims_by_pool.get(p))
                .unwrap_or(&no_claims);
            let judged = disruptability(
                &ClaimView {
                    claim,
                    pool,
                    node,
                    pods: all_pods,
                    pool_claims,
                    disrupting: &disrupting,
                    pending: &pending,
                },
                pdbs,
                now,
            );
            let pods: Vec<&CachedPod> = all_pods
                .iter()
                .copied()
                .filter(|p| is_reschedulable(p))
                .collect();
            let instance_type = label(claim, node, labels::INSTANCE_TYPE);
            let zone = label(claim, node, labels::ZONE);
            let capacity_type = label(claim, node, labels::CAPACITY_TYPE);
            let price = snapshot
                .catalogues
                .of(&claim.spec.node_class_ref)
                .iter()
                .find(|it| it.name == instance_type)
                .and_then(|it| {
                    it.offerings
                        .iter()
                        .find(|o| o.zone == zone && o.capacity_type.as_str() == capacity_type)
                })
                .and_then(|o| o.known_price());
            let cost: f64 = pods.iter().map(|p| eviction_cost(p)).sum();
            Candidate {
                claim,
                node,
                pool,
                disruption_cost: cost * lifetime_remaining(claim, now),
                pods,
                disruptability: judged,
                instance_type,
                zone,
                capacity_type,
                price,
            }
        })
        .collect()
}
