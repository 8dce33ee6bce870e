//! What a node or a NodeClaim costs per hour, and where that price came from: the node's
//! `eks-node-viewer/instance-price` label (as eks-node-viewer reads it), else the claim's recorded
//! instance type options, else the shipped list price of its instance type and capacity type
//! ([`ListPrices`]): the agent records a price, upstream Karpenter does not, so a cluster it runs
//! is priced from the same tables.

use super::label;
use crate::apis::CapacityType;
use crate::apis::{NodeClaim, labels};
use crate::state::CachedNode;
use serde::Serialize;
use std::collections::BTreeMap;

/// Shipped list prices per hour by (instance type, capacity type), for what the cluster runs.
pub type ListPrices = BTreeMap<(String, String), f64>;

/// Hours in an average month (8,760 / 12), the factor from $/hour to $/month, as eks-node-viewer uses.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// Where an hourly price came from.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum PriceSource {
    /// The node's `eks-node-viewer/instance-price` label.
    NodeLabel,
    /// The matching entry of the claim's recorded instance type options.
    InstanceTypeOptions,
    /// The shipped list price of its instance type and capacity type.
    ListPrice,
}

/// An hourly price and where it came from.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Price {
    pub per_hour: f64,
    pub source: PriceSource,
}

/// A node's price from its `eks-node-viewer/instance-price` label.
pub(crate) fn node_price(node: &CachedNode) -> Option<f64> {
    node.label(labels::INSTANCE_PRICE)?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|p| p.is_finite() && *p >= 0.0)
}

/// The list price of what an object's labels say it runs (its instance type, and capacity type,
/// on-demand when unlabelled).
fn list_price<'l>(label: impl Fn(&str) -> Option<&'l str>, list: &ListPrices) -> Option<Price> {
    let instance_type = label(labels::INSTANCE_TYPE)?;
    let capacity_type = label(labels::CAPACITY_TYPE).unwrap_or(CapacityType::OnDemand.as_str());
    let per_hour = *list.get(&(instance_type.to_owned(), capacity_type.to_owned()))?;
    Some(Price {
        per_hour,
        source: PriceSource::ListPrice,
    })
}

/// What a node outside any claim costs per hour: its price label, else its list price.
pub(crate) fn node_price_or_list(node: &CachedNode, list: &ListPrices) -> Option<Price> {
    match node_price(node) {
        Some(per_hour) => Some(Price {
            per_hour,
            source: PriceSource::NodeLabel,
        }),
        None => list_price(|key| node.label(key), list),
    }
}

/// What a claim costs per hour: its node's price label if present, else the price of its
/// launched instance type among the recorded options, else its (or its node's) list price,
/// else unknown.
pub(crate) fn claim_price(
    claim: &NodeClaim,
    node: Option<&CachedNode>,
    list: &ListPrices,
) -> Option<Price> {
    if let Some(per_hour) = node.and_then(node_price) {
        return Some(Price {
            per_hour,
            source: PriceSource::NodeLabel,
        });
    }
    recorded_price(claim).or_else(|| {
        list_price(|key| label(&claim.metadata, key), list)
            .or_else(|| node.and_then(|n| list_price(|key| n.label(key), list)))
    })
}

/// The price of the claim's launched instance type among its recorded options.
fn recorded_price(claim: &NodeClaim) -> Option<Price> {
    let launched = label(&claim.metadata, labels::INSTANCE_TYPE)?;
    let zone = label(&claim.metadata, labels::ZONE);
    let capacity_type = label(&claim.metadata, labels::CAPACITY_TYPE);
    let options = claim.instance_type_options()?;
    let exact = options.iter().find(|o| {
        o.name == launched
            && Some(o.zone.as_str()) == zone
            && Some(o.capacity_type.as_str()) == capacity_type
    });
    let option = exact.or_else(|| options.iter().find(|o| o.name == launched))?;
    Some(Price {
        per_hour: option.price?,
        source: PriceSource::InstanceTypeOptions,
    })
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::explain::fixtures::*;
    use serde_json::json;

    #[test]
    fn a_claim_costs_its_node_label_else_its_recorded_option_else_unknown() {
        let c = ours("m.large");
        assert_eq!(
            claim_price(&c, Some(&node("n1", Some("0.25"))), &ListPrices::new()),
            Some(Price {
                per_hour: 0.25,
                source: PriceSource::NodeLabel
            })
        );
        assert_eq!(
            claim_price(&c, Some(&node("n1", None)), &ListPrices::new()),
            Some(Price {
                per_hour: 0.2,
                source: PriceSource::InstanceTypeOptions
            })
        );
        let upstream = claim(
            json!({"metadata": {"labels": {"node.kubernetes.io/instance-type": "m.large", "karpenter.sh/capacity-type": "spot"}}}),
        );
        assert_eq!(claim_price(&upstream, None, &ListPrices::new()), None);
        // Upstream records no price: the shipped list price of its type and capacity type.
        let list: ListPrices = [(("m.large".to_owned(), "spot".to_owned()), 0.031)].into();
        assert_eq!(
            claim_price(&upstream, None, &list),
            Some(Price {
                per_hour: 0.031,
                source: PriceSource::ListPrice
            })
        );
    }
}
