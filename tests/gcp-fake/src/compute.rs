//! Compute Engine v1 (`/compute/v1/projects/{project}/…`): zones, machine types (per zone and
//! aggregated), images (by name and family), global instance templates (get, list), instances (insert, get, list and aggregated list with
//! label filters, delete, setLabels) and zone/region/global operations.
//!
//! Faithful to the points the provider depends on (`cloud-test-servers.md` §2.4): a failed
//! insert still answers with an Operation that finishes `DONE` with `error` (the Rust poller
//! returns `Ok` for it), a duplicate name is 409, an unknown machine type 400, a missing instance
//! or operation 404, `requestId` makes a retried insert return the first operation, and lists
//! honour `filter` on labels. Tests inject stockouts, quota errors and failing operations with
//! [`FaultRule`]s and preempt instances with [`Compute::preempt`].

use crate::wire::{
    self, ApiResult, COMPUTE_BASE, GoogleError, int64, last_segment, new_fingerprint,
    new_numeric_id, now_rfc3339, ok, parse_body, random_hex,
};
use crate::{Shared, lock};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State as Ext};
use axum::http::Uri;
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap};

/// Compute Engine's part of the fake's state.
#[derive(Debug, Default)]
pub struct Compute {
    /// Projects by id.
    pub projects: BTreeMap<String, Project>,
    /// Public and private images by the project that owns them (`cos-cloud`, `ubuntu-os-cloud`…).
    pub images: BTreeMap<String, Vec<Image>>,
    /// Faults applied to inserts, first match wins.
    pub faults: Vec<FaultRule>,
    /// How many GETs of a new operation answer RUNNING before it is DONE (0: DONE at once,
    /// which keeps tests fast; the Rust poller needs about a second per poll).
    pub operation_polls: u32,
    /// Page size of lists when the client sends no `maxResults` (GCE: 500); lower it to make
    /// clients page.
    pub page_size: Option<usize>,
    /// How long an insert waits before it is answered (a slow API: a client that times out or
    /// dies meanwhile must cope); none by default.
    pub insert_latency: Option<std::time::Duration>,
}

/// A project and what lives in it.
#[derive(Debug, Default)]
pub struct Project {
    pub number: u64,
    pub zones: BTreeMap<String, Zone>,
    /// Instances by (zone, name), as the API returns them.
    pub instances: BTreeMap<(String, String), Value>,
    /// Operations by name.
    pub operations: BTreeMap<String, Operation>,
    /// Global instance templates by name, as the API returns them (GKE keeps one per node pool).
    pub instance_templates: BTreeMap<String, Value>,
    /// requestId → operation name, for idempotent retries.
    pub request_ids: HashMap<String, String>,
}

/// A zone and the machine types it offers.
#[derive(Debug, Clone)]
pub struct Zone {
    pub region: String,
    /// `UP` or `DOWN`.
    pub status: String,
    pub machine_types: BTreeMap<String, MachineType>,
}

/// A machine type as seeded.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineType {
    pub name: String,
    pub guest_cpus: i32,
    pub memory_mb: i32,
    /// `X86_64` or `ARM64`.
    pub architecture: String,
    pub is_shared_cpu: bool,
    /// (accelerator type, count).
    pub accelerators: Vec<(String, i32)>,
}

impl MachineType {
    /// An x86 machine type without accelerators.
    pub fn new(name: &str, guest_cpus: i32, memory_mb: i32) -> Self {
        let architecture = if name.starts_with("t2a") || name.starts_with("c4a") {
            "ARM64"
        } else {
            "X86_64"
        };
        Self {
            name: name.to_owned(),
            guest_cpus,
            memory_mb,
            architecture: architecture.to_owned(),
            is_shared_cpu: name.starts_with("e2-micro")
                || name.starts_with("e2-small")
                || name.starts_with("e2-medium"),
            accelerators: Vec::new(),
        }
    }

    /// With `count` accelerators of `kind` (`nvidia-l4`).
    pub fn with_accelerator(mut self, kind: &str, count: i32) -> Self {
        self.accelerators.push((kind.to_owned(), count));
        self
    }
}

/// An image as seeded.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub name: String,
    pub family: Option<String>,
    pub id: u64,
    /// `X86_64` or `ARM64`.
    pub architecture: String,
    pub disk_size_gb: u64,
    /// Set for deprecated images, which `getFromFamily` skips.
    pub deprecated: bool,
}

impl Image {
    pub fn new(name: &str, family: Option<&str>, architecture: &str) -> Self {
        Self {
            name: name.to_owned(),
            family: family.map(str::to_owned),
            id: new_numeric_id(),
            architecture: architecture.to_owned(),
            disk_size_gb: 10,
            deprecated: false,
        }
    }
}

/// An operation, and what happens to the world when it finishes.
#[derive(Debug, Clone)]
pub struct Operation {
    /// The operation as it reads once DONE.
    pub done: Value,
    /// GETs left that answer RUNNING.
    pub polls_left: u32,
    effect: Effect,
}

#[derive(Debug, Clone)]
enum Effect {
    None,
    Running { zone: String, name: String },
    Remove { zone: String, name: String },
}

/// Which inserts a fault applies to; `None` matches anything.
#[derive(Debug, Clone)]
pub struct FaultRule {
    pub zone: Option<String>,
    pub machine_type: Option<String>,
    pub fault: Fault,
    /// How many more inserts it applies to; `None` for all.
    pub times: Option<u32>,
}

/// What goes wrong.
#[derive(Debug, Clone)]
pub enum Fault {
    /// The operation ends with `ZONE_RESOURCE_POOL_EXHAUSTED` (or `…_WITH_DETAILS`, HTTP 503).
    Stockout { with_details: bool },
    /// The operation ends with `QUOTA_EXCEEDED` for `metric` (HTTP 403).
    QuotaExceeded { metric: String },
    /// The operation ends with this error code.
    OperationError {
        code: String,
        message: String,
        http_status: u16,
    },
    /// The insert call itself fails with this error.
    Http(GoogleError),
}

impl Compute {
    /// Adds an empty project (no zones) if it is missing.
    pub fn add_project(&mut self, project: &str) -> &mut Project {
        self.projects
            .entry(project.to_owned())
            .or_insert_with(|| Project {
                number: rand::random_range(100_000_000_000u64..999_999_999_999),
                ..Default::default()
            })
    }

    /// Adds a zone (its region is the name without the last `-x`) to a project.
    pub fn add_zone(&mut self, project: &str, zone: &str) -> &mut Zone {
        let region = zone.rsplit_once('-').map_or(zone, |(r, _)| r).to_owned();
        self.add_project(project)
            .zones
            .entry(zone.to_owned())
            .or_insert_with(|| Zone {
                region,
                status: "UP".to_owned(),
                machine_types: BTreeMap::new(),
            })
    }

    /// Offers `machine_type` in a zone of a project (adding both if missing).
    pub fn add_machine_type(&mut self, project: &str, zone: &str, machine_type: MachineType) {
        self.add_zone(project, zone)
            .machine_types
            .insert(machine_type.name.clone(), machine_type);
    }

    /// Adds an image to an image project.
    pub fn add_image(&mut self, image_project: &str, image: Image) {
        self.images
            .entry(image_project.to_owned())
            .or_default()
            .push(image);
    }

