//! One launch: pick the capacity type, order the claim's offerings cheapest first, and
//! `instances.insert` them one at a time until one comes up (at most
//! [`GcpConfig::max_launch_attempts`](super::GcpConfig) tries). Every finished operation is
//! checked for `error`, because the Rust poller returns `Ok` for a failed one: a stockout
//! (`ZONE_RESOURCE_POOL_EXHAUSTED*`) marks the offering unavailable, a `QUOTA_EXCEEDED` the type
//! in every zone of the region, and the next offering is tried.

use super::nodeclass::{Image, ResolvedNodeClass};
use super::{
    CLUSTER_LABEL, CatalogueSnapshot, GKE_CLUSTER_LOCATION_LABEL, GKE_CLUSTER_NAME_LABEL,
    GcpApiError, GcpConfig, GcpProvider, LOCATION_LABEL, NODE_CLAIM_LABEL, NODE_CLAIM_METADATA,
    NODE_CLASS_LABEL, NODE_POOL_LABEL, NODE_POOL_METADATA, NodeTemplate, gce_label_key,
    gce_label_value,
};
use crate::apis::CapacityType;
use crate::apis::gcenodeclass::{Disk, GCENodeClassSpec, RESERVED_METADATA_KEYS};
use crate::apis::{NodeClaim, labels};
use crate::cloud::provider::{CloudError, Instance};
use crate::scheduling::InstanceType;
use crate::scheduling::Requirements;
use google_cloud_lro::Poller;
use kube::ResourceExt;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Operation error codes that mean "no capacity for this offering in this zone now".
pub(crate) const STOCKOUT_CODES: [&str; 2] = [
    "ZONE_RESOURCE_POOL_EXHAUSTED",
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
];
/// Operation error codes that mean "the project may not have more of this".
pub(crate) const QUOTA_CODES: [&str; 1] = ["QUOTA_EXCEEDED"];

/// One offering to try.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    pub instance_type: String,
    pub zone: String,
    pub price: f64,
    pub image: Image,
}

/// The capacity type to launch and the offerings to try, cheapest first, or `None` when no
/// candidate has a usable offering. Spot wins when allowed and some spot offering is no dearer
/// than the cheapest on-demand one (upstream's rule).
pub fn plan(
    requirements: &Requirements,
    candidates: &[InstanceType],
    resolved: &ResolvedNodeClass,
    is_unavailable: impl Fn(CapacityType, &str, &str) -> bool,
) -> Option<(CapacityType, Vec<Attempt>)> {
    let arch_of = |it: &InstanceType| {
        ["amd64", "arm64"]
            .into_iter()
            .find(|arch| it.requirements.allows(labels::ARCH, arch))
            .unwrap_or("amd64")
    };
    let usable = |it: &InstanceType, capacity_type: CapacityType| -> Vec<(String, f64)> {
        it.offerings
            .iter()
            .filter(|o| {
                o.capacity_type == capacity_type && o.available && o.allowed_by(requirements)
            })
            .filter(|o| !is_unavailable(capacity_type, &it.name, &o.zone))
            .map(|o| (o.zone.clone(), o.price))
            .collect()
    };
    let bootable: Vec<(&InstanceType, &Image)> = candidates
        .iter()
        .filter_map(|it| resolved.image_for(arch_of(it)).map(|image| (it, image)))
        .collect();
    let cheapest_on_demand = bootable
        .iter()
        .flat_map(|(it, _)| usable(it, CapacityType::OnDemand))
        .map(|(_, p)| p)
        .fold(f64::INFINITY, f64::min);
    let allows = |ct: CapacityType| requirements.allows(labels::CAPACITY_TYPE, ct.as_str());
    let spot_offers = |it: &InstanceType| -> Vec<(String, f64)> {
        usable(it, CapacityType::Spot)
            .into_iter()
            .filter(|(_, p)| *p <= cheapest_on_demand)
            .collect()
    };
    let capacity_type = if allows(CapacityType::Spot)
        && bootable.iter().any(|(it, _)| !spot_offers(it).is_empty())
    {
        CapacityType::Spot
    } else if allows(CapacityType::OnDemand) {
        CapacityType::OnDemand
    } else {
        return None;
    };
    let mut attempts: Vec<Attempt> = bootable
        .iter()
        .flat_map(|(it, image)| {
            let offers = if capacity_type == CapacityType::Spot {
                spot_offers(it)
            } else {
                usable(it, capacity_type)
            };
            offers.into_iter().map(|(zone, price)| Attempt {
                instance_type: it.name.clone(),
                zone,
                price,
                image: (*image).clone(),
            })
        })
        .collect();
    // Stable: equal prices keep the candidates' order (the scheduler's preference).
    attempts.sort_by(|a, b| a.price.total_cmp(&b.price));
    (!attempts.is_empty()).then_some((capacity_type, attempts))
}

