//! `karpenter.k8s.gcp/v1alpha1` GCENodeClass: the image, service account, disks, network and
//! kubelet settings Compute Engine instances launch with. Field for field, with its defaults and
//! validation rules, as the GCP provider's (github.com/cloudpilot-ai/karpenter-provider-gcp
//! v0.5.0, `pkg/apis/v1alpha1/gcenodeclass.go`); `tests/crd_parity.rs` compares the two.

use super::common::{KubeletConfiguration, add_rules};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The Compute Engine settings NodeClaims launch with.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.k8s.gcp",
    version = "v1alpha1",
    kind = "GCENodeClass",
    doc = "GCENodeClass is the Schema for the GCENodeClass API: the Compute Engine settings NodeClaims launch with",
    plural = "gcenodeclasses",
    singular = "gcenodeclass",
    shortname = "gcenc",
    shortname = "gcencs",
    status = "GCENodeClassStatus",
    category = "karpenter",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GCENodeClassSpec {
    /// The service account email the instances run as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^[^@]+@(developer\.gserviceaccount\.com|[^@]+\.iam\.gserviceaccount\.com)$"))]
    pub service_account: Option<String>,
    /// Disks attached to the instances; one may be the boot disk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 10))]
    pub disks: Vec<Disk>,
    /// Images to boot, by alias (`ContainerOptimizedOS@latest`), family or id. Terms are ORed.
    #[schemars(transform = image_term_rules)]
    pub image_selector_terms: Vec<ImageSelectorTerm>,
    /// The image family, when no alias says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Ubuntu", "ContainerOptimizedOS"]))]
    pub image_family: Option<String>,
    /// The subnetwork's secondary range for pod IPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minLength" = 1, "maxLength" = 63, "pattern" = "^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"))]
    pub subnet_range_name: Option<String>,
    /// Kubelet overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_configuration: Option<KubeletConfiguration>,
    /// Labels on the VM instances.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = gce_label_rules)]
    pub labels: BTreeMap<String, String>,
    /// Instance metadata key/value pairs. The keys GKE's bootstrap reads are refused, as the
    /// provider's rule does: the node's bootstrap owns them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = reserved_metadata_rule)]
    pub metadata: BTreeMap<String, String>,
    /// Network tags (firewall targets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 20), transform = network_tag_rules)]
    pub network_tags: Vec<String>,
    /// Shielded VM options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shielded_instance_config: Option<ShieldedInstanceConfig>,
    /// Confidential VM technology (`SEV`, `SEV_SNP`, `TDX`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["SEV", "SEV_SNP", "TDX"]))]
    pub confidential_instance_type: Option<String>,
    /// Network interface overrides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_config: Option<NetworkConfig>,
    /// Taint GPU nodes `nvidia.com/gpu=present:NoSchedule` automatically.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "autoGPUTaint"
    )]
    pub auto_gpu_taint: Option<bool>,
    /// The NVIDIA driver GKE installs on GPU nodes, as a GKE node pool's
    /// `gpu_driver_installation_config`: `default` (GKE's stable one), `latest` (COS only) or
    /// `disabled`. Ignored on machines without GPUs.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "gpuDriverVersion"
    )]
    #[schemars(extend("enum" = ["default", "latest", "disabled"], "default" = "default"))]
    pub gpu_driver_version: Option<String>,
}

/// The instance metadata keys GKE's node bootstrap reads or writes, which a node class may not
/// set (the GCP provider's list, in its order).
pub(crate) const RESERVED_METADATA_KEYS: [&str; 22] = [
    "cluster-location",
    "cluster-name",
    "cluster-uid",
    "configure-sh",
    "containerd-configure-sh",
    "disable-address-manager",
    "enable-os-login",
    "gci-ensure-gke-docker",
    "gci-metrics-enabled",
    "gci-update-strategy",
    "instance-template",
    "install-ssh-psm1",
    "k8s-node-setup-psm1",
    "kube-env",
    "kube-labels",
    "startup-script",
    "user-data",
    "user-profile-psm1",
    "windows-startup-script-ps1",
    "common-psm1",
    "kubeconfig",
    "kubelet-config",
];

fn reserved_metadata_rule(schema: &mut schemars::Schema) {
    let rule = RESERVED_METADATA_KEYS
        .iter()
        .map(|k| format!("!('{k}' in self)"))
        .collect::<Vec<_>>()
        .join(" && ");
    add_rules(
        schema,
        &[(&rule, "spec.metadata contains a reserved GKE metadata key")],
    );
}

