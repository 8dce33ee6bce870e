//! A node class's static hash: what a claim records at launch so that a later change to its
//! node class's static fields (user data, tags, block devices, metadata options, kubelet...)
//! makes the claim drifted, as upstream's providers do with `karpenter.k8s.aws/ec2nodeclass-hash`
//! (`EC2NodeClass.Hash()`, judged by `areStaticFieldsDrifted` in the AWS provider's
//! `pkg/cloudprovider/drift.go`).
//!
//! Dynamic fields (the selector terms, whose meaning is what they resolve to) are left out, as
//! upstream tags them `hash:"ignore"`; their drift is judged by comparing the instance with the
//! class's resolved status (images, subnets, security groups) instead.
//!
//! The hash is not upstream's bit for bit: upstream hashes Go structs with hashstructure and
//! folds in the cluster's CA bundle, which this agent does not hold. The value stamped beside it,
//! [`HASH_VERSION`], differs from every version upstream writes (`v1`...`v6` so far), so each
//! side skips the other's claims, as upstream does for a version it did not write, and no fleet
//! rolls when one controller replaces the other. What is upstream's: the annotation keys, the
//! fields left out, zero values counting as absent (`IgnoreZeroValue`), lists as sets
//! (`SlicesAsSets`), and the verdict name `NodeClassDrift`.

use serde::Serialize;
use serde_json::Value;
use std::hash::Hasher;

/// The hash version this agent stamps beside its node-class hashes.
pub(crate) const HASH_VERSION: &str = "kubectl-karpenter/v1";

/// Upstream's drift reason for a claim whose node class's static fields changed.
pub(crate) const NODE_CLASS_DRIFT: &str = "NodeClassDrift";

/// The hash of `spec` less the fields named in `ignore` (by their JSON names), plus values the
/// class resolves to that count like static fields (`resolved`, e.g. upstream's resolved AMI
/// family). Field order, list order and zero values do not change it.
pub(crate) fn hash(spec: &impl Serialize, ignore: &[&str], resolved: &[(&str, &str)]) -> String {
    let mut value = serde_json::to_value(spec).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut value {
        for field in ignore {
            fields.remove(*field);
        }
        for (key, resolved) in resolved {
            fields.insert(
                format!("resolved:{key}"),
                Value::String((*resolved).to_owned()),
            );
        }
    }
    let mut text = String::new();
    canonical(&value, &mut text);
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(text.as_bytes());
    hasher.finish().to_string()
}

/// Whether a claim's recorded hash says its class changed: only when the claim was stamped by
/// this agent's current hash version (a claim upstream or an older agent stamped is not judged,
/// as upstream skips a version it did not write).
pub(crate) fn drifted(recorded: Option<&str>, recorded_version: Option<&str>, now: &str) -> bool {
    recorded_version == Some(HASH_VERSION) && recorded.is_some_and(|recorded| recorded != now)
}

/// Writes `value` with object keys sorted, list elements sorted by their own canonical text
/// (lists are sets), and zero values (null, false, 0, "", [], {}) left out of objects.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(fields) => {
            let mut keys: Vec<&String> = fields
                .iter()
                .filter(|(_, v)| !is_zero(v))
                .map(|(k, _)| k)
                .collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&fields[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            let mut texts: Vec<String> = items
                .iter()
                .map(|item| {
                    let mut text = String::new();
                    canonical(item, &mut text);
                    text
                })
                .collect();
            texts.sort();
            out.push('[');
            out.push_str(&texts.join(","));
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.values().all(is_zero),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ignored_fields_do_not_count() {
        let a = json!({"userData": "x", "subnetSelectorTerms": [{"id": "subnet-1"}]});
        let b = json!({"userData": "x", "subnetSelectorTerms": [{"id": "subnet-2"}]});
        let ignore = ["subnetSelectorTerms"];
        assert_eq!(hash(&a, &ignore, &[]), hash(&b, &ignore, &[]));
    }

    #[test]
    fn a_static_field_changes_the_hash() {
        let a = json!({"userData": "x", "tags": {"team": "a"}});
        let b = json!({"userData": "x", "tags": {"team": "b"}});
        assert_ne!(hash(&a, &[], &[]), hash(&b, &[], &[]));
    }

    #[test]
    fn key_order_list_order_and_zero_values_do_not_count() {
        let a = json!({"tags": {"a": "1", "b": "2"}, "blockDeviceMappings": [{"deviceName": "/dev/xvda"}, {"deviceName": "/dev/xvdb"}]});
        let b = json!({"blockDeviceMappings": [{"deviceName": "/dev/xvdb"}, {"deviceName": "/dev/xvda"}],
            "tags": {"b": "2", "a": "1"}, "detailedMonitoring": false, "context": null, "userData": ""});
        assert_eq!(hash(&a, &[], &[]), hash(&b, &[], &[]));
    }

    #[test]
    fn a_resolved_value_counts_like_a_field() {
        let spec = json!({"userData": "x"});
        assert_ne!(
            hash(&spec, &[], &[("amiFamily", "AL2023")]),
            hash(&spec, &[], &[("amiFamily", "Bottlerocket")])
        );
    }

    #[test]
    fn only_claims_stamped_with_this_version_are_judged() {
        assert!(drifted(Some("1"), Some(HASH_VERSION), "2"));
        assert!(!drifted(Some("1"), Some(HASH_VERSION), "1"));
        assert!(!drifted(Some("1"), Some("v6"), "2"), "upstream's stamp");
        assert!(!drifted(None, None, "2"), "a claim made before stamping");
    }
}