    /// A project with zones `us-central1-a`, `-b`, `-c` and `-f` offering a spread of common
    /// machine types ([`default_machine_types`]) and the COS and Ubuntu images.
    pub fn seed_project(&mut self, project: &str) {
        for zone in [
            "us-central1-a",
            "us-central1-b",
            "us-central1-c",
            "us-central1-f",
        ] {
            for machine_type in default_machine_types() {
                self.add_machine_type(project, zone, machine_type);
            }
        }
        self.seed_public_images();
    }

    /// COS and Ubuntu images, x86 and Arm, one family each, and GKE's COS node images.
    pub fn seed_public_images(&mut self) {
        let images = [
            (
                "cos-cloud",
                "cos-stable-117-18613-0-79",
                "cos-stable",
                "X86_64",
            ),
            (
                "cos-cloud",
                "cos-arm64-stable-117-18613-0-79",
                "cos-arm64-stable",
                "ARM64",
            ),
            (
                "ubuntu-os-cloud",
                "ubuntu-2404-noble-amd64-v20241115",
                "ubuntu-2404-lts-amd64",
                "X86_64",
            ),
            (
                "ubuntu-os-cloud",
                "ubuntu-2404-noble-arm64-v20241115",
                "ubuntu-2404-lts-arm64",
                "ARM64",
            ),
            // GKE's own COS node images (no family: GKE names the one a node pool boots).
            (
                "gke-node-images",
                "gke-1334-gke1000000-cos-121-18867-90-4-c-pre",
                "",
                "X86_64",
            ),
            (
                "gke-node-images",
                "gke-1334-gke1000000-cos-arm64-121-18867-90-4-c-pre",
                "",
                "ARM64",
            ),
            (
                "ubuntu-os-gke-cloud",
                "ubuntu-gke-2404-1-33-amd64-v20241115",
                "ubuntu-gke-2404-1-33-amd64",
                "X86_64",
            ),
            (
                "ubuntu-os-gke-cloud",
                "ubuntu-gke-2404-1-33-arm64-v20241115",
                "ubuntu-gke-2404-1-33-arm64",
                "ARM64",
            ),
        ];
        for (owner, name, family, arch) in images {
            let known = self
                .images
                .get(owner)
                .is_some_and(|list| list.iter().any(|i| i.name == name));
            if !known {
                let family = Some(family).filter(|f| !f.is_empty());
                self.add_image(owner, Image::new(name, family, arch));
            }
        }
    }

    /// Adds a global instance template with these `properties` (an InstanceProperties body).
    pub fn add_instance_template(&mut self, project: &str, name: &str, properties: Value) {
        let value = json!({
            "kind": "compute#instanceTemplate",
            "id": int64(new_numeric_id()),
            "creationTimestamp": now_rfc3339(),
            "name": name,
            "properties": properties,
            "selfLink": format!("{}/global/instanceTemplates/{name}", project_url(project)),
        });
        self.add_project(project)
            .instance_templates
            .insert(name.to_owned(), value);
    }

    /// Inserts of `machine_type` in `zone` end in a stockout until the rule is removed.
    pub fn stockout(&mut self, zone: &str, machine_type: &str, with_details: bool) {
        self.faults.push(FaultRule {
            zone: Some(zone.to_owned()),
            machine_type: Some(machine_type.to_owned()),
            fault: Fault::Stockout { with_details },
            times: None,
        });
    }

    /// Inserts of `machine_type` (any zone, or `zone`) end with QUOTA_EXCEEDED for `metric`.
    pub fn quota_exceeded(&mut self, zone: Option<&str>, machine_type: Option<&str>, metric: &str) {
        self.faults.push(FaultRule {
            zone: zone.map(str::to_owned),
            machine_type: machine_type.map(str::to_owned),
            fault: Fault::QuotaExceeded {
                metric: metric.to_owned(),
            },
            times: None,
        });
    }

    /// The next insert (anywhere) ends with a failed DONE operation carrying `code`.
    pub fn fail_next_insert(&mut self, code: &str, message: &str, http_status: u16) {
        self.faults.push(FaultRule {
            zone: None,
            machine_type: None,
            fault: Fault::OperationError {
                code: code.to_owned(),
                message: message.to_owned(),
                http_status,
            },
            times: Some(1),
        });
    }

    /// The next `times` inserts (anywhere) are refused at once with HTTP 429
    /// `RESOURCE_EXHAUSTED`/`rateLimitExceeded`, as Compute refuses a request over its rate
    /// limit before doing anything.
    pub fn rate_limit_inserts(&mut self, times: u32) {
        self.faults.push(FaultRule {
            zone: None,
            machine_type: None,
            fault: Fault::Http(GoogleError::new(
                429,
                "RESOURCE_EXHAUSTED",
                "rateLimitExceeded",
                "Rate Limit Exceeded",
            )),
            times: Some(times),
        });
    }

    /// Removes every fault rule.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Flips an instance to `status` (`TERMINATED` or `STOPPED`), as a spot preemption does.
    /// Returns whether it existed.
    pub fn preempt(&mut self, project: &str, zone: &str, name: &str, status: &str) -> bool {
        let Some(instance) = self
            .projects
            .get_mut(project)
            .and_then(|p| p.instances.get_mut(&(zone.to_owned(), name.to_owned())))
        else {
            return false;
        };
        instance["status"] = json!(status);
        instance["lastStopTimestamp"] = json!(now_rfc3339());
        true
    }

    /// Removes an instance without an operation (a preempted spot VM with termination action DELETE).
    pub fn remove_instance(&mut self, project: &str, zone: &str, name: &str) -> Option<Value> {
        self.projects
            .get_mut(project)?
            .instances
            .remove(&(zone.to_owned(), name.to_owned()))
    }

    /// Every instance of a project, as the API returns them, by zone then name.
    pub fn instances(&self, project: &str) -> Vec<Value> {
        self.projects
            .get(project)
            .map(|p| p.instances.values().cloned().collect())
            .unwrap_or_default()
    }

    /// One instance, as the API returns it.
    pub fn instance(&self, project: &str, zone: &str, name: &str) -> Option<Value> {
        self.projects
            .get(project)?
            .instances
            .get(&(zone.to_owned(), name.to_owned()))
            .cloned()
    }

    fn take_fault(&mut self, zone: &str, machine_type: &str) -> Option<Fault> {
        let index = self.faults.iter().position(|rule| {
            rule.zone.as_deref().is_none_or(|z| z == zone)
                && rule
                    .machine_type
                    .as_deref()
                    .is_none_or(|m| m == machine_type)
                && rule.times != Some(0)
        })?;
        let rule = &mut self.faults[index];
        let fault = rule.fault.clone();
        if let Some(times) = rule.times.as_mut() {
            *times -= 1;
            if *times == 0 {
                self.faults.remove(index);
            }
        }
        Some(fault)
    }
}

