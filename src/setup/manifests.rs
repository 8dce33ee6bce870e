//! The Kubernetes side of `init`: the CRDs, the agent's namespace, service account, RBAC and
//! Deployment, and a starter NodePool with its node class, as plain objects. The plugin can print
//! them (`--dry-run -o yaml`); [`ApplyManifests`] is the step that server-side-applies them.
//!
//! Each object carries the hash of what was applied ([`APPLIED_HASH`]), so `check` knows whether
//! the cluster already has exactly this version without comparing server-defaulted fields.

use super::{SetupError, Status, Step};
use futures::future::BoxFuture;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};
use std::hash::Hasher as _;

/// Annotation holding the hash of the applied object.
pub const APPLIED_HASH: &str = "kubectl-karpenter.io/applied-hash";
/// The field manager `init` applies with.
pub const FIELD_MANAGER: &str = "kubectl-karpenter";

/// One object to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub resource: ApiResource,
    pub namespace: Option<String>,
    pub name: String,
    /// The whole object (apiVersion, kind, metadata, spec...).
    pub object: Value,
}

impl Manifest {
    /// A manifest from a full object; `plural` is the resource name (`deployments`).
    pub fn new(object: Value, plural: &str) -> Self {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let kind = object["kind"].as_str().unwrap_or_default();
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let namespace = object["metadata"]["namespace"].as_str().map(str::to_owned);
        Self {
            resource,
            namespace,
            name,
            object,
        }
    }

    /// `Kind/name` (or `Kind namespace/name`).
    pub fn id(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.resource.kind, self.name),
            None => format!("{}/{}", self.resource.kind, self.name),
        }
    }

    /// FNV-1a (64-bit) of the object's JSON text.
    fn hash(&self) -> String {
        let mut hasher = fnv::FnvHasher::default();
        hasher.write(self.object.to_string().as_bytes());
        format!("{:016x}", hasher.finish())
    }

    /// The object as applied: with the hash annotation.
    pub fn applied_object(&self) -> Value {
        let mut object = self.object.clone();
        object["metadata"]["annotations"][APPLIED_HASH] = Value::String(self.hash());
        object
    }

    fn api(&self, client: &kube::Client) -> Api<DynamicObject> {
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.resource),
            None => Api::all_with(client.clone(), &self.resource),
        }
    }

    /// Whether the cluster has this exact version.
    pub async fn is_applied(&self, client: &kube::Client) -> Result<bool, SetupError> {
        let existing = self
            .api(client)
            .get_opt(&self.name)
            .await
            .map_err(|source| SetupError::Kube {
                action: format!("reading {}", self.id()),
                source,
            })?;
        Ok(existing.is_some_and(|o| {
            o.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(APPLIED_HASH))
                == Some(&self.hash())
        }))
    }

    /// Server-side applies the object. A Deployment whose `spec.selector` differs from the one
    /// in the cluster (immutable: versions of `init` before the chart selected the agent's pods
    /// by name only) is deleted and created again, as `kubectl apply --force` does; the agent is
    /// down for as long as its new pods take to start, and nothing else is lost.
    pub async fn apply(&self, client: &kube::Client) -> Result<(), SetupError> {
        let error = |source| SetupError::Kube {
            action: format!("applying {}", self.id()),
            source,
        };
        let api = self.api(client);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let object = self.applied_object();
        match api.patch(&self.name, &params, &Patch::Apply(&object)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status))
                if self.resource.kind == "Deployment"
                    && status.code == 422
                    && status.message.contains("spec.selector") =>
            {
                tracing::info!(object = %self.id(), "replacing a Deployment whose selector changed");
                api.delete(&self.name, &kube::api::DeleteParams::background())
                    .await
                    .map_err(error)?;
                api.patch(&self.name, &params, &Patch::Apply(&object))
                    .await
                    .map_err(error)?;
                Ok(())
            }
            Err(source) => Err(error(source)),
        }
    }
}

/// A step that applies a group of manifests.
pub struct ApplyManifests {
    pub name: String,
    pub description: String,
    pub client: kube::Client,
    pub manifests: Vec<Manifest>,
}

impl Step for ApplyManifests {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>> {
        Box::pin(async move {
            let mut missing = Vec::new();
            for m in &self.manifests {
                if !m.is_applied(&self.client).await? {
                    missing.push(m.id());
                }
            }
            Ok(if missing.is_empty() {
                Status::InPlace(format!("{} objects up to date", self.manifests.len()))
            } else {
                Status::Needed(format!("apply {}", missing.join(", ")))
            })
        })
    }

    fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>> {
        Box::pin(async move {
            for m in &self.manifests {
                if !m.is_applied(&self.client).await? {
                    m.apply(&self.client).await?;
                }
            }
            Ok(())
        })
    }
}

/// How `init` deploys the agent: through the chart's templates ([`super::chart`]), with these
/// values over the chart's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentSettings {
    pub namespace: String,
    pub service_account: String,
    pub image: String,
    /// Annotations on the service account (IRSA's role ARN, Workload Identity's account).
    pub service_account_annotations: Vec<(String, String)>,
    /// The chart's values for the cloud: `provider`, `settings.*`, `aws.*` or `gcp.*`
    /// (`gcp.credentialsSecret` mounts a key Secret, for `init gcp --auth key`).
    pub values: Value,
}

impl AgentSettings {
    /// The chart's values: the cloud's, the service account's and the image's.
    pub fn chart_values(&self) -> Value {
        let annotations: serde_json::Map<String, Value> = self
            .service_account_annotations
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let mut values = self.values.clone();
        super::chart::merge(
            &mut values,
            &json!({
                "serviceAccount": {"create": true, "name": self.service_account, "annotations": annotations},
                "image": super::chart::image_values(&self.image),
            }),
        );
        values
    }
}

/// The CRDs this project serves.
pub fn crds() -> Vec<Manifest> {
    crate::apis::crds()
        .into_iter()
        .filter_map(|crd| serde_json::to_value(crd).ok())
        .map(|mut v| {
            v["apiVersion"] = json!("apiextensions.k8s.io/v1");
            v["kind"] = json!("CustomResourceDefinition");
            Manifest::new(v, "customresourcedefinitions")
        })
        .collect()
}

/// The agent's namespace, then the chart's objects for it (service account, RBAC, budget,
/// Service, Deployment) as `helm template` renders them for release `karpenter-agent`.
pub fn agent(settings: &AgentSettings) -> Result<Vec<Manifest>, super::chart::ChartError> {
    let namespace = Manifest::new(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": settings.namespace,
            "labels": {"app.kubernetes.io/name": "karpenter-agent", "app.kubernetes.io/part-of": "kubectl-karpenter"},
        }}),
        "namespaces",
    );
    let release = super::chart::Release::init(&settings.namespace);
    let chart = super::chart::render(&release, &settings.chart_values())?;
    Ok(std::iter::once(namespace).chain(chart).collect())
}

/// The `kubernetes-agent` step: applies the agent's objects when there is a client and the
/// plan applies them, or, when they could not be rendered, fails saying why.
pub fn agent_step(
    agent: &Result<Vec<Manifest>, super::chart::ChartError>,
    namespace: &str,
    client: Option<&kube::Client>,
    apply: bool,
) -> Option<Box<dyn Step>> {
    let name = "kubernetes-agent".to_owned();
    let description =
        format!("CRDs, namespace {namespace}, service account, RBAC and the agent's Deployment");
    match (agent, client) {
        (Err(error), _) => Some(Box::new(Unrenderable {
            name,
            description,
            error: error.clone(),
        })),
        (Ok(agent), Some(client)) if apply => Some(Box::new(ApplyManifests {
            name,
            description,
            client: client.clone(),
            manifests: agent.clone(),
        })),
        (Ok(_), _) => None,
    }
}

/// A step that cannot run because what it would apply could not be made: its check fails
/// with that error, so the plan stops there and says why.
pub struct Unrenderable {
    pub name: String,
    pub description: String,
    pub error: super::chart::ChartError,
}

impl Step for Unrenderable {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>> {
        Box::pin(async move { Err(SetupError::Chart(self.error.clone())) })
    }

    fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>> {
        Box::pin(async move { Err(SetupError::Chart(self.error.clone())) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_applied_hash_of_an_object_never_changes() {
        // Clusters carry these hashes already: a different hash for the same object would make
        // every re-run re-apply it.
        let namespace = Manifest::new(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "karpenter"}}),
            "namespaces",
        );
        assert_eq!(namespace.hash(), "5d9e3cf05a36af21");
        assert_eq!(
            namespace.applied_object()["metadata"]["annotations"][APPLIED_HASH],
            "5d9e3cf05a36af21"
        );
    }
}
