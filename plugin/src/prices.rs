//! The shipped list prices `status`, `explain` and `status -w` fall back on for nodes nothing
//! recorded a price for (clusters run by upstream Karpenter, node groups): the catalogue's
//! us-west-2 and us-central1 list prices by capacity type, then the AWS provider's on-demand
//! table for EC2 types the catalogue does not have.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_core::apis::labels;
use karpenter_core::cloud::aws::pricing::PriceTable;
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

/// The list price of one instance type at one capacity type (the cheapest zone's).
fn price(instance_type: &str, capacity_type: &str) -> Option<f64> {
    let from_catalogue = shipped()
        .iter()
        .find(|t| t.name == instance_type)
        .and_then(|t| {
            t.offerings
                .iter()
                .filter(|o| o.capacity_type == capacity_type)
                .filter_map(|o| o.known_price())
                .reduce(f64::min)
        });
    from_catalogue.or_else(|| {
        (capacity_type == labels::CAPACITY_TYPE_ON_DEMAND)
            .then(|| PriceTable::shipped().on_demand(instance_type))
            .flatten()
    })
}

/// The list prices of what `objects` (claims and nodes) run, by their instance type and
/// capacity type labels.
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
        let key = (instance_type.clone(), capacity_type.to_owned());
        if out.contains_key(&key) {
            continue;
        }
        if let Some(p) = price(instance_type, capacity_type) {
            out.insert(key, p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_priced_from_the_catalogue_then_the_on_demand_table_and_unknown_ones_are_left_out()
    {
        let meta = |t: &str, c: Option<&str>| {
            let mut l = std::collections::BTreeMap::from([(
                labels::INSTANCE_TYPE.to_owned(),
                t.to_owned(),
            )]);
            if let Some(c) = c {
                l.insert(labels::CAPACITY_TYPE.to_owned(), c.to_owned());
            }
            ObjectMeta {
                labels: Some(l),
                ..ObjectMeta::default()
            }
        };
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
        assert!(!prices.keys().any(|(t, _)| t == "no-such-type"));
    }
}
