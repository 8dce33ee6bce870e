//! The agent's Helm chart (`agent/chart`), compiled into the library and rendered as
//! `helm template` renders it, so `kubectl karpenter init` installs the objects `helm install`
//! would: the chart's templates are the one description of the agent's RBAC and Deployment.
//!
//! [`render`] follows Helm's steps: the chart's `values.yaml` coalesced with the caller's
//! values (maps merge key by key, anything else replaces, `null` removes), `.Chart` from
//! `Chart.yaml`, `.Release` from [`Release`], every template but `_*.tpl` and `NOTES.txt`
//! rendered, the output split into YAML documents with the empty ones dropped, and the objects
//! sorted in Helm's install order. A value the chart refuses (`fail`, `required`) is
//! [`ChartError::Refused`] with the chart's message, which names the value.
//!
//! The CRDs (`agent/chart/crds/`) are not rendered here: the library makes them
//! ([`crate::apis::crds`]) and `agent/tests/crds.rs` keeps the chart's copy equal to them.

mod template;

pub use template::TemplateError;

use super::manifest::Manifest;
use serde_json::{Value, json};

/// The chart's files, as `helm package` would take them.
const CHART_YAML: &str = include_str!("../../../agent/chart/Chart.yaml");
const VALUES_YAML: &str = include_str!("../../../agent/chart/values.yaml");
const TEMPLATES: &[(&str, &str)] = &[
    (
        "templates/_helpers.tpl",
        include_str!("../../../agent/chart/templates/_helpers.tpl"),
    ),
    (
        "templates/deployment.yaml",
        include_str!("../../../agent/chart/templates/deployment.yaml"),
    ),
    (
        "templates/poddisruptionbudget.yaml",
        include_str!("../../../agent/chart/templates/poddisruptionbudget.yaml"),
    ),
    (
        "templates/rbac.yaml",
        include_str!("../../../agent/chart/templates/rbac.yaml"),
    ),
    (
        "templates/resourcequota.yaml",
        include_str!("../../../agent/chart/templates/resourcequota.yaml"),
    ),
    (
        "templates/service.yaml",
        include_str!("../../../agent/chart/templates/service.yaml"),
    ),
    (
        "templates/serviceaccount.yaml",
        include_str!("../../../agent/chart/templates/serviceaccount.yaml"),
    ),
    (
        "templates/servicemonitor.yaml",
        include_str!("../../../agent/chart/templates/servicemonitor.yaml"),
    ),
];

/// The kinds the chart makes, in Helm's install order (`releaseutil.InstallOrder`), with
/// their resource names.
const KINDS: &[(&str, &str)] = &[
    ("Namespace", "namespaces"),
    ("ResourceQuota", "resourcequotas"),
    ("PodDisruptionBudget", "poddisruptionbudgets"),
    ("ServiceAccount", "serviceaccounts"),
    ("Secret", "secrets"),
    ("ConfigMap", "configmaps"),
    ("ClusterRole", "clusterroles"),
    ("ClusterRoleBinding", "clusterrolebindings"),
    ("Role", "roles"),
    ("RoleBinding", "rolebindings"),
    ("Service", "services"),
    ("Deployment", "deployments"),
    // Not in Helm's list: unknown kinds go last.
    ("ServiceMonitor", "servicemonitors"),
];

/// Why the chart did not render.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ChartError {
    /// A template failed, or refused the values (its message names the value).
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The chart's YAML (values, Chart.yaml or a rendered template) does not parse.
    #[error("{file}: not YAML: {message}")]
    Yaml { file: String, message: String },
    /// A template made an object of a kind this renderer has no resource name for.
    #[error("{file}: a {kind} object, which init does not know how to apply")]
    UnknownKind { file: String, kind: String },
}

/// `.Release`: who installs the chart, under which name and namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub name: String,
    pub namespace: String,
    /// `app.kubernetes.io/managed-by`: `Helm` for Helm, `kubectl-karpenter` for init.
    pub service: String,
}

