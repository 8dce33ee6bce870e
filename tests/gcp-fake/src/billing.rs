//! Cloud Billing Catalog v1: `GET /v1/services/{service}/skus`, the SKUs of a service with their
//! prices, as the agent's GCP provider reads the Compute Engine service's
//! (`services/6F81-5844-456A`). Tests seed SKUs with [`Billing::add_sku`] (or raw JSON into
//! [`Billing::skus`]).
//!
//! Shapes and refusals as Google documents them: a SKU has `name`, `skuId`, `description`,
//! `category` (`serviceDisplayName`, `resourceFamily`, `resourceGroup`, `usageType`),
//! `serviceRegions`, `pricingInfo[].pricingExpression` (`usageUnit`, `tieredRates[]` with a
//! `google.type.Money` `unitPrice` whose int64 `units` is a JSON string) and `geoTaxonomy`;
//! pages hold at most 5,000 SKUs and end with an empty `nextPageToken`. An unknown service is a
//! 404; a page token the server did not hand out, a page size below zero or a currency code that
//! is not three letters are 400 INVALID_ARGUMENT; with the API not enabled in the caller's
//! project ([`Billing::caller_project`], checked against Service Usage) the answer is Google's
//! 403 SERVICE_DISABLED.

use crate::wire::{ApiResult, GoogleError, ok, query};
use crate::{Shared, lock};
use axum::Router;
use axum::extract::{Path, State as Ext};
use axum::http::Uri;
use axum::routing::get;
use serde_json::{Value, json};

/// The Compute Engine service's ID in the catalog.
pub const COMPUTE_SERVICE_ID: &str = "6F81-5844-456A";

/// The catalog's most SKUs per page.
const MAX_PAGE: usize = 5000;

/// The Cloud Billing Catalog's part of the fake's state.
#[derive(Debug, Default)]
pub struct Billing {
    /// The Compute Engine service's SKUs, in the order pages return them.
    pub skus: Vec<Value>,
    /// The project calls are attributed to (a real caller's credentials carry it). When set,
    /// `cloudbilling.googleapis.com` must be enabled there, as Google requires.
    pub caller_project: Option<String>,
    /// Pages hold at most this many SKUs (0: the API's 5,000), so tests can see paging.
    pub page_limit: usize,
}

impl Billing {
    /// Adds a Compute Engine SKU as the catalog lists it: `usage_type` `OnDemand` or
    /// `Preemptible`, one region, a price of `usd` per `unit` (`h`, `GiBy.h`, `GBy.h`…).
    pub fn add_sku(
        &mut self,
        description: &str,
        usage_type: &str,
        region: &str,
        unit: &str,
        usd: f64,
    ) {
        let id = format!("{:04X}-{:04X}-{:04X}", self.skus.len(), 0xC0DE, 0xF00D);
        #[allow(clippy::cast_possible_truncation, reason = "test prices are small")]
        let units = usd.trunc() as i64;
        #[allow(clippy::cast_possible_truncation, reason = "below 10^9")]
        let nanos = ((usd - usd.trunc()) * 1e9).round() as i64;
        let group = if description.contains(" Core") {
            "CPU"
        } else if description.contains(" Ram") {
            "RAM"
        } else {
            "Other"
        };
        self.skus.push(json!({
            "name": format!("services/{COMPUTE_SERVICE_ID}/skus/{id}"),
            "skuId": id,
            "description": description,
            "category": {
                "serviceDisplayName": "Compute Engine",
                "resourceFamily": "Compute",
                "resourceGroup": group,
                "usageType": usage_type,
            },
            "serviceRegions": [region],
            "pricingInfo": [{
                "summary": "",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "tieredRates": [{
                        "startUsageAmount": 0,
                        "unitPrice": {"currencyCode": "USD", "units": units.to_string(), "nanos": nanos},
                    }],
                    "usageUnitDescription": unit,
                    "baseUnit": unit,
                    "baseUnitDescription": unit,
                    "baseUnitConversionFactor": 1,
                },
                "currencyConversionRate": 1,
                "effectiveTime": "2026-12-01T00:00:00Z",
            }],
            "serviceProviderName": "Google",
            "geoTaxonomy": {"type": "REGIONAL", "regions": [region]},
        }));
    }
}

/// The catalog's routes.
pub fn router() -> Router<Shared> {
    Router::new().route("/v1/services/{service}/skus", get(list_skus))
}

async fn list_skus(Ext(state): Ext<Shared>, Path(service): Path<String>, uri: Uri) -> ApiResult {
    let state = lock(&state);
    let billing = &state.billing;
    if let Some(project) = &billing.caller_project
        && !state
            .service_usage
            .is_enabled(project, "cloudbilling.googleapis.com")
    {
        return Err(GoogleError::new(
            403,
            "PERMISSION_DENIED",
            "SERVICE_DISABLED",
            format!(
                "Cloud Billing API has not been used in project {project} before or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/cloudbilling.googleapis.com/overview?project={project} then retry."
            ),
        ));
    }
    if service != COMPUTE_SERVICE_ID {
        return Err(GoogleError::not_found(format!(
            "Service services/{service} not found."
        )));
    }
    let params = query(&uri);
    if let Some(currency) = params.get("currencyCode")
        && (currency.len() != 3 || !currency.chars().all(|c| c.is_ascii_uppercase()))
    {
        return Err(GoogleError::invalid(format!(
            "Invalid currency code: {currency}"
        )));
    }
    let size = match params.get("pageSize").map(|s| s.parse::<i64>()) {
        None => MAX_PAGE,
        Some(Ok(n)) if n < 0 => {
            return Err(GoogleError::invalid("page_size must not be negative"));
        }
        Some(Ok(0)) => MAX_PAGE,
        Some(Ok(n)) => usize::try_from(n).unwrap_or(MAX_PAGE).min(MAX_PAGE),
        Some(Err(_)) => return Err(GoogleError::invalid("Invalid value for page_size")),
    };
    let size = if billing.page_limit > 0 {
        size.min(billing.page_limit)
    } else {
        size
    };
    let start = match params.get("pageToken").filter(|t| !t.is_empty()) {
        None => 0,
        Some(token) => token
            .strip_prefix("skus-from-")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= billing.skus.len())
            .ok_or_else(|| GoogleError::invalid("Invalid page token."))?,
    };
    let end = (start + size).min(billing.skus.len());
    let next = if end < billing.skus.len() {
        format!("skus-from-{end}")
    } else {
        String::new()
    };
    ok(json!({"skus": billing.skus[start..end], "nextPageToken": next}))
}
