//! On-demand prices of EC2 instance types, shipped with the binary and replaceable at run time.
//!
//! The numbers are AWS's public on-demand list prices for Linux in us-east-1 (USD per hour), as
//! published in the EC2 price list (the same source upstream Karpenter generates its
//! `zz_generated.pricing_aws.go` from). us-east-2 and us-west-2 charge the same for every type
//! listed here; other regions charge a few to ~30 % more, with nearly the same *order*, which is
//! what cheapest-first launching needs. Within a family the price scales exactly with the size,
//! so the table stores one price per family (for `large`) and derives the rest; GPU families,
//! whose sizes do not scale linearly, are listed type by type.
//!
//! The agent asks the Pricing API for the region's exact prices ([`super::price_feed`]); this
//! table is what it uses until that succeeds, or where it cannot (an isolated VPC, no
//! pricing:GetProducts permission). Exact prices for another region, or types missing here,
//! also come from a JSON file
//! (`{"m5.large": 0.096, ...}`) passed to [`PriceTable::with_overrides`]; the agent reads it from
//! `--aws-price-file`. A type with no price still gets on-demand offerings, ranked after every
//! priced one ([`crate::scheduling::UNKNOWN_PRICE`]); upstream makes them unavailable.
//! Spot prices are not here: they come from DescribeSpotPriceHistory.

use std::collections::HashMap;

/// Price of the `large` size of each linearly priced family.
const FAMILIES: &[(&str, f64)] = &[
    ("t3", 0.0832),
    ("t3a", 0.0752),
    ("t4g", 0.0672),
    ("m5", 0.096),
    ("m5a", 0.086),
    ("m5d", 0.113),
    ("m5n", 0.119),
    ("m6i", 0.096),
    ("m6id", 0.1187),
    ("m6a", 0.0864),
    ("m6g", 0.077),
    ("m6gd", 0.0904),
    ("m7i", 0.1008),
    ("m7i-flex", 0.09576),
    ("m7a", 0.11592),
    ("m7g", 0.0816),
    ("m7gd", 0.1068),
    ("m8g", 0.08976),
    ("c5", 0.085),
    ("c5a", 0.077),
    ("c5d", 0.096),
    ("c5n", 0.108),
    ("c6i", 0.085),
    ("c6id", 0.1008),
    ("c6a", 0.0765),
    ("c6g", 0.068),
    ("c6gd", 0.0768),
    ("c6gn", 0.0864),
    ("c7i", 0.08925),
    ("c7a", 0.10264),
    ("c7g", 0.0725),
    ("c7gd", 0.0907),
    ("c8g", 0.07976),
    ("r5", 0.126),
    ("r5a", 0.113),
    ("r5d", 0.144),
    ("r5n", 0.149),
    ("r6i", 0.126),
    ("r6id", 0.1512),
    ("r6a", 0.1134),
    ("r6g", 0.1008),
    ("r6gd", 0.1152),
    ("r7i", 0.1323),
    ("r7a", 0.1521),
    ("r7g", 0.1071),
    ("r8g", 0.11782),
    ("i3", 0.156),
    ("i4i", 0.172),
    ("x2gd", 0.167),
];

/// Types whose price does not follow the family's size ladder.
const TYPES: &[(&str, f64)] = &[
    ("g4dn.xlarge", 0.526),
    ("g4dn.2xlarge", 0.752),
    ("g4dn.4xlarge", 1.204),
    ("g4dn.8xlarge", 2.176),
    ("g4dn.12xlarge", 3.912),
    ("g4dn.16xlarge", 4.352),
    ("g5.xlarge", 1.006),
    ("g5.2xlarge", 1.212),
    ("g5.4xlarge", 1.624),
    ("g5.8xlarge", 2.448),
    ("g5.12xlarge", 5.672),
    ("g5.16xlarge", 4.096),
    ("g5.24xlarge", 8.144),
    ("g5.48xlarge", 16.288),
    ("g6.xlarge", 0.8048),
    ("g6.2xlarge", 0.9776),
    ("g6.4xlarge", 1.3232),
    ("g6.8xlarge", 2.0144),
    ("g5g.xlarge", 0.42),
    ("g5g.2xlarge", 0.556),
    ("p3.2xlarge", 3.06),
    ("p3.8xlarge", 12.24),
    ("p3.16xlarge", 24.48),
    ("inf1.xlarge", 0.228),
    ("inf1.2xlarge", 0.362),
    ("inf2.xlarge", 0.7582),
];

