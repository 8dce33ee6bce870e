//! A NodePool's template hash, `karpenter.sh/nodepool-hash`, computed bit for bit as upstream's
//! `NodePool.Hash()` (`pkg/apis/v1/nodepool.go`): `hashstructure.Hash(spec.template, FormatV2,
//! {SlicesAsSets, IgnoreZeroValue, ZeroNil})` from github.com/mitchellh/hashstructure v2, with
//! upstream's `hash:"ignore"` fields (the requirements) left out. Claims carry it so drift can
//! be judged later; matching upstream means claims an upstream controller made are judged
//! correctly after a switch, and the other way round.
//!
//! hashstructure walks Go values by reflection, so the walk below follows the Go types of
//! upstream's template field by field: each struct hashes its Go type name, then folds in its
//! non-zero fields in declaration order, keyed by their Go field names.

use super::NodePool;
use super::common::{NillableDuration, NodeClassReference};
use super::nodepool::{NodeClaimTemplate, NodeClaimTemplateSpec, TemplateMetadata};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::BTreeMap;
use std::time::Duration;

impl NodePool {
    /// The hash of this pool's template, as upstream's `NodePool.Hash()` (hash version
    /// [`NODE_POOL_HASH_VERSION_VALUE`](super::labels::NODE_POOL_HASH_VERSION_VALUE)).
    pub fn hash(&self) -> String {
        template(&self.spec.template).to_string()
    }

    /// The hash this agent stamped before it computed upstream's (FNV-1a over the template's
    /// JSON less its requirements), under the same version `v3`. Claims made then still carry
    /// it; drift and the hash loop accept it for the unchanged template, so upgrading the agent
    /// does not make every node look drifted.
    pub(crate) fn legacy_hash(&self) -> String {
        use std::hash::Hasher;
        let mut template = serde_json::to_value(&self.spec.template).unwrap_or_default();
        if let Some(spec) = template
            .get_mut("spec")
            .and_then(serde_json::Value::as_object_mut)
        {
            spec.remove("requirements");
        }
        let mut hasher = fnv::FnvHasher::default();
        hasher.write(template.to_string().as_bytes());
        hasher.finish().to_string()
    }
}

/// `NodeClaimTemplate{ObjectMeta, Spec}`.
fn template(template: &NodeClaimTemplate) -> u64 {
    let mut hash = GoStruct::new("NodeClaimTemplate");
    hash.field("ObjectMeta", metadata(&template.metadata));
    hash.field("Spec", Some(spec(&template.spec)));
    hash.finish()
}

/// The template's own `ObjectMeta{Labels, Annotations}`; `None` (a zero value, skipped) when
/// both are empty.
fn metadata(metadata: &TemplateMetadata) -> Option<u64> {
    if metadata.labels.is_empty() && metadata.annotations.is_empty() {
        return None;
    }
    let mut hash = GoStruct::new("ObjectMeta");
    hash.field("Labels", string_map(&metadata.labels));
    hash.field("Annotations", string_map(&metadata.annotations));
    Some(hash.finish())
}

/// `NodeClaimTemplateSpec`, less `Requirements` (`hash:"ignore"`).
fn spec(spec: &NodeClaimTemplateSpec) -> u64 {
    let mut hash = GoStruct::new("NodeClaimTemplateSpec");
    hash.field("Taints", taints(&spec.taints));
    hash.field("StartupTaints", taints(&spec.startup_taints));
    hash.field("NodeClassRef", Some(node_class_ref(&spec.node_class_ref)));
    hash.field(
        "TerminationGracePeriod",
        spec.termination_grace_period
            .as_ref()
            .map(|text| meta_duration(text)),
    );
    hash.field("ExpireAfter", nillable_duration(&spec.expire_after));
    hash.finish()
}

/// `NodeClassReference{Kind, Name, Group}`, in Go's field order (it matters: see [`GoStruct`]).
fn node_class_ref(reference: &NodeClassReference) -> u64 {
    let mut hash = GoStruct::new("NodeClassReference");
    hash.field("Kind", string_field(&reference.kind));
    hash.field("Name", string_field(&reference.name));
    hash.field("Group", string_field(&reference.group));
    hash.finish()
}

