//! Types shared by several Karpenter kinds: requirements with `minValues`, node class
//! references, durations that may be `Never`, and the schema rules that guard them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// How a requirement relates a label key to its values.
///
/// `Gt`, `Lt`, `Gte` and `Lte` compare a single non-negative integer.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum RequirementOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
    Gte,
    Lte,
}

impl std::fmt::Display for RequirementOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Self::In => "In",
            Self::NotIn => "NotIn",
            Self::Exists => "Exists",
            Self::DoesNotExist => "DoesNotExist",
            Self::Gt => "Gt",
            Self::Lt => "Lt",
            Self::Gte => "Gte",
            Self::Lte => "Lte",
        };
        f.write_str(name)
    }
}

/// A node selector requirement plus `minValues`: the least number of distinct values of the
/// key that the instance types kept for a NodeClaim must span (flexibility for the launch).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// The label key the requirement applies to.
    #[schemars(extend(
        "maxLength" = 316,
        "pattern" = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$",
        "x-kubernetes-validations" = [
            {
                "message": "label domain \"kubernetes.io\" is restricted",
                "rule": "self in [\"beta.kubernetes.io/instance-type\", \"failure-domain.beta.kubernetes.io/region\", \"beta.kubernetes.io/os\", \"beta.kubernetes.io/arch\", \"failure-domain.beta.kubernetes.io/zone\", \"topology.kubernetes.io/zone\", \"topology.kubernetes.io/region\", \"node.kubernetes.io/instance-type\", \"kubernetes.io/arch\", \"kubernetes.io/os\", \"node.kubernetes.io/windows-build\"] || self.find(\"^([^/]+)\").endsWith(\"node.kubernetes.io\") || self.find(\"^([^/]+)\").endsWith(\"node-restriction.kubernetes.io\") || !self.find(\"^([^/]+)\").endsWith(\"kubernetes.io\")"
            },
            {
                "message": "label domain \"k8s.io\" is restricted",
                "rule": "self.find(\"^([^/]+)\").endsWith(\"kops.k8s.io\") || !self.find(\"^([^/]+)\").endsWith(\"k8s.io\")"
            },
            {
                "message": "label domain \"karpenter.sh\" is restricted",
                "rule": "self in [\"karpenter.sh/capacity-type\", \"karpenter.sh/nodepool\"] || !self.find(\"^([^/]+)\").endsWith(\"karpenter.sh\")"
            }
        ]
    ))]
    pub key: String,
    /// In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte.
    pub operator: RequirementOperator,
    /// The values the operator applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = 500, "x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<LabelValue>,
    /// The least number of distinct values of this key the NodeClaim's instance types must span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i32>,
}

/// A label value (at most 63 characters).
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(transparent)]
#[schemars(extend("maxLength" = 63, "pattern" = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"))]
pub struct LabelValue(pub String);

impl LabelValue {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for LabelValue {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl std::fmt::Display for LabelValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Adds the rules every list of requirements obeys, on NodePools and NodeClaims alike.
///
/// Values are checked with `has()` first so that a missing `values` list fails the rule with its
/// message instead of a CEL "no such key" error.
pub(crate) fn requirement_list_rules(schema: &mut schemars::Schema) {
    add_rules(
        schema,
        &[
            (
                "self.all(x, x.operator == 'In' ? (has(x.values) && x.values.size() != 0) : true)",
                "requirements with operator 'In' must have a value defined",
            ),
            (
                "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (has(x.values) && x.values.size() == 1 && x.values[0].matches('^[0-9]+$')) : true)",
                "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
            ),
            (
                "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
                "requirements with 'minValues' must have at least that many values specified in the 'values' field",
            ),
        ],
    );
    schema.insert("maxItems".to_owned(), 100.into());
    schema.insert("x-kubernetes-list-type".to_owned(), "atomic".into());
}

/// Appends CEL rules (`rule`, `message`) to a schema's `x-kubernetes-validations`.
pub(crate) fn add_rules(schema: &mut schemars::Schema, rules: &[(&str, &str)]) {
    let entries = rules
        .iter()
        .map(|(rule, message)| serde_json::json!({ "rule": rule, "message": message }));
    let key = "x-kubernetes-validations".to_owned();
    match schema
        .get_mut(&key)
        .and_then(serde_json::Value::as_array_mut)
    {
        Some(existing) => existing.extend(entries),
        None => {
            schema.insert(key, serde_json::Value::Array(entries.collect()));
        }
    }
}

/// Points at the cloud-specific node class (EC2NodeClass, GCENodeClass, KWOKNodeClass).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    /// API group of the node class, e.g. `karpenter.k8s.aws`.
    #[schemars(extend(
        "pattern" = r"^[^/]*$",
        "x-kubernetes-validations" = [{"message": "group may not be empty", "rule": "self != ''"}]
    ))]
    pub group: String,
    /// Kind of the node class, e.g. `EC2NodeClass`.
    #[schemars(extend(
        "x-kubernetes-validations" = [{"message": "kind may not be empty", "rule": "self != ''"}]
    ))]
    pub kind: String,
    /// Name of the node class.
    #[schemars(extend(
        "x-kubernetes-validations" = [{"message": "name may not be empty", "rule": "self != ''"}]
    ))]
    pub name: String,
}

