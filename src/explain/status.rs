//! The facts behind `kubectl karpenter status`: each NodePool against its limits and what its
//! claims cost, each NodeClaim with its state, price and (when every pod was listed) the pods on
//! its node, the pending pods, and cluster-wide totals.

use super::{
    ClaimState, ClusterObjects, HOURS_PER_MONTH, ListPrices, NodeIndex, PendingPod, Price,
    claim_price, claim_state, label, name_of, node_name_of, node_price_or_list, pending_pods,
};
use crate::apis::{NodeClaim, labels};
use crate::resources::{self, ResourceList};
use crate::scheduling::PodView;
use crate::state::CachedNode;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

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
    /// A static pool's node count (`replicas`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// Why the pool launches nothing now, when its `Ready` condition is False.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
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

/// ClusterObjects-wide sums.
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
    /// `ClusterObjects::pods` holds every pod, so per-node usage can be computed.
    pub all_pods_listed: bool,
    /// The clock claims' expiry is judged against; `None` leaves expiry out.
    pub now: Option<Timestamp>,
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

/// One claim's row in `status`, given its Node if known (usage left out), priced from `list`
/// when nothing recorded a price.
pub fn claim_summary(
    claim: &NodeClaim,
    node: Option<&CachedNode>,
    list: &ListPrices,
) -> ClaimSummary {
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
            .map(|n| n.name.clone())
            .or_else(|| claim.status.as_ref().and_then(|s| s.node_name.clone())),
        provider_id: claim.status.as_ref().and_then(|s| s.provider_id.clone()),
        created_at: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
        price: claim_price(claim, node, list),
        capacity,
        usage: None,
    }
}

/// Builds the report `status` prints.
pub fn status_report(cluster: &ClusterObjects, options: &StatusOptions) -> StatusReport {
    let nodes = NodeIndex::new(&cluster.nodes);
    let mut claimed_nodes = std::collections::HashSet::new();
    let pods_by_node: HashMap<&str, Vec<&Pod>> = if options.all_pods_listed {
        let mut map: HashMap<&str, Vec<&Pod>> = HashMap::new();
        for pod in cluster.pods.iter().filter(|p| !p.is_terminal()) {
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
            claimed_nodes.insert(node.name.clone());
        }
        let price = claim_price(claim, node, &cluster.list_prices);
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
        let mut summary = claim_summary(claim, node, &cluster.list_prices);
        if let Some(now) = options.now {
            summary.state.expiring = crate::disruption::is_expired(claim, now);
        }
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
                match claim_price(claim, nodes.of(claim), &cluster.list_prices) {
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
                replicas: pool.spec.replicas,
                not_ready: pool
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
                    .filter(|c| c.status == "False")
                    .map(|c| c.message.clone()),
                created_at: pool.metadata.creation_timestamp.as_ref().map(|t| t.0),
                name,
            }
        })
        .collect();
    pools.sort_by(|a, b| a.name.cmp(&b.name));

    let mut other_nodes = 0;
    for node in &cluster.nodes {
        if claimed_nodes.contains(&node.name) {
            continue;
        }
        other_nodes += 1;
        match node_price_or_list(node, &cluster.list_prices) {
            Some(p) => price_total += p.per_hour,
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

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::explain::fixtures::*;
    use serde_json::json;

    #[test]
    fn status_sums_pools_against_limits_and_prices_the_cluster() {
        let cluster = ClusterObjects {
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
            ..ClusterObjects::default()
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
}
