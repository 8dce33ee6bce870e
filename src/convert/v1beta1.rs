//! v1beta1 `NodePool`, `NodeClaim` and `EC2NodeClass` to v1, as upstream's v1.0 conversion
//! webhooks convert them (sigs.k8s.io/karpenter `pkg/apis/v1/nodepool_conversion.go`,
//! `nodeclaim_conversion.go`; karpenter-provider-aws `pkg/apis/v1/ec2nodeclass_conversion.go`)
//! plus the manual steps of upstream's v1 migration guide:
//!
//! * `WhenUnderutilized` is `WhenEmptyOrUnderutilized` with `consolidateAfter: 0s`;
//!   `disruption.expireAfter` moves to `template.spec.expireAfter`.
//! * `nodeClassRef.apiVersion` becomes `group`; a missing kind or group is EC2NodeClass's.
//! * `amiFamily` without `amiSelectorTerms` becomes an `alias` (`al2023@latest`); Ubuntu becomes
//!   AL2 with Ubuntu's root volume, as the webhook does.
//! * The NodePool's `kubelet` moves into its EC2NodeClass (the webhook kept it in an annotation
//!   until v1.1). NodePools that share a class with different kubelet settings get a copy of the
//!   class each, as the guide says to do by hand.
//! * A manifest without `metadataOptions` keeps v1beta1's IMDS hop limit of 2 (v1's default is
//!   1, which cuts pods without host networking off from IMDS); the webhook kept it because
//!   stored objects carry their defaults.

