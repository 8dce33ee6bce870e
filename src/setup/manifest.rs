//! One object `init` applies ([`Manifest`]): what it is, whether the cluster already has this
//! exact version (the hash it was applied with, [`APPLIED_HASH`]), and applying it server-side
//! as `init`'s one field manager.

use super::SetupError;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::Value;
use std::hash::Hasher as _;

/// Annotation holding the hash of the applied object.
pub(crate) const APPLIED_HASH: &str = "kubectl-karpenter.io/applied-hash";
/// The field manager `init` applies with.
pub(crate) const FIELD_MANAGER: &str = "kubectl-karpenter";

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
    pub(super) fn hash(&self) -> String {
        let mut hasher = fnv::FnvHasher::default();
        hasher.write(self.object.to_string().as_bytes());
        format!("{:016x}", hasher.finish())
    }

    /// The object as applied: with the hash annotation.
    pub(crate) fn applied_object(&self) -> Value {
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
    pub(crate) async fn is_applied(&self, client: &kube::Client) -> Result<bool, SetupError> {
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
