//! Compute Engine prices of the cluster's region from the Cloud Billing Catalog API, as the GCP
//! provider reads them (`pkg/providers/pricing/instanceprice/client.go`): every SKU of the
//! Compute Engine service (`services/6F81-5844-456A/skus`, USD), kept when it serves the region
//! and is billed `OnDemand` or `Preemptible` (spot); a machine family's per-vCPU and per-GiB
//! hourly rates come from its `… Instance Core` and `… Instance Ram` SKUs (spot ones start with
//! `Spot Preemptible `), and a machine type costs its vCPUs and memory at those rates, as GCE
//! bills predefined types.
//!
//! Refreshed with the machine type catalogue once 12 hours old, as upstream's AWS provider does
//! its Pricing API prices. A failed call or an answer without a rate for the region keeps the
//! last good rates (the shipped table, [`crate::cloud::gcp_prices`], until one succeeds), says
//! so in a warning and in `karpenter_cloudprovider_pricing_refreshes_total`; a SKU that does
//! not parse is skipped. Types the catalogue rates cannot price (GPU machines, whose GPUs are
//! billed apart; `f1-micro`, `g1-small`; families not listed in [`FAMILIES`]) keep the table's
//! price.
//!
//! Plain REST over reqwest, as `init gcp` reads GKE: the official `google-cloud-billing-v1`
//! crate is not in this build's registry.

use crate::cloud::CloudError;
use crate::cloud::gcp_prices::{self, Price};
use crate::cloud::last_good::{LastGood, Outcome};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// The Compute Engine service in the Cloud Billing Catalog.
pub(crate) const COMPUTE_SERVICE: &str = "services/6F81-5844-456A";

/// The Cloud Billing API's root.
const BILLING_ENDPOINT: &str = "https://cloudbilling.googleapis.com";

/// How old the rates may get before they are fetched again (upstream's 12 hours for prices).
pub(crate) const REFRESH: Duration = Duration::from_secs(12 * 3600);

/// The most SKUs one page may hold (the API's maximum and default).
const PAGE_SIZE: usize = 5000;

/// A GiB is this many GB: some RAM SKUs are priced per GB (`GBy.h`).
const GIB_PER_GB: f64 = 1.073_741_824;

/// Machine families and the description stems of their core and RAM SKUs (`{stem} Core
/// running in …`, `{stem} Ram running in …`). C2's SKUs are named by the family's old name,
/// with or without `Instance` depending on the region. GPU families are left out: their GPUs
/// are billed on SKUs of their own.
pub(crate) const FAMILIES: &[(&str, &[&str])] = &[
    ("e2", &["E2 Instance"]),
    ("n1", &["N1 Predefined Instance"]),
    ("n2", &["N2 Instance"]),
    ("n2d", &["N2D AMD Instance"]),
    ("n4", &["N4 Instance"]),
    ("n4d", &["N4D Instance"]),
    ("c2", &["Compute optimized", "Compute optimized Instance"]),
    ("c2d", &["C2D AMD Instance"]),
    ("c3", &["C3 Instance"]),
    ("c3d", &["C3D Instance"]),
    ("c4", &["C4 Instance"]),
    ("c4a", &["C4A Arm Instance"]),
    ("c4d", &["C4D Instance"]),
    ("t2a", &["T2A Arm Instance"]),
    ("t2d", &["T2D AMD Instance"]),
    ("m1", &["Memory-optimized Instance"]),
    ("m3", &["M3 Memory-optimized Instance"]),
    ("h3", &["H3 Instance"]),
    ("z3", &["Z3 Instance"]),
];

/// The vCPUs GCE bills a shared-core E2 type for (a fraction of the two it reports).
fn shared_core_vcpus(machine_type: &str) -> Option<f64> {
    match machine_type {
        "e2-micro" => Some(0.25),
        "e2-small" => Some(0.5),
        "e2-medium" => Some(1.0),
        _ => None,
    }
}