/// A `[]corev1.Taint`; `SlicesAsSets` makes it the XOR of its elements, so order does not count.
/// Empty is the nil slice Go decodes an absent field to, a zero value.
fn taints(taints: &[Taint]) -> Option<u64> {
    if taints.is_empty() {
        return None;
    }
    Some(taints.iter().map(taint).fold(0, |set, one| set ^ one))
}

/// `corev1.Taint{Key, Value, Effect, TimeAdded}`.
fn taint(taint: &Taint) -> u64 {
    let mut hash = GoStruct::new("Taint");
    hash.field("Key", string_field(&taint.key));
    hash.field("Value", taint.value.as_deref().and_then(string_field));
    hash.field("Effect", string_field(&taint.effect));
    hash.field("TimeAdded", taint.time_added.as_ref().map(meta_time));
    hash.finish()
}

/// `metav1.Time{time.Time}`: hashstructure hashes a `time.Time` as its `MarshalBinary` bytes.
/// `metav1.Time` decodes into the process's local zone; upstream's image has no zone data, so
/// that is UTC under the name Local, which `MarshalBinary` writes as offset 0 (not -1, which it
/// keeps for the UTC location itself).
fn meta_time(time: &Time) -> u64 {
    // Seconds from 0001-01-01 to 1970-01-01, Go's `unixToInternal`.
    const UNIX_TO_INTERNAL: i64 = 62_135_596_800;
    let mut bytes = Vec::with_capacity(15);
    bytes.push(1); // timeBinaryVersionV1: the offset is a whole number of minutes
    bytes.extend_from_slice(&(time.0.as_second() + UNIX_TO_INTERNAL).to_be_bytes());
    bytes.extend_from_slice(&time.0.subsec_nanosecond().to_be_bytes());
    bytes.extend_from_slice(&0_i16.to_be_bytes());
    let mut hash = GoStruct::new("Time");
    hash.field("Time", Some(fnv1(&bytes)));
    hash.finish()
}

/// `*metav1.Duration{Duration}`: set (even to `0s`) is never a zero value; its inner duration
/// is skipped when zero.
fn meta_duration(text: &str) -> u64 {
    let mut hash = GoStruct::new("Duration");
    hash.field("Duration", go_duration(NillableDuration(text.to_owned())));
    hash.finish()
}

/// `NillableDuration{*time.Duration, Raw}` (Raw is `hash:"ignore"`). `Never` decodes to a nil
/// duration and no Raw, the zero value, skipped.
fn nillable_duration(duration: &NillableDuration) -> Option<u64> {
    let nanos = go_duration(duration.clone())?;
    let mut hash = GoStruct::new("NillableDuration");
    hash.field("Duration", Some(nanos));
    Some(hash.finish())
}

/// A `time.Duration` field: its nanoseconds as an `int64`, `None` when zero (or when it cannot
/// be read, which the CRD's pattern refuses, so it hashes like `Never`).
fn go_duration(text: NillableDuration) -> Option<u64> {
    let nanos = text.to_duration().ok().flatten().map(nanoseconds)?;
    (nanos != 0).then(|| fnv1(&nanos.to_le_bytes()))
}