/// A network tag is an RFC 1035 label, as Compute Engine requires.
fn network_tag_rules(schema: &mut schemars::Schema) {
    if let Some(items) = schema.get_mut("items").and_then(Value::as_object_mut) {
        items.insert("minLength".to_owned(), json!(1));
        items.insert("maxLength".to_owned(), json!(63));
        items.insert(
            "pattern".to_owned(),
            json!("^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"),
        );
    }
}

fn image_term_rules(schema: &mut schemars::Schema) {
    schema.insert("minItems".to_owned(), 1.into());
    schema.insert("maxItems".to_owned(), 30.into());
    add_rules(
        schema,
        &[
            (
                "self.all(x, has(x.alias) || has(x.id) || has(x.family))",
                "each term must set exactly one of: alias, id, or family (with channel or version)",
            ),
            (
                "!(self.exists(t, has(t.channel)) && self.exists(t, has(t.family) && t.family == 'ContainerOptimizedOS' && has(t.version) && t.version == 'latest'))",
                "channel: and version: latest cannot both appear in the same imageSelectorTerms",
            ),
        ],
    );
}

fn gce_label_rules(schema: &mut schemars::Schema) {
    schema.insert("maxProperties".to_owned(), 20.into());
    add_rules(
        schema,
        &[
            ("self.all(k, k != '')", "empty tag keys aren't supported"),
            (
                "self.all(k, k !='gce:gce-cluster-name')",
                "tag contains a restricted tag matching gce:gce-cluster-name",
            ),
            (
                "self.all(k, !k.startsWith('kubernetes.io/cluster') )",
                "tag contains a restricted tag matching kubernetes.io/cluster/",
            ),
            (
                "self.all(k, k != 'karpenter.sh/nodepool')",
                "tag contains a restricted tag matching karpenter.sh/nodepool",
            ),
            (
                "self.all(k, k !='karpenter.sh/nodeclaim')",
                "tag contains a restricted tag matching karpenter.sh/nodeclaim",
            ),
            (
                "self.all(k, k !='karpenter.k8s.gcp/gcenodeclass')",
                "tag contains a restricted tag matching karpenter.k8s.gcp/gcenodeclass",
            ),
        ],
    );
}

/// Selects an image: exactly one of an alias (`family@version`, deprecated upstream), an id, or
/// a family with a channel or a version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = image_term_shape_rules)]
pub struct ImageSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = gce_alias_rules)]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 160, "x-kubernetes-validations" = [{
        "rule": "self.matches('^.*$')",
        "message": "'id' is improperly formatted, must match the format 'id'"
    }]))]
    pub id: Option<String>,
    /// `ContainerOptimizedOS`, `Ubuntu2404` or `Ubuntu2204`, with a channel or a version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ContainerOptimizedOS", "Ubuntu2404", "Ubuntu2204"]))]
    pub family: Option<String>,
    /// The GKE release channel to follow (ContainerOptimizedOS only). Only `cluster`, the
    /// channel the cluster is enrolled in, is supported here: its nodes boot the image GKE boots
    /// in the cluster's own node pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["rapid", "regular", "stable", "extended", "cluster"], "x-kubernetes-validations" = [{
        "rule": "self == 'cluster'",
        "message": "channel: only 'cluster' is supported by kubectl-karpenter yet; for another channel's image pin it with version"
    }]))]
    pub channel: Option<String>,
    /// `latest`, or a pin: `milestone.build.build.build` for ContainerOptimizedOS, `vYYYYMMDD`
    /// for Ubuntu.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 32))]
    pub version: Option<String>,
}

