//! `karpenter.k8s.aws/v1` EC2NodeClass: where and how AWS instances launch (subnets, security
//! groups, AMIs, IAM role, disks, metadata options, kubelet). Field for field as upstream.

use super::common::{KubeletConfiguration, add_rules, open_kubelet, tag_map_rules};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The AWS settings NodeClaims launch with.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    doc = "EC2NodeClass is the Schema for the EC2NodeClass API: the AWS settings NodeClaims launch with",
    plural = "ec2nodeclasses",
    singular = "ec2nodeclass",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    status = "EC2NodeClassStatus",
    category = "karpenter",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Role","type":"string","jsonPath":".spec.role","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ec2_spec_rules)]
pub struct EC2NodeClassSpec {
    /// Subnets to launch in, by tags or id.
    #[schemars(transform = subnet_term_rules)]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Security groups for the instances, by tags, id or name.
    #[schemars(transform = security_group_term_rules)]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Capacity reservations the instances may use. Not implemented yet: refused at apply, so
    /// no one relies on a reservation that is never used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend(
        "maxItems" = 30,
        "x-kubernetes-validations" = [{
            "rule": "self.size() == 0",
            "message": "capacityReservationSelectorTerms is not supported by kubectl-karpenter yet: remove it (instances launch as on-demand or spot, outside any reservation)"
        }]
    ))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// Whether instances get a public IP address (default: the subnet's setting).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "associatePublicIPAddress"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// Images to boot, by alias (`al2023@latest`), id, name/owner, tags or SSM parameter.
    #[schemars(transform = ami_term_rules)]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// How user data is built; inferred from an alias when one is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025"]))]
    pub ami_family: Option<String>,
    /// Extra user data, merged with the AMI family's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// The IAM role for the nodes; Karpenter manages the instance profile. Exclusive with
    /// `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxLength" = 64,
        "x-kubernetes-validations" = [{"message": "role cannot be empty", "rule": "self != ''"}]
    ))]
    pub role: Option<String>,
    /// An existing instance profile for the nodes. Exclusive with `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxLength" = 128,
        "x-kubernetes-validations" = [{"message": "instanceProfile cannot be empty", "rule": "self != ''"}]
    ))]
    pub instance_profile: Option<String>,
    /// Tags for every resource launched (instances, volumes, launch templates).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = ec2_tag_rules)]
    pub tags: BTreeMap<String, String>,
    /// Kubelet overrides: the typed fields, and any other `KubeletConfiguration` field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = open_kubelet)]
    pub kubelet: Option<KubeletConfiguration>,
    /// Volumes attached at launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = block_device_rules)]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// How local instance store volumes are used (`RAID0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["RAID0"]))]
    pub instance_store_policy: Option<String>,
    /// Detailed (1-minute) CloudWatch monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service settings.
    #[serde(default = "MetadataOptions::upstream_default")]
    pub metadata_options: MetadataOptions,
    /// Outpost/ODCR context id passed to CreateFleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Upstream's `cpuOptions`, not supported yet: refused at apply with a message saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "unsupported_object")]
    pub cpu_options: Option<serde_json::Value>,
    /// Upstream's `enclaveOptions`, not supported yet: refused at apply with a message saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "unsupported_object")]
    pub enclave_options: Option<serde_json::Value>,
    /// Upstream's `connectionTracking`, not supported yet: refused at apply with a message saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "unsupported_object")]
    pub connection_tracking: Option<serde_json::Value>,
    /// Upstream's `networkInterfaces`, not supported yet: refused at apply with a message saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "unsupported_array")]
    pub network_interfaces: Option<serde_json::Value>,
    /// Upstream's `placementGroupSelector`, not supported yet: refused at apply with a message saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "unsupported_object")]
    pub placement_group_selector: Option<serde_json::Value>,
    /// Upstream's `ipPrefixCount`, not supported yet: refused at apply with a message saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "unsupported_integer")]
    pub ip_prefix_count: Option<serde_json::Value>,
}

/// The message refusing an upstream field this project does not implement yet.
fn not_supported(field: &str) -> serde_json::Value {
    serde_json::json!([{
        "rule": "false",
        "message": format!("{field} is not supported by kubectl-karpenter yet: remove it"),
    }])
}

fn unsupported_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "x-kubernetes-validations": not_supported("this field"),
    })
}

fn unsupported_array(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "x-kubernetes-validations": not_supported("this field"),
    })
}