/// A spread of real machine shapes: e2, n2, n2d, c3, t2a, t2d and g2 (one L4 GPU).
pub fn default_machine_types() -> Vec<MachineType> {
    let mut out = vec![
        MachineType::new("e2-medium", 2, 4096),
        MachineType::new("e2-standard-2", 2, 8192),
        MachineType::new("e2-standard-4", 4, 16384),
        MachineType::new("e2-standard-8", 8, 32768),
        MachineType::new("e2-highmem-2", 2, 16384),
        MachineType::new("e2-highcpu-4", 4, 4096),
        MachineType::new("n2-standard-2", 2, 8192),
        MachineType::new("n2-standard-4", 4, 16384),
        MachineType::new("n2-standard-8", 8, 32768),
        MachineType::new("n2-highmem-4", 4, 32768),
        MachineType::new("n2d-standard-2", 2, 8192),
        MachineType::new("n2d-standard-4", 4, 16384),
        MachineType::new("c3-standard-4", 4, 16384),
        MachineType::new("c3-standard-8", 8, 32768),
        MachineType::new("t2a-standard-2", 2, 8192),
        MachineType::new("t2a-standard-4", 4, 16384),
        MachineType::new("t2d-standard-2", 2, 8192),
        MachineType::new("t2d-standard-4", 4, 16384),
    ];
    out.push(MachineType::new("g2-standard-4", 4, 16384).with_accelerator("nvidia-l4", 1));
    out
}

/// The Compute Engine routes.
pub fn router() -> Router<Shared> {
    const P: &str = "/compute/v1/projects/{project}";
    Router::new()
        .route(&format!("{P}/zones"), get(list_zones))
        .route(&format!("{P}/zones/{{zone}}"), get(get_zone))
        .route(
            &format!("{P}/zones/{{zone}}/machineTypes"),
            get(list_machine_types),
        )
        .route(
            &format!("{P}/zones/{{zone}}/machineTypes/{{name}}"),
            get(get_machine_type),
        )
        .route(
            &format!("{P}/aggregated/machineTypes"),
            get(aggregated_machine_types),
        )
        .route(&format!("{P}/global/images"), get(list_images))
        .route(&format!("{P}/global/images/{{name}}"), get(get_image))
        .route(
            &format!("{P}/global/images/family/{{family}}"),
            get(get_image_from_family),
        )
        .route(
            &format!("{P}/global/instanceTemplates"),
            get(list_instance_templates),
        )
        .route(
            &format!("{P}/global/instanceTemplates/{{name}}"),
            get(get_instance_template),
        )
        .route(
            &format!("{P}/zones/{{zone}}/instances"),
            get(list_instances).post(insert_instance),
        )
        .route(
            &format!("{P}/zones/{{zone}}/instances/{{name}}"),
            get(get_instance).delete(delete_instance),
        )
        .route(
            &format!("{P}/zones/{{zone}}/instances/{{name}}/setLabels"),
            post(set_labels),
        )
        .route(
            &format!("{P}/aggregated/instances"),
            get(aggregated_instances),
        )
        .route(
            &format!("{P}/zones/{{zone}}/operations/{{operation}}"),
            get(get_zone_operation),
        )
        .route(
            &format!("{P}/zones/{{zone}}/operations/{{operation}}/wait"),
            post(wait_zone_operation),
        )
        .route(
            &format!("{P}/regions/{{region}}/operations/{{operation}}"),
            get(get_other_operation),
        )
        .route(
            &format!("{P}/global/operations/{{operation}}"),
            get(get_global_operation),
        )
}

fn project_url(project: &str) -> String {
    format!("{COMPUTE_BASE}/projects/{project}")
}

fn zone_url(project: &str, zone: &str) -> String {
    format!("{}/zones/{zone}", project_url(project))
}

fn project_not_found(project: &str) -> GoogleError {
    GoogleError::not_found(format!("The resource 'projects/{project}' was not found"))
}

fn zone_not_found(project: &str, zone: &str) -> GoogleError {
    GoogleError::not_found(format!(
        "The resource 'projects/{project}/zones/{zone}' was not found"
    ))
}

fn project<'a>(compute: &'a Compute, project: &str) -> Result<&'a Project, GoogleError> {
    compute
        .projects
        .get(project)
        .ok_or_else(|| project_not_found(project))
}

fn project_mut<'a>(
    compute: &'a mut Compute,
    project: &str,
) -> Result<&'a mut Project, GoogleError> {
    compute
        .projects
        .get_mut(project)
        .ok_or_else(|| project_not_found(project))
}

// ---- zones and machine types ----

fn zone_json(project: &str, name: &str, zone: &Zone, id: usize) -> Value {
    json!({
        "kind": "compute#zone",
        "id": int64(2000 + id as u64),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": name,
        "description": name,
        "status": zone.status,
        "region": format!("{}/regions/{}", project_url(project), zone.region),
        "selfLink": zone_url(project, name),
        "availableCpuPlatforms": ["Intel Sapphire Rapids", "Intel Cascade Lake", "AMD Milan", "Ampere Altra"],
        "supportsPzs": false,
    })
}

fn machine_type_json(project: &str, zone: &str, mt: &MachineType) -> Value {
    let mut value = json!({
        "kind": "compute#machineType",
        "id": int64(800_000 + u64::try_from(mt.guest_cpus).unwrap_or(0) * 1000 + u64::try_from(mt.memory_mb).unwrap_or(0) / 1024),
        "creationTimestamp": "1969-12-31T16:00:00.000-08:00",
        "name": mt.name,
        "description": format!("{} vCPUs, {} GB RAM", mt.guest_cpus, mt.memory_mb / 1024),
        "guestCpus": mt.guest_cpus,
        "memoryMb": mt.memory_mb,
        "imageSpaceGb": 0,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": int64(263_168),
        "zone": zone,
        "selfLink": format!("{}/machineTypes/{}", zone_url(project, zone), mt.name),
        "isSharedCpu": mt.is_shared_cpu,
        "architecture": mt.architecture,
    });
    if !mt.accelerators.is_empty() {
        value["accelerators"] = mt
            .accelerators
            .iter()
            .map(|(kind, count)| json!({"guestAcceleratorType": kind, "guestAcceleratorCount": count}))
            .collect();
    }
    value
}

async fn list_zones(Ext(state): Ext<Shared>, Path(p): Path<String>, uri: Uri) -> ApiResult {
    let state = lock(&state);
    let proj = project(&state.compute, &p)?;
    let items: Vec<Value> = proj
        .zones
        .iter()
        .enumerate()
        .map(|(i, (name, zone))| zone_json(&p, name, zone, i))
        .collect();
    let items = filter_items(items, &wire::query(&uri))?;
    ok(
        json!({"kind": "compute#zoneList", "id": format!("projects/{p}/zones"), "items": items,
        "selfLink": format!("{}/zones", project_url(&p))}),
    )
}

async fn get_zone(Ext(state): Ext<Shared>, Path((p, z)): Path<(String, String)>) -> ApiResult {
    let state = lock(&state);
    let proj = project(&state.compute, &p)?;
    let (index, zone) = proj
        .zones
        .iter()
        .enumerate()
        .find_map(|(i, (name, zone))| (*name == z).then_some((i, zone)))
        .ok_or_else(|| zone_not_found(&p, &z))?;
    ok(zone_json(&p, &z, zone, index))
}

