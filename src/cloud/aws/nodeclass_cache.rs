//! The provider's view of EC2NodeClasses: [`AwsProvider::resolve_node_class`] for launches and
//! the catalogue (the class from the watch), [`AwsProvider::resolve_node_class_status`] for the
//! node class status controller (the class from the API server), both through the resolution
//! the providers share ([`crate::cloud::node_class_resolution`]). What is AWS's own is here: a
//! class resolves through [`super::nodeclass::resolve`] with the cluster's Kubernetes version,
//! and its answer is reused while the class is Ready, its spec unchanged and the answer younger
//! than `node_class_ttl`.
//!
//! This mirrors how upstream's AWS provider resolves an EC2NodeClass in its status controller
//! (`pkg/controllers/nodeclass`) and reuses the result (the caches of its `amifamily`, `subnet`
//! and `securitygroup` providers).

use super::AwsProvider;
use super::nodeclass::{self, NodeClassResolution, ResolvedNodeClass};
use crate::apis::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
use crate::cloud::CloudError;
use crate::cloud::node_class_resolution::{self as shared, NodeClassCache, Resolver, Unresolved};
use std::sync::Arc;

/// The EC2NodeClass resolutions an [`AwsProvider`] keeps.
pub(super) type NodeClassResolutions = NodeClassCache<EC2NodeClassSpec, (), ResolvedNodeClass>;

impl AwsProvider {
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

impl Resolver for AwsProvider {
    type Class = EC2NodeClass;
    /// The cache is keyed on the spec alone.
    type Inputs = ();
    type Resolved = ResolvedNodeClass;
    /// The status condition that failed.
    type Failed = &'static str;

    fn cache(&self) -> &NodeClassResolutions {
        &self.node_classes
    }

    async fn inputs(&self) -> Result<(), CloudError> {
        Ok(())
    }

    fn may_reuse(class: &EC2NodeClass) -> bool {
        class.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == nodeclass::conditions::READY && c.status == "True")
        })
    }

    async fn resolve(
        &self,
        class: &EC2NodeClass,
        _: &(),
    ) -> Result<ResolvedNodeClass, Unresolved<&'static str>> {
        let k8s_version = self
            .kubernetes_version()
            .await
            .map_err(Unresolved::Cloud)?
            .to_owned();
        nodeclass::resolve(&self.clients, class, &k8s_version)
            .await
            .map_err(|e| match e {
                nodeclass::ResolveError::NotReady { condition, reason } => Unresolved::NotReady {
                    failed: condition,
                    reason,
                },
                nodeclass::ResolveError::Cloud(e) => Unresolved::Cloud(e),
            })
    }

    fn status(
        result: &Result<ResolvedNodeClass, String>,
        failed: Option<&'static str>,
        generation: Option<i64>,
        previous: &EC2NodeClassStatus,
    ) -> EC2NodeClassStatus {
        nodeclass::status(result, failed, generation, previous)
    }

    fn status_changed(status: &EC2NodeClassStatus, previous: &EC2NodeClassStatus) -> bool {
        !nodeclass::same_status(status, previous)
    }
}