fn unsupported_integer(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "integer",
        "x-kubernetes-validations": not_supported("this field"),
    })
}

fn ec2_spec_rules(schema: &mut schemars::Schema) {
    add_rules(
        schema,
        &[(
            "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))",
            "must specify exactly one of ['role', 'instanceProfile']",
        )],
    );
    // Upstream's rules verbatim: an amiFamily set beside an alias must match it (or be Custom).
    for (alias, family, article) in [
        ("al2", "AL2", "an"),
        ("al2023", "AL2023", "an"),
        ("bottlerocket", "Bottlerocket", "a"),
        ("windows2019", "Windows2019", "a"),
        ("windows2022", "Windows2022", "a"),
        ("windows2025", "Windows2025", "a"),
    ] {
        add_rules(
            schema,
            &[(
                &format!(
                    "!has(self.amiFamily) || (self.amiSelectorTerms.exists(x, has(x.alias) && x.alias.find('^[^@]+') == '{alias}') ? (self.amiFamily == 'Custom' || self.amiFamily == '{family}') : true)"
                ),
                &format!(
                    "if set, amiFamily must be '{family}' or 'Custom' when using {article} {family} alias"
                ),
            )],
        );
    }
    add_rules(
        schema,
        &[(
            "self.amiSelectorTerms.exists(x, has(x.alias)) ? true : has(self.amiFamily)",
            "must specify amiFamily if amiSelectorTerms does not contain an alias",
        )],
    );
}

fn subnet_term_rules(schema: &mut schemars::Schema) {
    schema.insert("maxItems".to_owned(), 30.into());
    add_rules(
        schema,
        &[
            ("self.size() != 0", "subnetSelectorTerms cannot be empty"),
            (
                "self.all(x, has(x.tags) || has(x.id))",
                "expected at least one, got none, ['tags', 'id']",
            ),
            (
                "!self.all(x, has(x.id) && has(x.tags))",
                "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",
            ),
        ],
    );
}

fn security_group_term_rules(schema: &mut schemars::Schema) {
    schema.insert("maxItems".to_owned(), 30.into());
    add_rules(
        schema,
        &[
            (
                "self.size() != 0",
                "securityGroupSelectorTerms cannot be empty",
            ),
            (
                "self.all(x, has(x.tags) || has(x.id) || has(x.name))",
                "expected at least one, got none, ['tags', 'id', 'name']",
            ),
            (
                "!self.exists(x, has(x.id) && (has(x.tags) || has(x.name)))",
                "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            ),
            (
                "!self.exists(x, has(x.name) && (has(x.tags) || has(x.id)))",
                "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",
            ),
        ],
    );
}

fn ami_term_rules(schema: &mut schemars::Schema) {
    schema.insert("minItems".to_owned(), 1.into());
    schema.insert("maxItems".to_owned(), 30.into());
    add_rules(
        schema,
        &[
            (
                "self.all(x, has(x.tags) || has(x.id) || has(x.name) || has(x.alias) || has(x.ssmParameter))",
                "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",
            ),
            (
                "!self.exists(x, has(x.id) && (has(x.alias) || has(x.tags) || has(x.name) || has(x.owner)))",
                "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            ),
            (
                "!self.exists(x, has(x.alias) && (has(x.id) || has(x.tags) || has(x.name) || has(x.owner)))",
                "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms",
            ),
            (
                "!(self.exists(x, has(x.alias)) && self.size() != 1)",
                "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms",
            ),
        ],
    );
}

/// Upstream's rules for `spec.tags`, verbatim: no empty key, none of the tags Karpenter and EKS
/// set themselves.
fn ec2_tag_rules(schema: &mut schemars::Schema) {
    add_rules(
        schema,
        &[
            ("self.all(k, k != '')", "empty tag keys aren't supported"),
            (
                "self.all(k, k !='eks:eks-cluster-name')",
                "tag contains a restricted tag matching eks:eks-cluster-name",
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
                "self.all(k, k !='karpenter.k8s.aws/ec2nodeclass')",
                "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass",
            ),
        ],
    );
}

/// Upstream's rules for an EBS volume, verbatim.
fn ebs_rules(schema: &mut schemars::Schema) {
    add_rules(
        schema,
        &[
            (
                "has(self.snapshotID) || has(self.volumeSize)",
                "snapshotID or volumeSize must be defined",
            ),
            (
                "!has(self.volumeInitializationRate) || (has(self.snapshotID) && self.snapshotID != '')",
                "snapshotID must be set when volumeInitializationRate is set",
            ),
        ],
    );
}

fn block_device_rules(schema: &mut schemars::Schema) {
    schema.insert("maxItems".to_owned(), 50.into());
    add_rules(
        schema,
        &[(
            "self.filter(x, has(x.rootVolume)?x.rootVolume==true:false).size() <= 1",
            "must have only one blockDeviceMappings with rootVolume",
        )],
    );
}

/// Selects subnets by tags (all must match) or by id.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = tag_map_rules)]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^subnet-[0-9a-z]+$"))]
    pub id: Option<String>,
}

/// Selects security groups by tags, id or name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = tag_map_rules)]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^sg-[0-9a-z]+$"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Selects capacity reservations by tags or id, optionally of one owner account.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = tag_map_rules)]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ownerID")]
    #[schemars(extend("pattern" = "^[0-9]{12}$"))]
    pub owner_id: Option<String>,
}

