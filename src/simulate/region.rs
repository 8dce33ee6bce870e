//! `simulate --region`: the shipped catalogue moved to another region. The catalogue's types
//! and shapes are the same everywhere; its zones become the region's (`eu-west-1a`… on AWS,
//! `europe-west4-a`… on Google Cloud), its `topology.kubernetes.io/region` the region, and its
//! on-demand prices the region's where the caller has them (the plugin asks the AWS Pricing
//! API). A region's spot discount is not known offline, so a type's spot price keeps its
//! shipped ratio to on-demand; the report says which prices are the region's.

use crate::apis::CapacityType;
use crate::apis::labels;
use crate::scheduling::{InstanceType, Requirement, known_price};
use std::collections::HashMap;

/// The cloud a catalogue belongs to, for its zone names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneStyle {
    /// `us-west-2a`.
    Aws,
    /// `us-central1-a`.
    Gcp,
}

/// Three zones of `region`, named as the cloud names them.
pub fn zones(region: &str, style: ZoneStyle) -> Vec<String> {
    ["a", "b", "c"]
        .iter()
        .map(|z| match style {
            ZoneStyle::Aws => format!("{region}{z}"),
            ZoneStyle::Gcp => format!("{region}-{z}"),
        })
        .collect()
}

/// The catalogue in `region`: offerings in `zones`, on-demand at `on_demand`'s price where it
/// has the type (spot at the same ratio as before), the shipped price elsewhere. Returns how
/// many types were priced from `on_demand`.
pub fn in_region(
    catalogue: &mut [InstanceType],
    region: &str,
    zones: &[String],
    on_demand: &HashMap<String, f64>,
) -> usize {
    let mut repriced = 0;
    for it in catalogue.iter_mut() {
        it.requirements.remove(labels::REGION);
        it.requirements
            .add(Requirement::in_values(labels::REGION, [region]));
        let shipped = |capacity_type: CapacityType| {
            it.offerings
                .iter()
                .filter(|o| o.capacity_type == capacity_type)
                .map(|o| o.price)
                .reduce(f64::min)
        };
        let (od, spot) = (shipped(CapacityType::OnDemand), shipped(CapacityType::Spot));
        let (od, spot) = match (on_demand.get(&it.name), od) {
            (Some(&live), Some(old)) if old > 0.0 && known_price(old).is_some() => {
                repriced += 1;
                (Some(live), spot.map(|s| s * live / old))
            }
            (Some(&live), _) => {
                repriced += 1;
                (Some(live), spot)
            }
            _ => (od, spot),
        };
        it.offerings = zones
            .iter()
            .flat_map(|zone| {
                let mut offerings = Vec::new();
                if let Some(price) = spot {
                    offerings.push(crate::scheduling::Offering::new(
                        zone,
                        CapacityType::Spot,
                        price,
                    ));
                }
                if let Some(price) = od {
                    offerings.push(crate::scheduling::Offering::new(
                        zone,
                        CapacityType::OnDemand,
                        price,
                    ));
                }
                offerings
            })
            .collect();
    }
    repriced
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_catalogue_moves_to_the_regions_zones_and_takes_its_on_demand_prices() {
        let mut catalogue = crate::cloud::kwok::catalogue::aws_catalogue();
        let zones = zones("eu-west-1", ZoneStyle::Aws);
        let live: HashMap<String, f64> = [("m5.large".to_owned(), 0.107)].into();
        let repriced = in_region(&mut catalogue, "eu-west-1", &zones, &live);
        assert_eq!(repriced, 1);
        let m5 = catalogue.iter().find(|t| t.name == "m5.large").unwrap();
        let od: Vec<(&str, f64)> = m5
            .offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
            .map(|o| (o.zone.as_str(), o.price))
            .collect();
        assert_eq!(
            od,
            [
                ("eu-west-1a", 0.107),
                ("eu-west-1b", 0.107),
                ("eu-west-1c", 0.107)
            ]
        );
        // Spot keeps its shipped discount: 0.0371 of 0.096, applied to 0.107.
        let spot = m5
            .offerings
            .iter()
            .find(|o| o.capacity_type == CapacityType::Spot)
            .unwrap();
        assert!((spot.price - 0.0371 * 0.107 / 0.096).abs() < 1e-9);
        assert!(m5.requirements.allows(labels::REGION, "eu-west-1"));
        assert_eq!(
            zones_of_gcp(),
            ["europe-west4-a", "europe-west4-b", "europe-west4-c"]
        );
    }

    fn zones_of_gcp() -> Vec<String> {
        zones("europe-west4", ZoneStyle::Gcp)
    }
}