/// Hourly rates of one usage type.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Per vCPU-hour.
    pub vcpu: Option<f64>,
    /// Per GiB-hour.
    pub gib: Option<f64>,
}

impl Rates {
    fn cost(&self, vcpus: f64, gib: f64) -> Option<f64> {
        Some(vcpus * self.vcpu? + gib * self.gib?)
    }
}

/// A family's on-demand and spot rates.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FamilyRates {
    pub on_demand: Rates,
    pub spot: Rates,
}

/// The rates of one region's families, and how many SKUs were skipped as unreadable.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    pub families: HashMap<String, FamilyRates>,
    pub skipped: usize,
}

impl Parsed {
    /// The live price of a machine type, `None` where the rates cannot price it (see the module
    /// doc). Spot falls back to the shipped table's spot price where the region has no spot
    /// rate, then to the on-demand price.
    pub fn price(
        &self,
        machine_type: &str,
        vcpus: u64,
        memory_mib: u64,
        shared_cpu: bool,
        gpus: bool,
    ) -> Option<Price> {
        if gpus {
            return None;
        }
        let rates = self.families.get(gcp_prices::family(machine_type))?;
        #[allow(
            clippy::cast_precision_loss,
            reason = "vCPU and memory counts are far below 2^52"
        )]
        let (full_vcpus, gib) = (vcpus as f64, memory_mib as f64 / 1024.0);
        let billed_vcpus = if shared_cpu {
            shared_core_vcpus(machine_type)?
        } else {
            full_vcpus
        };
        let on_demand = rates.on_demand.cost(billed_vcpus, gib)?;
        let spot = rates
            .spot
            .cost(billed_vcpus, gib)
            .or_else(|| {
                // The discount is the same in every region; the table's region does not matter.
                gcp_prices::price(machine_type, vcpus, memory_mib, "us-central1")
                    .and_then(|p| (p.on_demand > 0.0).then(|| on_demand * p.spot / p.on_demand))
            })
            .unwrap_or(on_demand);
        Some(Price { on_demand, spot })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sku {
    description: String,
    category: Category,
    #[serde(default)]
    service_regions: Vec<String>,
    #[serde(default)]
    pricing_info: Vec<PricingInfo>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Category {
    #[serde(default)]
    usage_type: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PricingInfo {
    pricing_expression: PricingExpression,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PricingExpression {
    usage_unit: String,
    #[serde(default)]
    tiered_rates: Vec<TierRate>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TierRate {
    #[serde(default)]
    start_usage_amount: f64,
    unit_price: Money,
}

/// `google.type.Money`: `units` is an int64, so a JSON string on the wire.
#[derive(Deserialize)]
struct Money {
    #[serde(default)]
    units: Value,
    #[serde(default)]
    nanos: i64,
}

impl Money {
    fn amount(&self) -> Option<f64> {
        let units: i64 = match &self.units {
            Value::String(s) => s.parse().ok()?,
            Value::Number(n) => n.as_i64()?,
            Value::Null => 0,
            _ => return None,
        };
        #[allow(
            clippy::cast_precision_loss,
            reason = "prices are far below 2^52 dollars"
        )]
        let amount = units as f64 + nanos_f64(self.nanos);
        Some(amount)
    }
}

#[allow(
    clippy::cast_precision_loss,
    reason = "nanos are below 10^9, exact in an f64"
)]
fn nanos_f64(nanos: i64) -> f64 {
    nanos as f64 / 1e9
}

/// Which family and part a SKU description names: (family, is it the core rate).
fn family_of(description: &str) -> Option<(&'static str, bool)> {
    let description = description
        .strip_prefix("Spot Preemptible ")
        .unwrap_or(description);
    for (family, stems) in FAMILIES {
        for stem in *stems {
            let Some(rest) = description.strip_prefix(stem) else {
                continue;
            };
            if rest.starts_with(" Core running in") || rest == " Core" {
                return Some((family, true));
            }
            if rest.starts_with(" Ram running in") || rest == " Ram" {
                return Some((family, false));
            }
        }
    }
    None
}