/// Selects AMIs. An alias (`al2023@latest`, `bottlerocket@v1.20.0`) must be the only term.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = ami_alias_rules)]
    pub alias: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = tag_map_rules)]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = "^ami-[0-9a-z]+$"))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

fn ami_alias_rules(schema: &mut schemars::Schema) {
    schema.insert("maxLength".to_owned(), 30.into());
    add_rules(
        schema,
        &[
            (
                "self.matches('^[a-zA-Z0-9]+@.+$')",
                "'alias' is improperly formatted, must match the format 'family@version'",
            ),
            (
                "self.split('@')[0] in ['al2','al2023','bottlerocket','windows2019','windows2022','windows2025']",
                "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",
            ),
            (
                "self.split('@')[0] in ['windows2019','windows2022','windows2025'] ? self.split('@')[1] == 'latest' : true",
                "windows families may only specify version 'latest'",
            ),
        ],
    );
}

/// One volume attached at launch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Whether this is the root volume (at most one may be).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<bool>,
}

/// An EBS volume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = ebs_rules)]
pub struct BlockDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "kmsKeyID")]
    pub kms_key_id: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "snapshotID"
    )]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// Size as a quantity, e.g. `20Gi` (up to 64 TiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "pattern" = r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
    ))]
    pub volume_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"]))]
    pub volume_type: Option<String>,
}

/// Instance metadata service (IMDS) settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    #[serde(default = "MetadataOptions::enabled")]
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub http_endpoint: String,
    #[serde(default = "MetadataOptions::disabled", rename = "httpProtocolIPv6")]
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub http_protocol_ipv6: String,
    #[serde(default = "MetadataOptions::one_hop")]
    #[schemars(range(min = 1, max = 64))]
    pub http_put_response_hop_limit: i64,
    #[serde(default = "MetadataOptions::required")]
    #[schemars(extend("enum" = ["required", "optional"]))]
    pub http_tokens: String,
}

impl MetadataOptions {
    fn enabled() -> String {
        "enabled".to_owned()
    }
    fn disabled() -> String {
        "disabled".to_owned()
    }
    fn one_hop() -> i64 {
        1
    }
    fn required() -> String {
        "required".to_owned()
    }

    /// IMDSv2 only, one hop: upstream's default.
    pub(crate) fn upstream_default() -> Self {
        Self {
            http_endpoint: Self::enabled(),
            http_protocol_ipv6: Self::disabled(),
            http_put_response_hop_limit: Self::one_hop(),
            http_tokens: Self::required(),
        }
    }
}

/// What Karpenter resolved from the selectors.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ResolvedSubnet>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<ResolvedSecurityGroup>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<ResolvedCapacityReservation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<ResolvedAmi>,
    /// The instance profile Karpenter created for `role`, or the one named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Ready, and the conditions behind it (SubnetsReady, SecurityGroupsReady, AMIsReady, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSubnet {
    pub id: String,
    pub zone: String,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "zoneID")]
    pub zone_id: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSecurityGroup {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedCapacityReservation {
    pub id: String,
    pub availability_zone: String,
    pub instance_type: String,
    #[serde(rename = "ownerID")]
    pub owner_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedAmi {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<bool>,
    /// Which nodes the AMI is for (architecture, GPU, ...).
    #[serde(default)]
    pub requirements: Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>,
}