/// The provider's rules on one image term's shape.
fn image_term_shape_rules(schema: &mut schemars::Schema) {
    add_rules(
        schema,
        &[
            (
                "!has(self.family) || has(self.channel) || has(self.version)",
                "family requires either channel or version to be set",
            ),
            (
                "!(has(self.channel) || has(self.version)) || has(self.family)",
                "channel and version require family to be set",
            ),
            (
                "!(has(self.channel) && has(self.version))",
                "channel and version cannot both be set",
            ),
            (
                "!has(self.channel) || self.family == 'ContainerOptimizedOS'",
                "channel is only supported for family ContainerOptimizedOS",
            ),
            (
                "(has(self.alias) ? 1 : 0) + (has(self.id) ? 1 : 0) + (has(self.family) ? 1 : 0) == 1",
                "exactly one of alias, id, or family must be set",
            ),
            (
                "!has(self.version) || !has(self.family) || self.family != 'ContainerOptimizedOS' || self.version == 'latest' || self.version.matches('^[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+$')",
                "ContainerOptimizedOS version must be 'latest' or 'milestone.build.build.build' (e.g. '125.19216.104.126')",
            ),
            (
                "!has(self.version) || !has(self.family) || self.family != 'Ubuntu2404' || self.version == 'latest' || self.version.matches('^v[0-9]{8}$')",
                "Ubuntu2404 version must be 'latest' or 'vYYYYMMDD' (e.g. 'v20260416')",
            ),
            (
                "!has(self.version) || !has(self.family) || self.family != 'Ubuntu2204' || self.version == 'latest' || self.version.matches('^v[0-9]{8}$')",
                "Ubuntu2204 version must be 'latest' or 'vYYYYMMDD' (e.g. 'v20260416')",
            ),
            (
                "!has(self.family) || self.family != 'Ubuntu'",
                "family 'Ubuntu' is not valid; use Ubuntu2404 for Ubuntu 24.04 or Ubuntu2204 for Ubuntu 22.04",
            ),
        ],
    );
}

fn gce_alias_rules(schema: &mut schemars::Schema) {
    schema.insert("maxLength".to_owned(), 60.into());
    add_rules(
        schema,
        &[
            (
                "self.matches('^[a-zA-Z0-9]+@.+$')",
                "'alias' is improperly formatted, must match the format 'family@version'",
            ),
            (
                "self.find('^[^@]+') in ['ContainerOptimizedOS', 'Ubuntu']",
                "family is not supported, must be one of the following: 'ContainerOptimizedOS,Ubuntu'",
            ),
            (
                "!self.startsWith('ContainerOptimizedOS@') || self.matches('^ContainerOptimizedOS@(latest|[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+)$')",
                "ContainerOptimizedOS version must be 'latest' or 'milestone.build.build.build' (e.g. '125.19216.104.126')",
            ),
            (
                "!self.startsWith('Ubuntu@') || self.matches('^Ubuntu@(latest|v[0-9]{8})$')",
                "Ubuntu version must be 'latest' or 'vYYYYMMDD' (e.g. 'v20260416')",
            ),
        ],
    );
}

/// A disk attached at launch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = disk_rules)]
pub struct Disk {
    /// Size in GiB (at least 10). Unset: the image's size for the boot disk, Compute Engine's
    /// default for the others.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "sizeGiB")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self >= 10", "message": "size invalid"}]))]
    pub size_gib: Option<i32>,
    /// pd-standard, pd-balanced, pd-ssd, pd-extreme, hyperdisk-*, local-ssd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = [
        "hyperdisk-balanced", "hyperdisk-balanced-high-availability", "hyperdisk-extreme",
        "hyperdisk-ml", "hyperdisk-throughput", "local-ssd", "pd-balanced", "pd-extreme",
        "pd-ssd", "pd-standard"
    ]))]
    pub category: Option<String>,
    /// Whether this is the boot disk.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub boot: bool,
    /// An image to preload on this (non-boot) disk, as GKE's secondary boot disks: the disk is
    /// made from the image and the node is labelled for GKE's bootstrap to use it
    /// (`secondaryBootMode: CONTAINER_IMAGE_CACHE` serves its container images from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secondary_boot_image: Option<String>,
    /// How GKE's bootstrap uses the secondary boot disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["MODE_UNSPECIFIED", "CONTAINER_IMAGE_CACHE"]))]
    pub secondary_boot_mode: Option<String>,
    /// The Cloud KMS key the disk is encrypted with:
    /// `projects/P/locations/L/keyRings/R/cryptoKeys/K[/cryptoKeyVersions/V]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+(/cryptoKeyVersions/[^/]+)?$"))]
    pub kms_key_name: Option<String>,
    /// The service account Compute Engine uses the KMS key as; unset, its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^[^@]+@(developer\.gserviceaccount\.com|[^@]+\.iam\.gserviceaccount\.com)$"))]
    pub kms_key_service_account: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "provisionedIOPS"
    )]
    pub provisioned_iops: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_throughput: Option<i64>,
}