async fn list_machine_types(
    Ext(state): Ext<Shared>,
    Path((p, z)): Path<(String, String)>,
    uri: Uri,
) -> ApiResult {
    let state = lock(&state);
    let zone = project(&state.compute, &p)?
        .zones
        .get(&z)
        .ok_or_else(|| zone_not_found(&p, &z))?;
    let items: Vec<Value> = zone
        .machine_types
        .values()
        .map(|mt| machine_type_json(&p, &z, mt))
        .collect();
    let query = wire::query(&uri);
    let items = filter_items(items, &query)?;
    let (page, next) = paginate(items, &query, state.compute.page_size)?;
    let mut body = json!({"kind": "compute#machineTypeList", "id": format!("projects/{p}/zones/{z}/machineTypes"),
        "items": page, "selfLink": format!("{}/machineTypes", zone_url(&p, &z))});
    if let Some(next) = next {
        body["nextPageToken"] = json!(next);
    }
    ok(body)
}

async fn get_machine_type(
    Ext(state): Ext<Shared>,
    Path((p, z, name)): Path<(String, String, String)>,
) -> ApiResult {
    let state = lock(&state);
    let zone = project(&state.compute, &p)?
        .zones
        .get(&z)
        .ok_or_else(|| zone_not_found(&p, &z))?;
    let mt = zone.machine_types.get(&name).ok_or_else(|| {
        GoogleError::not_found(format!(
            "The resource 'projects/{p}/zones/{z}/machineTypes/{name}' was not found"
        ))
    })?;
    ok(machine_type_json(&p, &z, mt))
}

async fn aggregated_machine_types(
    Ext(state): Ext<Shared>,
    Path(p): Path<String>,
    uri: Uri,
) -> ApiResult {
    let state = lock(&state);
    let proj = project(&state.compute, &p)?;
    let p = p.as_str();
    let scoped: Vec<(String, Value)> = proj
        .zones
        .iter()
        .flat_map(|(z, zone)| {
            zone.machine_types
                .values()
                .map(move |mt| (z.clone(), machine_type_json(p, z, mt)))
        })
        .collect();
    let zones: Vec<String> = proj.zones.keys().cloned().collect();
    aggregated(
        "compute#machineTypeAggregatedList",
        "machineTypes",
        p,
        &zones,
        scoped,
        &wire::query(&uri),
        state.compute.page_size,
    )
}

// ---- images ----

fn image_json(owner: &str, image: &Image) -> Value {
    let mut value = json!({
        "kind": "compute#image",
        "id": int64(image.id),
        "creationTimestamp": "2024-11-15T00:00:00.000-08:00",
        "name": image.name,
        "status": "READY",
        "architecture": image.architecture,
        "diskSizeGb": int64(image.disk_size_gb),
        "sourceType": "RAW",
        "selfLink": format!("{}/global/images/{}", project_url(owner), image.name),
    });
    if let Some(family) = &image.family {
        value["family"] = json!(family);
    }
    if image.deprecated {
        value["deprecated"] = json!({"state": "DEPRECATED"});
    }
    value
}

fn image_not_found(owner: &str, what: &str) -> GoogleError {
    GoogleError::not_found(format!(
        "The resource 'projects/{owner}/global/images/{what}' was not found"
    ))
}

async fn list_images(Ext(state): Ext<Shared>, Path(owner): Path<String>, uri: Uri) -> ApiResult {
    let state = lock(&state);
    let items: Vec<Value> = state
        .compute
        .images
        .get(&owner)
        .map(|list| list.iter().map(|i| image_json(&owner, i)).collect())
        .unwrap_or_default();
    let query = wire::query(&uri);
    let items = filter_items(items, &query)?;
    let (page, next) = paginate(items, &query, state.compute.page_size)?;
    let mut body = json!({"kind": "compute#imageList", "id": format!("projects/{owner}/global/images"), "items": page,
        "selfLink": format!("{}/global/images", project_url(&owner))});
    if let Some(next) = next {
        body["nextPageToken"] = json!(next);
    }
    ok(body)
}

async fn get_image(
    Ext(state): Ext<Shared>,
    Path((owner, name)): Path<(String, String)>,
) -> ApiResult {
    let state = lock(&state);
    let image = state
        .compute
        .images
        .get(&owner)
        .and_then(|list| list.iter().find(|i| i.name == name))
        .ok_or_else(|| image_not_found(&owner, &name))?;
    ok(image_json(&owner, image))
}

async fn get_image_from_family(
    Ext(state): Ext<Shared>,
    Path((owner, family)): Path<(String, String)>,
) -> ApiResult {
    let state = lock(&state);
    let image = state
        .compute
        .images
        .get(&owner)
        .and_then(|list| {
            list.iter()
                .rev()
                .find(|i| !i.deprecated && i.family.as_deref() == Some(family.as_str()))
        })
        .ok_or_else(|| image_not_found(&owner, &format!("family/{family}")))?;
    ok(image_json(&owner, image))
}

// ---- instance templates ----

async fn list_instance_templates(
    Ext(state): Ext<Shared>,
    Path(p): Path<String>,
    uri: Uri,
) -> ApiResult {
    let state = lock(&state);
    let items: Vec<Value> = project(&state.compute, &p)?
        .instance_templates
        .values()
        .cloned()
        .collect();
    let query = wire::query(&uri);
    let items = filter_items(items, &query)?;
    let (page, next) = paginate(items, &query, state.compute.page_size)?;
    let mut body = json!({"kind": "compute#instanceTemplateList", "id": format!("projects/{p}/global/instanceTemplates"),
        "items": page, "selfLink": format!("{}/global/instanceTemplates", project_url(&p))});
    if let Some(next) = next {
        body["nextPageToken"] = json!(next);
    }
    ok(body)
}

async fn get_instance_template(
    Ext(state): Ext<Shared>,
    Path((p, name)): Path<(String, String)>,
) -> ApiResult {
    let state = lock(&state);
    let template = project(&state.compute, &p)?
        .instance_templates
        .get(&name)
        .cloned()
        .ok_or_else(|| {
            GoogleError::not_found(format!(
                "The resource 'projects/{p}/global/instanceTemplates/{name}' was not found"
            ))
        })?;
    ok(template)
}

// ---- instances ----

/// GCE's resource name rule: `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`.
pub fn valid_resource_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.last().is_some_and(|b| *b != b'-')
}

/// GCE's label rules: keys start with a lowercase letter; keys and values are at most 63
/// characters of lowercase letters, digits, `_` and `-`.
pub fn label_problem(key: &str, value: &str) -> Option<String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
    if key.is_empty()
        || !key.starts_with(|c: char| c.is_ascii_lowercase())
        || key.len() > 63
        || !key.chars().all(ok_char)
    {
        return Some(format!(
            "Invalid value for field 'resource.labels': label key '{key}' violates format constraints"
        ));
    }
    if value.len() > 63 || !value.chars().all(ok_char) {
        return Some(format!(
            "Invalid value for field 'resource.labels': label value '{value}' violates format constraints"
        ));
    }
    None
}

