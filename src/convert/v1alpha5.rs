//! v1alpha5 `Provisioner` and v1alpha1 `AWSNodeTemplate` to v1beta1 `NodePool` and
//! `EC2NodeClass`, following upstream's v1beta1 migration guide (Karpenter v0.32): the
//! Provisioner's fields move under `spec.template`, `ttlSecondsAfterEmpty` and
//! `consolidation.enabled` become a `consolidationPolicy`, `ttlSecondsUntilExpired` becomes
//! `expireAfter`, `limits.resources` becomes `limits`, `providerRef` a `nodeClassRef`, and the
//! template's selectors become selector terms. Where v1alpha5 behaved differently by default, the
//! old behaviour is written out: the requirements its defaulting webhook added, no expiry and no
//! consolidation when none was configured, `amiFamily: AL2`.

use super::{Notes, duration_of_seconds, present, quantities, set, user_metadata};
use serde_json::{Value, json};

/// A Provisioner as a v1beta1 NodePool, preceded by an EC2NodeClass of its name when it had
/// an inline `spec.provider`.
pub(super) fn provisioner(provisioner: &Value, notes: &mut Notes<'_>) -> Vec<Value> {
    let spec = &provisioner["spec"];
    let name = provisioner["metadata"]["name"].as_str().unwrap_or_default();
    let mut template = json!({"metadata": {}, "spec": {}});
    for (from, to) in [("labels", "labels"), ("annotations", "annotations")] {
        if present(&spec[from]) {
            template["metadata"][to] = spec[from].clone();
        }
    }
    template["spec"]["requirements"] = Value::Array(requirements(spec, notes));
    for field in ["taints", "startupTaints"] {
        if present(&spec[field]) {
            template["spec"][field] = spec[field].clone();
        }
    }
    let kubelet_field = if present(&spec["kubeletConfiguration"]) {
        "kubeletConfiguration"
    } else {
        "kubelet"
    };
    if present(&spec[kubelet_field]) {
        let mut kubelet = spec[kubelet_field].clone();
        if let Some(runtime) = kubelet
            .as_object_mut()
            .and_then(|k| k.remove("containerRuntime"))
        {
            notes.warn(
                &format!("spec.{kubelet_field}.containerRuntime"),
                format!("dropped ({runtime}): nodes run containerd, the only runtime since Kubernetes 1.24"),
            );
        }
        template["spec"]["kubelet"] = kubelet;
    }

    let mut objects = Vec::new();
    if present(&spec["provider"]) {
        let node_class = node_class_spec(&spec["provider"], "spec.provider", notes);
        objects.push(json!({
            "apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass",
            "metadata": {"name": name},
            "spec": node_class,
        }));
        template["spec"]["nodeClassRef"] = json!({"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": name});
        notes.warn(
            "spec.provider",
            format!("moved into a new EC2NodeClass {name}, which the NodePool uses"),
        );
    } else if present(&spec["providerRef"]) {
        let reference = &spec["providerRef"];
        let kind = reference["kind"].as_str().unwrap_or("AWSNodeTemplate");
        if kind != "AWSNodeTemplate" {
            notes.warn(
                "spec.providerRef.kind",
                format!("{kind} is not an AWSNodeTemplate; the NodePool refers to an EC2NodeClass of the same name, convert the {kind} by hand"),
            );
        }
        template["spec"]["nodeClassRef"] = json!({
            "apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass",
            "name": reference["name"].clone(),
        });
    } else {
        notes.warn(
            "spec.providerRef",
            "missing: the NodePool needs a node class; set spec.template.spec.nodeClassRef",
        );
    }

    let mut disruption = json!({});
    let empty_after = spec["ttlSecondsAfterEmpty"].as_i64();
    let consolidation = spec["consolidation"]["enabled"].as_bool() == Some(true);
    match (consolidation, empty_after) {
        (true, _) => disruption["consolidationPolicy"] = json!("WhenUnderutilized"),
        (false, Some(seconds)) => {
            disruption["consolidationPolicy"] = json!("WhenEmpty");
            disruption["consolidateAfter"] = json!(duration_of_seconds(seconds));
        }
        // v1alpha5 removed no node that had neither: keep it so.
        (false, None) => {
            disruption["consolidationPolicy"] = json!("WhenEmpty");
            disruption["consolidateAfter"] = json!("Never");
        }
    }
    disruption["expireAfter"] = match spec["ttlSecondsUntilExpired"].as_i64() {
        Some(seconds) => json!(duration_of_seconds(seconds)),
        // v1alpha5 never expired nodes unless told to; v1beta1 would after 720h.
        None => json!("Never"),
    };

    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool",
        "metadata": user_metadata(&provisioner["metadata"]),
        "spec": {"template": template, "disruption": disruption},
    });
    if present(&spec["limits"]["resources"]) {
        pool["spec"]["limits"] = quantities(&spec["limits"]["resources"]);
    }
    if let Some(weight) = spec.get("weight").filter(|w| !w.is_null()) {
        pool["spec"]["weight"] = weight.clone();
    }
    objects.push(pool);
    objects
}

