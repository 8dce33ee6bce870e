//! On-demand prices of EC2 instance types, shipped with the binary and replaceable at run time.
//!
//! The table (`on_demand_prices.json`) is generated, never edited: `tests/upstream/aws-prices`
//! reads the tables the AWS provider release pinned in `tests/upstream/go.mod` ships
//! (`pkg/providers/pricing/zz_generated.pricing_*.go`, which upstream's price codegen makes from
//! the Pricing API), and `tests/aws/pricing.rs` fails when the committed file differs from what it
//! prints. Like upstream (`DefaultProvider.Reset` in `pkg/providers/pricing/pricing.go`), a region
//! has its own table where one is shipped (us-east-1, the two GovCloud regions, cn-north-1) and
//! falls back on us-east-1's otherwise: other commercial regions charge a few to ~30 % more, in
//! nearly the same order, which is what cheapest-first launching needs until the live feed
//! answers.
//!
//! The agent asks the Pricing API for the region's exact prices ([`super::price_feed`]); this
//! table is what it uses until that succeeds, or where it cannot (an isolated VPC, no
//! pricing:GetProducts permission). Exact prices for another region, or types missing here,
//! also come from a JSON file
//! (`{"m5.large": 0.096, ...}`) passed to [`PriceTable::with_overrides`]; the agent reads it from
//! `--aws-price-file`. A type with no price still gets on-demand offerings, ranked after every
//! priced one ([`crate::scheduling::UNKNOWN_PRICE`]); upstream makes them unavailable.
//! Spot prices are not here: they come from DescribeSpotPriceHistory.

use serde::Deserialize;
use std::collections::HashMap;
use std::sync::LazyLock;

/// The region whose table every region without one of its own uses, as upstream's.
pub const FALLBACK_REGION: &str = "us-east-1";

/// `on_demand_prices.json`, as `tests/upstream/aws-prices` writes it.
#[derive(Debug, Default, Deserialize)]
struct Shipped {
    /// The upstream release the figures come from.
    source: String,
    /// When upstream generated each region's table.
    generated: HashMap<String, String>,
    regions: HashMap<String, HashMap<String, f64>>,
}

static SHIPPED: LazyLock<Shipped> = LazyLock::new(|| {
    // The file is generated and committed; `tests::the_shipped_table_parses_and_prices_every_region`
    // reads it, so an empty table here means a broken build, which that test catches.
    serde_json::from_str(include_str!("on_demand_prices.json")).unwrap_or_default()
});

static EMPTY: LazyLock<HashMap<String, f64>> = LazyLock::new(HashMap::new);

/// On-demand hourly prices by instance type, for one region.
#[derive(Clone, Debug)]
pub struct PriceTable {
    /// The region whose shipped table this reads (the cluster's, or [`FALLBACK_REGION`]).
    table_region: String,
    table: &'static HashMap<String, f64>,
    overrides: HashMap<String, f64>,
}

impl Default for PriceTable {
    fn default() -> Self {
        Self::shipped(FALLBACK_REGION)
    }
}

/// A price file that is not a JSON object of type → price.
#[derive(Debug, thiserror::Error)]
#[error("the price file is not a JSON object of instance type to hourly price")]
pub struct InvalidPriceFile(#[source] pub serde_json::Error);

impl PriceTable {
    /// The shipped table for `region`: its own where one ships, us-east-1's otherwise.
    pub fn shipped(region: &str) -> Self {
        let (table_region, table) = match SHIPPED.regions.get_key_value(region) {
            Some((name, table)) => (name.clone(), table),
            None => (
                FALLBACK_REGION.to_owned(),
                SHIPPED.regions.get(FALLBACK_REGION).unwrap_or(&EMPTY),
            ),
        };
        Self {
            table_region,
            table,
            overrides: HashMap::new(),
        }
    }

    /// This table with `json` (`{"m5.large": 0.107, ...}`) taking precedence.
    pub fn with_overrides(self, json: &str) -> Result<Self, InvalidPriceFile> {
        let overrides: HashMap<String, f64> =
            serde_json::from_str(json).map_err(InvalidPriceFile)?;
        Ok(Self { overrides, ..self })
    }

    /// The region whose shipped prices this reads.
    pub fn table_region(&self) -> &str {
        &self.table_region
    }

    /// Where the shipped figures come from and when upstream generated them, for a log line.
    pub fn provenance(&self) -> String {
        let generated = SHIPPED
            .generated
            .get(&self.table_region)
            .map_or("an unknown date", String::as_str);
        format!(
            "{} ({}, generated {generated})",
            SHIPPED.source, self.table_region
        )
    }

    /// The on-demand price of `instance_type`, if known: the price file's, else the region's
    /// live price (the Pricing API's, [`super::price_feed`]), else the shipped table's.
    pub(crate) fn on_demand_with(
        &self,
        live: &HashMap<String, f64>,
        instance_type: &str,
    ) -> Option<f64> {
        if let Some(price) = self.overrides.get(instance_type) {
            return Some(*price);
        }
        live.get(instance_type)
            .copied()
            .or_else(|| self.on_demand(instance_type))
    }

    /// The on-demand price of `instance_type`, if known.
    pub fn on_demand(&self, instance_type: &str) -> Option<f64> {
        self.overrides
            .get(instance_type)
            .or_else(|| self.table.get(instance_type))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_table_parses_and_prices_every_region() {
        for region in ["us-east-1", "us-gov-west-1", "us-gov-east-1", "cn-north-1"] {
            let table = PriceTable::shipped(region);
            assert_eq!(table.table_region(), region);
            assert!(table.table.len() > 250, "{region}: {}", table.table.len());
            assert!(table.table.values().all(|p| *p > 0.0));
        }
        let east = PriceTable::shipped("us-east-1");
        assert_eq!(east.on_demand("m5.large"), Some(0.096));
        assert_eq!(east.on_demand("m5.metal"), Some(4.608));
        assert_eq!(east.on_demand("t3.micro"), Some(0.0104));
        assert_eq!(east.on_demand("zz9.large"), None);
        assert!(east.provenance().contains("karpenter-provider-aws"));
        // China is priced in yuan, as upstream's table and the Pricing API there give it.
        assert!(PriceTable::shipped("cn-north-1").on_demand("c4.large") > Some(1.0));
    }

    #[test]
    fn a_region_without_a_table_of_its_own_uses_us_east_1s_as_upstream_does() {
        let table = PriceTable::shipped("eu-west-1");
        assert_eq!(table.table_region(), "us-east-1");
        assert_eq!(table.on_demand("m5.large"), Some(0.096));
    }

    #[test]
    fn a_price_file_overrides_the_table() {
        let table = PriceTable::shipped("us-east-1")
            .with_overrides(r#"{"m5.large": 0.107, "u-6tb1.56xlarge": 40.0}"#)
            .unwrap_or_default();
        assert_eq!(table.on_demand("m5.large"), Some(0.107));
        assert_eq!(table.on_demand("u-6tb1.56xlarge"), Some(40.0));
        assert_eq!(table.on_demand("m5.xlarge"), Some(0.192));
        assert!(PriceTable::default().with_overrides("[1]").is_err());
    }
}