fn check_labels(labels: Option<&Value>) -> Result<(), GoogleError> {
    let Some(labels) = labels else { return Ok(()) };
    let Some(map) = labels.as_object() else {
        return Err(GoogleError::invalid(
            "Invalid value for field 'resource.labels': must be a map",
        ));
    };
    if map.len() > 64 {
        return Err(GoogleError::invalid(
            "Invalid value for field 'resource.labels': at most 64 labels",
        ));
    }
    for (key, value) in map {
        let value = value.as_str().unwrap_or("\u{0}");
        if let Some(problem) = label_problem(key, value) {
            return Err(GoogleError::invalid(problem));
        }
    }
    Ok(())
}

async fn insert_instance(
    Ext(state): Ext<Shared>,
    Path((p, z)): Path<(String, String)>,
    uri: Uri,
    body: Bytes,
) -> ApiResult {
    let mut body: Map<String, Value> = parse_body(&body)?;
    let request_id = wire::query(&uri).remove("requestId");
    let latency = lock(&state).compute.insert_latency;
    if let Some(latency) = latency {
        tokio::time::sleep(latency).await;
    }
    let mut state = lock(&state);
    let compute = &mut state.compute;
    let polls = compute.operation_polls;
    {
        let proj = project(compute, &p)?;
        if let Some(op) = request_id
            .as_ref()
            .and_then(|id| proj.request_ids.get(id))
            .and_then(|n| proj.operations.get(n))
        {
            return ok(operation_view(op));
        }
    }
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !valid_resource_name(&name) {
        return Err(GoogleError::invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        )));
    }
    let zone = project(compute, &p)?.zones.get(&z).ok_or_else(|| {
        GoogleError::invalid(format!(
            "Invalid value for field 'zone': '{z}'. Unknown zone."
        ))
    })?;
    let machine_type_field = body
        .get("machineType")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let machine_type = last_segment(&machine_type_field).to_owned();
    if !zone.machine_types.contains_key(&machine_type) {
        return Err(GoogleError::invalid(format!(
            "Invalid value for field 'resource.machineType': '{machine_type_field}'. Machine type with name '{machine_type}' does not exist in zone '{z}'."
        )));
    }
    check_labels(body.get("labels"))?;
    check_images(compute, &body)?;
    if project(compute, &p)?
        .instances
        .contains_key(&(z.clone(), name.clone()))
    {
        return Err(GoogleError::already_exists(format!(
            "The resource 'projects/{p}/zones/{z}/instances/{name}' already exists"
        )));
    }
    let fault = compute.take_fault(&z, &machine_type);
    if let Some(Fault::Http(error)) = fault {
        return Err(error);
    }

    let instance_id = new_numeric_id();
    let target = format!("{}/instances/{name}", zone_url(&p, &z));
    complete_instance(&mut body, &p, &z, &machine_type, instance_id, polls > 0);
    let error = fault.map(|f| operation_error(f, &p, &z, &machine_type));
    let effect = match (&error, polls) {
        (Some(_), _) => Effect::Remove {
            zone: z.clone(),
            name: name.clone(),
        },
        (None, 0) => Effect::None,
        (None, _) => Effect::Running {
            zone: z.clone(),
            name: name.clone(),
        },
    };
    // A stocked-out instance shows up briefly (while its operation runs), then is gone.
    let create = error.is_none() || polls > 0;
    let op = new_operation(
        &p,
        Some(&z),
        "insert",
        &target,
        instance_id,
        error,
        polls,
        effect,
    );
    let op_name = op.done["name"].as_str().unwrap_or_default().to_owned();
    let proj = project_mut(compute, &p)?;
    if create {
        proj.instances
            .insert((z.clone(), name), Value::Object(body));
    }
    if let Some(id) = request_id {
        proj.request_ids.insert(id, op_name.clone());
    }
    let view = operation_view(&op);
    proj.operations.insert(op_name, op);
    ok(view)
}

/// Checks that every `initializeParams.sourceImage` names an image the fake knows.
fn check_images(compute: &Compute, body: &Map<String, Value>) -> Result<(), GoogleError> {
    for disk in body
        .get("disks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(source) = disk
            .pointer("/initializeParams/sourceImage")
            .and_then(Value::as_str)
        else {
            continue;
        };
        let path = source
            .split("/projects/")
            .nth(1)
            .map_or(source, |rest| rest);
        let path = path.strip_prefix("projects/").unwrap_or(path);
        let parts: Vec<&str> = path.split('/').collect();
        let found = match parts.as_slice() {
            [owner, "global", "images", "family", family] => {
                compute.images.get(*owner).is_some_and(|l| {
                    l.iter()
                        .any(|i| !i.deprecated && i.family.as_deref() == Some(*family))
                })
            }
            [owner, "global", "images", name] => compute
                .images
                .get(*owner)
                .is_some_and(|l| l.iter().any(|i| i.name == *name)),
            _ => false,
        };
        if !found {
            return Err(GoogleError::not_found(format!(
                "The resource '{source}' was not found"
            )));
        }
    }
    Ok(())
}

/// Fills in what GCE adds to an inserted instance.
fn complete_instance(
    body: &mut Map<String, Value>,
    p: &str,
    z: &str,
    machine_type: &str,
    id: u64,
    provisioning: bool,
) {
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let zone = zone_url(p, z);
    body.insert("kind".into(), json!("compute#instance"));
    body.insert("id".into(), int64(id));
    body.insert("creationTimestamp".into(), json!(now_rfc3339()));
    body.insert("zone".into(), json!(zone));
    body.insert(
        "machineType".into(),
        json!(format!("{zone}/machineTypes/{machine_type}")),
    );
    body.insert(
        "status".into(),
        json!(if provisioning {
            "PROVISIONING"
        } else {
            "RUNNING"
        }),
    );
    body.insert("selfLink".into(), json!(format!("{zone}/instances/{name}")));
    body.insert("labelFingerprint".into(), json!(new_fingerprint()));
    body.insert("cpuPlatform".into(), json!("Intel Cascade Lake"));
    body.insert("fingerprint".into(), json!(new_fingerprint()));
    let metadata = body.entry("metadata").or_insert_with(|| json!({}));
    metadata["kind"] = json!("compute#metadata");
    metadata["fingerprint"] = json!(new_fingerprint());
    let scheduling = body.entry("scheduling").or_insert_with(|| json!({}));
    let spot = scheduling.get("provisioningModel").and_then(Value::as_str) == Some("SPOT")
        || scheduling.get("preemptible").and_then(Value::as_bool) == Some(true);
    if scheduling.get("provisioningModel").is_none() {
        scheduling["provisioningModel"] = json!(if spot { "SPOT" } else { "STANDARD" });
    }
    scheduling["preemptible"] = json!(spot);
    if scheduling.get("onHostMaintenance").is_none() {
        scheduling["onHostMaintenance"] = json!(if spot { "TERMINATE" } else { "MIGRATE" });
    }
    if scheduling.get("automaticRestart").is_none() {
        scheduling["automaticRestart"] = json!(!spot);
    }
    if let Some(interfaces) = body
        .get_mut("networkInterfaces")
        .and_then(Value::as_array_mut)
    {
        for (i, nic) in interfaces.iter_mut().enumerate() {
            nic["kind"] = json!("compute#networkInterface");
            nic["name"] = json!(format!("nic{i}"));
            nic["networkIP"] = json!(format!(
                "10.128.{}.{}",
                rand::random_range(0..255u8),
                rand::random_range(2..255u8)
            ));
            if nic.get("network").is_none() {
                nic["network"] = json!(format!("{}/global/networks/default", project_url(p)));
            }
            // An external address, as GCE gives every one-to-one NAT access config without one.
            if let Some(configs) = nic.get_mut("accessConfigs").and_then(Value::as_array_mut) {
                for config in configs {
                    if config.get("natIP").is_none() {
                        config["natIP"] = json!(format!(
                            "34.{}.{}.{}",
                            rand::random_range(0..255u8),
                            rand::random_range(0..255u8),
                            rand::random_range(2..255u8)
                        ));
                    }
                }
            }
        }
    }
    if let Some(disks) = body.get_mut("disks").and_then(Value::as_array_mut) {
        for (i, disk) in disks.iter_mut().enumerate() {
            let size = disk
                .pointer("/initializeParams/diskSizeGb")
                .and_then(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .or_else(|| v.as_u64().map(|n| n.to_string()))
                })
                .unwrap_or_else(|| "10".to_owned());
            let device = disk.get("deviceName").and_then(Value::as_str).map_or_else(
                || {
                    if i == 0 {
                        name.clone()
                    } else {
                        format!("{name}-{i}")
                    }
                },
                str::to_owned,
            );
            disk["kind"] = json!("compute#attachedDisk");
            disk["index"] = json!(i);
            disk["deviceName"] = json!(device);
            disk["diskSizeGb"] = json!(size);
            disk["source"] = json!(format!("{zone}/disks/{device}"));
            if disk.get("type").is_none() {
                disk["type"] = json!("PERSISTENT");
            }
            if disk.get("mode").is_none() {
                disk["mode"] = json!("READ_WRITE");
            }
        }
    }
}

