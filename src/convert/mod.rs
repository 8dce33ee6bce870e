//! `kubectl karpenter convert`: Karpenter manifests written for the retired APIs, rewritten for
//! v1. Upstream removed its conversion webhook (v1.1) and never shipped a v1alpha5 converter to
//! v1, so manifests copied from older walkthroughs fail with a bare "no matches for kind".
//!
//! Objects go through the versions upstream went through, each step following upstream's own
//! mapping:
//!
//! * [`v1alpha5`]: `Provisioner` (karpenter.sh/v1alpha5) and `AWSNodeTemplate`
//!   (karpenter.k8s.aws/v1alpha1) to v1beta1 `NodePool` and `EC2NodeClass`, as upstream's v1beta1
//!   migration guide maps them (an inline `spec.provider` becomes an `EC2NodeClass` of the
//!   Provisioner's name; the requirements v1alpha5's defaulting webhook added are written out).
//! * [`v1beta1`]: v1beta1 `NodePool`, `NodeClaim` and `EC2NodeClass` to v1, as upstream's v1.0
//!   conversion webhooks (`nodepool_conversion.go`, `nodeclaim_conversion.go`,
//!   `ec2nodeclass_conversion.go`) and its v1 migration guide do, with the guide's manual steps
//!   done too: a NodePool's `kubelet` moves into the `EC2NodeClass` it uses, and NodePools that
//!   share a class with different kubelet settings get a class each.
//!
//! Objects already at the served versions pass through unchanged. Whatever cannot be carried
//! over is a [`Warning`] naming the object, the field and what to do; nothing is dropped
//! silently. Two inputs that make the same object are a [`ConvertError::Conflict`].

mod v1alpha5;
mod v1beta1;

use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt;

/// One object read from the user's manifests.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// Where it came from (`nodepools.yaml, document 2`), for errors.
    pub source: String,
    pub object: Value,
}

/// Something the conversion could not carry over as it was, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// `NodePool default`.
    pub object: String,
    /// The field in the input (`spec.kubeletConfiguration.containerRuntime`), or empty for the
    /// whole object.
    pub field: String,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.object, self.message)
        } else {
            write!(f, "{}: {}: {}", self.object, self.field, self.message)
        }
    }
}

/// The v1 objects, in the order of their inputs, and the warnings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conversion {
    pub objects: Vec<Value>,
    pub warnings: Vec<Warning>,
}

/// Why the inputs cannot be converted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    /// Two inputs make the same object.
    #[error("{first} and {second} both make {kind} {name}: keep one of them")]
    Conflict {
        kind: String,
        name: String,
        first: String,
        second: String,
    },
}

/// Collects warnings about one object.
pub(crate) struct Notes<'a> {
    object: String,
    warnings: &'a mut Vec<Warning>,
}

impl Notes<'_> {
    pub(crate) fn warn(&mut self, field: &str, message: impl Into<String>) {
        self.warnings.push(Warning {
            object: self.object.clone(),
            field: field.to_owned(),
            message: message.into(),
        });
    }
}

/// `Kind name` of an object, as warnings name it.
pub fn describe(object: &Value) -> String {
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or("object"),
        object["metadata"]["name"].as_str().unwrap_or("(unnamed)")
    )
}

/// The API versions served here, whose objects pass through.
const SERVED: &[(&str, &str)] = &[
    ("karpenter.sh/v1", "NodePool"),
    ("karpenter.sh/v1", "NodeClaim"),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"),
    ("karpenter.k8s.gcp/v1alpha1", "GCENodeClass"),
    ("karpenter.kwok.sh/v1alpha1", "KWOKNodeClass"),
];

/// An object on its way to v1, with the input it came from.
pub(crate) struct Staged {
    pub(crate) source: String,
    pub(crate) object: Value,
    /// Already v1: not touched again.
    pub(crate) done: bool,
}

/// Converts every input to v1.
pub fn convert(inputs: Vec<Input>) -> Result<Conversion, ConvertError> {
    let mut warnings = Vec::new();
    let mut staged = Vec::new();
    for input in inputs {
        let api_version = input.object["apiVersion"].as_str().unwrap_or_default();
        let kind = input.object["kind"].as_str().unwrap_or_default();
        let mut notes = Notes {
            object: describe(&input.object),
            warnings: &mut warnings,
        };
        match (api_version, kind) {
            (v, k) if SERVED.contains(&(v, k)) => staged.push(Staged {
                source: input.source,
                object: input.object,
                done: true,
            }),
            ("karpenter.sh/v1alpha5", "Provisioner") => {
                for object in v1alpha5::provisioner(&input.object, &mut notes) {
                    staged.push(Staged {
                        source: input.source.clone(),
                        object,
                        done: false,
                    });
                }
            }
            ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate") => staged.push(Staged {
                source: input.source,
                object: v1alpha5::node_template(&input.object, &mut notes),
                done: false,
            }),
            ("karpenter.sh/v1alpha5", "Machine") => notes.warn(
                "",
                "skipped: Machines are made by Karpenter, not by users; once the new NodePools run, delete them with their Provisioners",
            ),
            ("karpenter.sh/v1beta1", "NodePool" | "NodeClaim")
            | ("karpenter.k8s.aws/v1beta1", "EC2NodeClass") => staged.push(Staged {
                source: input.source,
                object: input.object,
                done: false,
            }),
            _ => notes.warn(
                "",
                format!(
                    "skipped: {api_version} {kind} is not a Karpenter object convert knows"
                ),
            ),
        }
    }
    check_conflicts(&staged)?;
    let objects = v1beta1::to_v1(staged, &mut warnings);
    Ok(Conversion { objects, warnings })
}

