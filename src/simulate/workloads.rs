//! Workload manifests as the pods they make: a Deployment, ReplicaSet or StatefulSet makes
//! `replicas` pods from its template (as its controller would), a Job `parallelism` (at most
//! `completions`), a CronJob one run of its Job, a DaemonSet one pod that is overhead on every
//! node, and a Pod itself. NodePools (karpenter.sh/v1) are read as the agent reads them. Other
//! kinds are skipped with a note; what cannot be read is an error naming its source.

use crate::apis::NodePool;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What to plan for.
#[derive(Clone, Debug, Default)]
pub struct Workloads {
    /// The pods to place.
    pub pods: Vec<Pod>,
    /// One pod per DaemonSet.
    pub daemon_set_pods: Vec<Pod>,
    pub node_pools: Vec<NodePool>,
    /// What was skipped, and why.
    pub notes: Vec<String>,
}

/// Why the workloads cannot be planned.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WorkloadError {
    /// An object that does not read as its kind.
    #[error("{source_name}: {object}: {message}")]
    Invalid {
        source_name: String,
        object: String,
        message: String,
    },
    /// Two objects of one kind and name.
    #[error("{first} and {second} both define {object}: keep one of them")]
    Conflict {
        object: String,
        first: String,
        second: String,
    },
    /// A `--replicas` override names no workload.
    #[error(
        "--replicas {0}: no Deployment, ReplicaSet or StatefulSet of that namespace/name among the manifests"
    )]
    UnknownWorkload(String),
}

/// Reads `objects` (each with where it came from), with `replicas` overriding the replica
/// count of the Deployments, ReplicaSets and StatefulSets they name (`namespace/name`).
pub fn read(
    objects: &[(String, Value)],
    replicas: &BTreeMap<String, u32>,
) -> Result<Workloads, WorkloadError> {
    let mut out = Workloads::default();
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    let mut used_overrides = Vec::new();
    for (source, object) in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default");
        let id = format!("{kind} {namespace}/{name}");
        if let Some(first) = seen.insert(format!("{api_version} {id}"), source) {
            return Err(WorkloadError::Conflict {
                object: id,
                first: first.to_owned(),
                second: source.clone(),
            });
        }
        let invalid = |message: String| WorkloadError::Invalid {
            source_name: source.clone(),
            object: id.clone(),
            message,
        };
        let spec = &object["spec"];
        match (api_version, kind) {
            ("apps/v1", "Deployment" | "ReplicaSet" | "StatefulSet") => {
                let key = format!("{namespace}/{name}");
                let count = match replicas.get(&key) {
                    Some(n) => {
                        used_overrides.push(key);
                        *n
                    }
                    // A controller's default.
                    None => count(&spec["replicas"], 1),
                };
                out.pods.extend(pods(&spec["template"], namespace, name, count).map_err(invalid)?);
            }
            ("batch/v1", "Job") => {
                let parallel = count(&spec["parallelism"], 1);
                let running = count(&spec["completions"], parallel).min(parallel);
                out.pods.extend(pods(&spec["template"], namespace, name, running).map_err(invalid)?);
            }
            ("batch/v1", "CronJob") => {
                let job = &spec["jobTemplate"]["spec"];
                let parallel = count(&job["parallelism"], 1);
                let running = count(&job["completions"], parallel).min(parallel);
                out.pods.extend(pods(&job["template"], namespace, name, running).map_err(invalid)?);
                out.notes.push(format!("{id}: planned as one run of its Job"));
            }
            ("apps/v1", "DaemonSet") => {
                out.daemon_set_pods
                    .extend(pods(&spec["template"], namespace, name, 1).map_err(invalid)?);
            }
            ("v1", "Pod") => {
                let mut pod = object.clone();
                // Placed as pending, wherever the manifest had it.
                if let Some(spec) = pod["spec"].as_object_mut() {
                    spec.remove("nodeName");
                }
                pod["metadata"]["namespace"] = json!(namespace);
                out.pods
                    .push(serde_json::from_value(pod).map_err(|e| invalid(e.to_string()))?);
            }
            ("karpenter.sh/v1", "NodePool") => out.node_pools.push(
                serde_json::from_value(object.clone()).map_err(|e| invalid(e.to_string()))?,
            ),
            ("karpenter.sh/v1beta1" | "karpenter.sh/v1alpha5", _) => out.notes.push(format!(
                "{api_version} {kind} {name}: skipped; convert it to v1 first (kubectl karpenter convert)"
            )),
            (
                "karpenter.k8s.aws/v1" | "karpenter.k8s.gcp/v1alpha1" | "karpenter.kwok.sh/v1alpha1",
                _,
            ) => {}
            _ => out.notes.push(format!("{api_version} {kind} {name}: skipped, it makes no pods")),
        }
    }
    if let Some(unused) = replicas.keys().find(|k| !used_overrides.contains(k)) {
        return Err(WorkloadError::UnknownWorkload(unused.clone()));
    }
    Ok(out)
}

/// A count field, or `default` when unset.
fn count(value: &Value, default: u32) -> u32 {
    value
        .as_u64()
        .map_or(default, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// `count` pods from a pod template, named `<owner>-<i>` in `namespace`.
fn pods(template: &Value, namespace: &str, owner: &str, count: u32) -> Result<Vec<Pod>, String> {
    let mut metadata = json!({"namespace": namespace});
    for field in ["labels", "annotations"] {
        if let Some(value) = template["metadata"].get(field) {
            metadata[field] = value.clone();
        }
    }
    let mut pods = Vec::with_capacity(count as usize);
    for i in 0..count {
        metadata["name"] = json!(format!("{owner}-{i}"));
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]});
        pods.push(serde_json::from_value(pod).map_err(|e| format!("its pod template: {e}"))?);
    }
    Ok(pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(name: &str, replicas: u32) -> (String, Value) {
        (
            "apps.yaml".to_owned(),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "shop"},
                "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}}),
        )
    }

    #[test]
    fn workloads_make_the_pods_their_controllers_would_with_overrides() {
        let job = (
            "jobs.yaml".to_owned(),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl"},
                "spec": {"parallelism": 5, "completions": 3, "template": {"spec": {"containers": [{"name": "c"}]}}}}),
        );
        let overrides = BTreeMap::from([("shop/web".to_owned(), 7)]);
        let out = read(
            &[deployment("web", 2), deployment("cart", 3), job],
            &overrides,
        )
        .unwrap();
        let names: Vec<String> = out
            .pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names.len(), 7 + 3 + 3, "{names:?}");
        assert_eq!(names[0], "web-0");
        assert_eq!(out.pods[0].metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(out.pods[12].metadata.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn an_override_of_nothing_and_a_name_defined_twice_are_errors() {
        let overrides = BTreeMap::from([("shop/none".to_owned(), 1)]);
        assert_eq!(
            read(&[deployment("web", 1)], &overrides)
                .unwrap_err()
                .to_string(),
            "--replicas shop/none: no Deployment, ReplicaSet or StatefulSet of that namespace/name among the manifests"
        );
        let twice = read(
            &[deployment("web", 1), deployment("web", 2)],
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert_eq!(
            twice.to_string(),
            "apps.yaml and apps.yaml both define Deployment shop/web: keep one of them"
        );
    }
}
