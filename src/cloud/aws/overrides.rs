//! Which offerings one launch asks CreateFleet for: the capacity type (spot when allowed and
//! worth it), then at most 60 overrides (instance type × subnet) from the cheapest candidates,
//! ordinary types before exotic ones, each with the AMI that boots it. Upstream's
//! `pkg/providers/instance` (`getCapacityType`, `getOverrides`, `filterInstanceTypes`).

use super::catalogue::TypeInfo;
use super::nodeclass::{Ami, ResolvedNodeClass};
use crate::apis::CapacityType;
use crate::apis::labels;
use crate::scheduling::{InstanceType, Requirements};
use std::collections::BTreeMap;

/// CreateFleet takes at most this many overrides in one request (upstream's limit).
pub(crate) const MAX_OVERRIDES: usize = 60;

/// One (instance type, subnet) a fleet may launch.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Override {
    pub instance_type: String,
    pub subnet_id: String,
    pub zone: String,
    pub price: f64,
    pub ami_id: String,
}

/// The capacity type to launch and the overrides to launch with, cheapest first, or `None` when
/// no candidate has a usable offering.
pub(crate) fn plan_overrides(
    requirements: &Requirements,
    candidates: &[InstanceType],
    types: &BTreeMap<String, TypeInfo>,
    resolved: &ResolvedNodeClass,
    is_unavailable: impl Fn(CapacityType, &str, &str) -> bool,
) -> Option<(CapacityType, Vec<Override>)> {
    let zones_with_subnets = |zone: &str| resolved.subnets.iter().any(|s| s.zone == zone);
    let known: Vec<(&InstanceType, &TypeInfo)> = candidates
        .iter()
        .filter_map(|it| types.get(&it.name).map(|info| (it, info)))
        .collect();
    // Exotic types (GPUs, accelerators, metal) only when nothing ordinary is left.
    let ordinary: Vec<_> = known
        .iter()
        .filter(|(_, info)| !info.is_exotic())
        .copied()
        .collect();
    let types_kept = if ordinary.is_empty() { known } else { ordinary };
    let usable = |it: &InstanceType, capacity_type: CapacityType| -> Vec<(String, f64)> {
        it.offerings
            .iter()
            .filter(|o| {
                o.capacity_type == capacity_type
                    && o.available
                    && o.allowed_by(requirements)
                    && zones_with_subnets(&o.zone)
            })
            .filter(|o| !is_unavailable(capacity_type, &it.name, &o.zone))
            .map(|o| (o.zone.clone(), o.price))
            .collect()
    };
    // Spot offerings dearer than the cheapest on-demand one are not worth the interruptions.
    let cheapest_on_demand = types_kept
        .iter()
        .flat_map(|(it, _)| usable(it, CapacityType::OnDemand))
        .map(|(_, p)| p)
        .fold(f64::INFINITY, f64::min);
    let usable_for = |it: &InstanceType, capacity_type: CapacityType| -> Vec<(String, f64)> {
        let mut offers = usable(it, capacity_type);
        if capacity_type == CapacityType::Spot {
            offers.retain(|(_, price)| *price <= cheapest_on_demand);
        }
        offers
    };
    let allows = |ct: CapacityType| requirements.allows(labels::CAPACITY_TYPE, ct.as_str());
    let spot_possible = allows(CapacityType::Spot)
        && types_kept
            .iter()
            .any(|(it, _)| !usable_for(it, CapacityType::Spot).is_empty());
    let capacity_type = if spot_possible {
        CapacityType::Spot
    } else if allows(CapacityType::OnDemand) {
        CapacityType::OnDemand
    } else {
        return None;
    };
    let overrides = cheapest_overrides(&types_kept, resolved, |it| usable_for(it, capacity_type));
    (!overrides.is_empty()).then_some((capacity_type, overrides))
}

