//! Service Usage v1 (`/v1/projects/{project}/services…`, `/v1/operations/{id}`): get a service,
//! list services (with `filter=state:ENABLED`), enable one or a batch, and poll the
//! long-running operation.
//!
//! Faithful to what the official client's poller needs (`cloud-test-servers.md` §2.4): enabling
//! answers a `google.longrunning.Operation` that is not done yet (done at once when the service
//! was already enabled), and the operation, once polled, is done with a `response` whose `@type`
//! is exactly `type.googleapis.com/google.api.serviceusage.v1.EnableServiceResponse` (or
//! `…BatchEnableServicesResponse`). Any `*.googleapis.com` service exists and starts DISABLED.

use crate::resourcemanager::project_number;
use crate::wire::{ApiResult, GoogleError, ok, parse_body, query, random_hex};
use crate::{Shared, lock};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State as Ext};
use axum::http::Uri;
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

const ENABLE_RESPONSE: &str =
    "type.googleapis.com/google.api.serviceusage.v1.EnableServiceResponse";
const BATCH_RESPONSE: &str =
    "type.googleapis.com/google.api.serviceusage.v1.BatchEnableServicesResponse";
const EMPTY: &str = "type.googleapis.com/google.protobuf.Empty";

/// Service Usage's part of the fake's state.
#[derive(Debug, Default)]
pub struct ServiceUsage {
    /// Enabled services as (project id, service name).
    pub enabled: BTreeSet<(String, String)>,
    /// Operations by name (`operations/acf.p2-…`): the finished operation a poll returns.
    pub operations: BTreeMap<String, Value>,
}

impl ServiceUsage {
    /// Whether `service` is enabled in `project`.
    pub fn is_enabled(&self, project: &str, service: &str) -> bool {
        self.enabled
            .contains(&(project.to_owned(), service.to_owned()))
    }
}

/// Service Usage's routes.
pub fn router() -> Router<Shared> {
    Router::new()
        .route("/v1/projects/{project}/services", get(list_services))
        .route("/v1/projects/{project}/services/{service}", get(get_service).post(service_action))
        // `services:batchEnable` is one path segment.
        .route("/v1/projects/{project}/{action}", post(project_action))
        .route("/v1/operations/{operation}", get(get_operation))
}

fn title(service: &str) -> String {
    match service {
        "compute.googleapis.com" => "Compute Engine API".to_owned(),
        "container.googleapis.com" => "Kubernetes Engine API".to_owned(),
        "iam.googleapis.com" => "Identity and Access Management (IAM) API".to_owned(),
        other => other.trim_end_matches(".googleapis.com").to_owned(),
    }
}

fn service_json(number: u64, service: &str, enabled: bool) -> Value {
    json!({
        "name": format!("projects/{number}/services/{service}"),
        "parent": format!("projects/{number}"),
        "config": {"name": service, "title": title(service)},
        "state": if enabled { "ENABLED" } else { "DISABLED" },
    })
}

fn check_service_name(service: &str) -> Result<(), GoogleError> {
    if service.ends_with(".googleapis.com") && !service.contains('/') {
        Ok(())
    } else {
        Err(GoogleError::not_found(format!(
            "Service {service} not found or permission denied."
        )))
    }
}

async fn list_services(
    Ext(state): Ext<Shared>,
    Path(project): Path<String>,
    uri: Uri,
) -> ApiResult {
    let state = lock(&state);
    state
        .resource_manager
        .denials
        .check("serviceusage.services.list", &format!("projects/{project}"))?;
    let number = project_number(&state, &project)?;
    // Only enabled services are listed: the fake does not know the catalogue of disabled ones.
    let _ = query(&uri).get("filter");
    let services: Vec<Value> = state
        .service_usage
        .enabled
        .iter()
        .filter(|(p, _)| *p == project)
        .map(|(_, s)| service_json(number, s, true))
        .collect();
    ok(if services.is_empty() {
        json!({})
    } else {
        json!({"services": services})
    })
}

async fn get_service(
    Ext(state): Ext<Shared>,
    Path((project, service)): Path<(String, String)>,
) -> ApiResult {
    let state = lock(&state);
    state.resource_manager.denials.check(
        "serviceusage.services.get",
        &format!("projects/{project}/services/{service}"),
    )?;
    let number = project_number(&state, &project)?;
    check_service_name(&service)?;
    ok(service_json(
        number,
        &service,
        state.service_usage.is_enabled(&project, &service),
    ))
}

fn operation_name(number: u64) -> String {
    format!(
        "operations/acf.p2-{number}-{}-{}-{}-{}-{}",
        random_hex(8),
        random_hex(4),
        random_hex(4),
        random_hex(4),
        random_hex(12)
    )
}

/// `POST …/services/{service}:enable`.
async fn service_action(
    Ext(state): Ext<Shared>,
    Path((project, target)): Path<(String, String)>,
) -> ApiResult {
    let Some((service, "enable")) = target.rsplit_once(':') else {
        return Err(GoogleError::not_found(format!(
            "The requested URL POST /v1/projects/{project}/services/{target} was not found on this server."
        )));
    };
    let mut state = lock(&state);
    state.resource_manager.denials.check(
        "serviceusage.services.enable",
        &format!("projects/{project}/services/{service}"),
    )?;
    let number = project_number(&state, &project)?;
    check_service_name(service)?;
    let was_enabled = !state
        .service_usage
        .enabled
        .insert((project.clone(), service.to_owned()));
    let name = operation_name(number);
    let done = json!({"name": name, "done": true, "response": {"@type": ENABLE_RESPONSE, "service": service_json(number, service, true)}});
    state
        .service_usage
        .operations
        .insert(name.clone(), done.clone());
    ok(if was_enabled {
        done
    } else {
        json!({"name": name, "metadata": {"@type": EMPTY}, "done": false})
    })
}

/// `POST /v1/projects/{project}/services:batchEnable` `{serviceIds: [...]}`.
async fn project_action(
    Ext(state): Ext<Shared>,
    Path((project, action)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    if action != "services:batchEnable" {
        return Err(GoogleError::not_found(format!(
            "The requested URL POST /v1/projects/{project}/{action} was not found on this server."
        )));
    }
    let mut state = lock(&state);
    state.resource_manager.denials.check(
        "serviceusage.services.enable",
        &format!("projects/{project}"),
    )?;
    let number = project_number(&state, &project)?;
    let request: Value = parse_body(&body)?;
    let ids: Vec<String> = request["serviceIds"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if ids.is_empty() || ids.len() > 20 {
        return Err(GoogleError::invalid(
            "serviceIds must name between 1 and 20 services.",
        ));
    }
    for id in &ids {
        check_service_name(id)?;
    }
    for id in &ids {
        state
            .service_usage
            .enabled
            .insert((project.clone(), id.clone()));
    }
    let name = operation_name(number);
    let services: Vec<Value> = ids
        .iter()
        .map(|id| service_json(number, id, true))
        .collect();
    let done = json!({"name": name, "done": true, "response": {"@type": BATCH_RESPONSE, "services": services}});
    state.service_usage.operations.insert(name.clone(), done);
    ok(json!({"name": name, "metadata": {"@type": EMPTY}, "done": false}))
}

async fn get_operation(Ext(state): Ext<Shared>, Path(operation): Path<String>) -> ApiResult {
    let state = lock(&state);
    let name = format!("operations/{operation}");
    state
        .service_usage
        .operations
        .get(&name)
        .cloned()
        .map_or_else(
            || {
                Err(GoogleError::not_found(format!(
                    "Operation {name} not found."
                )))
            },
            ok,
        )
}