fn nanoseconds(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// A `map[string]string`: the XOR of `ordered(key, value)` over its entries, then finished.
/// Empty is the nil map Go decodes an absent field to, a zero value.
fn string_map(map: &BTreeMap<String, String>) -> Option<u64> {
    if map.is_empty() {
        return None;
    }
    let entries = map
        .iter()
        .map(|(key, value)| ordered(string(key), string(value)))
        .fold(0, |set, one| set ^ one);
    Some(finish(entries))
}

/// A string field: skipped when empty (Go's zero value).
fn string_field(text: &str) -> Option<u64> {
    (!text.is_empty()).then(|| string(text))
}

fn string(text: &str) -> u64 {
    fnv1(text.as_bytes())
}

/// A Go struct as hashstructure v2 folds it: start from the hash of the type's name; for each
/// field that is not a zero value, `h = finish(h ^ ordered(hash(name), hash(value)))`. The
/// finish after every field makes the result depend on field order.
struct GoStruct(u64);

impl GoStruct {
    fn new(type_name: &str) -> Self {
        Self(string(type_name))
    }

    /// Folds in a field; `None` is a zero value, which `IgnoreZeroValue` skips.
    fn field(&mut self, name: &str, value: Option<u64>) {
        if let Some(value) = value {
            self.0 = finish(self.0 ^ ordered(string(name), value));
        }
    }

    fn finish(self) -> u64 {
        self.0
    }
}

/// hashstructure's `hashUpdateOrdered`: the hasher over both values, little-endian.
fn ordered(a: u64, b: u64) -> u64 {
    let mut bytes = [0_u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    fnv1(&bytes)
}

/// hashstructure's `hashFinishUnordered`.
fn finish(a: u64) -> u64 {
    fnv1(&a.to_le_bytes())
}

/// 64-bit FNV-1 (multiply, then XOR: Go's `fnv.New64`, hashstructure's default hasher; the
/// `fnv` crate implements only FNV-1a).
fn fnv1(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        hash.wrapping_mul(PRIME) ^ u64::from(byte)
    })
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(template: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"limits": {"cpu": "1000"}, "template": template},
        }))
        .expect("a NodePool")
    }

    fn web(requirements: serde_json::Value) -> serde_json::Value {
        json!({
            "metadata": {"labels": {"team": "web"}, "annotations": {"owner": "ops"}},
            "spec": {
                "requirements": requirements,
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
                "expireAfter": "720h",
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            },
        })
    }

    // The expected values below are what upstream's `NodePool.Hash()` returns for the same
    // templates: computed with hashstructure v2.0.2 over copies of upstream's Go types (run
    // with TZ=UTC, as upstream's image runs).

    #[test]
    fn the_node_pool_hash_is_the_one_upstream_karpenter_stamps() {
        let spot =
            json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]);
        assert_eq!(pool(web(spot)).hash(), "8894170854890529868");
    }

    #[test]
    fn the_legacy_hash_stays_what_claims_made_by_earlier_agents_carry() {
        let spot =
            json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]);
        assert_eq!(pool(web(spot)).legacy_hash(), "18408960296977224894");
    }

    #[test]
    fn the_node_pool_hash_ignores_requirements() {
        let spot =
            json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]);
        assert_eq!(
            pool(web(spot)).hash(),
            pool(web(json!([]))).hash(),
            "upstream leaves requirements out of the hash"
        );
    }

    #[test]
    fn a_bare_template_that_never_expires_hashes_as_upstream() {
        let bare = json!({"spec": {"requirements": [], "expireAfter": "Never",
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}});
        assert_eq!(pool(bare).hash(), "7428780003907761376");
    }

    #[test]
    fn every_hashed_field_counts_as_upstream() {
        let full = json!({
            "metadata": {"labels": {"team": "web", "tier": "2"}},
            "spec": {
                "requirements": [],
                "taints": [
                    {"key": "dedicated", "effect": "NoSchedule"},
                    {"key": "gpu", "value": "true", "effect": "NoExecute", "timeAdded": "2026-01-02T03:04:05Z"},
                ],
                "startupTaints": [{"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"}],
                "terminationGracePeriod": "48h",
                "expireAfter": "1h30m",
                "nodeClassRef": {"group": "karpenter.k8s.gcp", "kind": "GCENodeClass", "name": "web"},
            },
        });
        assert_eq!(pool(full).hash(), "11882091214409845737");
    }

    #[test]
    fn a_zero_termination_grace_period_still_counts_as_upstream() {
        let zero = json!({"metadata": {"annotations": {"a": "b"}}, "spec": {"requirements": [],
            "terminationGracePeriod": "0s", "expireAfter": "30s",
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}});
        assert_eq!(pool(zero).hash(), "376574996974388775");
    }

    #[test]
    fn taints_hash_as_a_set() {
        let a = json!({"key": "a", "effect": "NoSchedule"});
        let b = json!({"key": "b", "effect": "NoSchedule"});
        let with = |taints| {
            json!({"spec": {"requirements": [], "taints": taints,
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}}})
        };
        assert_eq!(
            pool(with(json!([a, b]))).hash(),
            pool(with(json!([b, a]))).hash()
        );
    }

    #[test]
    fn changing_a_template_label_changes_the_hash() {
        let mut other = web(json!([]));
        other["metadata"]["labels"]["team"] = json!("api");
        assert_ne!(pool(web(json!([]))).hash(), pool(other).hash());
    }
}
