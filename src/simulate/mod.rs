//! `kubectl karpenter simulate`: what the agent would launch for a set of workloads, and what it
//! would cost, before anything runs. The plan comes from the agent's own scheduler
//! ([`crate::scheduling::schedule`]) over a catalogue the caller gives (the plugin passes the
//! shipped one of the provider asked for), so a simulation and the agent agree: same bin
//! packing, same constraints, same prices.
//!
//! [`workloads::read`] turns manifests into pods; [`plan`] places them and prices the result as
//! a [`Report`]: the claims to launch, the pods no NodePool can take with the scheduler's reason,
//! and the total per hour and per month (730 hours, as cloud price pages count a month).
//! [`plan_cluster`] plans a live cluster's pending pods from a [`Snapshot`] of it, exactly as
//! the agent's next round would, and prices today's nodes ([`fleet`]) next to the plan;
//! [`disruption::plan`] runs the agent's disruption passes over it and says what they save.

pub mod disruption;
pub mod region;
pub mod workloads;

pub use workloads::WorkloadError;
pub use workloads::{Workloads, read};

use crate::apis::CapacityType;
use crate::apis::labels;
use crate::scheduling::{Input, InstanceType, PodView, PoolInput, schedule};
use crate::state::CachedNode;
use crate::state::input::{Snapshot, scheduling_input};
use serde::Serialize;

/// Hours in the month cloud price pages use.
pub const HOURS_PER_MONTH: f64 = 730.0;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One node the agent would launch.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedClaim {
    pub node_pool: String,
    pub instance_type: String,
    pub capacity_type: CapacityType,
    pub zone: String,
    /// `namespace/name` of its pods.
    pub pods: Vec<String>,
    /// Hourly price, unless no price is known for its type (it still launches, ranked after
    /// every priced type).
    pub price_per_hour: Option<f64>,
}

/// A pod no NodePool can take, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unplaced {
    pub pod: String,
    pub reason: String,
}

/// Today's nodes and what they cost at the catalogue's list prices.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    pub nodes: usize,
    pub price_per_hour: f64,
    pub price_per_month: f64,
    /// Nodes whose type the catalogue does not price (left out of the price).
    pub unpriced: usize,
}

/// The result of a simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub claims: Vec<PlannedClaim>,
    pub unplaced: Vec<Unplaced>,
    /// The pods planned for.
    pub pods: usize,
    /// Of those, how many fit on nodes already there (a cluster simulation).
    pub placed_on_existing: usize,
    /// The new nodes' price, where known.
    pub price_per_hour: f64,
    pub price_per_month: f64,
    /// New nodes whose price is unknown (left out of the price).
    #[serde(skip_serializing_if = "is_zero")]
    pub unpriced: usize,
    /// Today's nodes (a cluster simulation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<Fleet>,
    /// What the disruption loop would do now (a cluster simulation asked for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disruption: Option<disruption::DisruptionPlan>,
}

/// Places the workloads' pods on new nodes of their NodePools, each pool choosing from
/// `catalogue`.
pub fn plan(workloads: &Workloads, catalogue: &[InstanceType]) -> Report {
    let input = Input {
        pods: workloads.pods.iter().collect(),
        node_pools: workloads
            .node_pools
            .iter()
            .map(|pool| PoolInput::new(pool, catalogue))
            .collect(),
        daemon_set_pods: workloads.daemon_set_pods.iter().collect(),
        ..Input::default()
    };
    let result = schedule(&input);
    report(&result, &input.pods)
}

/// Plans a cluster's pending pods as the agent's next round would (its own
/// [`scheduling_input`]: the nodes there with their pods, the claims in flight, each NodePool
/// with its usage and catalogue), and prices today's nodes at `prices`' list prices.
pub fn plan_cluster(snapshot: &Snapshot<'_>, prices: &[InstanceType]) -> Report {
    let input = scheduling_input(snapshot);
    let result = schedule(&input);
    let mut report = report(&result, &input.pods);
    report.current = Some(fleet(snapshot.nodes, prices));
    report
}