/// The Provisioner's requirements, with those v1alpha5's AWS defaulting webhook added when
/// they were missing (`Provisioner.SetDefaults`): linux, amd64, on-demand, and categories c, m, r
/// of generation > 2 when nothing narrows the instance type.
fn requirements(spec: &Value, notes: &mut Notes<'_>) -> Vec<Value> {
    let mut requirements: Vec<Value> = spec["requirements"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| {
            let dropped = r["key"] == "karpenter.k8s.aws/instance-pods";
            if dropped {
                notes.warn(
                    "spec.requirements",
                    "karpenter.k8s.aws/instance-pods: dropped, v1beta1 has no such label (use karpenter.k8s.aws/instance-cpu or -memory)",
                );
            }
            !dropped
        })
        .collect();
    let has = |requirements: &[Value], key: &str| requirements.iter().any(|r| r["key"] == key);
    let mut added = Vec::new();
    for (key, operator, values) in [
        ("kubernetes.io/os", "In", vec!["linux"]),
        ("kubernetes.io/arch", "In", vec!["amd64"]),
        ("karpenter.sh/capacity-type", "In", vec!["on-demand"]),
    ] {
        if !has(&requirements, key) {
            requirements.push(json!({"key": key, "operator": operator, "values": values}));
            added.push(key);
        }
    }
    let narrowed = [
        "node.kubernetes.io/instance-type",
        "karpenter.k8s.aws/instance-family",
        "karpenter.k8s.aws/instance-category",
        "karpenter.k8s.aws/instance-generation",
    ]
    .iter()
    .any(|key| has(&requirements, key));
    if !narrowed {
        requirements.push(json!({"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]}));
        requirements.push(json!({"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]}));
        added.push("karpenter.k8s.aws/instance-category and -generation");
    }
    if !added.is_empty() {
        notes.warn(
            "spec.requirements",
            format!(
                "wrote out what v1alpha5 added by default and v1beta1 no longer does: {}",
                added.join(", ")
            ),
        );
    }
    requirements
}

/// An AWSNodeTemplate as a v1beta1 EC2NodeClass.
pub(super) fn node_template(template: &Value, notes: &mut Notes<'_>) -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass",
        "metadata": user_metadata(&template["metadata"]),
        "spec": node_class_spec(&template["spec"], "spec", notes),
    })
}

/// The v1beta1 EC2NodeClass spec for an AWSNodeTemplate's spec (or a Provisioner's inline
/// provider, at `at`).
fn node_class_spec(old: &Value, at: &str, notes: &mut Notes<'_>) -> Value {
    let mut spec = json!({});
    for field in [
        "tags",
        "userData",
        "blockDeviceMappings",
        "metadataOptions",
        "detailedMonitoring",
        "context",
        "instanceProfile",
        "role",
    ] {
        if let Some(value) = old.get(field).filter(|v| !v.is_null()) {
            spec[field] = value.clone();
        }
    }
    // v1alpha5 defaulted to AL2; v1beta1 requires the family.
    spec["amiFamily"] = old.get("amiFamily").cloned().unwrap_or(json!("AL2"));
    if !present(&spec["instanceProfile"]) && !present(&spec["role"]) {
        notes.warn(
            &format!("{at}.instanceProfile"),
            "missing: v1alpha5 fell back to the aws.defaultInstanceProfile setting, v1 has none; set spec.role to the nodes' IAM role (kubectl karpenter init creates KarpenterNodeRole-<cluster>)",
        );
    }
    for field in ["launchTemplate", "launchTemplateName"] {
        if present(&old[field]) {
            notes.warn(
                &format!("{at}.{field}"),
                "dropped: Karpenter no longer launches from a launch template of yours; set what it held with the EC2NodeClass's fields (amiSelectorTerms, userData, blockDeviceMappings, securityGroupSelectorTerms, metadataOptions)",
            );
        }
    }
    let subnets = selector_terms(
        &old["subnetSelector"],
        &format!("{at}.subnetSelector"),
        notes,
    );
    if !subnets.is_empty() {
        set(&mut spec, &["subnetSelectorTerms"], Value::Array(subnets));
    }
    let groups = selector_terms(
        &old["securityGroupSelector"],
        &format!("{at}.securityGroupSelector"),
        notes,
    );
    if !groups.is_empty() {
        set(
            &mut spec,
            &["securityGroupSelectorTerms"],
            Value::Array(groups),
        );
    }
    let amis = ami_terms(&old["amiSelector"]);
    if !amis.is_empty() {
        spec["amiSelectorTerms"] = Value::Array(amis);
    }
    spec
}

/// Comma-separated values of a v1alpha1 selector key.
fn split(value: &Value) -> Vec<String> {
    value
        .as_str()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A v1alpha1 subnet or security group selector as terms: `aws-ids`/`aws::ids` become one
/// `id` term each, the other keys one `tags` term.
fn selector_terms(selector: &Value, at: &str, notes: &mut Notes<'_>) -> Vec<Value> {
    let Some(selector) = selector.as_object() else {
        return Vec::new();
    };
    let mut terms = Vec::new();
    let mut tags = serde_json::Map::new();
    for (key, value) in selector {
        match key.as_str() {
            "aws-ids" | "aws::ids" => {
                terms.extend(split(value).into_iter().map(|id| json!({"id": id})));
            }
            _ => {
                if value.as_str().is_some_and(|v| v.contains(',')) {
                    notes.warn(
                        &format!("{at}.{key}"),
                        "a comma in a tag value is now part of the value; write one selector term per value if you meant several",
                    );
                }
                tags.insert(key.clone(), value.clone());
            }
        }
    }
    if !tags.is_empty() {
        terms.push(json!({"tags": tags}));
    }
    terms
}

/// A v1alpha1 AMI selector as terms: ids, names times owners, or tags (with each owner).
fn ami_terms(selector: &Value) -> Vec<Value> {
    let Some(selector) = selector.as_object() else {
        return Vec::new();
    };
    let mut terms = Vec::new();
    let names = selector.get("aws::name").map(split).unwrap_or_default();
    let owners = selector.get("aws::owners").map(split).unwrap_or_default();
    let tags: serde_json::Map<String, Value> = selector
        .iter()
        .filter(|(k, _)| !k.starts_with("aws::") && !k.starts_with("aws-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for key in ["aws::ids", "aws-ids"] {
        if let Some(ids) = selector.get(key) {
            terms.extend(split(ids).into_iter().map(|id| json!({"id": id})));
        }
    }
    let owners_or_none: Vec<Option<&String>> = if owners.is_empty() {
        vec![None]
    } else {
        owners.iter().map(Some).collect()
    };
    for name in &names {
        for owner in &owners_or_none {
            let mut term = json!({"name": name});
            if let Some(owner) = owner {
                term["owner"] = json!(owner);
            }
            if !tags.is_empty() {
                term["tags"] = Value::Object(tags.clone());
            }
            terms.push(term);
        }
    }
    if names.is_empty() && !tags.is_empty() {
        for owner in &owners_or_none {
            let mut term = json!({"tags": tags});
            if let Some(owner) = owner {
                term["owner"] = json!(owner);
            }
            terms.push(term);
        }
    }
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notes(warnings: &mut Vec<super::super::Warning>) -> Notes<'_> {
        Notes {
            object: "test".to_owned(),
            warnings,
        }
    }

    #[test]
    fn selectors_become_terms_as_the_v1beta1_guide_shows() {
        let mut warnings = Vec::new();
        let subnets = selector_terms(
            &json!({"aws::ids": "subnet-123, subnet-456"}),
            "spec.subnetSelector",
            &mut notes(&mut warnings),
        );
        assert_eq!(
            subnets,
            [json!({"id": "subnet-123"}), json!({"id": "subnet-456"})]
        );
        let amis = ami_terms(
            &json!({"aws::name": "my-name1,my-name2", "aws::owners": "123456789,amazon"}),
        );
        assert_eq!(
            amis,
            [
                json!({"name": "my-name1", "owner": "123456789"}),
                json!({"name": "my-name1", "owner": "amazon"}),
                json!({"name": "my-name2", "owner": "123456789"}),
                json!({"name": "my-name2", "owner": "amazon"}),
            ]
        );
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn a_provisioner_without_ttls_keeps_its_nodes_as_v1alpha5_did() {
        let mut warnings = Vec::new();
        let out = provisioner(
            &json!({"metadata": {"name": "p"}, "spec": {"providerRef": {"name": "t"}, "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]}}),
            &mut notes(&mut warnings),
        );
        let disruption = &out[0]["spec"]["disruption"];
        assert_eq!(disruption["consolidationPolicy"], "WhenEmpty");
        assert_eq!(disruption["consolidateAfter"], "Never");
        assert_eq!(disruption["expireAfter"], "Never");
        let keys: Vec<&str> = out[0]["spec"]["template"]["spec"]["requirements"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["key"].as_str())
            .collect();
        // The instance type narrows the choice, so no category default.
        assert_eq!(
            keys,
            [
                "node.kubernetes.io/instance-type",
                "kubernetes.io/os",
                "kubernetes.io/arch",
                "karpenter.sh/capacity-type"
            ]
        );
    }
}