/// The hourly base rate of a SKU, per vCPU or per GiB: the tier starting at zero usage.
fn hourly_rate(sku: &Sku) -> Option<f64> {
    let expression = &sku.pricing_info.first()?.pricing_expression;
    let tier = expression
        .tiered_rates
        .iter()
        .find(|t| t.start_usage_amount == 0.0)
        .or_else(|| expression.tiered_rates.first())?;
    let amount = tier.unit_price.amount()?;
    let rate = match expression.usage_unit.as_str() {
        "h" | "GiBy.h" => amount,
        "GBy.h" => amount * GIB_PER_GB,
        _ => return None,
    };
    (rate.is_finite() && rate > 0.0).then_some(rate)
}

/// Reads one page of SKUs into `into` for `region`. A SKU that does not parse, or whose rate
/// for a family is not a positive hourly price, is counted as skipped; SKUs of other regions,
/// usage types (commitments) or products (disks, GPUs, licences) are ignored. Where two SKUs
/// give a rate (a region's own and a broader one), the higher is kept, so a price is never
/// understated.
pub fn parse(skus: &[Value], region: &str, into: &mut Parsed) {
    for value in skus {
        let Ok(sku) = serde_json::from_value::<Sku>(value.clone()) else {
            into.skipped += 1;
            continue;
        };
        let spot = match sku.category.usage_type.as_str() {
            "OnDemand" => false,
            "Preemptible" => true,
            _ => continue,
        };
        if !sku.service_regions.iter().any(|r| r == region) {
            continue;
        }
        let Some((family, core)) = family_of(&sku.description) else {
            continue;
        };
        let Some(rate) = hourly_rate(&sku) else {
            into.skipped += 1;
            continue;
        };
        let rates = into.families.entry(family.to_owned()).or_default();
        let rates = if spot {
            &mut rates.spot
        } else {
            &mut rates.on_demand
        };
        let slot = if core {
            &mut rates.vcpu
        } else {
            &mut rates.gib
        };
        *slot = Some(slot.map_or(rate, |old| old.max(rate)));
    }
}

/// Who the catalog is asked as: Google with Application Default Credentials, or a test
/// endpoint without credentials.
#[derive(Clone, Debug)]
pub struct CatalogClient {
    http: reqwest::Client,
    endpoint: String,
    credentials: Option<google_cloud_auth::credentials::AccessTokenCredentials>,
}

/// A failed read of the catalog.
fn billing_error(detail: impl Into<String>) -> CloudError {
    let detail: Box<dyn std::error::Error + Send + Sync> = detail.into().into();
    CloudError::Api {
        action: "listing Compute Engine SKUs (Cloud Billing Catalog API)".to_owned(),
        source: detail,
    }
}