/// How many `large`s a size is worth: `nano` 1/16 … `xlarge` 2, `Nxlarge` 2N.
fn size_factor(size: &str) -> Option<f64> {
    match size {
        "nano" => Some(0.0625),
        "micro" => Some(0.125),
        "small" => Some(0.25),
        "medium" => Some(0.5),
        "large" => Some(1.0),
        "xlarge" => Some(2.0),
        _ => size
            .strip_suffix("xlarge")?
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .map(|n| 2.0 * f64::from(n)),
    }
}

/// On-demand hourly prices by instance type.
#[derive(Clone, Debug, Default)]
pub struct PriceTable {
    overrides: HashMap<String, f64>,
}

/// A price file that is not a JSON object of type → price.
#[derive(Debug, thiserror::Error)]
#[error("the price file is not a JSON object of instance type to hourly price")]
pub struct InvalidPriceFile(#[source] pub serde_json::Error);

impl PriceTable {
    /// The shipped table.
    pub fn shipped() -> Self {
        Self::default()
    }

    /// The shipped table with `json` (`{"m5.large": 0.107, ...}`) taking precedence.
    pub fn with_overrides(json: &str) -> Result<Self, InvalidPriceFile> {
        let overrides: HashMap<String, f64> =
            serde_json::from_str(json).map_err(InvalidPriceFile)?;
        Ok(Self { overrides })
    }

    /// The on-demand price of `instance_type`, if known: the price file's, else the region's
    /// live price (the Pricing API's, [`super::price_feed`]), else the shipped table's.
    pub fn on_demand_with(&self, live: &HashMap<String, f64>, instance_type: &str) -> Option<f64> {
        if let Some(price) = self.overrides.get(instance_type) {
            return Some(*price);
        }
        live.get(instance_type)
            .copied()
            .or_else(|| self.on_demand(instance_type))
    }

    /// The on-demand price of `instance_type`, if known.
    pub fn on_demand(&self, instance_type: &str) -> Option<f64> {
        if let Some(price) = self.overrides.get(instance_type) {
            return Some(*price);
        }
        if let Some((_, price)) = TYPES.iter().find(|(name, _)| *name == instance_type) {
            return Some(*price);
        }
        let (family, size) = instance_type.split_once('.')?;
        let (_, large) = FAMILIES.iter().find(|(name, _)| *name == family)?;
        let price = large * size_factor(size)?;
        // Four decimal places, as the price list gives them.
        Some((price * 10_000.0).round() / 10_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_scale_the_family_price_and_gpu_types_are_listed_one_by_one() {
        let table = PriceTable::shipped();
        assert_eq!(table.on_demand("m5.large"), Some(0.096));
        assert_eq!(table.on_demand("m5.xlarge"), Some(0.192));
        assert_eq!(table.on_demand("m5.24xlarge"), Some(4.608));
        assert_eq!(table.on_demand("t3.micro"), Some(0.0104));
        assert_eq!(table.on_demand("c6g.medium"), Some(0.034));
        assert_eq!(table.on_demand("g5.xlarge"), Some(1.006));
        assert_eq!(table.on_demand("m5.metal"), None);
        assert_eq!(table.on_demand("zz9.large"), None);
    }

    #[test]
    fn a_price_file_overrides_the_table() {
        let table = PriceTable::with_overrides(r#"{"m5.large": 0.107, "u-6tb1.56xlarge": 40.0}"#)
            .unwrap_or_default();
        assert_eq!(table.on_demand("m5.large"), Some(0.107));
        assert_eq!(table.on_demand("u-6tb1.56xlarge"), Some(40.0));
        assert_eq!(table.on_demand("m5.xlarge"), Some(0.192));
        assert!(PriceTable::with_overrides("[1]").is_err());
    }
}
