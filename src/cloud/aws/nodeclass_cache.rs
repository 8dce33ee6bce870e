//! The provider's view of EC2NodeClasses: [`AwsProvider::resolve_node_class`] for launches and
//! the catalogue (the class from the watch), [`AwsProvider::resolve_node_class_status`] for the
//! node class status controller (the class from the API server), both through one resolution
//! ([`super::nodeclass::resolve`]) reused while the class is Ready, its spec unchanged and the
//! answer younger than `node_class_ttl`. The GCP provider does the same for GCENodeClasses;
//! this file is kept whole so the two can later share one helper.

use super::AwsProvider;
use super::nodeclass::{self, NodeClassResolution, ResolvedNodeClass};
use crate::apis::EC2NodeClass;
use crate::cloud::CloudError;
use std::sync::Arc;
use std::time::Instant;

/// A resolution, and the spec it was made from.
pub(super) struct CachedNodeClass {
    resolved_at: Instant,
    spec: crate::apis::EC2NodeClassSpec,
    resolved: Arc<ResolvedNodeClass>,
}

impl AwsProvider {
    /// Resolves a node class (reusing a recent answer for an unchanged spec), as a launch and
    /// the catalogue need it.
    pub async fn resolve_node_class(
        &self,
        name: &str,
    ) -> Result<Arc<ResolvedNodeClass>, CloudError> {
        // From the watch: this is every round's and every launch's read (see `NodeClasses`).
        let class = self
            .classes
            .get(name)
            .await
            .map_err(|e| CloudError::api("reading the EC2NodeClass", e))?;
        self.resolve_class(name, class.as_deref()).await?.resolved
    }

    /// Resolves a node class as [`Self::resolve_node_class`] does, and says which status that
    /// amounts to when it differs from the class's: the node class status controller writes it
    /// (the provider makes no Kubernetes writes). The class is read from the API server, not
    /// the watch, so a status follows the change that prompted it.
    pub async fn resolve_node_class_status(
        &self,
        name: &str,
    ) -> Result<NodeClassResolution, CloudError> {
        let api: kube::Api<EC2NodeClass> = kube::Api::all(self.kube.clone());
        let class = api
            .get_opt(name)
            .await
            .map_err(|e| CloudError::api("reading the EC2NodeClass", e))?;
        self.resolve_class(name, class.as_ref()).await
    }

    /// Resolves the class `name` as found (`None`: there is none).
    async fn resolve_class(
        &self,
        name: &str,
        class: Option<&EC2NodeClass>,
    ) -> Result<NodeClassResolution, CloudError> {
        let Some(class) = class else {
            return Err(CloudError::NodeClassNotReady {
                name: name.to_owned(),
                reason: format!("EC2NodeClass {name} does not exist"),
            });
        };
        let previous = class.status.clone().unwrap_or_default();
        let generation = class.metadata.generation;
        if let Some(cached) = self.cached_node_class(name, class) {
            let status = nodeclass::status(&Ok((*cached).clone()), None, generation, &previous);
            return Ok(NodeClassResolution {
                resolved: Ok(cached),
                status: (!nodeclass::same_status(&status, &previous)).then_some(status),
            });
        }
        let k8s_version = self.kubernetes_version().await?.to_owned();
        let result = nodeclass::resolve(&self.clients, class, &k8s_version).await;
        let (status, outcome) = match result {
            Ok(resolved) => {
                let resolved = Arc::new(resolved);
                (
                    nodeclass::status(&Ok((*resolved).clone()), None, generation, &previous),
                    Ok(resolved),
                )
            }
            Err(nodeclass::ResolveError::NotReady { condition, reason }) => (
                nodeclass::status(&Err(reason.clone()), Some(condition), generation, &previous),
                Err(CloudError::NodeClassNotReady {
                    name: name.to_owned(),
                    reason,
                }),
            ),
            Err(nodeclass::ResolveError::Cloud(e)) => return Err(e),
        };
        if let Ok(resolved) = &outcome {
            self.node_classes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(
                    name.to_owned(),
                    CachedNodeClass {
                        resolved_at: Instant::now(),
                        spec: class.spec.clone(),
                        resolved: resolved.clone(),
                    },
                );
        }
        Ok(NodeClassResolution {
            resolved: outcome,
            status: (!nodeclass::same_status(&status, &previous)).then_some(status),
        })
    }

    fn cached_node_class(
        &self,
        name: &str,
        class: &EC2NodeClass,
    ) -> Option<Arc<ResolvedNodeClass>> {
        let cache = self
            .node_classes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let cached = cache.get(name)?;
        let fresh =
            cached.resolved_at.elapsed() < self.config.node_class_ttl && cached.spec == class.spec;
        let ready = class.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == nodeclass::conditions::READY && c.status == "True")
        });
        (fresh && ready).then(|| cached.resolved.clone())
    }
}