/// The instance name for a claim: `<cluster>-<claim>`, made a valid GCE name, at most 63
/// characters (a hash keeps long ones unique). Deterministic, so a retried launch finds the
/// instance it already created.
pub(crate) fn instance_name(cluster: &str, claim: &str) -> String {
    let raw = format!("{cluster}-{claim}").to_ascii_lowercase();
    let mut name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name.insert_str(0, "k-");
    }
    if name.len() > 63 {
        let hash = {
            use std::hash::Hasher;
            let mut hasher = fnv::FnvHasher::default();
            hasher.write(raw.as_bytes());
            hasher.finish()
        };
        name.truncate(54);
        name = format!("{}-{:08x}", name.trim_end_matches('-'), hash & 0xffff_ffff);
    }
    name.trim_end_matches('-').to_owned()
}

fn disk_json(disk: &Disk, zone: &str, image: Option<&str>) -> Value {
    let category = disk
        .category
        .clone()
        .unwrap_or_else(|| "pd-balanced".to_owned());
    if category == "local-ssd" {
        return json!({"type": "SCRATCH", "interface": "NVME", "autoDelete": true,
            "initializeParams": {"diskType": format!("zones/{zone}/diskTypes/local-ssd"), "diskSizeGb": "375"}});
    }
    let mut params = json!({"diskType": format!("zones/{zone}/diskTypes/{category}")});
    if let Some(size) = disk.size_gib {
        params["diskSizeGb"] = json!(size.to_string());
    }
    let mut value = json!({"type": "PERSISTENT", "boot": image.is_some(), "autoDelete": true});
    if let Some(image) = image {
        params["sourceImage"] = json!(image);
    } else if let Some(preload) = disk
        .secondary_boot_image
        .as_deref()
        .filter(|i| !i.is_empty())
    {
        // A secondary boot disk, as the GCP provider makes it (`instance.go`): made from the
        // image, under the device name GKE's bootstrap looks for.
        params["sourceImage"] = json!(preload);
        value["deviceName"] = json!(format!("gke-{}-disk", image_name(preload)));
    }
    if let Some(iops) = disk.provisioned_iops {
        params["provisionedIops"] = json!(iops.to_string());
    }
    if let Some(throughput) = disk.provisioned_throughput {
        params["provisionedThroughput"] = json!(throughput.to_string());
    }
    value["initializeParams"] = params;
    if let Some(key) = &disk.kms_key_name {
        value["diskEncryptionKey"] = json!({"kmsKeyName": key});
        if let Some(account) = &disk.kms_key_service_account {
            value["diskEncryptionKey"]["kmsKeyServiceAccount"] = json!(account);
        }
    }
    value
}

/// An image's name: the last part of its path.
fn image_name(image: &str) -> &str {
    image.rsplit('/').next().unwrap_or(image)
}

/// The node labels GKE's bootstrap reads to mount the class's secondary boot disks
/// (`cloud.google.com/gke-secondary-boot-disk-IMAGE=MODE.PROJECT`), as the GCP provider sets
/// them: one per non-boot disk with an image and a mode other than `MODE_UNSPECIFIED`.
fn secondary_boot_disk_labels(spec: &GCENodeClassSpec, project: &str) -> Vec<String> {
    spec.disks
        .iter()
        .filter(|d| !d.boot)
        .filter_map(|d| {
            let image = d
                .secondary_boot_image
                .as_deref()
                .filter(|i| !i.is_empty())?;
            let mode = d
                .secondary_boot_mode
                .as_deref()
                .filter(|m| !m.is_empty() && *m != "MODE_UNSPECIFIED")?;
            Some(format!(
                "cloud.google.com/gke-secondary-boot-disk-{}={mode}.{project}",
                image_name(image)
            ))
        })
        .collect()
}