/// The report of a scheduler's plan for `pods`.
fn report<P: PodView>(result: &crate::scheduling::Plan, pods: &[&P]) -> Report {
    let name = |index: usize| {
        let pod = &pods[index];
        format!(
            "{}/{}",
            pod.pod_namespace().unwrap_or("default"),
            pod.pod_name().unwrap_or_default()
        )
    };
    let claims: Vec<PlannedClaim> = result
        .new_claims
        .iter()
        .filter_map(|claim| {
            let cheapest = claim.instance_types.first()?;
            Some(PlannedClaim {
                node_pool: claim.node_pool.clone(),
                instance_type: cheapest.name.clone(),
                capacity_type: cheapest.capacity_type,
                zone: cheapest.zone.clone(),
                pods: claim.pods.iter().map(|&i| name(i)).collect(),
                price_per_hour: cheapest.known_price(),
            })
        })
        .collect();
    let unplaced = result
        .unschedulable
        .iter()
        .map(|u| Unplaced {
            pod: u.pod_name.clone(),
            reason: u.to_string(),
        })
        .collect();
    // A fold from 0.0: an empty f64 sum is -0.0, which prints as "$-0.0000".
    let price_per_hour = claims
        .iter()
        .filter_map(|c| c.price_per_hour)
        .fold(0.0, |a, b| a + b);
    let unpriced = claims.iter().filter(|c| c.price_per_hour.is_none()).count();
    Report {
        claims,
        unpriced,
        unplaced,
        pods: pods.len(),
        placed_on_existing: result.existing.iter().map(|e| e.pods.len()).sum(),
        price_per_hour,
        price_per_month: price_per_hour * HOURS_PER_MONTH,
        current: None,
        disruption: None,
    }
}

/// Today's nodes at `prices`' list prices: each node's type (`node.kubernetes.io/instance-type`)
/// at its capacity type (Karpenter's label, EKS's, GKE's spot label; on-demand otherwise),
/// the cheapest zone's price.
pub fn fleet(nodes: &[std::sync::Arc<CachedNode>], prices: &[InstanceType]) -> Fleet {
    let mut price_per_hour = 0.0;
    let mut unpriced = 0;
    for node in nodes {
        let spot = node.label(labels::CAPACITY_TYPE) == Some(CapacityType::Spot.as_str())
            || node.label("eks.amazonaws.com/capacityType") == Some("SPOT")
            || node.label("cloud.google.com/gke-spot") == Some("true");
        let capacity = if spot {
            CapacityType::Spot
        } else {
            CapacityType::OnDemand
        };
        let price = node
            .label(labels::INSTANCE_TYPE)
            .and_then(|t| prices.iter().find(|it| it.name == t))
            .and_then(|it| {
                it.offerings
                    .iter()
                    .filter(|o| o.capacity_type == capacity)
                    .filter_map(|o| o.known_price())
                    .reduce(f64::min)
            });
        match price {
            Some(p) => price_per_hour += p,
            None => unpriced += 1,
        }
    }
    Fleet {
        nodes: nodes.len(),
        price_per_hour,
        price_per_month: price_per_hour * HOURS_PER_MONTH,
        unpriced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn a_deployment_is_packed_onto_priced_nodes_and_an_impossible_pod_is_named_with_its_reason() {
        let objects = vec![
            (
                "pool.yaml".to_owned(),
                json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                    "spec": {"template": {"spec": {"requirements": [],
                        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}}}),
            ),
            (
                "app.yaml".to_owned(),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                    "spec": {"replicas": 10, "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}}),
            ),
            (
                "app.yaml".to_owned(),
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge"},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1000"}}}]}}),
            ),
        ];
        let workloads = read(&objects, &BTreeMap::new()).unwrap();
        let report = plan(&workloads, &crate::cloud::kwok::catalogue::catalogue());
        let placed: usize = report.claims.iter().map(|c| c.pods.len()).sum();
        assert_eq!(placed, 10);
        assert!(report.price_per_hour > 0.0);
        assert!((report.price_per_month - report.price_per_hour * 730.0).abs() < 1e-9);
        assert_eq!(report.unplaced.len(), 1);
        assert_eq!(report.unplaced[0].pod, "default/huge");
        assert!(!report.unplaced[0].reason.is_empty());
    }
}
