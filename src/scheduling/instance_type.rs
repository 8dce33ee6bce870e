//! The instance-type vocabulary the scheduler reasons about: what each machine shape has, what
//! the node keeps for itself, and where and at what price it can be launched.
//!
//! Mirrors upstream Karpenter's `cloudprovider.InstanceType` and `Offering`. It lives in the
//! scheduler's layer because the scheduler is what reads it; cloud providers build these values
//! from their catalogues. A provider returns the *whole* catalogue, unavailable offerings
//! included, so the scheduler can explain that a type would fit but has no capacity left in the
//! zone the pod needs.

use super::requirements::{Requirement, Requirements};
use crate::apis::{CapacityType, labels};
use crate::resources::ResourceList;
use std::collections::BTreeMap;

/// One machine shape.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    /// The provider's name, e.g. `m5.large`.
    pub name: String,
    /// The labels a node of this type gets, as requirements (`node.kubernetes.io/instance-type`,
    /// arch, os, family, size, GPU, ...). Multi-valued where several values are possible (an
    /// image may run linux or windows). Zone and capacity type come from [`Self::offerings`].
    pub requirements: Requirements,
    /// Where and how the type can be bought.
    pub offerings: Vec<Offering>,
    /// What the machine has: cpu, memory, pods, ephemeral-storage, GPUs...
    pub capacity: ResourceList,
    /// What the node keeps for itself.
    pub overhead: Overhead,
}

/// Resources a node holds back from pods, as the kubelet computes allocatable.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overhead {
    /// `kubeReserved`: kubelet and container runtime.
    pub kube_reserved: ResourceList,
    /// `systemReserved`: the operating system.
    pub system_reserved: ResourceList,
    /// The hard eviction threshold (e.g. `memory.available<100Mi` counts as 100Mi of memory).
    pub eviction_threshold: ResourceList,
}

impl Overhead {
    /// All three reservations added up.
    pub fn total(&self) -> ResourceList {
        self.kube_reserved
            .saturating_add(&self.system_reserved)
            .saturating_add(&self.eviction_threshold)
    }
}

/// The price an offering whose real price nobody knows is ranked at: above any real hourly
/// price (the dearest EC2 and Compute Engine types cost a few hundred dollars an hour), so the
/// scheduler, the launch order and consolidation take it only where no priced offering will
/// do, yet small enough that sums and differences of it stay exact.
///
/// Upstream drops an instance type without a price (its offerings are unavailable); here it
/// still launches, ranked last, so a type newer than the price table is not refused. It is
/// never shown, summed into a bill or written anywhere: readers use [`Offering::known_price`]
/// or [`known_price`].
pub(crate) const UNKNOWN_PRICE: f64 = 1.0e6;

/// `price`, unless it is [`UNKNOWN_PRICE`] (or above, as a sum of unknown prices is).
pub fn known_price(price: f64) -> Option<f64> {
    (price < UNKNOWN_PRICE).then_some(price)
}

/// One way to buy an instance type: a zone, a capacity type and a price.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    /// `topology.kubernetes.io/zone`.
    pub zone: String,
    /// `karpenter.sh/capacity-type`.
    pub capacity_type: CapacityType,
    /// Price per hour, in the provider's currency, for ranking; [`UNKNOWN_PRICE`] when no
    /// price is known (read it for display with [`Offering::known_price`]).
    pub price: f64,
    /// False when the provider recently reported no capacity (or the offering is otherwise not
    /// launchable right now). Kept so explanations can say so.
    pub available: bool,
}

impl Offering {
    /// An available offering.
    pub fn new(zone: &str, capacity_type: CapacityType, price: f64) -> Self {
        Self {
            zone: zone.to_owned(),
            capacity_type,
            price,
            available: true,
        }
    }

    /// An available offering whose price is not known: ranked after every priced one.
    pub fn unpriced(zone: &str, capacity_type: CapacityType) -> Self {
        Self::new(zone, capacity_type, UNKNOWN_PRICE)
    }

    /// The hourly price, if it is known.
    pub fn known_price(&self) -> Option<f64> {
        known_price(self.price)
    }

    /// Whether the zone and capacity type are allowed by `requirements`.
    pub fn allowed_by(&self, requirements: &Requirements) -> bool {
        requirements.allows(labels::ZONE, &self.zone)
            && requirements.allows(labels::CAPACITY_TYPE, self.capacity_type.as_str())
    }
}

