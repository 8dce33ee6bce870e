//! The claim a static NodePool (`replicas`) launches: upstream's `NewNodeClaimTemplate(np)`
//! with no pods (`pkg/controllers/provisioning/scheduling/nodeclaimtemplate.go`). No scheduling
//! simulation: the pool's requirements and template labels are the claim's, every catalogue
//! type they allow is an option, cheapest first, as the provider's launch then orders them
//! (upstream's AWS provider keeps the 60 cheapest and asks CreateFleet for the lowest price).

use super::requirements::{Requirement, Requirements};
use super::{InstanceType, InstanceTypeOption, NewClaim};
use crate::apis::{NodePool, labels};
use crate::resources::ResourceList;

/// The claim `pool` launches to keep its count, or why none can be made from `catalogue`.
pub(crate) fn static_claim(
    pool: &NodePool,
    catalogue: &[InstanceType],
) -> Result<NewClaim, String> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let template = &pool.spec.template;
    let mut requirements = Requirements::from_api(&template.spec.requirements)
        .map_err(|e| format!("NodePool {name}'s requirements cannot be read: {e}"))?;
    let mut claim_labels = template.metadata.labels.clone();
    claim_labels.insert(labels::NODE_POOL.to_owned(), name.clone());
    for (key, value) in &claim_labels {
        requirements.add(Requirement::in_values(key, [value]));
    }
    let mut options: Vec<InstanceTypeOption> = catalogue
        .iter()
        .filter(|it| it.requirements.intersects(&requirements).is_ok())
        .filter_map(|it| {
            let offering = it.cheapest_offering(&requirements)?;
            Some(InstanceTypeOption {
                name: it.name.clone(),
                price: offering.price,
                zone: offering.zone.clone(),
                capacity_type: offering.capacity_type,
                allocatable: it.allocatable(),
            })
        })
        .collect();
    if options.is_empty() {
        return Err(format!(
            "no instance type of NodePool {name}'s node class satisfies its requirements with an available offering"
        ));
    }
    options.sort_by(|a, b| {
        a.price
            .total_cmp(&b.price)
            .then_with(|| a.name.cmp(&b.name))
    });
    Ok(NewClaim {
        node_pool: name,
        requirements,
        taints: template.spec.taints.clone(),
        startup_taints: template.spec.startup_taints.clone(),
        labels: claim_labels,
        pods: Vec::new(),
        pod_requests: ResourceList::default(),
        daemon_requests: ResourceList::default(),
        instance_types: options,
    })
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use crate::apis::CapacityType;
    use crate::scheduling::Offering;
    use serde_json::json;

    fn pool(requirements: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "fixed"},
            "spec": {"replicas": 3, "template": {
                "metadata": {"labels": {"team": "db"}},
                "spec": {"requirements": requirements,
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}}},
        }))
        .expect("a pool")
    }

    fn it(name: &str, price: f64, zone: &str) -> InstanceType {
        let mut it = InstanceType::new(name, ResourceList::default());
        it.offerings
            .push(Offering::new(zone, CapacityType::OnDemand, price));
        it
    }

    #[test]
    fn a_static_claim_offers_every_allowed_type_cheapest_first_and_carries_the_pool_labels() {
        let catalogue = [
            it("big", 2.0, "a"),
            it("small", 0.5, "a"),
            it("elsewhere", 0.1, "b"),
        ];
        let claim = static_claim(
            &pool(
                json!([{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]),
            ),
            &catalogue,
        )
        .expect("a claim");
        let names: Vec<&str> = claim
            .instance_types
            .iter()
            .map(|o| o.name.as_str())
            .collect();
        assert_eq!(names, ["small", "big"]);
        assert_eq!(claim.labels.get("team").map(String::as_str), Some("db"));
        assert_eq!(
            claim.labels.get(labels::NODE_POOL).map(String::as_str),
            Some("fixed")
        );
        assert!(claim.pods.is_empty() && claim.requests().is_empty());
    }

    #[test]
    fn a_static_pool_that_nothing_satisfies_says_so() {
        let err = static_claim(
            &pool(json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["huge"]}])),
            &[it("small", 0.5, "a")],
        )
        .expect_err("no claim");
        assert!(err.contains("NodePool fixed"), "{err}");
    }
}