use super::{
    Notes, Staged, Warning, describe, present, quantities, restricted_label, user_metadata,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The staged objects at v1, in order; node classes a NodePool's kubelet needed a copy of
/// follow the class they copy.
pub(super) fn to_v1(staged: Vec<Staged>, warnings: &mut Vec<Warning>) -> Vec<Value> {
    let mut objects: Vec<(Value, bool)> = Vec::new();
    // Kubelet settings of each NodePool, with the class it uses and whether it is converted
    // here (a NodePool already at v1 has none, and keeps its class).
    let mut kubelets: Vec<PoolKubelet> = Vec::new();
    for s in staged {
        if s.done {
            if s.object["kind"] == "NodePool" && s.object["apiVersion"] == "karpenter.sh/v1" {
                kubelets.push(PoolKubelet {
                    pool: s.object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    class: s.object["spec"]["template"]["spec"]["nodeClassRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    kubelet: None,
                    fixed: true,
                });
            }
            objects.push((s.object, false));
            continue;
        }
        let mut notes = Notes {
            object: describe(&s.object),
            warnings: &mut *warnings,
        };
        let kind = s.object["kind"].as_str().unwrap_or_default();
        let converted = match kind {
            "NodePool" => {
                let (pool, kubelet) = node_pool(&s.object, &mut notes);
                let class = pool["spec"]["template"]["spec"]["nodeClassRef"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let name = pool["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                kubelets.push(PoolKubelet {
                    pool: name,
                    class,
                    kubelet,
                    fixed: false,
                });
                pool
            }
            "NodeClaim" => node_claim(&s.object, &mut notes),
            _ => node_class(&s.object, &mut notes),
        };
        objects.push((converted, true));
    }
    place_kubelets(&mut objects, &kubelets, warnings);
    objects.into_iter().map(|(o, _)| o).collect()
}

/// A NodePool's kubelet settings and the class it uses.
struct PoolKubelet {
    pool: String,
    class: String,
    kubelet: Option<Value>,
    /// Already v1: it keeps its class as it is.
    fixed: bool,
}

/// Moves each NodePool's kubelet into the EC2NodeClass it uses, when that class was converted
/// here; pools with other settings than the class's first user (a NodePool already at v1 comes
/// first) get their own copy of it.
fn place_kubelets(
    objects: &mut Vec<(Value, bool)>,
    kubelets: &[PoolKubelet],
    warnings: &mut Vec<Warning>,
) {
    let mut by_class: BTreeMap<&str, Vec<(&str, &Option<Value>)>> = BTreeMap::new();
    let fixed_first = kubelets
        .iter()
        .filter(|k| k.fixed)
        .chain(kubelets.iter().filter(|k| !k.fixed));
    for k in fixed_first {
        by_class
            .entry(&k.class)
            .or_default()
            .push((&k.pool, &k.kubelet));
    }
    for (class, pools) in by_class {
        let position = objects.iter().position(|(o, converted)| {
            *converted && o["kind"] == "EC2NodeClass" && o["metadata"]["name"] == class
        });
        let Some(position) = position else {
            for (pool, kubelet) in pools {
                if let Some(kubelet) = kubelet {
                    warnings.push(Warning {
                        object: format!("NodePool {pool}"),
                        field: "spec.template.spec.kubelet".to_owned(),
                        message: format!(
                            "v1 keeps kubelet settings on the EC2NodeClass: EC2NodeClass {class} is not among the converted inputs, so add them to its spec.kubelet yourself: {kubelet}"
                        ),
                    });
                }
            }
            continue;
        };
        // The first pool's settings stay on the class; each other setting gets a copy.
        let mut settings: Vec<(&Option<Value>, Vec<&str>)> = Vec::new();
        for (pool, kubelet) in pools {
            match settings.iter_mut().find(|(k, _)| *k == kubelet) {
                Some((_, users)) => users.push(pool),
                None => settings.push((kubelet, vec![pool])),
            }
        }
        let original = objects[position].0.clone();
        let mut inserted = 0;
        for (index, (kubelet, users)) in settings.iter().enumerate() {
            let target = if index == 0 {
                position
            } else {
                let copy_name = format!("{class}-{}", users[0]);
                let mut copy = original.clone();
                copy["metadata"]["name"] = json!(copy_name);
                inserted += 1;
                objects.insert(position + inserted, (copy, true));
                for pool in users {
                    if let Some((pool_object, _)) = objects.iter_mut().find(|(o, converted)| {
                        *converted && o["kind"] == "NodePool" && o["metadata"]["name"] == *pool
                    }) {
                        pool_object["spec"]["template"]["spec"]["nodeClassRef"]["name"] =
                            json!(copy_name);
                    }
                    warnings.push(Warning {
                        object: format!("NodePool {pool}"),
                        field: "spec.template.spec.kubelet".to_owned(),
                        message: format!(
                            "its kubelet settings differ from the other NodePools' on EC2NodeClass {class}, and v1 keeps them on the class: it now uses a copy, EC2NodeClass {copy_name} (its nodes drift and are replaced once)"
                        ),
                    });
                }
                position + inserted
            };
            if let Some(kubelet) = kubelet {
                objects[target].0["spec"]["kubelet"] = kubelet.clone();
            }
        }
    }
}

/// A node class reference at v1: `group` from `apiVersion`, EC2NodeClass when unsaid.
fn node_class_ref(reference: &Value) -> Value {
    let group = reference["apiVersion"]
        .as_str()
        .and_then(|v| v.split('/').next())
        .filter(|g| !g.is_empty())
        .unwrap_or("karpenter.k8s.aws");
    json!({
        "group": reference.get("group").cloned().unwrap_or(json!(group)),
        "kind": reference.get("kind").filter(|k| !k.is_null()).cloned().unwrap_or(json!("EC2NodeClass")),
        "name": reference["name"].clone(),
    })
}

/// Annotations v1 dropped, on pods and nodes alike, and what replaced them.
fn rename_annotations(metadata: &mut Value, at: &str, notes: &mut Notes<'_>) {
    let Some(annotations) = metadata["annotations"].as_object_mut() else {
        return;
    };
    for old in [
        "karpenter.sh/do-not-consolidate",
        "karpenter.sh/do-not-evict",
    ] {
        if let Some(value) = annotations.remove(old) {
            annotations.insert("karpenter.sh/do-not-disrupt".to_owned(), value);
            notes.warn(
                &format!("{at}.annotations"),
                format!("{old} was removed in v1: replaced by karpenter.sh/do-not-disrupt"),
            );
        }
    }
}

/// A v1beta1 NodePool at v1, and the kubelet settings it carried.
fn node_pool(old: &Value, notes: &mut Notes<'_>) -> (Value, Option<Value>) {
    let spec = &old["spec"];
    let template = &spec["template"];
    let mut new_template = json!({"spec": {}});
    if present(&template["metadata"]) {
        new_template["metadata"] = template["metadata"].clone();
        rename_annotations(
            &mut new_template["metadata"],
            "spec.template.metadata",
            notes,
        );
    }
    for field in [
        "requirements",
        "taints",
        "startupTaints",
        "terminationGracePeriod",
    ] {
        if present(&template["spec"][field]) {
            new_template["spec"][field] = template["spec"][field].clone();
        }
    }
    // What v1's NodePool refuses (restricted label domains) is dropped, and said.
    // `get_mut`, not indexing: indexing a missing key for writing inserts a null.
    if let Some(template_labels) = new_template
        .get_mut("metadata")
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        template_labels.retain(|key, _| match restricted_label(key) {
            Some(why) => {
                notes.warn(
                    "spec.template.metadata.labels",
                    format!("{key}: dropped, {why}"),
                );
                false
            }
            None => true,
        });
    }
    if let Some(requirements) = new_template
        .get_mut("spec")
        .and_then(|s| s.get_mut("requirements"))
        .and_then(Value::as_array_mut)
    {
        requirements.retain(|r| {
            let key = r["key"].as_str().unwrap_or_default();
            match restricted_label(key) {
                Some(why) => {
                    notes.warn(
                        "spec.template.spec.requirements",
                        format!("{key}: dropped, {why}"),
                    );
                    false
                }
                None => true,
            }
        });
    }
    if !present(&template["spec"]["requirements"]) {
        new_template["spec"]["requirements"] = json!([]);
    }
    new_template["spec"]["nodeClassRef"] = node_class_ref(&template["spec"]["nodeClassRef"]);
    if let Some(expire_after) = spec["disruption"].get("expireAfter") {
        new_template["spec"]["expireAfter"] = expire_after.clone();
    }
    let disruption = &spec["disruption"];
    // v1beta1 defaulted the policy to WhenUnderutilized.
    let policy = disruption["consolidationPolicy"]
        .as_str()
        .unwrap_or("WhenUnderutilized");
    let mut new_disruption = match policy {
        "WhenUnderutilized" => {
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"})
        }
        other => json!({
            "consolidationPolicy": other,
            "consolidateAfter": disruption.get("consolidateAfter").cloned().unwrap_or(json!("0s")),
        }),
    };
    if present(&disruption["budgets"]) {
        new_disruption["budgets"] = disruption["budgets"].clone();
    }
    let mut pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": user_metadata(&old["metadata"]),
        "spec": {"template": new_template, "disruption": new_disruption},
    });
    if present(&spec["limits"]) {
        pool["spec"]["limits"] = quantities(&spec["limits"]);
    }
    if let Some(weight) = spec.get("weight").filter(|v| present(v)) {
        pool["spec"]["weight"] = weight.clone();
    }
    let kubelet = Some(template["spec"]["kubelet"].clone()).filter(present);
    (pool, kubelet)
}