impl CatalogClient {
    /// A client for `endpoint` without credentials (tests), else Google's with ADC.
    pub fn new(endpoint: Option<&str>) -> Result<Self, CloudError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| billing_error(e.to_string()))?;
        let credentials = match endpoint {
            Some(_) => None,
            None => Some(
                google_cloud_auth::credentials::Builder::default()
                    .build_access_token_credentials()
                    .map_err(|e| billing_error(e.to_string()))?,
            ),
        };
        Ok(Self {
            http,
            endpoint: endpoint
                .unwrap_or(BILLING_ENDPOINT)
                .trim_end_matches('/')
                .to_owned(),
            credentials,
        })
    }

    /// Every Compute Engine SKU's rate for `region`, page by page.
    pub async fn fetch(&self, region: &str) -> Result<Parsed, CloudError> {
        let mut parsed = Parsed::default();
        let mut token = String::new();
        let url = format!("{}/v1/{COMPUTE_SERVICE}/skus", self.endpoint);
        loop {
            let mut request = self.http.get(&url).query(&[
                ("currencyCode", "USD"),
                ("pageSize", &PAGE_SIZE.to_string()),
                ("pageToken", &token),
            ]);
            if let Some(credentials) = &self.credentials {
                let token = credentials
                    .access_token()
                    .await
                    .map_err(|e| billing_error(e.to_string()))?;
                request = request.bearer_auth(token.token);
            }
            let response = request
                .send()
                .await
                .map_err(|e| billing_error(e.to_string()))?;
            let status = response.status();
            let body: Value = response
                .json()
                .await
                .map_err(|e| billing_error(format!("HTTP {status}: {e}")))?;
            if !status.is_success() {
                let message = body
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                return Err(billing_error(format!(
                    "HTTP {}: {message}",
                    status.as_u16()
                )));
            }
            let skus = body
                .get("skus")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            parse(skus, region, &mut parsed);
            match body.get("nextPageToken").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => token = next.to_owned(),
                _ => return Ok(parsed),
            }
        }
    }
}

/// The region's live rates, refreshed every [`REFRESH`].
pub(crate) struct PriceFeed {
    rates: LastGood<Parsed>,
}

impl Default for PriceFeed {
    fn default() -> Self {
        Self {
            rates: LastGood::new(REFRESH),
        }
    }
}

impl PriceFeed {
    /// The live rates (empty until a fetch succeeded).
    pub(crate) fn rates(&self) -> Arc<Parsed> {
        self.rates.current()
    }

    /// Counts each refresh in `metrics` (see [`LastGood::report_to`]).
    pub(crate) fn report_to(&self, metrics: Arc<crate::metrics::Metrics>) {
        self.rates.report_to(metrics);
    }

