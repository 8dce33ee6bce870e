//! On-demand prices of the cluster's region from the AWS Price List Query API, as upstream's
//! pricing provider reads them (`pkg/providers/pricing/pricing.go`, refreshed every 12 hours by
//! `pkg/controllers/providers/pricing`): `GetProducts` for `AmazonEC2` with upstream's filters
//! (the region, shared tenancy, Linux, no pre-installed software, capacity in use, on-demand),
//! 100 products a page, each product's on-demand price per hour in USD (CNY in China).
//!
//! The feed is refreshed when the instance type catalogue is, once it is 12 hours old (or has
//! never succeeded). A failed call, or an answer with no price in it, keeps the last good prices
//! (the shipped table until one succeeds) and says so in a warning; a product that does not
//! parse is skipped. The Pricing API answers only in a few regions, so its client has its own
//! ([`pricing_region`]).

use super::cloud_error;
use crate::cloud::CloudError;
use crate::cloud::last_good::{LastGood, Outcome};
use aws_sdk_pricing::types::{Filter, FilterType};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// How old the prices may get before they are fetched again (upstream's 12 hours).
pub(crate) const REFRESH: Duration = Duration::from_secs(12 * 3600);

/// The region whose Pricing endpoint serves `region` (the API is only in us-east-1,
/// eu-central-1, ap-south-1 and, for China, cn-northwest-1).
pub(crate) fn pricing_region(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("eu-") || region.starts_with("me-") || region.starts_with("af-") {
        "eu-central-1"
    } else if region.starts_with("ap-") {
        "ap-south-1"
    } else {
        "us-east-1"
    }
}

/// The filters upstream asks GetProducts with, for `region`.
pub fn filters(region: &str) -> Vec<Filter> {
    [
        ("regionCode", region),
        ("serviceCode", "AmazonEC2"),
        ("preInstalledSw", "NA"),
        ("operatingSystem", "Linux"),
        ("capacitystatus", "Used"),
        ("marketoption", "OnDemand"),
        ("tenancy", "Shared"),
        ("productFamily", "Compute Instance"),
    ]
    .into_iter()
    .filter_map(|(field, value)| {
        Filter::builder()
            .field(field)
            .value(value)
            .r#type(FilterType::TermMatch)
            .build()
            .ok()
    })
    .collect()
}

/// The parts of a price list product this reads.
#[derive(Deserialize)]
struct Product {
    product: ProductInfo,
    #[serde(default)]
    terms: Terms,
}

#[derive(Deserialize)]
struct ProductInfo {
    attributes: Attributes,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Attributes {
    #[serde(default)]
    instance_type: String,
}

#[derive(Deserialize, Default)]
struct Terms {
    #[serde(rename = "OnDemand", default)]
    on_demand: HashMap<String, Term>,
}

#[derive(Deserialize)]
struct Term {
    #[serde(rename = "priceDimensions", default)]
    price_dimensions: HashMap<String, Dimension>,
}

#[derive(Deserialize)]
struct Dimension {
    #[serde(rename = "pricePerUnit", default)]
    price_per_unit: HashMap<String, String>,
}

/// Prices read from price list products, and how many products were skipped.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    pub prices: HashMap<String, f64>,
    pub skipped: usize,
}

/// Reads GetProducts' `PriceList` entries (each a JSON document): a product without an instance
/// type, or whose price is not a positive number in `currency`, is skipped.
pub fn parse(items: &[String], currency: &str, into: &mut Parsed) {
    for item in items {
        let Ok(product) = serde_json::from_str::<Product>(item) else {
            into.skipped += 1;
            continue;
        };
        let instance_type = product.product.attributes.instance_type;
        let price = product
            .terms
            .on_demand
            .values()
            .flat_map(|t| t.price_dimensions.values())
            .filter_map(|d| d.price_per_unit.get(currency)?.parse::<f64>().ok())
            .find(|p| p.is_finite() && *p > 0.0);
        match price {
            Some(price) if !instance_type.is_empty() => {
                into.prices.insert(instance_type, price);
            }
            _ => into.skipped += 1,
        }
    }
}

