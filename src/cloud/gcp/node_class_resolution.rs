//! The provider's resolution of a GCENodeClass, as a launch, the catalogue and the node class
//! status controller need it: the class read from the watch (or, for a status, the API server),
//! resolved by [`super::nodeclass`] against the images and the node template's boot image, and
//! reused for `node_class_ttl` while the spec and that image are unchanged. Kept in one file so
//! it can later move behind a helper shared with the AWS provider.

use super::GcpProvider;
use super::nodeclass::{self, NodeClassResolution, ResolvedNodeClass};
use crate::apis::{GCENodeClass, GCENodeClassStatus};
use crate::cloud::provider::CloudError;
use std::sync::Arc;
use std::time::Instant;

/// A node class's resolution, kept to be reused.
pub(super) struct CachedNodeClass {
    resolved_at: Instant,
    spec: crate::apis::GCENodeClassSpec,
    /// The node template's boot image it was resolved with: when GKE upgrades the node pool,
    /// aliases resolve afresh (and the old nodes drift).
    template_image: Option<String>,
    resolved: Arc<ResolvedNodeClass>,
}

impl GcpProvider {
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
            .map_err(|e| CloudError::api("reading the GCENodeClass", e))?;
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
        let api: kube::Api<GCENodeClass> = kube::Api::all(self.kube.clone());
        let class = api
            .get_opt(name)
            .await
            .map_err(|e| CloudError::api("reading the GCENodeClass", e))?;
        self.resolve_class(name, class.as_ref()).await
    }

    /// Resolves the class `name` as found (`None`: there is none).
    async fn resolve_class(
        &self,
        name: &str,
        class: Option<&GCENodeClass>,
    ) -> Result<NodeClassResolution, CloudError> {
        let Some(class) = class else {
            return Err(CloudError::NodeClassNotReady {
                name: name.to_owned(),
                reason: format!("GCENodeClass {name} does not exist"),
            });
        };
        let previous = class.status.clone().unwrap_or_default();
        let template_image = self
            .node_template()
            .await?
            .and_then(|t| t.source_image.clone());
        if let Some(cached) = self.cached_resolution(name, class, template_image.as_deref()) {
            let status =
                nodeclass::status(&Ok((*cached).clone()), class.metadata.generation, &previous);
            return Ok(NodeClassResolution {
                resolved: Ok(cached),
                status: nodeclass::status_changed(&status, &previous).then_some(status),
            });
        }
        let result = nodeclass::resolve(
            &self.clients.images,
            class,
            &self.config.project,
            template_image.as_deref(),
        )
        .await;
        let (status, outcome): (
            GCENodeClassStatus,
            Result<Arc<ResolvedNodeClass>, CloudError>,
        ) = match result {
            Ok(resolved) => {
                let status =
                    nodeclass::status(&Ok(resolved.clone()), class.metadata.generation, &previous);
                (status, Ok(Arc::new(resolved)))
            }
            Err(nodeclass::ResolveError::NotReady { reason }) => (
                nodeclass::status(&Err(reason.clone()), class.metadata.generation, &previous),
                Err(CloudError::NodeClassNotReady {
                    name: name.to_owned(),
                    reason,
                }),
            ),
            Err(nodeclass::ResolveError::Cloud(e)) => return Err(e),
        };
        if let Ok(resolved) = &outcome {
            self.remember_resolution(name, class, template_image, resolved.clone());
        }
        Ok(NodeClassResolution {
            resolved: outcome,
            status: nodeclass::status_changed(&status, &previous).then_some(status),
        })
    }

    /// The class's cached resolution, if it was made from the same spec and template image
    /// within `node_class_ttl`.
    fn cached_resolution(
        &self,
        name: &str,
        class: &GCENodeClass,
        template_image: Option<&str>,
    ) -> Option<Arc<ResolvedNodeClass>> {
        let cache = self
            .node_classes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .get(name)
            .filter(|cached| {
                cached.spec == class.spec
                    && cached.template_image.as_deref() == template_image
                    && cached.resolved_at.elapsed() < self.config.node_class_ttl
            })
            .map(|cached| cached.resolved.clone())
    }

    /// Keeps a resolution for [`Self::cached_resolution`].
    fn remember_resolution(
        &self,
        name: &str,
        class: &GCENodeClass,
        template_image: Option<String>,
        resolved: Arc<ResolvedNodeClass>,
    ) {
        self.node_classes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                name.to_owned(),
                CachedNodeClass {
                    resolved_at: Instant::now(),
                    spec: class.spec.clone(),
                    template_image,
                    resolved,
                },
            );
    }
}