/// The instance labels: the node class's, then cluster (name and location, ours and GKE's),
/// pool, claim and class (ours win).
pub(crate) fn instance_labels(
    config: &GcpConfig,
    claim: &NodeClaim,
    resolved: &ResolvedNodeClass,
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = resolved
        .spec
        .labels
        .iter()
        .map(|(k, v)| (gce_label_key(k), gce_label_value(v)))
        .collect();
    out.insert(
        CLUSTER_LABEL.to_owned(),
        gce_label_value(&config.cluster_name),
    );
    out.insert(
        LOCATION_LABEL.to_owned(),
        gce_label_value(config.location()),
    );
    out.insert(
        GKE_CLUSTER_NAME_LABEL.to_owned(),
        gce_label_value(&config.cluster_name),
    );
    out.insert(
        GKE_CLUSTER_LOCATION_LABEL.to_owned(),
        gce_label_value(config.location()),
    );
    out.insert(
        NODE_CLAIM_LABEL.to_owned(),
        gce_label_value(&claim.name_any()),
    );
    out.insert(NODE_CLASS_LABEL.to_owned(), gce_label_value(&resolved.name));
    if let Some(pool) = claim.labels().get(labels::NODE_POOL) {
        out.insert(NODE_POOL_LABEL.to_owned(), gce_label_value(pool));
    }
    out
}