/// Fetches every on-demand price of `region`.
pub async fn fetch(client: &aws_sdk_pricing::Client, region: &str) -> Result<Parsed, CloudError> {
    let currency = if region.starts_with("cn-") {
        "CNY"
    } else {
        "USD"
    };
    let mut parsed = Parsed::default();
    let mut token: Option<String> = None;
    loop {
        let out = client
            .get_products()
            .service_code("AmazonEC2")
            .set_filters(Some(filters(region)))
            .max_results(100)
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| cloud_error("getting on-demand prices (pricing:GetProducts)", e))?;
        parse(out.price_list(), currency, &mut parsed);
        token = out
            .next_token()
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        if token.is_none() {
            return Ok(parsed);
        }
    }
}

/// The region's live on-demand prices, refreshed every [`REFRESH`].
pub(crate) struct PriceFeed {
    prices: LastGood<HashMap<String, f64>>,
}

impl Default for PriceFeed {
    fn default() -> Self {
        Self {
            prices: LastGood::new(REFRESH),
        }
    }
}

impl PriceFeed {
    /// The live prices (empty until a fetch succeeded).
    pub(crate) fn prices(&self) -> Arc<HashMap<String, f64>> {
        self.prices.current()
    }

    /// Counts each refresh in `metrics` (see [`LastGood::report_to`]).
    pub(crate) fn report_to(&self, metrics: Arc<crate::metrics::Metrics>) {
        self.prices.report_to(metrics);
    }

    /// Whether the prices are due for a refresh.
    pub(crate) fn due(&self) -> bool {
        self.prices.due()
    }

    /// Fetches the prices if they are due; on failure, or an answer without prices, the last
    /// good ones stay.
    pub(crate) async fn refresh_if_due(&self, client: &aws_sdk_pricing::Client, region: &str) {
        if !self.due() {
            return;
        }
        match fetch(client, region).await {
            Ok(parsed) if parsed.prices.is_empty() => {
                self.prices.kept(Outcome::Empty);
                warn!(
                    region,
                    skipped = parsed.skipped,
                    "the Pricing API answered no on-demand price for the region; keeping the last good prices"
                );
            }
            Ok(parsed) => {
                info!(
                    region,
                    prices = parsed.prices.len(),
                    skipped = parsed.skipped,
                    "on-demand prices updated from the Pricing API"
                );
                self.prices.update(parsed.prices);
            }
            Err(error) => {
                self.prices.kept(Outcome::Failed);
                warn!(
                    region,
                    error = %error,
                    "on-demand prices could not be read from the Pricing API (pricing:GetProducts); keeping the last good prices"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn product(instance_type: &str, usd: &str) -> String {
        serde_json::json!({
            "product": {"productFamily": "Compute Instance", "attributes": {"instanceType": instance_type, "regionCode": "eu-west-1"}},
            "terms": {"OnDemand": {"X.JRTCKXETXF": {"priceDimensions": {"X.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}},
        })
        .to_string()
    }

    #[test]
    fn products_give_their_hourly_price_and_malformed_ones_are_skipped() {
        let items = vec![
            product("m5.large", "0.1070000000"),
            product("c5.xlarge", "0.1920000000"),
            product("m5.xlarge", "0.0000000000"),
            product("", "0.5"),
            "{not json".to_owned(),
            serde_json::json!({"product": {"attributes": {"instanceType": "r5.large"}}})
                .to_string(),
        ];
        let mut parsed = Parsed::default();
        parse(&items, "USD", &mut parsed);
        assert_eq!(parsed.prices.len(), 2);
        assert_eq!(parsed.prices["m5.large"], 0.107);
        assert_eq!(parsed.prices["c5.xlarge"], 0.192);
        assert_eq!(parsed.skipped, 4);
    }

    #[test]
    fn each_region_asks_the_pricing_endpoint_that_serves_it() {
        assert_eq!(pricing_region("us-west-2"), "us-east-1");
        assert_eq!(pricing_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(pricing_region("cn-north-1"), "cn-northwest-1");
        let fields: Vec<String> = filters("eu-west-1")
            .iter()
            .map(|f| format!("{}={}", f.field(), f.value()))
            .collect();
        assert!(fields.contains(&"regionCode=eu-west-1".to_owned()));
        assert!(fields.contains(&"operatingSystem=Linux".to_owned()));
    }
}
