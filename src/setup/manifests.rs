//! The Kubernetes side of `init`: the CRDs, the agent's namespace, service account, RBAC and
//! Deployment, and a starter NodePool with its node class, as plain objects. The plugin can print
//! them (`--dry-run -o yaml`); [`ApplyManifests`] is the step that server-side-applies them.
//!
//! Each object carries the hash of what was applied ([`APPLIED_HASH`]), so `check` knows whether
//! the cluster already has exactly this version without comparing server-defaulted fields.

use super::{SetupError, Status, Step};
use futures::future::BoxFuture;
use serde_json::{Value, json};

pub use super::manifest::Manifest;

/// A step that applies a group of manifests.
pub(crate) struct ApplyManifests {
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
    pub(crate) fn chart_values(&self) -> Value {
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
pub(crate) fn agent_step(
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
pub(crate) struct Unrenderable {
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
    use crate::setup::manifest::APPLIED_HASH;

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