    /// Fetches the rates if they are due; on failure, or an answer without a rate for the
    /// region, the last good ones stay.
    pub(crate) async fn refresh_if_due(&self, client: &CatalogClient, region: &str) {
        if !self.rates.due() {
            return;
        }
        match client.fetch(region).await {
            Ok(parsed) if parsed.families.is_empty() => {
                self.rates.kept(Outcome::Empty);
                warn!(
                    region,
                    skipped = parsed.skipped,
                    "the Cloud Billing Catalog answered no Compute Engine rate for the region; keeping the last good prices"
                );
            }
            Ok(parsed) => {
                info!(
                    region,
                    families = parsed.families.len(),
                    skipped = parsed.skipped,
                    "Compute Engine prices updated from the Cloud Billing Catalog"
                );
                self.rates.update(parsed);
            }
            Err(error) => {
                self.rates.kept(Outcome::Failed);
                warn!(
                    region,
                    error = %error,
                    "Compute Engine prices could not be read from the Cloud Billing Catalog (is cloudbilling.googleapis.com enabled?); keeping the last good prices"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sku(description: &str, usage: &str, regions: &[&str], unit: &str, nanos: i64) -> Value {
        json!({
            "name": "services/6F81-5844-456A/skus/X", "skuId": "X", "description": description,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
                         "resourceGroup": "CPU", "usageType": usage},
            "serviceRegions": regions,
            "pricingInfo": [{"pricingExpression": {"usageUnit": unit, "displayQuantity": 1,
                "tieredRates": [{"startUsageAmount": 0, "unitPrice": {"currencyCode": "USD", "units": "0", "nanos": nanos}}]}}],
        })
    }

    #[test]
    fn a_family_costs_its_vcpus_and_memory_at_the_regions_rates() {
        let skus = vec![
            sku(
                "N2 Instance Core running in Americas",
                "OnDemand",
                &["us-central1"],
                "h",
                31_611_000,
            ),
            sku(
                "N2 Instance Ram running in Americas",
                "OnDemand",
                &["us-central1"],
                "GiBy.h",
                4_237_000,
            ),
            sku(
                "Spot Preemptible N2 Instance Core running in Americas",
                "Preemptible",
                &["us-central1"],
                "h",
                7_650_000,
            ),
            sku(
                "Spot Preemptible N2 Instance Ram running in Americas",
                "Preemptible",
                &["us-central1"],
                "GiBy.h",
                1_025_000,
            ),
            // Another region's, a commitment, a disk: none of them changes us-central1's rates.
            sku(
                "N2 Instance Core running in Belgium",
                "OnDemand",
                &["europe-west1"],
                "h",
                34_773_000,
            ),
            sku(
                "Commitment v1: N2 Cpu in Americas for 1 Year",
                "Commit1Yr",
                &["us-central1"],
                "h",
                19_915_000,
            ),
            sku(
                "Storage PD Capacity",
                "OnDemand",
                &["us-central1"],
                "GiBy.mo",
                40_000_000,
            ),
            // Unreadable: no category; a rate in an unknown unit.
            json!({"description": "N2 Instance Core running in Americas"}),
            sku(
                "N2D AMD Instance Core running in Americas",
                "OnDemand",
                &["us-central1"],
                "GiBy.mo",
                1,
            ),
        ];
        let mut parsed = Parsed::default();
        parse(&skus, "us-central1", &mut parsed);
        assert_eq!(parsed.skipped, 2);
        let price = parsed.price("n2-standard-4", 4, 16384, false, false);
        let on_demand = 4.0 * 0.031611 + 16.0 * 0.004237;
        let spot = 4.0 * 0.00765 + 16.0 * 0.001025;
        assert!(
            price.is_some_and(
                |p| (p.on_demand - on_demand).abs() < 1e-9 && (p.spot - spot).abs() < 1e-9
            ),
            "{price:?}"
        );
        // GPU machines and families without rates keep the shipped table's price.
        assert_eq!(parsed.price("n2-standard-4", 4, 16384, false, true), None);
        assert_eq!(parsed.price("c3-standard-4", 4, 16384, false, false), None);
    }

    #[test]
    fn shared_core_e2_is_billed_for_its_fraction_of_a_vcpu_and_ram_per_gb_is_made_per_gib() {
        let skus = vec![
            sku(
                "E2 Instance Core running in Americas",
                "OnDemand",
                &["us-central1"],
                "h",
                21_811_590,
            ),
            sku(
                "E2 Instance Ram running in Americas",
                "OnDemand",
                &["us-central1"],
                "GBy.h",
                2_723_000,
            ),
        ];
        let mut parsed = Parsed::default();
        parse(&skus, "us-central1", &mut parsed);
        let micro = parsed
            .price("e2-micro", 2, 1024, true, false)
            .map(|p| p.on_demand);
        let expected = 0.25 * 0.02181159 + 0.002723 * GIB_PER_GB;
        assert!(
            micro.is_some_and(|p| (p - expected).abs() < 1e-9),
            "{micro:?}"
        );
        // No spot rate in the answer: spot follows the table's discount for the type.
        let standard = parsed.price("e2-standard-2", 2, 8192, false, false);
        assert!(
            standard.is_some_and(|p| p.spot < p.on_demand),
            "{standard:?}"
        );
    }

    #[test]
    fn money_units_come_as_strings_or_numbers_and_garbage_is_skipped() {
        let mut parsed = Parsed::default();
        let mut whole = sku(
            "C3 Instance Core running in Americas",
            "OnDemand",
            &["us-central1"],
            "h",
            500_000_000,
        );
        whole["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]["units"] =
            json!(1);
        let mut garbage = whole.clone();
        garbage["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]["units"] =
            json!("one");
        parse(&[whole, garbage], "us-central1", &mut parsed);
        assert_eq!(parsed.skipped, 1);
        assert_eq!(
            parsed.families.get("c3").and_then(|r| r.on_demand.vcpu),
            Some(1.5)
        );
    }
}
