//! The shipped list prices `status`, `explain` and `status -w` fall back on for nodes nothing
//! recorded a price for (clusters run by upstream Karpenter, node groups): on demand, the AWS
//! provider's shipped table for the object's region (us-east-1's where none ships, as the agent
//! does), then the catalogue's; spot, the catalogue's us-west-2 and us-central1 list prices
//! (Compute Engine's from the gcp provider's table).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_core::apis::labels;
use karpenter_core::cloud::aws::pricing::{self, PriceTable};
use karpenter_core::cloud::kwok::catalogue;
use karpenter_core::explain::ListPrices;
use karpenter_core::scheduling::InstanceType;
use std::sync::OnceLock;

fn shipped() -> &'static [InstanceType] {
    static CATALOGUE: OnceLock<Vec<InstanceType>> = OnceLock::new();
    CATALOGUE.get_or_init(|| {
        let mut all = catalogue::aws_catalogue();
        all.extend(catalogue::gcp_catalogue());
        all
    })
}

/// The list price of one instance type at one capacity type in `region` (the cheapest zone's).
fn price(instance_type: &str, capacity_type: &str, region: &str) -> Option<f64> {
    let on_demand = capacity_type == labels::CAPACITY_TYPE_ON_DEMAND;
    if let Some(price) = on_demand
        .then(|| PriceTable::shipped(region).on_demand(instance_type))
        .flatten()
    {
        return Some(price);
    }
    shipped()
        .iter()
        .find(|t| t.name == instance_type)
        .and_then(|t| {
            t.offerings
                .iter()
                .filter(|o| o.capacity_type == capacity_type)
                .filter_map(|o| o.known_price())
                .reduce(f64::min)
        })
}

/// The list prices of what `objects` (claims and nodes) run, by their instance type, capacity
/// type and region labels.
pub fn list_prices<'a>(objects: impl IntoIterator<Item = &'a ObjectMeta>) -> ListPrices {
    let mut out = ListPrices::new();
    for meta in objects {
        let Some(object_labels) = meta.labels.as_ref() else {
            continue;
        };
        let Some(instance_type) = object_labels.get(labels::INSTANCE_TYPE) else {
            continue;
        };
        let capacity_type = object_labels
            .get(labels::CAPACITY_TYPE)
            .map_or(labels::CAPACITY_TYPE_ON_DEMAND, String::as_str);
        let region = object_labels
            .get(labels::REGION)
            .map_or(pricing::FALLBACK_REGION, String::as_str);
        let key = (instance_type.clone(), capacity_type.to_owned());
        if out.contains_key(&key) {
            continue;
        }
        if let Some(p) = price(instance_type, capacity_type, region) {
            out.insert(key, p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(t: &str, c: Option<&str>) -> ObjectMeta {
        let mut l =
            std::collections::BTreeMap::from([(labels::INSTANCE_TYPE.to_owned(), t.to_owned())]);
        if let Some(c) = c {
            l.insert(labels::CAPACITY_TYPE.to_owned(), c.to_owned());
        }
        ObjectMeta {
            labels: Some(l),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_node_in_govcloud_is_priced_at_govclouds_rates_and_one_in_ireland_at_us_east_1s() {
        let in_region = |region: &str| {
            let mut m = meta("m5.large", None);
            if let Some(l) = m.labels.as_mut() {
                l.insert(labels::REGION.to_owned(), region.to_owned());
            }
            list_prices([&m])[&("m5.large".to_owned(), "on-demand".to_owned())]
        };
        assert_eq!(in_region("us-gov-west-1"), 0.121);
        assert_eq!(in_region("eu-west-1"), 0.096);
    }

    #[test]
    fn types_are_priced_from_the_regions_on_demand_table_then_the_catalogue_and_unknown_ones_are_left_out()
     {
        let objects = [
            meta("m5.large", Some("spot")),
            meta("m5.large", None),
            meta("x2iedn.32xlarge", None),
            meta("r6i.2xlarge", None),
            meta("no-such-type", None),
        ];
        let prices = list_prices(objects.iter());
        assert_eq!(
            prices.get(&("m5.large".into(), "on-demand".into())),
            Some(&0.096)
        );
        assert!(prices[&("m5.large".to_owned(), "spot".to_owned())] < 0.096);
        assert_eq!(
            prices.get(&("r6i.2xlarge".into(), "on-demand".into())),
            Some(&0.504)
        );
        assert_eq!(
            prices.get(&("x2iedn.32xlarge".into(), "on-demand".into())),
            Some(&26.676)
        );
        assert!(!prices.keys().any(|(t, _)| t == "no-such-type"));
    }
}