/// A Go-style duration (`30s`, `5m`, `720h`, `1h30m`) that may also be `Never`.
///
/// Kept as the text the user wrote, so that reading and writing an object never rewrites it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(transparent)]
#[schemars(extend("pattern" = r"^(([0-9]+(s|m|h))+|Never)$"))]
pub struct NillableDuration(pub String);

/// Why a duration could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid duration {text:?}: expected a number followed by s, m or h (e.g. 30s, 720h, 1h30m)"
)]
pub struct InvalidDuration {
    /// The text that failed to parse.
    pub text: String,
}

impl NillableDuration {
    /// The upstream default for `expireAfter`.
    pub(crate) fn default_expire_after() -> Self {
        Self("720h".to_owned())
    }

    /// `Never`.
    pub fn never() -> Self {
        Self("Never".to_owned())
    }

    /// The duration, or `None` for `Never`.
    pub(crate) fn to_duration(&self) -> Result<Option<Duration>, InvalidDuration> {
        if self.0 == "Never" {
            return Ok(None);
        }
        parse_duration(&self.0).map(Some)
    }
}

/// Parses the subset of Go's `time.ParseDuration` that Karpenter's schema allows: one or more
/// `<integer><unit>` groups with units `h`, `m`, `s` (and, for robustness, `ms`).
pub fn parse_duration(text: &str) -> Result<Duration, InvalidDuration> {
    let invalid = || InvalidDuration {
        text: text.to_owned(),
    };
    if text.is_empty() {
        return Err(invalid());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(invalid());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else {
            return Err(invalid());
        };
        rest = &rest[len..];
        let part = unit
            .checked_mul(u32::try_from(value).map_err(|_| invalid())?)
            .ok_or_else(invalid)?;
        total = total.checked_add(part).ok_or_else(invalid)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("720h"), Ok(Duration::from_secs(720 * 3600)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("h").is_err());
    }

    #[test]
    fn never_means_no_duration() {
        assert_eq!(NillableDuration::never().to_duration(), Ok(None));
        assert_eq!(
            NillableDuration::default_expire_after().to_duration(),
            Ok(Some(Duration::from_secs(720 * 3600)))
        );
    }
}

/// Kubelet settings a node class may override, named as in the kubelet's own
/// `KubeletConfiguration` (EC2NodeClass `spec.kubelet`, GCENodeClass `spec.kubeletConfiguration`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = kubelet_rules)]
pub struct KubeletConfiguration {
    /// IP addresses of the cluster DNS servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    /// The most pods a node runs; overrides the provider's computed value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
    /// Pods per CPU core; the lower of this and `maxPods` wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods_per_core: Option<i32>,
    /// Resources held back for the OS (cpu, memory, ephemeral-storage, pid).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = reserved_rules)]
    pub system_reserved: BTreeMap<String, String>,
    /// Resources held back for Kubernetes daemons (cpu, memory, ephemeral-storage, pid).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = reserved_rules)]
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = eviction_signal_rules)]
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = eviction_signal_rules)]
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace periods for the soft eviction thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = eviction_signal_rules)]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// Longest pod grace period used for soft evictions, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage (percent) above which image garbage collection always runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage (percent) below which image garbage collection never runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Enforce CPU limits with CFS quota.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "cpuCFSQuota"
    )]
    pub cpu_cfs_quota: Option<bool>,
    /// Any other `KubeletConfiguration` field, kept as written: upstream's EC2NodeClass
    /// `kubelet` is an open map whose other fields go to the node's kubelet configuration.
    #[serde(flatten)]
    #[schemars(skip)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// EC2NodeClass `spec.kubelet` is open as upstream's (v1.15) is: fields beyond the typed ones
/// are kept, not pruned, and reach the kubelet's configuration.
pub(crate) fn open_kubelet(schema: &mut schemars::Schema) {
    schema.insert(
        "x-kubernetes-preserve-unknown-fields".to_owned(),
        true.into(),
    );
}

fn kubelet_rules(schema: &mut schemars::Schema) {
    add_rules(
        schema,
        &[
            (
                "has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ? self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent : true",
                "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
            ),
            (
                "has(self.evictionSoft) ? self.evictionSoft.all(e, has(self.evictionSoftGracePeriod) && (e in self.evictionSoftGracePeriod)) : true",
                "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
            ),
            (
                "has(self.evictionSoftGracePeriod) ? self.evictionSoftGracePeriod.all(e, has(self.evictionSoft) && (e in self.evictionSoft)) : true",
                "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
            ),
        ],
    );
}

fn reserved_rules(schema: &mut schemars::Schema) {
    schema.insert("maxProperties".to_owned(), 10.into());
    add_rules(
        schema,
        &[
            (
                "self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')",
                "valid keys are ['cpu','memory','ephemeral-storage','pid']",
            ),
            (
                "self.all(x, !self[x].startsWith('-'))",
                "reserved quantities cannot be negative",
            ),
        ],
    );
}

fn eviction_signal_rules(schema: &mut schemars::Schema) {
    schema.insert("maxProperties".to_owned(), 10.into());
    add_rules(
        schema,
        &[(
            "self.all(x, x in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])",
            "valid keys are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",
        )],
    );
}

/// Rules for the tags of a selector term (upstream's): no empty keys or values, at most 20.
pub(crate) fn tag_map_rules(schema: &mut schemars::Schema) {
    schema.insert("maxProperties".to_owned(), 20.into());
    add_rules(
        schema,
        &[(
            "self.all(k, k != '' && self[k] != '')",
            "empty tag keys or values aren't supported",
        )],
    );
}
