//! The parts of upstream's CRD schemas that its kubebuilder markers put on types this project
//! takes from k8s-openapi (Taint, Condition, Quantity), where schemars cannot reach: applied to
//! the generated CRDs, so they validate as upstream's do (`tests/crd_parity.rs` compares them).
//!
//! * the standard `apiVersion`, `kind` and `metadata` properties, and `listKind`;
//! * a `Quantity` (an int-or-string) checks upstream's quantity pattern;
//! * taints: `effect` one of the three, `key` non-empty, key and value upstream's label-like
//!   pattern, the list atomic;
//! * conditions: `metav1.Condition`'s bounds and patterns, keyed by `type` (but on
//!   EC2NodeClass, as the AWS provider's); NodeClaim's own
//!   condition type lets `reason` and `message` be empty, as upstream's does;
//! * GCENodeClass's `kubeletConfiguration`, a type it shares with EC2NodeClass, validates as the
//!   GCP provider's.

use serde_json::{Value, json};

/// Upstream's pattern for a `resource.Quantity`.
const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Upstream's pattern for a taint's key and value.
const TAINT_PART: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";

/// `metav1.Condition`'s `type` pattern.
const CONDITION_TYPE: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

/// Applies the conventions to one CRD (as JSON).
pub(super) fn apply(crd: &mut Value) {
    let kind = crd["spec"]["names"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if let Some(names) = crd["spec"]["names"].as_object_mut() {
        names.insert("listKind".to_owned(), json!(format!("{kind}List")));
    }
    let Some(versions) = crd["spec"]["versions"].as_array_mut() else {
        return;
    };
    for version in versions {
        let Some(schema) = version
            .pointer_mut("/schema/openAPIV3Schema")
            .filter(|s| s.is_object())
        else {
            continue;
        };
        if let Some(properties) = schema["properties"].as_object_mut() {
            properties.insert(
                "apiVersion".to_owned(),
                json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
            );
            properties.insert(
                "kind".to_owned(),
                json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
            );
            properties.insert("metadata".to_owned(), json!({"type": "object"}));
        }
        quantities(schema);
        for pointer in [
            "/properties/spec/properties/taints",
            "/properties/spec/properties/startupTaints",
            "/properties/spec/properties/template/properties/spec/properties/taints",
            "/properties/spec/properties/template/properties/spec/properties/startupTaints",
        ] {
            if let Some(list) = schema.pointer_mut(pointer) {
                taints(list);
            }
        }
        if let Some(list) = schema.pointer_mut("/properties/status/properties/conditions") {
            conditions(list, &kind);
        }
        if kind == "GCENodeClass" {
            super::gcenodeclass::kubelet_schema_as_gcp(schema);
        }
    }
}

/// Every int-or-string without a pattern of its own is a Quantity here.
fn quantities(node: &mut Value) {
    match node {
        Value::Object(map) => {
            if map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
                && !map.contains_key("pattern")
            {
                map.insert("pattern".to_owned(), json!(QUANTITY));
            }
            map.values_mut().for_each(quantities);
        }
        Value::Array(items) => items.iter_mut().for_each(quantities),
        _ => {}
    }
}

fn taints(list: &mut Value) {
    list["x-kubernetes-list-type"] = json!("atomic");
    let Some(properties) = list
        .pointer_mut("/items/properties")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    if let Some(effect) = properties.get_mut("effect") {
        effect["enum"] = json!(["NoSchedule", "PreferNoSchedule", "NoExecute"]);
    }
    if let Some(key) = properties.get_mut("key") {
        key["minLength"] = json!(1);
        key["pattern"] = json!(TAINT_PART);
    }
    if let Some(value) = properties.get_mut("value") {
        value["pattern"] = json!(TAINT_PART);
    }
}

fn conditions(list: &mut Value, kind: &str) {
    let node_claim = kind == "NodeClaim";
    // Core's kinds key their conditions by type; the AWS provider's leaves the list plain.
    if kind != "EC2NodeClass" {
        list["x-kubernetes-list-type"] = json!("map");
        list["x-kubernetes-list-map-keys"] = json!(["type"]);
    }
    let Some(item) = list.get_mut("items").filter(|i| i.is_object()) else {
        return;
    };
    item["required"] = if node_claim {
        json!(["lastTransitionTime", "status", "type"])
    } else {
        json!(["lastTransitionTime", "message", "reason", "status", "type"])
    };
    let Some(properties) = item["properties"].as_object_mut() else {
        return;
    };
    if let Some(message) = properties.get_mut("message") {
        message["maxLength"] = json!(32768);
    }
    if let Some(generation) = properties.get_mut("observedGeneration") {
        generation["minimum"] = json!(0);
    }
    if let Some(reason) = properties.get_mut("reason") {
        reason["maxLength"] = json!(1024);
        if node_claim {
            reason["pattern"] = json!("^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$");
        } else {
            reason["minLength"] = json!(1);
            reason["pattern"] = json!("^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$");
        }
    }
    if let Some(status) = properties.get_mut("status") {
        status["enum"] = json!(["True", "False", "Unknown"]);
    }
    if let Some(type_) = properties.get_mut("type") {
        type_["maxLength"] = json!(316);
        type_["pattern"] = json!(CONDITION_TYPE);
    }
}
