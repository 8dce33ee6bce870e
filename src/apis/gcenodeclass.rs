//! `karpenter.k8s.gcp/v1alpha1` GCENodeClass: the image, service account, disks, network and
//! kubelet settings Compute Engine instances launch with. Field for field as the GCP provider.

use super::common::{KubeletConfiguration, add_rules};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
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
    /// Instance metadata key/value pairs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Network tags (firewall targets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 20))]
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
    /// GPU driver version to install (`DEFAULT`, `LATEST`, `INSTALLATION_DISABLED`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "gpuDriverVersion"
    )]
    pub gpu_driver_version: Option<String>,
}

fn image_term_rules(schema: &mut schemars::Schema) {
    schema.insert("minItems".to_owned(), 1.into());
    schema.insert("maxItems".to_owned(), 30.into());
    add_rules(
        schema,
        &[(
            "self.all(x, has(x.alias) || has(x.id) || has(x.family))",
            "expected at least one, got none, ['alias', 'id', 'family']",
        )],
    );
}

fn gce_label_rules(schema: &mut schemars::Schema) {
    schema.insert("maxProperties".to_owned(), 20.into());
    add_rules(
        schema,
        &[
            ("self.all(k, k != '')", "empty tag keys aren't supported"),
            (
                "self.all(k, k != 'gce:gce-cluster-name')",
                "tag contains a restricted tag matching gce:gce-cluster-name",
            ),
            (
                "self.all(k, !k.startsWith('kubernetes.io/cluster'))",
                "tag contains a restricted tag matching kubernetes.io/cluster/",
            ),
            (
                "self.all(k, k != 'karpenter.sh/nodepool')",
                "tag contains a restricted tag matching karpenter.sh/nodepool",
            ),
            (
                "self.all(k, k != 'karpenter.sh/nodeclaim')",
                "tag contains a restricted tag matching karpenter.sh/nodeclaim",
            ),
            (
                "self.all(k, k != 'karpenter.k8s.gcp/gcenodeclass')",
                "tag contains a restricted tag matching karpenter.k8s.gcp/gcenodeclass",
            ),
        ],
    );
}

/// Selects an image by alias (`family@version`), family (+ channel or version) or id.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = gce_alias_rules)]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 160))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ContainerOptimizedOS", "Ubuntu", "Ubuntu2404", "Ubuntu2204"]))]
    pub family: Option<String>,
    /// Release channel (`rapid`, `regular`, `stable`, `extended`, or `cluster` for the cluster's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["rapid", "regular", "stable", "extended", "cluster"]))]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
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
        ],
    );
}

/// A disk attached at launch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    /// Size in GiB (at least 10).
    #[serde(rename = "sizeGiB")]
    #[schemars(range(min = 10))]
    pub size_gib: i32,
    /// pd-standard, pd-balanced, pd-ssd, pd-extreme, hyperdisk-*, local-ssd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = [
        "pd-standard", "pd-balanced", "pd-ssd", "pd-extreme", "hyperdisk-balanced",
        "hyperdisk-balanced-high-availability", "hyperdisk-extreme", "hyperdisk-throughput",
        "hyperdisk-ml", "local-ssd"
    ]))]
    pub category: Option<String>,
    /// Whether this is the boot disk.
    #[serde(default)]
    pub boot: bool,
    /// Not implemented yet: refused at apply, so no one counts on images it would preload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == ''",
        "message": "secondaryBootImage is not supported by kubectl-karpenter yet: remove it (images are pulled as usual)"
    }]))]
    pub secondary_boot_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_name: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "provisionedIOPS"
    )]
    pub provisioned_iops: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioned_throughput: Option<i64>,
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
