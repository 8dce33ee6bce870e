//! The node view of `status` (`kubectl karpenter status nodes`), what people open
//! eks-node-viewer for: every Node, from a NodePool or not, with what it runs, what it costs, and
//! its pods' CPU and memory requests against its allocatable; then the same summed per NodePool
//! and for the nodes outside any (a Cluster Autoscaler node group, the control plane), the whole
//! fleet during a migration.

use super::{ClusterObjects, NodeIndex, Price, claim_price, label, name_of, node_price_or_list};
use crate::apis::{NodeClaim, labels};
use crate::resources::{self, ResourceList};
use crate::scheduling::PodView;
use crate::state::CachedNode;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// One Node's row.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    pub name: String,
    /// Its NodePool: the claim's, else the Node's `karpenter.sh/nodepool` label; `None` outside
    /// any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    pub ready: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    pub usage: Usage,
}

/// Pods, and their requests against what is allocatable, of one node or a group of them.
#[derive(Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Pods that are not terminal.
    pub pods: usize,
    /// Millicores.
    pub cpu_requested: u64,
    pub cpu_allocatable: u64,
    /// Bytes.
    pub memory_requested: u64,
    pub memory_allocatable: u64,
}

impl Usage {
    fn add(&mut self, other: &Self) {
        self.pods += other.pods;
        self.cpu_requested = self.cpu_requested.saturating_add(other.cpu_requested);
        self.cpu_allocatable = self.cpu_allocatable.saturating_add(other.cpu_allocatable);
        self.memory_requested = self.memory_requested.saturating_add(other.memory_requested);
        self.memory_allocatable = self
            .memory_allocatable
            .saturating_add(other.memory_allocatable);
    }
}

/// One NodePool's nodes summed, or (`node_pool: None`) those outside any.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroup {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    pub nodes: usize,
    pub usage: Usage,
    /// Of the nodes whose price is known.
    pub price_per_hour: f64,
    pub unpriced: usize,
}

/// The node view.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodesReport {
    /// By NodePool (those outside any last), then name.
    pub nodes: Vec<NodeRow>,
    /// One per NodePool with nodes, then the nodes outside any.
    pub groups: Vec<NodeGroup>,
}

/// Every Node of `cluster` (whose `pods` must hold every pod bound to a node), with its usage.
pub fn nodes_report(cluster: &ClusterObjects) -> NodesReport {
    let index = NodeIndex::new(&cluster.nodes);
    let claims_by_node: HashMap<&str, &NodeClaim> = cluster
        .node_claims
        .iter()
        .filter_map(|claim| Some((index.of(claim)?.name.as_str(), claim)))
        .collect();
    let mut pods_by_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for pod in cluster.pods.iter().filter(|p| !p.is_terminal()) {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            pods_by_node.entry(node).or_default().push(pod);
        }
    }
    let mut rows: Vec<NodeRow> = cluster
        .nodes
        .iter()
        .map(|node| {
            let claim = claims_by_node.get(node.name.as_str()).copied();
            row(
                node,
                claim,
                pods_by_node.get(node.name.as_str()).map(Vec::as_slice),
                cluster,
            )
        })
        .collect();
    // Pools first, by name; nodes outside any last.
    rows.sort_by(|a, b| {
        (a.node_pool.is_none(), &a.node_pool, &a.name).cmp(&(
            b.node_pool.is_none(),
            &b.node_pool,
            &b.name,
        ))
    });
    let mut groups: BTreeMap<(bool, Option<String>), NodeGroup> = BTreeMap::new();
    for row in &rows {
        let group = groups
            .entry((row.node_pool.is_none(), row.node_pool.clone()))
            .or_insert_with(|| NodeGroup {
                node_pool: row.node_pool.clone(),
                nodes: 0,
                usage: Usage::default(),
                price_per_hour: 0.0,
                unpriced: 0,
            });
        group.nodes += 1;
        group.usage.add(&row.usage);
        match row.price {
            Some(p) => group.price_per_hour += p.per_hour,
            None => group.unpriced += 1,
        }
    }
    NodesReport {
        nodes: rows,
        groups: groups.into_values().collect(),
    }
}