/// The provider's rules on which disk categories take provisioned IOPS and throughput.
fn disk_rules(schema: &mut schemars::Schema) {
    // `boot: false` is what an unset `boot` means; upstream's schema has no default for it.
    if let Some(boot) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("boot"))
        .and_then(Value::as_object_mut)
    {
        boot.remove("default");
    }
    add_rules(
        schema,
        &[
            (
                "!has(self.provisionedIOPS) || self.category in ['pd-extreme', 'hyperdisk-balanced', 'hyperdisk-balanced-high-availability', 'hyperdisk-extreme']",
                "provisionedIOPS is only applicable for pd-extreme, hyperdisk-balanced, hyperdisk-balanced-high-availability, and hyperdisk-extreme",
            ),
            (
                "!has(self.provisionedThroughput) || self.category in ['hyperdisk-balanced', 'hyperdisk-balanced-high-availability', 'hyperdisk-throughput', 'hyperdisk-ml']",
                "provisionedThroughput is only applicable for hyperdisk-balanced, hyperdisk-balanced-high-availability, hyperdisk-throughput, and hyperdisk-ml",
            ),
            (
                "!(self.category in ['hyperdisk-balanced', 'hyperdisk-balanced-high-availability']) || (has(self.provisionedIOPS) == has(self.provisionedThroughput))",
                "provisionedIOPS and provisionedThroughput must both be set or both be unset for hyperdisk-balanced and hyperdisk-balanced-high-availability",
            ),
        ],
    );
}

/// The GCP provider's `kubeletConfiguration` validates as the AWS provider's, with three
/// differences this gives the shared schema: every reserved and eviction value is at most 64
/// characters and must parse (a quantity; a percentage too for eviction thresholds), and the
/// object's rules are worded as the GCP provider's. Applied to the generated GCENodeClass CRD.
pub(crate) fn kubelet_schema_as_gcp(schema: &mut Value) {
    const QUANTITY: &str = r"^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$";
    const THRESHOLD: &str = r"^((\\d{1,2}(\\.\\d{1,2})?|100(\\.0{1,2})?)%|(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?)$";
    let Some(kubelet) = schema.pointer_mut("/properties/spec/properties/kubeletConfiguration")
    else {
        return;
    };
    for (field, pattern, what) in [
        ("kubeReserved", QUANTITY, "a resource.Quantity"),
        ("systemReserved", QUANTITY, "a resource.Quantity"),
        (
            "evictionHard",
            THRESHOLD,
            "a percentage or a resource.Quantity",
        ),
        (
            "evictionSoft",
            THRESHOLD,
            "a percentage or a resource.Quantity",
        ),
    ] {
        let Some(map) = kubelet.pointer_mut(&format!("/properties/{field}")) else {
            continue;
        };
        if let Some(values) = map
            .get_mut("additionalProperties")
            .and_then(Value::as_object_mut)
        {
            values.insert("maxLength".to_owned(), json!(64));
        }
        if let Some(rules) = map
            .get_mut("x-kubernetes-validations")
            .and_then(Value::as_array_mut)
        {
            rules.push(json!({
                "rule": format!("self.all(x, self[x].matches('{pattern}'))"),
                "message": format!("{field} values must be {what}"),
            }));
        }
    }
    kubelet["x-kubernetes-validations"] = json!([
        {
            "rule": "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true",
            "message": "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"
        },
        {
            "rule": "has(self.evictionSoft) ? self.evictionSoft.all(e, (e in self.evictionSoftGracePeriod)):true",
            "message": "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod"
        },
        {
            "rule": "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, (e in self.evictionSoft)):true",
            "message": "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft"
        }
    ]);
}

/// Shielded VM options.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShieldedInstanceConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_secure_boot: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_vtpm: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_integrity_monitoring: Option<bool>,
}

/// Per-interface network settings, shaped like GKE node pools' `network_config`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    /// Internal IPs only; defaults to the cluster's setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_private_nodes: Option<bool>,
    /// `projects/{project}/regions/{region}/subnetworks/{name}` for the primary interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnetwork: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 7))]
    pub additional_network_interfaces: Vec<AdditionalNetworkInterface>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalNetworkInterface {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[schemars(extend("minLength" = 1))]
    pub subnetwork: String,
}

/// What Karpenter resolved from the selectors.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GCENodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ResolvedImage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedImage {
    pub source_image: String,
    #[serde(default)]
    pub requirements: Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>,
}
