//! Compute Engine list prices, shipped with the binary: the Compute API has no prices. The gcp
//! provider prices from the Cloud Billing Catalog ([`crate::cloud::gcp::billing`]) where it can
//! and falls back on these (the API not enabled, no answer yet, GPU machines); `status`,
//! `simulate` and the kwok simulation's GCP shapes read them directly.
//!
//! First a generated table (`gcp_prices.json`, USD per hour, on-demand and spot per machine type
//! in each of 43 regions): `tests/upstream/gcp-prices` writes it from the table the GCP provider
//! for Karpenter embeds (`pkg/providers/pricing/initial-prices.json`, computed from the Cloud
//! Billing Catalog), and the file names the commit it came from. Never edited by hand.
//!
//! For a machine type or region that table lacks (custom machine types, a new family, a new
//! region), the family's per-vCPU and per-GB rates in `us-central1` (how GCE bills predefined
//! types) scaled by a per-region factor, with the family's typical spot discount. Approximate by
//! design: prices only rank offerings; the bill is Google's.

use serde::Deserialize;
use std::collections::HashMap;
use std::sync::LazyLock;

/// `gcp_prices.json`, as `tests/upstream/gcp-prices` writes it.
#[derive(Debug, Default, Deserialize)]
struct Shipped {
    /// The repository, commit and file the figures come from.
    source: String,
    regions: HashMap<String, RegionPrices>,
}

#[derive(Debug, Default, Deserialize)]
struct RegionPrices {
    on_demand: HashMap<String, f64>,
    spot: HashMap<String, f64>,
}

static SHIPPED: LazyLock<Shipped> = LazyLock::new(|| {
    // Generated and committed; `tests::the_generated_table_prices_every_region_on_demand_and_spot`
    // reads it, so an empty table here means a broken build, which that test catches.
    serde_json::from_str(include_str!("gcp_prices.json")).unwrap_or_default()
});

/// Where the generated table's figures come from, for a log line.
pub fn source() -> &'static str {
    &SHIPPED.source
}

/// Per-family rates in us-central1.
struct Family {
    name: &'static str,
    vcpu: f64,
    gb: f64,
    /// Spot price as a fraction of on-demand.
    spot: f64,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "e2",
        vcpu: 0.021811,
        gb: 0.002923,
        spot: 0.30,
    },
    Family {
        name: "n1",
        vcpu: 0.031611,
        gb: 0.004237,
        spot: 0.21,
    },
    Family {
        name: "n2",
        vcpu: 0.031611,
        gb: 0.004237,
        spot: 0.242,
    },
    Family {
        name: "n2d",
        vcpu: 0.027502,
        gb: 0.003686,
        spot: 0.242,
    },
    Family {
        name: "n4",
        vcpu: 0.030317,
        gb: 0.004061,
        spot: 0.40,
    },
    Family {
        name: "c2",
        vcpu: 0.03398,
        gb: 0.00455,
        spot: 0.24,
    },
    Family {
        name: "c2d",
        vcpu: 0.029563,
        gb: 0.003959,
        spot: 0.24,
    },
    Family {
        name: "c3",
        vcpu: 0.03465,
        gb: 0.00464,
        spot: 0.242,
    },
    Family {
        name: "c3d",
        vcpu: 0.029563,
        gb: 0.003959,
        spot: 0.242,
    },
    Family {
        name: "c4",
        vcpu: 0.03465,
        gb: 0.003938,
        spot: 0.40,
    },
    Family {
        name: "t2d",
        vcpu: 0.027502,
        gb: 0.003686,
        spot: 0.242,
    },
    Family {
        name: "t2a",
        vcpu: 0.0308,
        gb: 0.0019,
        spot: 0.30,
    },
    Family {
        name: "m1",
        vcpu: 0.0348,
        gb: 0.0051,
        spot: 0.30,
    },
    Family {
        name: "m3",
        vcpu: 0.04235,
        gb: 0.00567,
        spot: 0.30,
    },
];

