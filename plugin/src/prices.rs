//! The shipped list prices `status`, `explain` and `status -w` fall back on for nodes nothing
//! recorded a price for (clusters run by upstream Karpenter, node groups), from the tables the
//! providers ship, for the object's region: on demand, the AWS provider's (us-east-1's where
//! none ships, as the agent does); on demand and spot, the gcp provider's generated table; then
//! the catalogue's us-west-2 and us-central1 list prices (EC2 spot among them).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_core::apis::{CapacityType, labels};
use karpenter_core::cloud::aws::pricing::{self, PriceTable};
use karpenter_core::cloud::gcp_prices;
use karpenter_core::cloud::kwok::catalogue;
use karpenter_core::explain::ListPrices;
use karpenter_core::scheduling::InstanceType;
use karpenter_core::state::CachedNode;
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
fn price(instance_type: &str, capacity_type: CapacityType, region: &str) -> Option<f64> {
    let on_demand = capacity_type == CapacityType::OnDemand;
    if let Some(price) = on_demand
        .then(|| PriceTable::shipped(region).on_demand(instance_type))
        .flatten()
    {
        return Some(price);
    }
    if let Some(price) = gcp_prices::shipped(instance_type, region) {
        return Some(if on_demand {
            price.on_demand
        } else {
            price.spot
        });
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

/// An object whose labels say what it runs: a claim's metadata or a Node.
pub(crate) trait Labelled {
    /// The value of the label `key`.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labelled for ObjectMeta {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }
}

impl Labelled for CachedNode {
    fn label(&self, key: &str) -> Option<&str> {
        CachedNode::label(self, key)
    }
}

/// The list prices of what `objects` (claims and nodes) run, by their instance type, capacity
/// type and region labels.
pub(crate) fn list_prices<'a, L: Labelled + ?Sized + 'a>(
    objects: impl IntoIterator<Item = &'a L>,
) -> ListPrices {
    let mut out = ListPrices::new();
    for object in objects {
        let Some(instance_type) = object.label(labels::INSTANCE_TYPE) else {
            continue;
        };
        // Unlabelled is on-demand; a value no cloud sells has no list price.
        let Ok(capacity_type) = object
            .label(labels::CAPACITY_TYPE)
            .unwrap_or(CapacityType::OnDemand.as_str())
            .parse::<CapacityType>()
        else {
            continue;
        };
        let region = object
            .label(labels::REGION)
            .unwrap_or(pricing::FALLBACK_REGION);
        let key = (instance_type.to_owned(), capacity_type.to_string());
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
            l.insert(labels::CAPACITY_TYPE.to_owned(), c.to_string());
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
    fn a_gke_node_is_priced_from_the_gcp_table_for_its_region() {
        let mut spot = meta("e2-standard-2", Some("spot"));
        let mut on_demand = meta("e2-standard-2", None);
        for m in [&mut spot, &mut on_demand] {
            if let Some(l) = m.labels.as_mut() {
                l.insert(labels::REGION.to_owned(), "us-central1".to_owned());
            }
        }
        let prices = list_prices([&spot, &on_demand]);
        let of = |c: &str| prices[&("e2-standard-2".to_owned(), c.to_owned())];
        assert_eq!(of("on-demand"), 0.06701142);
        assert!(of("spot") < of("on-demand"));
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