fn row(
    node: &CachedNode,
    claim: Option<&NodeClaim>,
    pods: Option<&[&Pod]>,
    cluster: &ClusterObjects,
) -> NodeRow {
    let pods = pods.unwrap_or_default();
    let requested = pods.iter().fold(ResourceList::new(), |sum, p| {
        p.spec
            .as_ref()
            .and_then(|s| crate::scheduling::pod_requests(s).ok())
            .map_or(sum.clone(), |r| sum.saturating_add(&r))
    });
    let allocatable = node.allocatable.list().cloned().unwrap_or_default();
    // What the claim says first (it is what was launched), the Node's labels otherwise.
    let labelled = |key: &str| {
        claim
            .and_then(|c| label(&c.metadata, key))
            .or_else(|| node.label(key))
            .map(str::to_owned)
    };
    let price = match claim {
        Some(claim) => claim_price(claim, Some(node), &cluster.list_prices),
        None => node_price_or_list(node, &cluster.list_prices),
    };
    NodeRow {
        name: node.name.clone(),
        node_pool: labelled(labels::NODE_POOL),
        node_claim: claim.map(|c| name_of(&c.metadata)),
        instance_type: labelled(labels::INSTANCE_TYPE),
        capacity_type: labelled(labels::CAPACITY_TYPE),
        zone: labelled(labels::ZONE),
        ready: node.is_ready(),
        created_at: node.creation_timestamp.as_ref().map(|t| t.0),
        price,
        usage: Usage {
            pods: pods.len(),
            cpu_requested: requested.get(resources::CPU),
            cpu_allocatable: allocatable.get(resources::CPU),
            memory_requested: requested.get(resources::MEMORY),
            memory_allocatable: allocatable.get(resources::MEMORY),
        },
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::explain::fixtures::*;
    use serde_json::json;

    fn bound_pod(name: &str, node: &str, cpu: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": phase},
        }))
        .expect("a pod")
    }

    #[test]
    fn every_node_shows_its_requests_against_allocatable_and_the_groups_sum_them() {
        let mut static_node = node("static-1", Some("0.25"));
        static_node.allocatable = ResourceList::new()
            .with(resources::CPU, 2000)
            .with(resources::MEMORY, 8 << 30)
            .into();
        let mut karpenter_node = node("n1", Some("0.5"));
        karpenter_node.allocatable = ResourceList::new()
            .with(resources::CPU, 4000)
            .with(resources::MEMORY, 16 << 30)
            .into();
        let cluster = ClusterObjects {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![claim(json!({
                "metadata": {"labels": {"node.kubernetes.io/instance-type": "m.large"}},
                "status": {"nodeName": "n1", "providerID": "kwok://n1", "conditions": ready_conditions(NOW)},
            }))],
            nodes: vec![static_node, karpenter_node],
            pods: vec![
                bound_pod("a", "n1", "1500m", "Running"),
                bound_pod("b", "n1", "500m", "Running"),
                bound_pod("done", "n1", "3", "Succeeded"),
                bound_pod("c", "static-1", "1", "Running"),
            ],
            ..ClusterObjects::default()
        };
        let report = nodes_report(&cluster);
        let names: Vec<&str> = report.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n1", "static-1"], "pool nodes first");
        let n1 = &report.nodes[0];
        assert!(n1.node_pool.is_some() && n1.node_claim.is_some());
        assert_eq!(n1.usage.pods, 2, "a finished pod takes no room");
        assert_eq!(
            (n1.usage.cpu_requested, n1.usage.cpu_allocatable),
            (2000, 4000)
        );
        assert_eq!(n1.price.map(|p| p.per_hour), Some(0.5));
        let outside = report.groups.last().expect("a group");
        assert_eq!(
            outside.node_pool, None,
            "the nodes outside any pool come last"
        );
        assert_eq!((outside.nodes, outside.usage.cpu_requested), (1, 1000));
        assert_eq!(outside.usage.memory_allocatable, 8 << 30);
        assert_eq!(outside.price_per_hour, 0.25);
    }
}