/// Exact on-demand and spot prices in us-central1 for common types (shared-core E2s, which do
/// not follow the family rates, GPU shapes, and the shapes the kwok simulation offers).
const TYPES: &[(&str, f64, f64)] = &[
    ("e2-micro", 0.0084, 0.0025),
    ("e2-small", 0.0168, 0.0050),
    ("e2-medium", 0.0335, 0.0101),
    ("e2-standard-2", 0.0670, 0.0201),
    ("e2-standard-4", 0.1340, 0.0402),
    ("e2-standard-8", 0.2681, 0.0804),
    ("e2-standard-16", 0.5362, 0.1608),
    ("n2-standard-2", 0.0971, 0.0235),
    ("n2-standard-4", 0.1942, 0.0470),
    ("n2-standard-8", 0.3885, 0.0940),
    ("n2-standard-16", 0.7769, 0.1880),
    ("n2-highmem-2", 0.1310, 0.0317),
    ("n2-highmem-4", 0.2620, 0.0634),
    ("n2d-standard-2", 0.0845, 0.0204),
    ("n2d-standard-4", 0.1690, 0.0409),
    ("n2d-standard-8", 0.3380, 0.0818),
    ("c3-standard-4", 0.2086, 0.0505),
    ("c3-standard-8", 0.4172, 0.1010),
    ("t2a-standard-1", 0.0385, 0.0116),
    ("t2a-standard-2", 0.0770, 0.0231),
    ("t2a-standard-4", 0.1540, 0.0462),
    ("t2a-standard-8", 0.3080, 0.0924),
    ("g2-standard-4", 0.7068, 0.2828),
    ("g2-standard-8", 0.8536, 0.3414),
    ("g2-standard-12", 1.0004, 0.4002),
    ("g2-standard-16", 1.1472, 0.4589),
    ("g2-standard-24", 2.0008, 0.8003),
];

/// Region factors over us-central1 (regions not listed use 1.0).
const REGIONS: &[(&str, f64)] = &[
    ("us-central1", 1.0),
    ("us-east1", 1.0),
    ("us-west1", 1.0),
    ("us-east4", 1.126),
    ("us-east5", 1.0),
    ("us-south1", 1.18),
    ("us-west2", 1.2),
    ("us-west3", 1.2),
    ("us-west4", 1.126),
    ("northamerica-northeast1", 1.1),
    ("northamerica-northeast2", 1.1),
    ("southamerica-east1", 1.59),
    ("europe-west1", 1.1),
    ("europe-west2", 1.2),
    ("europe-west3", 1.2),
    ("europe-west4", 1.1),
    ("europe-west6", 1.32),
    ("europe-north1", 1.1),
    ("europe-central2", 1.29),
    ("asia-east1", 1.16),
    ("asia-east2", 1.4),
    ("asia-northeast1", 1.28),
    ("asia-northeast3", 1.28),
    ("asia-south1", 1.2),
    ("asia-southeast1", 1.23),
    ("australia-southeast1", 1.42),
];

/// The family of a machine type: the part before the first `-` (`n2d-standard-4` → `n2d`).
pub fn family(machine_type: &str) -> &str {
    machine_type.split('-').next().unwrap_or(machine_type)
}

fn region_factor(region: &str) -> f64 {
    REGIONS
        .iter()
        .find(|(r, _)| *r == region)
        .map_or(1.0, |(_, f)| *f)
}

/// Where a price came from, for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    pub on_demand: f64,
    pub spot: f64,
}

/// The on-demand and spot price per hour of `machine_type` (with `vcpus` and `memory_mib`) in
/// `region`: the generated table's, else from the family's rates; `None` for a family neither
/// knows.
pub fn price(machine_type: &str, vcpus: u64, memory_mib: u64, region: &str) -> Option<Price> {
    let rated = from_rates(machine_type, vcpus, memory_mib, region);
    let Some((table, &on_demand)) = SHIPPED
        .regions
        .get(region)
        .and_then(|t| Some((t, t.on_demand.get(machine_type)?)))
    else {
        return rated;
    };
    // A type with no spot price in the table gets its family's discount, or none.
    let spot = table.spot.get(machine_type).copied().unwrap_or_else(|| {
        rated
            .filter(|r| r.on_demand > 0.0)
            .map_or(on_demand, |r| on_demand * r.spot / r.on_demand)
    });
    Some(Price { on_demand, spot })
}