/// Two inputs making one object (same group, kind and name) are an error naming both.
fn check_conflicts(staged: &[Staged]) -> Result<(), ConvertError> {
    let mut seen: BTreeMap<(String, String, String), &str> = BTreeMap::new();
    for s in staged {
        let group = s.object["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let kind = s.object["kind"].as_str().unwrap_or_default().to_owned();
        let name = s.object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if let Some(first) = seen.insert((group, kind.clone(), name.clone()), &s.source) {
            return Err(ConvertError::Conflict {
                kind,
                name,
                first: first.to_owned(),
                second: s.source.clone(),
            });
        }
    }
    Ok(())
}

/// The object's metadata as a user would write it: without what the API server set (and
/// without kubectl's copy of the old version in `last-applied-configuration`).
pub(crate) fn user_metadata(metadata: &Value) -> Value {
    let mut out = Map::new();
    for key in ["name", "namespace", "labels", "annotations"] {
        if let Some(value) = metadata.get(key) {
            out.insert(key.to_owned(), value.clone());
        }
    }
    if let Some(Value::Object(annotations)) = out.get_mut("annotations") {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        if annotations.is_empty() {
            out.remove("annotations");
        }
    }
    Value::Object(out)
}

/// `ttlSeconds…` as a duration: `720h`, `2m`, `90s`.
pub(crate) fn duration_of_seconds(seconds: i64) -> String {
    match seconds {
        s if s % 3600 == 0 && s != 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 && s != 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// Puts `value` at `path` inside `object`, making the maps on the way.
pub(crate) fn set(object: &mut Value, path: &[&str], value: Value) {
    let mut at = object;
    for key in &path[..path.len().saturating_sub(1)] {
        if !at.get(*key).is_some_and(Value::is_object) {
            at[*key] = Value::Object(Map::new());
        }
        at = &mut at[*key];
    }
    if let Some(last) = path.last() {
        at[*last] = value;
    }
}

/// A map of resource quantities with numbers written as strings (`cpu: 1000` is `"1000"`), as
/// Kubernetes clients read quantities back.
pub(crate) fn quantities(map: &Value) -> Value {
    match map.as_object() {
        Some(map) => Value::Object(
            map.iter()
                .map(|(k, v)| match v {
                    Value::Number(n) => (k.clone(), Value::String(n.to_string())),
                    other => (k.clone(), other.clone()),
                })
                .collect(),
        ),
        None => map.clone(),
    }
}

/// Why v1 refuses `key` as a NodePool template's label or requirement key (the CRD's CEL rules,
/// upstream's `IsRestrictedLabel`), if it does.
pub(crate) fn restricted_label(key: &str) -> Option<&'static str> {
    const ALLOWED: &[&str] = &[
        "beta.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "node.kubernetes.io/windows-build",
    ];
    let domain = key.split_once('/').map_or("", |(domain, _)| domain);
    match key {
        "kubernetes.io/hostname" => Some("Karpenter names each node's host"),
        "karpenter.sh/nodepool" => Some("Karpenter sets it to the NodePool's name"),
        "karpenter.sh/capacity-type" => None,
        _ if ALLOWED.contains(&key) => None,
        _ if domain.ends_with("karpenter.sh") => Some(
            "the karpenter.sh domain is Karpenter's (v1alpha5's karpenter.sh/provisioner-name is karpenter.sh/nodepool, which Karpenter sets)",
        ),
        _ if domain.ends_with("kubernetes.io")
            && !domain.ends_with("node.kubernetes.io")
            && !domain.ends_with("node-restriction.kubernetes.io") =>
        {
            Some("the kubernetes.io domain is restricted in v1")
        }
        _ if domain.ends_with("k8s.io") && !domain.ends_with("kops.k8s.io") => {
            Some("the k8s.io domain is restricted in v1")
        }
        _ => None,
    }
}

/// Whether `value` holds something (not null, not an empty map or list).
pub(crate) fn present(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(object: Value) -> Input {
        Input {
            source: "test.yaml".to_owned(),
            object,
        }
    }

    #[test]
    fn served_objects_pass_through_unchanged_and_others_are_skipped_with_a_warning() {
        let pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "a", "resourceVersion": "7"}, "spec": {"x": 1}});
        let map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let out = convert(vec![input(pool.clone()), input(map)]).unwrap();
        assert_eq!(out.objects, [pool]);
        assert_eq!(
            out.warnings[0].to_string(),
            "ConfigMap c: skipped: v1 ConfigMap is not a Karpenter object convert knows"
        );
    }

    #[test]
    fn two_inputs_that_make_one_object_are_an_error_naming_both() {
        let provisioner = json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "default"}, "spec": {"providerRef": {"name": "default"}}});
        let pool = json!({"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": {}});
        let error = convert(vec![
            Input {
                source: "old.yaml".to_owned(),
                object: provisioner,
            },
            Input {
                source: "new.yaml".to_owned(),
                object: pool,
            },
        ])
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "old.yaml and new.yaml both make NodePool default: keep one of them"
        );
    }

    #[test]
    fn seconds_read_as_the_durations_a_user_would_write() {
        assert_eq!(duration_of_seconds(2_592_000), "720h");
        assert_eq!(duration_of_seconds(120), "2m");
        assert_eq!(duration_of_seconds(90), "90s");
        assert_eq!(duration_of_seconds(0), "0s");
    }
}