/// One override per usable (type, zone): the type's AMI and the zone's first subnet, cheapest
/// first, at most [`MAX_OVERRIDES`].
fn cheapest_overrides(
    types_kept: &[(&InstanceType, &TypeInfo)],
    resolved: &ResolvedNodeClass,
    usable: impl Fn(&InstanceType) -> Vec<(String, f64)>,
) -> Vec<Override> {
    let mut overrides = Vec::new();
    for (it, info) in types_kept {
        let accelerated = info.gpus.is_some() || info.neuron_devices > 0;
        let Some(ami) = resolved
            .amis
            .iter()
            .find(|a: &&Ami| a.fits(&info.arch, accelerated))
        else {
            continue;
        };
        for (zone, price) in usable(it) {
            // Subnets are sorted by zone, then most free addresses first.
            let Some(subnet) = resolved.subnets.iter().find(|s| s.zone == zone) else {
                continue;
            };
            overrides.push(Override {
                instance_type: it.name.clone(),
                subnet_id: subnet.id.clone(),
                zone,
                price,
                ami_id: ami.id.clone(),
            });
        }
    }
    overrides.sort_by(|a, b| a.price.total_cmp(&b.price));
    overrides.truncate(MAX_OVERRIDES);
    overrides
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::aws::nodeclass::{AmiFamily, Subnet};
    use crate::resources::ResourceList;
    use crate::scheduling::Offering;
    use crate::scheduling::Requirement;

    fn info(name: &str, gpus: bool) -> TypeInfo {
        TypeInfo {
            name: name.into(),
            vcpus: 2,
            memory_mib: 8192,
            arch: "amd64".into(),
            max_enis: 3,
            ipv4_per_eni: 10,
            gpus: gpus.then(|| super::super::catalogue::Gpu {
                name: "t4".into(),
                manufacturer: "nvidia".into(),
                count: 1,
                memory_mib: 16384,
            }),
            neuron_devices: 0,
            hypervisor: Some("nitro".into()),
            cpu_manufacturer: None,
            local_nvme_gb: None,
            spot: true,
            bare_metal: false,
        }
    }

    fn candidate(name: &str, od: f64, spot: f64, zones: &[&str]) -> InstanceType {
        let mut it = InstanceType::new(name, ResourceList::new());
        for z in zones {
            it.offerings
                .push(Offering::new(z, CapacityType::OnDemand, od));
            it.offerings
                .push(Offering::new(z, CapacityType::Spot, spot));
        }
        it
    }

    fn resolved() -> ResolvedNodeClass {
        let subnet = |id: &str, zone: &str| Subnet {
            id: id.into(),
            zone: zone.into(),
            zone_id: None,
            available_ips: 100,
        };
        ResolvedNodeClass {
            name: "default".into(),
            spec: serde_json::from_value(serde_json::json!({
                "subnetSelectorTerms": [{"id": "subnet-a"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r"
            }))
            .unwrap(),
            subnets: vec![subnet("subnet-a", "us-west-2a"), subnet("subnet-b", "us-west-2b")],
            security_groups: Vec::new(),
            amis: vec![Ami { id: "ami-x".into(), name: None, arch: "amd64".into(), accelerated: None, created: None }],
            instance_profile: "p".into(),
            family: AmiFamily::AL2023,
        }
    }

    #[test]
    fn spot_is_chosen_when_allowed_and_overrides_go_cheapest_first_per_subnet() {
        let types: BTreeMap<_, _> = [("m5.large", false), ("m5.xlarge", false)]
            .iter()
            .map(|(n, g)| (n.to_string(), info(n, *g)))
            .collect();
        let candidates = [
            candidate(
                "m5.large",
                0.096,
                0.04,
                &["us-west-2a", "us-west-2b", "us-west-2c"],
            ),
            candidate("m5.xlarge", 0.192, 0.03, &["us-west-2a"]),
        ];
        let (ct, overrides) = plan_overrides(
            &Requirements::new(),
            &candidates,
            &types,
            &resolved(),
            |_, _, _| false,
        )
        .unwrap();
        assert_eq!(ct, "spot");
        let names: Vec<_> = overrides
            .iter()
            .map(|o| (o.instance_type.as_str(), o.subnet_id.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("m5.xlarge", "subnet-a"),
                ("m5.large", "subnet-a"),
                ("m5.large", "subnet-b")
            ]
        );
    }

    #[test]
    fn on_demand_when_spot_is_not_allowed_and_unavailable_offerings_are_skipped() {
        let types: BTreeMap<_, _> = [("m5.large", false), ("m5.xlarge", false)]
            .iter()
            .map(|(n, g)| (n.to_string(), info(n, *g)))
            .collect();
        let candidates = [
            candidate("m5.large", 0.096, 0.04, &["us-west-2a"]),
            candidate("m5.xlarge", 0.192, 0.03, &["us-west-2a"]),
        ];
        let on_demand: Requirements = [Requirement::in_values(
            labels::CAPACITY_TYPE,
            [CapacityType::OnDemand],
        )]
        .into_iter()
        .collect();
        let (ct, overrides) =
            plan_overrides(&on_demand, &candidates, &types, &resolved(), |_, it, _| {
                it == "m5.large"
            })
            .unwrap();
        assert_eq!(ct, "on-demand");
        assert_eq!(
            overrides
                .iter()
                .map(|o| o.instance_type.as_str())
                .collect::<Vec<_>>(),
            ["m5.xlarge"]
        );
    }

    #[test]
    fn exotic_types_are_dropped_while_ordinary_ones_remain_and_spot_dearer_than_on_demand_is_skipped()
     {
        let types: BTreeMap<_, _> = [("m5.large", false), ("g4dn.xlarge", true)]
            .iter()
            .map(|(n, g)| (n.to_string(), info(n, *g)))
            .collect();
        let candidates = [
            candidate("g4dn.xlarge", 0.5, 0.01, &["us-west-2a"]),
            candidate("m5.large", 0.096, 0.2, &["us-west-2a"]),
        ];
        let (ct, overrides) = plan_overrides(
            &Requirements::new(),
            &candidates,
            &types,
            &resolved(),
            |_, _, _| false,
        )
        .unwrap();
        // m5.large's spot (0.2) costs more than its on-demand (0.096), and g4dn is exotic.
        assert_eq!(ct, "on-demand");
        assert_eq!(
            overrides
                .iter()
                .map(|o| o.instance_type.as_str())
                .collect::<Vec<_>>(),
            ["m5.large"]
        );
    }

    #[test]
    fn at_most_sixty_overrides_are_sent() {
        let names: Vec<String> = (1..=40).map(|i| format!("m5.{i}xlarge")).collect();
        let types: BTreeMap<_, _> = names.iter().map(|n| (n.clone(), info(n, false))).collect();
        let candidates: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                candidate(
                    n,
                    0.1 * (i + 1) as f64,
                    0.001 * (i + 1) as f64,
                    &["us-west-2a", "us-west-2b"],
                )
            })
            .collect();
        let (_, overrides) = plan_overrides(
            &Requirements::new(),
            &candidates,
            &types,
            &resolved(),
            |_, _, _| false,
        )
        .unwrap();
        assert_eq!(overrides.len(), MAX_OVERRIDES);
    }
}