/// The generated table's price of `machine_type` in `region`, if it has one (`status` for nodes
/// nothing recorded a price for, where the type's shape is not at hand).
pub fn shipped(machine_type: &str, region: &str) -> Option<Price> {
    let table = SHIPPED.regions.get(region)?;
    let on_demand = *table.on_demand.get(machine_type)?;
    let spot = table.spot.get(machine_type).copied().unwrap_or(on_demand);
    Some(Price { on_demand, spot })
}

/// The price from the hand-kept family rates and region factors.
fn from_rates(machine_type: &str, vcpus: u64, memory_mib: u64, region: &str) -> Option<Price> {
    let factor = region_factor(region);
    if let Some((_, on_demand, spot)) = TYPES.iter().find(|(name, _, _)| *name == machine_type) {
        return Some(Price {
            on_demand: on_demand * factor,
            spot: spot * factor,
        });
    }
    let rates = FAMILIES.iter().find(|f| f.name == family(machine_type))?;
    #[allow(
        clippy::cast_precision_loss,
        reason = "vCPU and memory counts are far below 2^52"
    )]
    let on_demand = (vcpus as f64 * rates.vcpu + memory_mib as f64 / 1024.0 * rates.gb) * factor;
    Some(Price {
        on_demand,
        spot: on_demand * rates.spot,
    })
}

/// The price of a type the table lists exactly, in us-central1 (the kwok simulation's shapes).
pub fn listed(machine_type: &str) -> Option<Price> {
    TYPES
        .iter()
        .find(|(name, _, _)| *name == machine_type)
        .map(|(_, on_demand, spot)| Price {
            on_demand: *on_demand,
            spot: *spot,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_table_prices_every_region_on_demand_and_spot() {
        assert!(SHIPPED.regions.len() >= 40, "{}", SHIPPED.regions.len());
        for (region, table) in &SHIPPED.regions {
            assert!(table.on_demand.len() > 50, "{region}");
            assert!(
                table
                    .on_demand
                    .values()
                    .chain(table.spot.values())
                    .all(|p| *p > 0.0)
            );
        }
        assert!(source().contains("karpenter-provider-gcp@"));
        let e2 = price("e2-standard-2", 2, 8192, "us-central1");
        assert_eq!(e2.map(|p| p.on_demand), Some(0.06701142));
        assert!(e2.is_some_and(|p| p.spot < p.on_demand));
        // Each region has its own figures.
        let tokyo = price("n2d-standard-4", 4, 16384, "asia-northeast1").map(|p| p.on_demand);
        let iowa = price("n2d-standard-4", 4, 16384, "us-central1").map(|p| p.on_demand);
        assert!(tokyo > iowa, "{tokyo:?} vs {iowa:?}");
    }

    #[test]
    fn a_type_or_region_the_table_lacks_is_priced_from_its_family_rates() {
        // A custom machine type is in no table: 4 vCPUs and 16 GiB at N2's rates.
        let custom = price("n2-custom-4-16384", 4, 16384, "us-central1").map(|p| p.on_demand);
        let expected = 4.0 * 0.031611 + 16.0 * 0.004237;
        assert!(
            custom.is_some_and(|p| (p - expected).abs() < 1e-9),
            "{custom:?} vs {expected}"
        );
        // A region the table does not have yet: the rates, scaled by its factor if known.
        let new_region = price("n2-standard-32", 32, 131_072, "mars-north1").map(|p| p.on_demand);
        assert!(
            new_region.is_some_and(|p| (p - 16.0 * 0.0971).abs() < 0.01),
            "{new_region:?}"
        );
        assert_eq!(price("zz9-plural-1", 1, 1024, "us-central1"), None);
    }
}
