//! The provider's resolution of a GCENodeClass, as a launch, the catalogue and the node class
//! status controller need it: the class read from the watch (or, for a status, the API server)
//! through the resolution the providers share ([`crate::cloud::node_class_resolution`]). What is
//! GCP's own is here: a class resolves through [`super::nodeclass`] against the images and the
//! node template's boot image, and its answer is reused for `node_class_ttl` while the spec and
//! that image are unchanged.
//!
//! This mirrors how upstream's providers resolve a node class in their status controller and
//! reuse the result (upstream AWS: `pkg/controllers/nodeclass`, the caches of its `amifamily`,
//! `subnet` and `securitygroup` providers).

use super::GcpProvider;
use super::nodeclass::{self, NodeClassResolution, ResolvedNodeClass};
use crate::apis::{GCENodeClass, GCENodeClassSpec, GCENodeClassStatus};
use crate::cloud::node_class_resolution::{self as shared, NodeClassCache, Resolver, Unresolved};
use crate::cloud::provider::CloudError;
use std::sync::Arc;

/// The GCENodeClass resolutions a [`GcpProvider`] keeps, by spec and node template image.
pub(super) type NodeClassResolutions =
    NodeClassCache<GCENodeClassSpec, Option<String>, ResolvedNodeClass>;

impl GcpProvider {
    /// Resolves a node class (reusing a recent answer for an unchanged spec), as a launch and
    /// the catalogue need it.
    pub(crate) async fn resolve_node_class(
        &self,
        name: &str,
    ) -> Result<Arc<ResolvedNodeClass>, CloudError> {
        shared::from_watch(self, &self.classes, name).await
    }

    /// Resolves a node class as [`Self::resolve_node_class`] does, and says which status that
    /// amounts to when it differs from the class's: the node class status controller writes it
    /// (the provider makes no Kubernetes writes). The class is read from the API server, not
    /// the watch, so a status follows the change that prompted it.
    pub(crate) async fn resolve_node_class_status(
        &self,
        name: &str,
    ) -> Result<NodeClassResolution, CloudError> {
        shared::from_api_server(self, &self.kube, name).await
    }
}

impl Resolver for GcpProvider {
    type Class = GCENodeClass;
    /// The node template's boot image it was resolved with: when GKE upgrades the node pool,
    /// aliases resolve afresh (and the old nodes drift).
    type Inputs = Option<String>;
    type Resolved = ResolvedNodeClass;
    /// A GCENodeClass has one condition (`Ready`), so a failure names nothing more.
    type Failed = ();

    fn cache(&self) -> &NodeClassResolutions {
        &self.node_classes
    }

    async fn inputs(&self) -> Result<Option<String>, CloudError> {
        Ok(self
            .node_template()
            .await?
            .and_then(|t| t.source_image.clone()))
    }

    /// Unlike the AWS provider's, a cached resolution answers whatever the class's `Ready`
    /// condition says: the spec, the template image and the TTL decide.
    fn may_reuse(_: &GCENodeClass) -> bool {
        true
    }

    async fn resolve(
        &self,
        class: &GCENodeClass,
        template_image: &Option<String>,
    ) -> Result<ResolvedNodeClass, Unresolved<()>> {
        nodeclass::resolve(
            &self.clients.images,
            class,
            &self.config.project,
            template_image.as_deref(),
        )
        .await
        .map_err(|e| match e {
            nodeclass::ResolveError::NotReady { reason } => {
                Unresolved::NotReady { failed: (), reason }
            }
            nodeclass::ResolveError::Cloud(e) => Unresolved::Cloud(e),
        })
    }

    fn status(
        result: &Result<ResolvedNodeClass, String>,
        _: Option<()>,
        generation: Option<i64>,
        previous: &GCENodeClassStatus,
    ) -> GCENodeClassStatus {
        nodeclass::status(result, generation, previous)
    }

    fn status_changed(status: &GCENodeClassStatus, previous: &GCENodeClassStatus) -> bool {
        nodeclass::status_changed(status, previous)
    }
}