impl Release {
    /// The release `kubectl karpenter init` installs: `karpenter-agent`, so its objects are
    /// named `karpenter-agent` as they have always been.
    pub fn init(namespace: &str) -> Self {
        Self {
            name: "karpenter-agent".to_owned(),
            namespace: namespace.to_owned(),
            service: "kubectl-karpenter".to_owned(),
        }
    }

    /// A release as `helm install NAME -n NAMESPACE` makes it.
    pub fn helm(name: &str, namespace: &str) -> Self {
        Self {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            service: "Helm".to_owned(),
        }
    }
}

fn yaml(file: &str, text: &str) -> Result<Value, ChartError> {
    serde_saphyr::from_str(text).map_err(|e| ChartError::Yaml {
        file: file.to_owned(),
        message: e.to_string(),
    })
}

/// The chart's own `values.yaml`.
pub(crate) fn default_values() -> Result<Value, ChartError> {
    yaml("values.yaml", VALUES_YAML)
}

/// Helm's coalescing of values: maps merge key by key, anything else in `overrides` replaces
/// what is in `base`, and a `null` removes the key.
pub fn merge(base: &mut Value, overrides: &Value) {
    match (base, overrides) {
        (Value::Object(base), Value::Object(overrides)) => {
            for (key, value) in overrides {
                if value.is_null() {
                    base.remove(key);
                    continue;
                }
                match base.get_mut(key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge(existing, value);
                    }
                    _ => {
                        base.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (base, overrides) => *base = overrides.clone(),
    }
}

/// `image.repository`, `image.tag` and `image.digest` for a full image reference
/// (`registry/name:tag`, `registry/name@sha256:…`, or `registry:5000/name` with no tag).
pub(crate) fn image_values(image: &str) -> Value {
    if let Some((repository, digest)) = image.split_once('@') {
        return json!({"repository": repository, "digest": digest, "tag": ""});
    }
    // A colon after the last slash starts the tag; one before it is a registry's port.
    let name_start = image.rfind('/').map_or(0, |slash| slash + 1);
    match image[name_start..].rfind(':') {
        Some(colon) => {
            let at = name_start + colon;
            json!({"repository": &image[..at], "tag": &image[at + 1..], "digest": ""})
        }
        None => json!({"repository": image, "tag": "", "digest": ""}),
    }
}

/// The chart's objects for `release` with `values` over the chart's defaults, in install order.
pub fn render(release: &Release, values: &Value) -> Result<Vec<Manifest>, ChartError> {
    let mut merged = default_values()?;
    merge(&mut merged, values);
    let chart = yaml("Chart.yaml", CHART_YAML)?;
    let root = json!({
        "Values": merged,
        "Release": {
            "Name": release.name,
            "Namespace": release.namespace,
            "Service": release.service,
            "IsInstall": true,
            "IsUpgrade": false,
            "Revision": 1,
        },
        "Chart": {
            "Name": chart["name"],
            "Version": chart["version"],
            "AppVersion": chart["appVersion"],
            "Description": chart["description"],
            "Type": chart["type"],
        },
    });
    let mut templates = template::Templates::default();
    for (file, text) in TEMPLATES {
        templates.add(file, text)?;
    }
    let mut objects = Vec::new();
    for (file, _) in TEMPLATES.iter().filter(|(f, _)| !is_partial(f)) {
        let text = templates.render(file, &root)?;
        let documents: Vec<Value> =
            serde_saphyr::from_multiple(&text).map_err(|e| ChartError::Yaml {
                file: (*file).to_owned(),
                message: e.to_string(),
            })?;
        for object in documents.into_iter().filter(|d| !d.is_null()) {
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let Some(order) = KINDS.iter().position(|(k, _)| *k == kind) else {
                return Err(ChartError::UnknownKind {
                    file: (*file).to_owned(),
                    kind,
                });
            };
            objects.push((order, Manifest::new(object, KINDS[order].1)));
        }
    }
    // Stable: objects of one kind keep the order of their files, as Helm's sort does.
    objects.sort_by_key(|(order, _)| *order);
    Ok(objects.into_iter().map(|(_, m)| m).collect())
}

/// Helm renders no object from `_*.tpl` partials or `NOTES.txt`.
fn is_partial(file: &str) -> bool {
    let name = file.rsplit('/').next().unwrap_or(file);
    name.starts_with('_') || name == "NOTES.txt"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(objects: &[Manifest]) -> Vec<String> {
        objects.iter().map(|m| m.id()).collect()
    }

    #[test]
    fn every_template_of_the_chart_is_compiled_in() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/agent/chart/templates");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| format!("templates/{}", e.unwrap().file_name().to_string_lossy()))
            .filter(|f| !f.ends_with("NOTES.txt"))
            .collect();
        on_disk.sort();
        let mut compiled: Vec<String> = TEMPLATES.iter().map(|(f, _)| (*f).to_owned()).collect();
        compiled.sort();
        assert_eq!(compiled, on_disk, "add the new template to TEMPLATES");
    }

    #[test]
    fn the_kwok_agent_renders_its_account_rbac_deployment_and_budget_in_install_order() {
        let objects = render(
            &Release::helm("karpenter", "karpenter"),
            &json!({"provider": "kwok"}),
        )
        .unwrap();
        assert_eq!(
            kinds(&objects),
            [
                "PodDisruptionBudget karpenter/karpenter",
                "ServiceAccount karpenter/karpenter",
                "ClusterRole/karpenter",
                "ClusterRoleBinding/karpenter",
                "Role karpenter/karpenter",
                "RoleBinding karpenter/karpenter",
                "Service karpenter/karpenter",
                "Deployment karpenter/karpenter",
            ]
        );
        let deployment = &objects[7].object;
        assert_eq!(deployment["spec"]["replicas"], 2);
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["run", "--provider", "kwok"])
        );
        assert_eq!(
            deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
    }

    #[test]
    fn values_the_agent_cannot_run_with_are_refused_naming_the_value() {
        let release = Release::init("karpenter");
        for (values, says) in [
            (
                json!({"provider": "azure"}),
                "provider must be aws, gcp or kwok",
            ),
            (
                json!({"provider": "aws"}),
                "settings.clusterName is required",
            ),
            (
                json!({"provider": "gcp", "settings": {"clusterName": "c"}}),
                "gcp.project is required",
            ),
        ] {
            let error = render(&release, &values).unwrap_err();
            assert!(
                matches!(error, ChartError::Template(TemplateError::Refused(_))),
                "{error:?}"
            );
            assert!(error.to_string().contains(says), "{values}: {error}");
        }
    }

    #[test]
    fn values_merge_as_helm_coalesces_them() {
        let mut base = json!({"a": {"b": 1, "c": 2}, "l": [1, 2], "gone": "x"});
        merge(&mut base, &json!({"a": {"c": 3}, "l": [9], "gone": null}));
        assert_eq!(base, json!({"a": {"b": 1, "c": 3}, "l": [9]}));
    }

    #[test]
    fn an_image_reference_splits_into_repository_tag_and_digest() {
        assert_eq!(
            image_values("ghcr.io/o/agent:0.1.0"),
            json!({"repository": "ghcr.io/o/agent", "tag": "0.1.0", "digest": ""})
        );
        assert_eq!(
            image_values("localhost:5000/agent"),
            json!({"repository": "localhost:5000/agent", "tag": "", "digest": ""})
        );
        assert_eq!(
            image_values("r.io/agent@sha256:ab"),
            json!({"repository": "r.io/agent", "tag": "", "digest": "sha256:ab"})
        );
    }
}