impl InstanceType {
    /// A type with the given capacity, no overhead and no offerings yet; its requirements start
    /// with `node.kubernetes.io/instance-type In [name]`.
    pub fn new(name: &str, capacity: ResourceList) -> Self {
        Self {
            name: name.to_owned(),
            requirements: [Requirement::in_values(labels::INSTANCE_TYPE, [name])]
                .into_iter()
                .collect(),
            offerings: Vec::new(),
            capacity,
            overhead: Overhead::default(),
        }
    }

    /// The labels a node of this type gets where its requirements fix one value (`In` with a
    /// single value: instance type, arch, os, family, size, GPU...). Zone and capacity type come
    /// from the offering the node was bought as.
    pub(crate) fn fixed_labels(&self) -> BTreeMap<String, String> {
        self.requirements
            .iter()
            .filter_map(|r| {
                let mut values = r.values();
                match (values.next(), values.next(), r.operator()) {
                    (Some(v), None, crate::apis::RequirementOperator::In) => {
                        Some((r.key().to_owned(), v.to_owned()))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// What pods can use: capacity minus kube-reserved, system-reserved and the eviction
    /// threshold (never below zero).
    pub fn allocatable(&self) -> ResourceList {
        self.capacity.saturating_sub(&self.overhead.total())
    }

    /// The cheapest available offering whose zone and capacity type `requirements` allow
    /// (ties go to the first listed).
    pub(crate) fn cheapest_offering(&self, requirements: &Requirements) -> Option<&Offering> {
        self.offerings
            .iter()
            .filter(|o| o.available && o.allowed_by(requirements))
            .fold(None, |best: Option<&Offering>, o| match best {
                Some(b) if b.price <= o.price => Some(b),
                _ => Some(o),
            })
    }

    /// The type's requirements plus `zone In [...]` and `capacity-type In [...]` from its
    /// available offerings.
    pub(crate) fn requirements_with_offerings(&self) -> Requirements {
        let available = || self.offerings.iter().filter(|o| o.available);
        let mut reqs = self.requirements.clone();
        reqs.add(Requirement::in_values(
            labels::ZONE,
            available().map(|o| o.zone.as_str()),
        ));
        reqs.add(Requirement::in_values(
            labels::CAPACITY_TYPE,
            available().map(|o| o.capacity_type.as_str()),
        ));
        reqs
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;
    use crate::resources::{CPU, MEMORY};

    fn m5_large() -> InstanceType {
        let mut it = InstanceType::new(
            "m5.large",
            ResourceList::new().with(CPU, 2000).with(MEMORY, 8 << 30),
        );
        it.overhead.kube_reserved = ResourceList::new().with(CPU, 70).with(MEMORY, 442 << 20);
        it.overhead.eviction_threshold = ResourceList::new().with(MEMORY, 100 << 20);
        it.offerings = vec![
            Offering::new("us-west-2a", CapacityType::OnDemand, 0.096),
            Offering::new("us-west-2a", CapacityType::Spot, 0.035),
            Offering {
                available: false,
                ..Offering::new("us-west-2b", CapacityType::Spot, 0.030)
            },
        ];
        it
    }

    #[test]
    fn allocatable_subtracts_every_reservation() {
        let it = m5_large();
        assert_eq!(it.allocatable().get(CPU), 1930);
        assert_eq!(it.allocatable().get(MEMORY), (8 << 30) - (542 << 20));
    }

    #[test]
    fn the_cheapest_offering_skips_unavailable_and_disallowed_ones() {
        let it = m5_large();
        assert_eq!(
            it.cheapest_offering(&Requirements::new()).map(|o| o.price),
            Some(0.035)
        );
        let on_demand: Requirements = [Requirement::in_values(
            labels::CAPACITY_TYPE,
            [CapacityType::OnDemand],
        )]
        .into_iter()
        .collect();
        assert_eq!(
            it.cheapest_offering(&on_demand).map(|o| o.price),
            Some(0.096)
        );
        let zone_b: Requirements = [Requirement::in_values(labels::ZONE, ["us-west-2b"])]
            .into_iter()
            .collect();
        assert_eq!(it.cheapest_offering(&zone_b), None);
        let reqs = it.requirements_with_offerings();
        assert!(
            reqs.allows(labels::ZONE, "us-west-2a") && !reqs.allows(labels::ZONE, "us-west-2b")
        );
        assert!(reqs.allows(labels::INSTANCE_TYPE, "m5.large"));
    }
}