fn operation_error(
    fault: Fault,
    p: &str,
    z: &str,
    machine_type: &str,
) -> (Value, u16, &'static str) {
    match fault {
        Fault::Stockout {
            with_details: false,
        } => (
            json!({"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED",
                "message": format!("The zone 'projects/{p}/zones/{z}' does not have enough resources available to fulfill the request.  Try a different zone, or try again later.")}]}),
            503,
            "SERVICE UNAVAILABLE",
        ),
        Fault::Stockout { with_details: true } => (
            json!({"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                "message": format!("The zone 'projects/{p}/zones/{z}' does not have enough resources available to fulfill the request.  '(resource type:compute)'."),
                "errorDetails": [{"errorInfo": {"reason": "resource_availability", "domain": "compute.googleapis.com",
                    "metadatas": {"vmType": machine_type, "zone": z}}}]}]}),
            503,
            "SERVICE UNAVAILABLE",
        ),
        Fault::QuotaExceeded { metric } => {
            let region = z.rsplit_once('-').map_or(z, |(r, _)| r);
            (
                json!({"errors": [{"code": "QUOTA_EXCEEDED",
                    "message": format!("Quota '{metric}' exceeded.  Limit: 0.0 in region {region}."),
                    "errorDetails": [{"quotaInfo": {"metricName": format!("compute.googleapis.com/{}", metric.to_lowercase()),
                        "limitName": format!("{}-per-project-region", metric), "dimensions": {"region": region}, "limit": 0}}]}]}),
                403,
                "FORBIDDEN",
            )
        }
        Fault::OperationError {
            code,
            message,
            http_status,
        } => (
            json!({"errors": [{"code": code, "message": message}]}),
            http_status,
            "ERROR",
        ),
        Fault::Http(error) => (
            json!({"errors": [{"code": error.status, "message": error.message}]}),
            error.code,
            "ERROR",
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn new_operation(
    p: &str,
    zone: Option<&str>,
    operation_type: &str,
    target: &str,
    target_id: u64,
    error: Option<(Value, u16, &'static str)>,
    polls: u32,
    effect: Effect,
) -> Operation {
    let name = format!(
        "operation-{}-{}-{}-{}",
        wire::now_millis(),
        random_hex(13),
        random_hex(8),
        random_hex(8)
    );
    let scope = zone.map_or_else(|| format!("{}/global", project_url(p)), |z| zone_url(p, z));
    let now = now_rfc3339();
    let mut done = json!({
        "kind": "compute#operation",
        "id": int64(new_numeric_id()),
        "name": name,
        "operationType": operation_type,
        "targetLink": target,
        "targetId": int64(target_id),
        "status": "DONE",
        "user": format!("karpenter@{p}.iam.gserviceaccount.com"),
        "progress": 100,
        "insertTime": now,
        "startTime": now,
        "endTime": now,
        "selfLink": format!("{scope}/operations/{name}"),
    });
    if let Some(z) = zone {
        done["zone"] = json!(zone_url(p, z));
    }
    if let Some((error, http, message)) = error {
        done["error"] = error;
        done["httpErrorStatusCode"] = json!(http);
        done["httpErrorMessage"] = json!(message);
    }
    Operation {
        done,
        polls_left: polls,
        effect,
    }
}

/// The operation as a GET sees it now.
fn operation_view(op: &Operation) -> Value {
    if op.polls_left == 0 {
        return op.done.clone();
    }
    let mut view = op.done.clone();
    if let Some(map) = view.as_object_mut() {
        for key in [
            "endTime",
            "error",
            "httpErrorStatusCode",
            "httpErrorMessage",
        ] {
            map.remove(key);
        }
        map.insert("status".into(), json!("RUNNING"));
        map.insert("progress".into(), json!(0));
    }
    view
}

/// Applies what a finished operation does to the world.
fn finish(proj: &mut Project, effect: &Effect) {
    match effect {
        Effect::None => {}
        Effect::Running { zone, name } => {
            if let Some(instance) = proj.instances.get_mut(&(zone.clone(), name.clone()))
                && instance["status"] == json!("PROVISIONING")
            {
                instance["status"] = json!("RUNNING");
            }
        }
        Effect::Remove { zone, name } => {
            proj.instances.remove(&(zone.clone(), name.clone()));
        }
    }
}

fn instance_not_found(p: &str, z: &str, name: &str) -> GoogleError {
    GoogleError::not_found(format!(
        "The resource 'projects/{p}/zones/{z}/instances/{name}' was not found"
    ))
}

async fn get_instance(
    Ext(state): Ext<Shared>,
    Path((p, z, name)): Path<(String, String, String)>,
) -> ApiResult {
    let state = lock(&state);
    let proj = project(&state.compute, &p)?;
    let instance = proj
        .instances
        .get(&(z.clone(), name.clone()))
        .ok_or_else(|| instance_not_found(&p, &z, &name))?;
    ok(instance.clone())
}

async fn list_instances(
    Ext(state): Ext<Shared>,
    Path((p, z)): Path<(String, String)>,
    uri: Uri,
) -> ApiResult {
    let state = lock(&state);
    let proj = project(&state.compute, &p)?;
    if !proj.zones.contains_key(&z) {
        return Err(zone_not_found(&p, &z));
    }
    let items: Vec<Value> = proj
        .instances
        .iter()
        .filter(|((zone, _), _)| *zone == z)
        .map(|(_, v)| v.clone())
        .collect();
    let query = wire::query(&uri);
    let items = filter_items(items, &query)?;
    let (page, next) = paginate(items, &query, state.compute.page_size)?;
    let mut body = json!({"kind": "compute#instanceList", "id": format!("projects/{p}/zones/{z}/instances"),
        "items": page, "selfLink": format!("{}/instances", zone_url(&p, &z))});
    if let Some(next) = next {
        body["nextPageToken"] = json!(next);
    }
    ok(body)
}

async fn aggregated_instances(
    Ext(state): Ext<Shared>,
    Path(p): Path<String>,
    uri: Uri,
) -> ApiResult {
    let state = lock(&state);
    let proj = project(&state.compute, &p)?;
    let query = wire::query(&uri);
    let scoped: Vec<(String, Value)> = proj
        .instances
        .iter()
        .map(|((z, _), v)| (z.clone(), v.clone()))
        .collect();
    let zones: Vec<String> = proj.zones.keys().cloned().collect();
    aggregated(
        "compute#instanceAggregatedList",
        "instances",
        &p,
        &zones,
        scoped,
        &query,
        state.compute.page_size,
    )
}

async fn delete_instance(
    Ext(state): Ext<Shared>,
    Path((p, z, name)): Path<(String, String, String)>,
    uri: Uri,
) -> ApiResult {
    let request_id = wire::query(&uri).remove("requestId");
    let mut state = lock(&state);
    let compute = &mut state.compute;
    let polls = compute.operation_polls;
    let proj = project_mut(compute, &p)?;
    if let Some(op) = request_id
        .as_ref()
        .and_then(|id| proj.request_ids.get(id))
        .and_then(|n| proj.operations.get(n))
    {
        return ok(operation_view(op));
    }
    let key = (z.clone(), name.clone());
    let instance = proj
        .instances
        .get_mut(&key)
        .ok_or_else(|| instance_not_found(&p, &z, &name))?;
    let id = instance["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let target = format!("{}/instances/{name}", zone_url(&p, &z));
    let effect = Effect::Remove {
        zone: z.clone(),
        name: name.clone(),
    };
    let op = new_operation(
        &p,
        Some(&z),
        "delete",
        &target,
        id,
        None,
        polls,
        effect.clone(),
    );
    if polls == 0 {
        finish(proj, &effect);
    } else {
        instance["status"] = json!("STOPPING");
    }
    let op_name = op.done["name"].as_str().unwrap_or_default().to_owned();
    if let Some(id) = request_id {
        proj.request_ids.insert(id, op_name.clone());
    }
    let view = operation_view(&op);
    proj.operations.insert(op_name, op);
    ok(view)
}

async fn set_labels(
    Ext(state): Ext<Shared>,
    Path((p, z, name)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult {
    let body: Value = parse_body(&body)?;
    check_labels(body.get("labels"))?;
    let mut state = lock(&state);
    let proj = project_mut(&mut state.compute, &p)?;
    let instance = proj
        .instances
        .get_mut(&(z.clone(), name.clone()))
        .ok_or_else(|| instance_not_found(&p, &z, &name))?;
    if body.get("labelFingerprint") != instance.get("labelFingerprint") {
        return Err(GoogleError::condition_not_met(
            "Labels fingerprint either invalid or resource labels have changed",
        ));
    }
    instance["labels"] = body.get("labels").cloned().unwrap_or_else(|| json!({}));
    instance["labelFingerprint"] = json!(new_fingerprint());
    let id = instance["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let target = format!("{}/instances/{name}", zone_url(&p, &z));
    let op = new_operation(
        &p,
        Some(&z),
        "setLabels",
        &target,
        id,
        None,
        0,
        Effect::None,
    );
    let op_name = op.done["name"].as_str().unwrap_or_default().to_owned();
    let view = operation_view(&op);
    proj.operations.insert(op_name, op);
    ok(view)
}

// ---- operations ----

fn operation_not_found(p: &str, scope: &str, op: &str) -> GoogleError {
    GoogleError::not_found(format!(
        "The resource 'projects/{p}/{scope}/operations/{op}' was not found"
    ))
}

fn poll_operation(
    state: &Shared,
    p: &str,
    zone: Option<&str>,
    scope: &str,
    name: &str,
    wait: bool,
) -> ApiResult {
    let mut state = lock(state);
    let proj = project_mut(&mut state.compute, p)?;
    let op = proj
        .operations
        .get_mut(name)
        .ok_or_else(|| operation_not_found(p, scope, name))?;
    let in_scope = match zone {
        Some(z) => {
            op.done
                .get("zone")
                .and_then(Value::as_str)
                .map(last_segment)
                == Some(z)
        }
        None => true,
    };
    if !in_scope {
        return Err(operation_not_found(p, scope, name));
    }
    if wait {
        op.polls_left = 0;
    }
    let view = operation_view(op);
    if op.polls_left > 0 {
        op.polls_left -= 1;
        if op.polls_left == 0 {
            let effect = op.effect.clone();
            finish(proj, &effect);
        }
    } else if wait {
        let effect = std::mem::replace(&mut op.effect, Effect::None);
        finish(proj, &effect);
    }
    ok(view)
}

async fn get_zone_operation(
    Ext(state): Ext<Shared>,
    Path((p, z, op)): Path<(String, String, String)>,
) -> ApiResult {
    poll_operation(&state, &p, Some(&z), &format!("zones/{z}"), &op, false)
}

async fn wait_zone_operation(
    Ext(state): Ext<Shared>,
    Path((p, z, op)): Path<(String, String, String)>,
) -> ApiResult {
    poll_operation(&state, &p, Some(&z), &format!("zones/{z}"), &op, true)
}

async fn get_other_operation(
    Ext(_state): Ext<Shared>,
    Path((p, r, op)): Path<(String, String, String)>,
) -> ApiResult {
    // No regional operations exist yet; answer the way GCE does for an unknown one.
    Err(operation_not_found(&p, &format!("regions/{r}"), &op))
}

async fn get_global_operation(
    Ext(state): Ext<Shared>,
    Path((p, op)): Path<(String, String)>,
) -> ApiResult {
    let state = lock(&state);
    let proj = project(&state.compute, &p)?;
    match proj.operations.get(&op) {
        Some(found) if found.done.get("zone").is_none() => ok(operation_view(found)),
        _ => Err(operation_not_found(&p, "global", &op)),
    }
}

// ---- lists: filter, pages, aggregation ----

/// One `field op value` term of a Compute list filter.
#[derive(Debug, PartialEq)]
struct Term {
    path: Vec<String>,
    op: FilterOp,
    value: String,
}

#[derive(Debug, PartialEq)]
enum FilterOp {
    Eq,
    Ne,
    Has,
}

/// Parses the subset of the Compute filter language the product uses: terms `labels.k = v`,
/// `name != "x"`, `labels.k:*`, optionally parenthesised, joined by `AND` or spaces.
fn parse_filter(filter: &str) -> Result<Vec<Term>, GoogleError> {
    let bad = || {
        GoogleError::invalid(format!(
            "Invalid value for field 'filter': '{filter}'. Invalid list filter expression."
        ))
    };
    let mut terms = Vec::new();
    let mut rest = filter.trim();
    while !rest.is_empty() {
        let (term, tail) = if let Some(inner) = rest.strip_prefix('(') {
            let end = inner.find(')').ok_or_else(bad)?;
            (&inner[..end], &inner[end + 1..])
        } else {
            match rest.find(" AND ") {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            }
        };
        let term = term.trim();
        if term.contains(" OR ") || term.contains(" or ") {
            return Err(bad());
        }
        let (field, op, value) = if let Some((f, v)) = term.split_once("!=") {
            (f, FilterOp::Ne, v)
        } else if let Some((f, v)) = term.split_once('=') {
            (f, FilterOp::Eq, v)
        } else if let Some((f, v)) = term.split_once(" eq ") {
            (f, FilterOp::Eq, v)
        } else if let Some((f, v)) = term.split_once(" ne ") {
            (f, FilterOp::Ne, v)
        } else if let Some((f, v)) = term.split_once(':') {
            (f, FilterOp::Has, v)
        } else {
            return Err(bad());
        };
        let field = field.trim();
        if field.is_empty() || field.contains(char::is_whitespace) {
            return Err(bad());
        }
        let value = value.trim().trim_matches('"').to_owned();
        terms.push(Term {
            path: field.split('.').map(str::to_owned).collect(),
            op,
            value,
        });
        rest = tail.trim_start();
        rest = rest
            .strip_prefix("AND ")
            .or_else(|| rest.strip_prefix("and "))
            .unwrap_or(rest)
            .trim_start();
    }
    Ok(terms)
}

fn matches(item: &Value, terms: &[Term]) -> bool {
    terms.iter().all(|term| {
        let mut node = Some(item);
        for key in &term.path {
            node = node.and_then(|n| n.get(key));
        }
        let text = node.map(|n| match n {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        match term.op {
            FilterOp::Eq => text.as_deref() == Some(term.value.as_str()),
            FilterOp::Ne => text.as_deref() != Some(term.value.as_str()),
            FilterOp::Has => {
                text.is_some()
                    && (term.value == "*" || text.as_deref() == Some(term.value.as_str()))
            }
        }
    })
}

fn filter_items(
    items: Vec<Value>,
    query: &HashMap<String, String>,
) -> Result<Vec<Value>, GoogleError> {
    match query.get("filter").filter(|f| !f.trim().is_empty()) {
        None => Ok(items),
        Some(filter) => {
            let terms = parse_filter(filter)?;
            Ok(items.into_iter().filter(|i| matches(i, &terms)).collect())
        }
    }
}

/// The page `pageToken` (an offset) and `maxResults` (default and at most 500) select, and the
/// next page's token.
fn paginate<T>(
    items: Vec<T>,
    query: &HashMap<String, String>,
    default_size: Option<usize>,
) -> Result<(Vec<T>, Option<String>), GoogleError> {
    let max = match query.get("maxResults") {
        Some(m) => m
            .parse::<usize>()
            .map_err(|_| GoogleError::invalid("Invalid value for field 'maxResults'"))?
            .clamp(1, 500),
        None => default_size.unwrap_or(500).clamp(1, 500),
    };
    let start = match query.get("pageToken").filter(|t| !t.is_empty()) {
        Some(token) => token
            .parse::<usize>()
            .map_err(|_| GoogleError::invalid("Invalid value for field 'pageToken'"))?,
        None => 0,
    };
    let total = items.len();
    let page: Vec<T> = items.into_iter().skip(start).take(max).collect();
    let end = start + page.len();
    Ok((page, (end < total).then(|| end.to_string())))
}

/// An aggregated list: `items` maps `zones/Z` to `{key: [...]}`, and a zone with nothing on this
/// page to a `NO_RESULTS_ON_PAGE` warning, as GCE does.
fn aggregated(
    kind: &str,
    key: &str,
    p: &str,
    zones: &[String],
    scoped: Vec<(String, Value)>,
    query: &HashMap<String, String>,
    page_size: Option<usize>,
) -> ApiResult {
    let terms = match query.get("filter").filter(|f| !f.trim().is_empty()) {
        Some(filter) => parse_filter(filter)?,
        None => Vec::new(),
    };
    let scoped: Vec<(String, Value)> = scoped
        .into_iter()
        .filter(|(_, v)| matches(v, &terms))
        .collect();
    let (page, next) = paginate(scoped, query, page_size)?;
    let mut items = Map::new();
    for (zone, value) in page {
        let scope = items
            .entry(format!("zones/{zone}"))
            .or_insert_with(|| json!({ key: [] }));
        if let Some(list) = scope[key].as_array_mut() {
            list.push(value);
        }
    }
    for zone in zones {
        let scope = format!("zones/{zone}");
        if !items.contains_key(&scope) {
            items.insert(
                scope.clone(),
                json!({"warning": {"code": "NO_RESULTS_ON_PAGE",
                    "message": format!("There are no results for scope '{scope}' on this page."),
                    "data": [{"key": "scope", "value": scope}]}}),
            );
        }
    }
    let mut body = json!({"kind": kind, "id": format!("projects/{p}/aggregated/{key}"), "items": items,
        "selfLink": format!("{}/aggregated/{key}", project_url(p))});
    if let Some(next) = next {
        body["nextPageToken"] = json!(next);
    }
    ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_the_forms_the_clients_send() {
        let terms = parse_filter("(labels.a = \"x\") AND (labels.b != y)").unwrap();
        assert_eq!(terms.len(), 2);
        assert_eq!(terms[0].path, ["labels", "a"]);
        assert_eq!(terms[1].op, FilterOp::Ne);
        assert_eq!(
            parse_filter("labels.karpenter-sh_cluster=c1").unwrap()[0].value,
            "c1"
        );
        assert_eq!(parse_filter("labels.k:*").unwrap()[0].op, FilterOp::Has);
        assert!(parse_filter("labels.a = x OR labels.b = y").is_err());
    }

    #[test]
    fn label_filters_match_on_nested_fields() {
        let item = json!({"name": "vm-1", "labels": {"cluster": "c1"}});
        assert!(matches(
            &item,
            &parse_filter("labels.cluster = c1").unwrap()
        ));
        assert!(!matches(
            &item,
            &parse_filter("labels.cluster = c2").unwrap()
        ));
        assert!(!matches(&item, &parse_filter("labels.other:*").unwrap()));
        assert!(matches(&item, &parse_filter("name != vm-2").unwrap()));
    }

    #[test]
    fn label_rules_are_gce_rules() {
        assert!(label_problem("karpenter-sh_nodepool", "default").is_none());
        assert!(label_problem("Upper", "x").is_some());
        assert!(label_problem("k", "has.dot").is_some());
        assert!(label_problem(&"k".repeat(64), "x").is_some());
        assert!(label_problem("k", "").is_none());
    }

    #[test]
    fn pages_carry_a_next_token_until_the_end() {
        let query: HashMap<String, String> = [("maxResults".to_owned(), "2".to_owned())].into();
        let (page, next) = paginate(vec![1, 2, 3], &query, None).unwrap();
        assert_eq!((page, next.as_deref()), (vec![1, 2], Some("2")));
        let query: HashMap<String, String> = [
            ("maxResults".to_owned(), "2".to_owned()),
            ("pageToken".to_owned(), "2".to_owned()),
        ]
        .into();
        assert_eq!(
            paginate(vec![1, 2, 3], &query, None).unwrap(),
            (vec![3], None)
        );
    }
}