/// A v1beta1 NodeClaim at v1 (its kubelet settings come from the class at v1).
fn node_claim(old: &Value, notes: &mut Notes<'_>) -> Value {
    let spec = &old["spec"];
    let mut new_spec = json!({"nodeClassRef": node_class_ref(&spec["nodeClassRef"])});
    for field in ["requirements", "taints", "startupTaints", "resources"] {
        if present(&spec[field]) {
            new_spec[field] = spec[field].clone();
        }
    }
    if !present(&spec["requirements"]) {
        new_spec["requirements"] = json!([]);
    }
    if present(&spec["kubelet"]) {
        notes.warn(
            "spec.kubelet",
            "dropped: at v1 a NodeClaim takes its kubelet settings from its EC2NodeClass",
        );
    }
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": user_metadata(&old["metadata"]),
        "spec": new_spec,
    })
}

/// A v1beta1 EC2NodeClass at v1.
fn node_class(old: &Value, notes: &mut Notes<'_>) -> Value {
    let mut spec = old["spec"].clone();
    let family = spec["amiFamily"].as_str().unwrap_or_default().to_owned();
    let has_terms = present(&spec["amiSelectorTerms"]);
    match family.as_str() {
        "AL2" | "AL2023" | "Bottlerocket" | "Windows2019" | "Windows2022" if !has_terms => {
            if let Some(s) = spec.as_object_mut() {
                s.remove("amiFamily");
            }
            spec["amiSelectorTerms"] =
                json!([{"alias": format!("{}@latest", family.to_lowercase())}]);
        }
        "AL2" | "AL2023" | "Bottlerocket" | "Windows2019" | "Windows2022" => {}
        "Ubuntu" => {
            spec["amiFamily"] = json!("AL2");
            if !present(&spec["blockDeviceMappings"]) {
                spec["blockDeviceMappings"] = json!([{
                    "deviceName": "/dev/sda1", "rootVolume": true,
                    "ebs": {"encrypted": true, "volumeType": "gp3", "volumeSize": "20Gi"},
                }]);
            }
            if has_terms {
                notes.warn(
                    "spec.amiFamily",
                    "Ubuntu is no longer a family: the selected AMIs boot with AL2's user data (the same format), with Ubuntu's root volume unless you set blockDeviceMappings",
                );
            } else {
                spec["amiSelectorTerms"] = json!([{"id": "ami-placeholder"}]);
                notes.warn(
                    "spec.amiFamily",
                    "Ubuntu is no longer a family and has no alias: replace the ami-placeholder term with amiSelectorTerms selecting your Ubuntu AMI; until then the class is not ready",
                );
            }
        }
        _ => {
            spec["amiFamily"] = json!("Custom");
            notes.warn(
                "spec.amiFamily",
                "Custom: at v1 your userData must register the node with the karpenter.sh/unregistered:NoExecute taint (Karpenter removes it)",
            );
        }
    }
    // v1beta1's default, which v1 lowered to 1.
    if spec["metadataOptions"]["httpPutResponseHopLimit"].is_null() {
        let had_options = present(&spec["metadataOptions"]);
        if !had_options {
            spec["metadataOptions"] = json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpTokens": "required"});
        }
        spec["metadataOptions"]["httpPutResponseHopLimit"] = json!(2);
        notes.warn(
            "spec.metadataOptions.httpPutResponseHopLimit",
            "kept v1beta1's default of 2; v1 defaults to 1, which keeps pods without host networking from reaching IMDS: set 1 once no pod needs it",
        );
    }
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": user_metadata(&old["metadata"]),
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Input, convert};
    use serde_json::json;

    fn v1beta1_pool(name: &str, class: &str, kubelet: Option<serde_json::Value>) -> Input {
        let mut spec = json!({"nodeClassRef": {"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "name": class}});
        if let Some(kubelet) = kubelet {
            spec["kubelet"] = kubelet;
        }
        Input {
            source: format!("{name}.yaml"),
            object: json!({"apiVersion": "karpenter.sh/v1beta1", "kind": "NodePool", "metadata": {"name": name},
                "spec": {"template": {"spec": spec}, "disruption": {"consolidationPolicy": "WhenUnderutilized", "expireAfter": "720h"}}}),
        }
    }

    fn v1beta1_class(name: &str) -> Input {
        Input {
            source: format!("{name}.yaml"),
            object: json!({"apiVersion": "karpenter.k8s.aws/v1beta1", "kind": "EC2NodeClass", "metadata": {"name": name},
                "spec": {"amiFamily": "AL2023", "role": "r", "subnetSelectorTerms": [{"tags": {"a": "b"}}], "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]}}),
        }
    }

    #[test]
    fn a_v1beta1_pool_and_class_convert_as_upstreams_webhooks_convert_them() {
        let out = convert(vec![
            v1beta1_class("default"),
            v1beta1_pool("default", "default", Some(json!({"maxPods": 20}))),
        ])
        .unwrap();
        let class = &out.objects[0];
        assert_eq!(class["apiVersion"], "karpenter.k8s.aws/v1");
        assert_eq!(
            class["spec"]["amiSelectorTerms"],
            json!([{"alias": "al2023@latest"}])
        );
        assert!(class["spec"].get("amiFamily").is_none());
        assert_eq!(class["spec"]["kubelet"], json!({"maxPods": 20}));
        assert_eq!(
            class["spec"]["metadataOptions"]["httpPutResponseHopLimit"],
            2
        );
        let pool = &out.objects[1];
        assert_eq!(
            pool["spec"]["disruption"],
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"})
        );
        assert_eq!(pool["spec"]["template"]["spec"]["expireAfter"], "720h");
        assert_eq!(
            pool["spec"]["template"]["spec"]["nodeClassRef"],
            json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"})
        );
        assert!(pool["spec"]["template"]["spec"].get("kubelet").is_none());
    }

    #[test]
    fn pools_sharing_a_class_with_different_kubelets_get_a_copy_of_the_class_each() {
        let out = convert(vec![
            v1beta1_class("shared"),
            v1beta1_pool("a", "shared", Some(json!({"maxPods": 20}))),
            v1beta1_pool("b", "shared", Some(json!({"maxPods": 20}))),
            v1beta1_pool("c", "shared", None),
        ])
        .unwrap();
        let names: Vec<String> = out.objects.iter().map(super::super::describe).collect();
        assert_eq!(
            names,
            [
                "EC2NodeClass shared",
                "EC2NodeClass shared-c",
                "NodePool a",
                "NodePool b",
                "NodePool c"
            ]
        );
        assert_eq!(out.objects[0]["spec"]["kubelet"], json!({"maxPods": 20}));
        assert!(out.objects[1]["spec"].get("kubelet").is_none());
        assert_eq!(
            out.objects[4]["spec"]["template"]["spec"]["nodeClassRef"]["name"],
            "shared-c"
        );
        assert!(
            out.warnings
                .iter()
                .any(|w| w.object == "NodePool c" && w.message.contains("EC2NodeClass shared-c")),
            "{:?}",
            out.warnings
        );
    }

    #[test]
    fn labels_and_requirements_in_domains_v1_restricts_are_dropped_with_a_warning() {
        let provisioner = Input {
            source: "p.yaml".to_owned(),
            object: json!({"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "p"},
                "spec": {"providerRef": {"name": "t"},
                    "labels": {"team": "a", "node.kubernetes.io/lifecycle": "normal", "kubernetes.io/hostname": "x",
                        "k8s.io/cluster-autoscaler/enabled": "true", "karpenter.sh/provisioner-name": "p"},
                    "requirements": [{"key": "karpenter.sh/provisioner-name", "operator": "Exists"}]}}),
        };
        let out = convert(vec![provisioner]).unwrap();
        let pool = &out.objects[0];
        assert_eq!(
            pool["spec"]["template"]["metadata"]["labels"],
            json!({"team": "a", "node.kubernetes.io/lifecycle": "normal"})
        );
        let keys: Vec<&str> = pool["spec"]["template"]["spec"]["requirements"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["key"].as_str())
            .collect();
        assert!(!keys.contains(&"karpenter.sh/provisioner-name"), "{keys:?}");
        let dropped = out
            .warnings
            .iter()
            .filter(|w| w.message.contains(": dropped, "))
            .count();
        assert_eq!(dropped, 4, "{:?}", out.warnings);
    }

    #[test]
    fn a_kubelet_whose_class_is_not_in_the_input_is_a_warning_carrying_the_settings() {
        let out = convert(vec![v1beta1_pool(
            "a",
            "elsewhere",
            Some(json!({"maxPods": 20})),
        )])
        .unwrap();
        assert_eq!(out.objects.len(), 1);
        let warning = out
            .warnings
            .iter()
            .find(|w| w.object == "NodePool a")
            .unwrap();
        assert!(
            warning.message.contains("EC2NodeClass elsewhere"),
            "{warning}"
        );
        assert!(warning.message.contains("\"maxPods\":20"), "{warning}");
    }
}