/// The `instances.insert` body for one attempt. The node class wins over the node template
/// (GKE's bootstrap), which wins over the provider's defaults.
pub(crate) fn instance_body(
    provider: &GcpProvider,
    claim: &NodeClaim,
    resolved: &ResolvedNodeClass,
    attempt: &Attempt,
    capacity_type: CapacityType,
    accelerated: bool,
    template: Option<&NodeTemplate>,
) -> Value {
    let spec = &resolved.spec;
    let zone = &attempt.zone;
    let config = &provider.config;
    let spot = capacity_type == CapacityType::Spot;
    let scheduling = scheduling(spot, accelerated);
    let disks = instance_disks(spec, zone, &attempt.image.source);
    let interfaces = network_interfaces(spec, config, template);
    let claim_name = claim.name_any();
    let metadata = instance_metadata(config, claim, spec, accelerated, template);
    let mut body = json!({
        "name": instance_name(&config.cluster_name, &claim_name),
        "machineType": format!("zones/{zone}/machineTypes/{}", attempt.instance_type),
        "labels": instance_labels(config, claim, resolved),
        "scheduling": scheduling,
        "disks": disks,
        "networkInterfaces": interfaces,
        "serviceAccounts": [{"email": spec.service_account.clone().or_else(|| template.and_then(|t| t.service_account.clone())).unwrap_or_else(|| "default".to_owned()),
                             "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}],
        "metadata": {"items": metadata.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>()},
    });
    let tags = network_tags(spec, template);
    if !tags.is_empty() {
        body["tags"] = json!({"items": tags});
    }
    if let Some(shielded) = &spec.shielded_instance_config {
        body["shieldedInstanceConfig"] = json!({"enableSecureBoot": shielded.enable_secure_boot,
            "enableVtpm": shielded.enable_vtpm, "enableIntegrityMonitoring": shielded.enable_integrity_monitoring});
    }
    if let Some(kind) = &spec.confidential_instance_type {
        body["confidentialInstanceConfig"] = json!({"confidentialInstanceType": kind});
    }
    body
}

/// The instance's `scheduling`: spot, or standard (live-migrated unless it has GPUs).
fn scheduling(spot: bool, accelerated: bool) -> Value {
    if spot {
        json!({"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE", "automaticRestart": false,
            "onHostMaintenance": "TERMINATE", "preemptible": false})
    } else {
        json!({"provisioningModel": "STANDARD", "automaticRestart": true,
            "onHostMaintenance": if accelerated { "TERMINATE" } else { "MIGRATE" }})
    }
}

/// The instance's disks: the boot disk from `image`, then the class's other disks.
fn instance_disks(spec: &GCENodeClassSpec, zone: &str, image: &str) -> Vec<Value> {
    let mut disks: Vec<Value> = Vec::new();
    let default_boot_gib = i32::try_from(super::catalogue::DEFAULT_BOOT_DISK_GIB).ok();
    let mut boot = spec.disks.iter().find(|d| d.boot).cloned().unwrap_or(Disk {
        category: Some("pd-balanced".to_owned()),
        boot: true,
        ..Default::default()
    });
    // Unsized, Compute Engine would make the boot disk the image's size (10 GB for COS), too
    // small for a node's images; the catalogue counts ephemeral storage on this default.
    boot.size_gib = boot.size_gib.or(default_boot_gib);
    disks.push(disk_json(&boot, zone, Some(image)));
    disks.extend(
        spec.disks
            .iter()
            .filter(|d| !d.boot)
            .map(|d| disk_json(d, zone, None)),
    );
    disks
}

/// The instance's network interfaces: the primary one (the class's subnetwork, else the
/// provider's, else the node template's; public unless the class or template says private),
/// then the class's additional ones.
fn network_interfaces(
    spec: &GCENodeClassSpec,
    config: &GcpConfig,
    template: Option<&NodeTemplate>,
) -> Vec<Value> {
    let network = spec.network_config.clone().unwrap_or_default();
    let template_nic = template.and_then(|t| t.network_interface.as_ref());
    let template_field = |key: &str| {
        template_nic
            .and_then(|n| n.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut primary = match (
        network.subnetwork.as_ref().or(config.subnetwork.as_ref()),
        template_field("subnetwork"),
    ) {
        (Some(subnetwork), _) => json!({"subnetwork": subnetwork}),
        (None, Some(subnetwork)) => {
            json!({"subnetwork": subnetwork, "network": template_field("network")})
        }
        (None, None) => {
            json!({"network": config.network.clone().unwrap_or_else(|| "global/networks/default".to_owned())})
        }
    };
    let template_public = template_nic.is_none_or(|n| {
        n.get("accessConfigs")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    });
    let public = match network.enable_private_nodes {
        Some(private) => !private,
        None => template_public,
    };
    if public {
        primary["accessConfigs"] = json!([{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]);
    }
    let template_range = template_nic
        .and_then(|n| n.pointer("/aliasIpRanges/0/subnetworkRangeName"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(range) = spec.subnet_range_name.clone().or(template_range) {
        primary["aliasIpRanges"] = json!([{"subnetworkRangeName": range, "ipCidrRange": "/24"}]);
    }
    let mut interfaces = vec![primary];
    for extra in &network.additional_network_interfaces {
        let mut nic = json!({"subnetwork": extra.subnetwork});
        if let Some(net) = &extra.network {
            nic["network"] = json!(net);
        }
        interfaces.push(nic);
    }
    interfaces
}

/// The instance's metadata: the node template's (GKE's bootstrap), then the class's, then the
/// claim's and pool's exact names, and the kubelet's labels, flags and taints.
fn instance_metadata(
    config: &GcpConfig,
    claim: &NodeClaim,
    spec: &GCENodeClassSpec,
    accelerated: bool,
    template: Option<&NodeTemplate>,
) -> BTreeMap<String, String> {
    let mut metadata: BTreeMap<String, String> = template
        .map(|t| t.metadata.iter().cloned().collect())
        .unwrap_or_default();
    // The CRD refuses the keys GKE's bootstrap owns; a class stored before that rule is kept
    // from overwriting them here too.
    metadata.extend(
        spec.metadata
            .iter()
            .filter(|(k, _)| !RESERVED_METADATA_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    metadata.insert(NODE_CLAIM_METADATA.to_owned(), claim.name_any());
    if let Some(pool) = claim.labels().get(labels::NODE_POOL) {
        metadata.insert(NODE_POOL_METADATA.to_owned(), pool.clone());
    }
    metadata.insert("cluster-name".to_owned(), config.cluster_name.clone());
    // What GKE's node bootstrap reads for the kubelet's labels and taints.
    let kube_labels = kube_labels(&metadata, claim, spec, accelerated, &config.project);
    metadata.insert("kube-labels".to_owned(), kube_labels.join(","));
    if let (Some(kubelet), Some(env)) = (&spec.kubelet_configuration, metadata.get_mut("kube-env"))
    {
        *env = with_kubelet_args(env, kubelet);
    }
    let taints = kube_node_taints(claim, spec, accelerated);
    metadata.insert("kube-node-taints".to_owned(), taints.join(","));
    metadata
}

/// The node's labels for GKE's bootstrap (`kube-labels`): the template's, the claim's, and
/// the GPU driver and secondary boot disk labels GKE's own components look for.
fn kube_labels(
    metadata: &BTreeMap<String, String>,
    claim: &NodeClaim,
    spec: &GCENodeClassSpec,
    accelerated: bool,
    project: &str,
) -> Vec<String> {
    let mut kube_labels: Vec<String> = metadata
        .get("kube-labels")
        .map(|l| {
            // The template's node pool label would claim the node for GKE's pool.
            l.split(',')
                .filter(|l| !l.is_empty() && !l.starts_with("cloud.google.com/gke-nodepool="))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    kube_labels.extend(
        crate::cloud::kubelet_labels::kubelet_labels(claim.labels())
            .iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    // GKE's GPU driver installer picks the nodes to install on by this label; the provider
    // labels every GPU node, with `default` when the class says nothing (`instance.go`).
    if accelerated {
        let version = spec.gpu_driver_version.as_deref().unwrap_or("default");
        kube_labels.push(format!("cloud.google.com/gke-gpu-driver-version={version}"));
    }
    kube_labels.extend(secondary_boot_disk_labels(spec, project));
    kube_labels
}

/// The node's taints for GKE's bootstrap (`kube-node-taints`): the claim's and its startup
/// taints, GKE's GPU taint when the class asks for it, and the unregistered taint.
fn kube_node_taints(claim: &NodeClaim, spec: &GCENodeClassSpec, accelerated: bool) -> Vec<String> {
    let mut taints: Vec<String> = claim
        .spec
        .taints
        .iter()
        .chain(&claim.spec.startup_taints)
        .map(|t| {
            format!(
                "{}={}:{}",
                t.key,
                t.value.clone().unwrap_or_default(),
                t.effect
            )
        })
        .collect();
    // GKE's own taint on GPU nodes, which GPU pods' tolerations expect.
    if accelerated && spec.auto_gpu_taint == Some(true) {
        taints.push("nvidia.com/gpu=present:NoSchedule".to_owned());
    }
    taints.push(format!("{}=:NoExecute", labels::UNREGISTERED_TAINT_KEY));
    taints
}

/// The instance's network tags: the node template's, then the class's.
fn network_tags(spec: &GCENodeClassSpec, template: Option<&NodeTemplate>) -> Vec<String> {
    let mut tags: Vec<String> = template.map(|t| t.tags.clone()).unwrap_or_default();
    tags.extend(
        spec.network_tags
            .iter()
            .filter(|t| !tags.contains(t))
            .cloned()
            .collect::<Vec<_>>(),
    );
    tags
}

/// GKE's `kube-env` with the node class's kubelet settings added to `KUBELET_ARGS` (GKE's node
/// bootstrap starts the kubelet with those flags; later flags win).
///
/// `kube-env` is YAML, which GKE's bootstrap turns into shell variables. The new value is
/// written as one double-quoted YAML scalar (a JSON string), so a setting with a quote or a
/// line break in it stays inside `KUBELET_ARGS` instead of ending it or adding another key.
pub(crate) fn with_kubelet_args(
    kube_env: &str,
    kubelet: &crate::apis::KubeletConfiguration,
) -> String {
    let mut flags = crate::cloud::kubelet_flags::flags(kubelet);
    if !kubelet.cluster_dns.is_empty() {
        flags.push(format!("--cluster-dns={}", kubelet.cluster_dns.join(",")));
    }
    if flags.is_empty() {
        return kube_env.to_owned();
    }
    let extra = flags.join(" ");
    let line_of = |value: &str| format!("KUBELET_ARGS: {}", serde_json::Value::from(value));
    let mut found = false;
    let mut lines: Vec<String> = kube_env
        .lines()
        .map(|line| {
            if !line.starts_with("KUBELET_ARGS:") {
                return line.to_owned();
            }
            found = true;
            // The value as YAML reads it (plain, single- or double-quoted).
            let current = serde_saphyr::from_str::<BTreeMap<String, String>>(line)
                .ok()
                .and_then(|mut m| m.remove("KUBELET_ARGS"))
                .unwrap_or_default();
            line_of(format!("{current} {extra}").trim_start())
        })
        .collect();
    if !found {
        lines.push(line_of(&extra));
    }
    let mut out = lines.join("\n");
    if kube_env.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// What a finished operation's `error` means.
#[derive(Debug, PartialEq)]
pub(crate) enum OperationFailure {
    /// No capacity in that zone now.
    Stockout(String),
    /// A quota ran out.
    Quota(String),
    /// Anything else.
    Other(String),
}

/// Classifies a DONE operation: `None` when it succeeded.
pub(crate) fn operation_failure(
    op: &google_cloud_compute_v1::model::Operation,
) -> Option<OperationFailure> {
    let error = op.error.as_ref()?;
    let first = error.errors.first();
    let code = first.and_then(|e| e.code.clone()).unwrap_or_default();
    let message = error
        .errors
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.code.as_deref().unwrap_or("UNKNOWN"),
                e.message.as_deref().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let message = if message.is_empty() {
        format!(
            "operation failed with HTTP {}",
            op.http_error_status_code.unwrap_or_default()
        )
    } else {
        message
    };
    Some(
        if error.errors.iter().any(|e| {
            e.code
                .as_deref()
                .is_some_and(|c| STOCKOUT_CODES.contains(&c))
        }) {
            OperationFailure::Stockout(message)
        } else if QUOTA_CODES.contains(&code.as_str()) {
            OperationFailure::Quota(message)
        } else {
            OperationFailure::Other(message)
        },
    )
}

/// A failed operation, as an error with its codes and messages.
#[derive(Debug, thiserror::Error)]
#[error("operation {operation} failed: {message}")]
pub struct OperationError {
    pub operation: String,
    pub message: String,
}

/// Launches one instance for `claim`.
pub(super) async fn launch(
    provider: &GcpProvider,
    claim: &NodeClaim,
    candidates: &[InstanceType],
    resolved: &ResolvedNodeClass,
    snapshot: &CatalogueSnapshot,
    template: Option<&NodeTemplate>,
) -> Result<Instance, CloudError> {
    let claim_name = claim.name_any();
    let requirements = Requirements::from_api(&claim.spec.requirements)
        .map_err(|e| CloudError::api("reading the NodeClaim's requirements", e))?;
    let unavailable = provider.unavailable.clone();
    let Some((capacity_type, attempts)) = plan(&requirements, candidates, resolved, |ct, it, z| {
        unavailable.is_unavailable(ct, it, z)
    }) else {
        return Err(CloudError::InsufficientCapacity {
            offerings: candidates.iter().map(|it| it.name.clone()).collect(),
        });
    };
    let config = &provider.config;
    let shared = Launch {
        provider,
        claim,
        name: instance_name(&config.cluster_name, &claim_name),
        claim_name,
        resolved,
        snapshot,
        template,
        capacity_type,
    };
    let mut failed = Vec::new();
    for attempt in attempts.iter().take(config.max_launch_attempts.max(1)) {
        let offering = format!("{capacity_type}:{}:{}", attempt.instance_type, attempt.zone);
        if provider
            .unavailable
            .is_unavailable(capacity_type, &attempt.instance_type, &attempt.zone)
        {
            continue; // a quota error on an earlier attempt ruled it out
        }
        match shared.try_offering(attempt, &offering).await? {
            Some(launched) => return Ok(launched),
            None => failed.push(offering),
        }
    }
    Err(CloudError::InsufficientCapacity { offerings: failed })
}

/// What every attempt of one launch shares.
struct Launch<'a> {
    provider: &'a GcpProvider,
    claim: &'a NodeClaim,
    claim_name: String,
    /// The instance's name, the same in every zone.
    name: String,
    resolved: &'a ResolvedNodeClass,
    snapshot: &'a CatalogueSnapshot,
    template: Option<&'a NodeTemplate>,
    capacity_type: CapacityType,
}

impl Launch<'_> {
    /// Inserts the instance in one offering: the instance it launched (or adopted), `None`
    /// when the offering had no capacity (now marked unavailable), or the error that ends the
    /// launch.
    async fn try_offering(
        &self,
        attempt: &Attempt,
        offering: &str,
    ) -> Result<Option<Instance>, CloudError> {
        let provider = self.provider;
        let accelerated = self
            .snapshot
            .types
            .get(&attempt.instance_type)
            .is_some_and(|t| t.gpus.is_some());
        let body = instance_body(
            provider,
            self.claim,
            self.resolved,
            attempt,
            self.capacity_type,
            accelerated,
            self.template,
        );
        let instance: google_cloud_compute_v1::model::Instance = serde_json::from_value(body)
            .map_err(|e| CloudError::api("building the instance request", e))?;
        // No requestId: GCE would answer a retry of a failed insert with the same failed
        // operation for an hour. The deterministic name makes a retry a 409 instead, and the
        // instance is adopted below.
        let result = provider
            .clients
            .instances
            .insert()
            .set_project(&provider.config.project)
            .set_zone(&attempt.zone)
            .set_body(instance)
            .poller()
            .until_done()
            .await;
        let op = match result {
            Ok(op) => op,
            Err(e) if e.http_status_code() == Some(409) => {
                return self.adopt(attempt, e).await.map(Some);
            }
            Err(e) if super::errors::is_quota_or_stockout(&e) => {
                tracing::warn!(nodeclaim = %self.claim_name, offering = %offering, error = %GcpApiError::from(e), "no capacity; trying the next offering");
                provider.unavailable.mark(
                    self.capacity_type,
                    &attempt.instance_type,
                    &attempt.zone,
                );
                return Ok(None);
            }
            Err(e) => return Err(super::errors::cloud_error("creating the instance", e)),
        };
        self.finished(attempt, offering, &op).await
    }

    /// The instance an insert conflicted with, when it is this claim's.
    async fn adopt(
        &self,
        attempt: &Attempt,
        conflict: google_cloud_compute_v1::Error,
    ) -> Result<Instance, CloudError> {
        // Launched before (an agent restart between insert and recording it): adopt it
        // if it is this claim's.
        let existing = self
            .provider
            .instance_by_name(&attempt.zone, &self.name)
            .await?;
        match existing {
            Some(found) if found.node_claim.as_deref() == Some(self.claim_name.as_str()) => {
                Ok(found)
            }
            _ => Err(CloudError::api(
                "creating the instance",
                GcpApiError::from(conflict),
            )),
        }
    }

    /// What a finished insert operation came to: the launched instance, `None` when the
    /// offering had no capacity or quota (now marked unavailable), or the error that ends the
    /// launch.
    async fn finished(
        &self,
        attempt: &Attempt,
        offering: &str,
        op: &google_cloud_compute_v1::model::Operation,
    ) -> Result<Option<Instance>, CloudError> {
        let provider = self.provider;
        let (claim_name, name, capacity_type) = (&self.claim_name, &self.name, self.capacity_type);
        match operation_failure(op) {
            None => {
                tracing::info!(nodeclaim = %claim_name, instance = %name, offering = %offering, "instance inserted");
                let mut launched = provider
                    .instance_by_name(&attempt.zone, name)
                    .await?
                    .ok_or_else(|| {
                        CloudError::api(
                            "reading the new instance",
                            OperationError {
                                operation: op.name.clone().unwrap_or_default(),
                                message: "the instance is gone".to_owned(),
                            },
                        )
                    })?;
                launched.image_id = Some(attempt.image.source.clone());
                launched.annotations = super::drift::claim_annotations(&self.resolved.spec);
                launched.price = crate::scheduling::known_price(attempt.price);
                Ok(Some(launched))
            }
            Some(OperationFailure::Stockout(message)) => {
                tracing::warn!(nodeclaim = %claim_name, offering = %offering, %message, "zone has no capacity; trying the next offering");
                provider
                    .unavailable
                    .mark(capacity_type, &attempt.instance_type, &attempt.zone);
                Ok(None)
            }
            Some(OperationFailure::Quota(message)) => {
                tracing::warn!(nodeclaim = %claim_name, offering = %offering, %message, "quota exceeded; trying the next offering");
                for zone in self
                    .snapshot
                    .zones_of
                    .get(&attempt.instance_type)
                    .into_iter()
                    .flatten()
                {
                    provider
                        .unavailable
                        .mark(capacity_type, &attempt.instance_type, zone);
                }
                Ok(None)
            }
            Some(OperationFailure::Other(message)) => {
                let operation = op.name.clone().unwrap_or_default();
                tracing::warn!(nodeclaim = %claim_name, offering = %offering, %operation, %message, "instance insert failed");
                Err(CloudError::api(
                    "creating the instance",
                    OperationError { operation, message },
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_settings_join_the_kubelet_args_gke_starts_the_kubelet_with() {
        let kubelet: crate::apis::KubeletConfiguration = serde_json::from_value(serde_json::json!({
            "maxPods": 64, "clusterDNS": ["10.8.0.10"], "evictionHard": {"memory.available": "200Mi"},
        }))
        .unwrap();
        let env =
            "CLUSTER_NAME: demo\nKUBELET_ARGS: --v=2 --cloud-provider=external\nNODE_LABELS: a=b\n";
        let flags = "--max-pods=64 --eviction-hard=memory.available<200Mi --cluster-dns=10.8.0.10";
        let read = |env: &str| {
            serde_saphyr::from_str::<BTreeMap<String, String>>(env).expect("kube-env stays YAML")
        };
        let updated = read(&with_kubelet_args(env, &kubelet));
        assert_eq!(
            updated["KUBELET_ARGS"],
            format!("--v=2 --cloud-provider=external {flags}")
        );
        assert_eq!(updated["NODE_LABELS"], "a=b", "the other keys stay");
        assert_eq!(
            read(&with_kubelet_args("KUBELET_ARGS: '--v=2'", &kubelet))["KUBELET_ARGS"],
            format!("--v=2 {flags}")
        );
        assert_eq!(
            read(&with_kubelet_args("A: b", &kubelet))["KUBELET_ARGS"],
            flags
        );
    }

    #[test]
    fn a_kubelet_setting_with_quotes_or_line_breaks_stays_inside_kubelet_args() {
        let kubelet: crate::apis::KubeletConfiguration =
            serde_json::from_value(serde_json::json!({
                "evictionHard": {"memory.available": "1Mi'\nCLUSTER_NAME: evil\n\""},
            }))
            .unwrap();
        let env = "CLUSTER_NAME: demo\nKUBELET_ARGS: --v=2\n";
        let updated =
            serde_saphyr::from_str::<BTreeMap<String, String>>(&with_kubelet_args(env, &kubelet))
                .expect("kube-env stays YAML");
        assert_eq!(updated["CLUSTER_NAME"], "demo");
        assert_eq!(
            updated["KUBELET_ARGS"],
            "--v=2 --eviction-hard=memory.available<1Mi'\nCLUSTER_NAME: evil\n\""
        );
    }

    #[test]
    fn a_long_instance_name_keeps_the_hash_suffix_it_had() {
        // Computed with the hand-written FNV-1a (before the fnv crate): a retried launch must
        // find the instance an older agent created.
        assert_eq!(
            instance_name(
                "production-cluster",
                "a-very-long-nodepool-name-with-many-words-xk2p9"
            ),
            "production-cluster-a-very-long-nodepool-name-with-many-01db99ba"
        );
    }

    #[test]
    fn instance_names_are_valid_gce_names() {
        assert_eq!(instance_name("demo", "default-abc12"), "demo-default-abc12");
        assert_eq!(
            instance_name("Demo.Cluster", "pool.x-1"),
            "demo-cluster-pool-x-1"
        );
        assert_eq!(instance_name("1c", "p"), "k-1c-p");
        let long = instance_name(&"c".repeat(40), &"p".repeat(40));
        assert!(long.len() <= 63, "{long}");
        assert_ne!(
            long,
            instance_name(&"c".repeat(40), &format!("{}q", "p".repeat(39)))
        );
    }
}
