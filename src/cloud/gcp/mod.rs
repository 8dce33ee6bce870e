//! The Compute Engine provider: launches a NodeClaim's VM with `instances.insert` (spot or
//! standard), deletes, looks up and lists this cluster's VMs by label, and describes the
//! catalogue (`zones.list` + `machineTypes.aggregatedList`, priced from
//! [`crate::cloud::gcp_prices`]) for a GCENodeClass.
//!
//! Sits under the controllers like every [`CloudProvider`]; also owns what only GCP has: the
//! GCENodeClass resolution ([`nodeclass`]) and the failed-operation check ([`launch`]). Offerings
//! GCE had no capacity or quota for go into the shared [`UnavailableOfferings`] cache. A VM that
//! GCE preempted (`TERMINATED`/`STOPPED`, or deleted) is reported `terminating` (or absent), and
//! the controllers replace its node.
//!
//! Credentials: Application Default Credentials in production; with
//! [`GcpConfig::endpoint`] set (tests, the project's `gcp-fake`), anonymous ones.
//!
//! By concern: `config` (what the agent tells the provider), `vm_labels` (how a VM says whose it
//! is), `errors` (what a failed Compute call means, and the retry policy), `clients`, `instances`
//! (get, list, delete, and a VM as an [`Instance`]), `instance_types` (the cached catalogue and a
//! node class's instance types, shaped by [`catalogue`] and priced by [`billing`]),
//! `node_class_resolution` (the cached resolution of [`nodeclass`], through the shared
//! [`node_class_resolution`](super::node_class_resolution)), `node_template` (what nodes copy from
//! GKE's instance template), [`launch`], [`drift`] and [`kubelet_identity`]. This file holds the
//! provider and its [`CloudProvider`] methods, which delegate to those.

pub mod billing;
pub mod catalogue;
mod clients;
mod config;
pub mod drift;
mod errors;
mod instance_types;
mod instances;
pub(crate) mod kubelet_identity;
pub mod launch;
mod node_class_resolution;
mod node_template;
pub mod nodeclass;
mod vm_labels;

pub use clients::Clients;
pub(crate) use clients::ClientsError;
pub use config::GcpConfig;
pub(crate) use errors::GcpApiError;
pub(crate) use instance_types::CatalogueSnapshot;
pub(crate) use node_template::NodeTemplate;
pub(crate) use vm_labels::{
    CLUSTER_LABEL, GKE_CLUSTER_LOCATION_LABEL, GKE_CLUSTER_NAME_LABEL, LOCATION_LABEL,
    NODE_CLAIM_LABEL, NODE_CLAIM_METADATA, NODE_CLASS_LABEL, NODE_POOL_LABEL, NODE_POOL_METADATA,
    gce_label_key, gce_label_value,
};

use super::node_classes::NodeClasses;
use super::provider::{
    CloudError, CloudProvider, DeleteOutcome, Instance, ListedInstance, ProviderId,
};
use super::unavailable::UnavailableOfferings;
use crate::apis::{GCENodeClass, NodeClaim, NodeClassReference, labels};
use crate::scheduling::InstanceType;
use node_class_resolution::NodeClassResolutions;
use std::sync::Arc;
use std::time::Instant;

/// Launches and tracks Compute Engine VMs for NodeClaims.
pub struct GcpProvider {
    clients: Clients,
    kube: kube::Client,
    config: GcpConfig,
    unavailable: Arc<UnavailableOfferings>,
    catalogue: tokio::sync::Mutex<Arc<CatalogueSnapshot>>,
    node_classes: NodeClassResolutions,
    classes: NodeClasses<GCENodeClass>,
    node_template: tokio::sync::Mutex<Option<(Instant, Option<Arc<NodeTemplate>>)>>,
    prices: billing::PriceFeed,
}

impl GcpProvider {
    /// A provider for `config` (ADC, or anonymous against `config.endpoint`).
    pub async fn new(config: GcpConfig, kube: kube::Client) -> Result<Self, ClientsError> {
        let clients = Clients::new(&config).await?;
        Ok(Self::with_clients(config, clients, kube))
    }

    /// A provider with clients of your own.
    pub(crate) fn with_clients(config: GcpConfig, clients: Clients, kube: kube::Client) -> Self {
        Self {
            clients,
            classes: NodeClasses::new(kube.clone()),
            kube,
            unavailable: Arc::new(UnavailableOfferings::new(config.unavailable_ttl)),
            node_classes: NodeClassResolutions::new(config.node_class_ttl),
            config,
            catalogue: tokio::sync::Mutex::new(Arc::new(CatalogueSnapshot::default())),
            node_template: tokio::sync::Mutex::new(None),
            prices: billing::PriceFeed::default(),
        }
    }

    /// Reports the Cloud Billing Catalog feed's refreshes in `metrics`.
    pub fn report_prices_to(&self, metrics: Arc<crate::metrics::Metrics>) {
        self.prices.report_to(metrics);
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &GcpConfig {
        &self.config
    }

    /// The cache of offerings GCE had no capacity or quota for.
    pub fn unavailable_offerings(&self) -> Arc<UnavailableOfferings> {
        self.unavailable.clone()
    }
}

fn is_gce_node_class(reference: &NodeClassReference) -> bool {
    reference.kind == "GCENodeClass" && reference.group == labels::GCP_GROUP
}

fn not_a_gce_node_class(reference: &NodeClassReference) -> CloudError {
    CloudError::NodeClassNotReady {
        name: reference.name.clone(),
        reason: format!(
            "{}/{} is not a GCENodeClass; the gcp provider serves only those",
            reference.group, reference.kind
        ),
    }
}

impl CloudProvider for GcpProvider {
    fn name(&self) -> &'static str {
        "gcp"
    }

    /// As the GKE Karpenter providers: the kubelet's Ready condition, tolerated 15 minutes.
    fn repair_policies(&self) -> Vec<crate::cloud::RepairPolicy> {
        crate::cloud::repair::kubelet_not_ready(15).to_vec()
    }

    async fn kubelet_identity(
        &self,
        id: &ProviderId,
    ) -> Result<Option<super::KubeletIdentity>, CloudError> {
        self.kubelet_identity_of(id).await
    }

    /// The class's static fields, then its image (see [`drift`]).
    async fn drift(&self, claim: &NodeClaim) -> Result<Option<String>, CloudError> {
        let reference = &claim.spec.node_class_ref;
        if !is_gce_node_class(reference) {
            return Ok(None);
        }
        let class = self
            .classes
            .get(&reference.name)
            .await
            .map_err(|e| CloudError::api("reading the GCENodeClass", e))?;
        Ok(class
            .and_then(|class| drift::drift(claim, &class))
            .map(str::to_owned))
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        candidates: &[InstanceType],
    ) -> Result<Instance, CloudError> {
        let reference = &claim.spec.node_class_ref;
        if !is_gce_node_class(reference) {
            return Err(not_a_gce_node_class(reference));
        }
        let resolved = self.resolve_node_class(&reference.name).await?;
        let snapshot = self.catalogue().await?;
        let template = self.node_template().await?;
        launch::launch(
            self,
            claim,
            candidates,
            &resolved,
            &snapshot,
            template.as_deref(),
        )
        .await
    }

    async fn delete(&self, id: &ProviderId) -> Result<DeleteOutcome, CloudError> {
        self.delete_instance(id).await
    }

    async fn get(&self, id: &ProviderId) -> Result<Option<Instance>, CloudError> {
        self.get_instance(id).await
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, CloudError> {
        self.list_instances().await
    }

    async fn node_class_generation(&self, node_class: &NodeClassReference) -> Option<i64> {
        if !(is_gce_node_class(node_class)) {
            return None;
        }
        let class = self.classes.get(&node_class.name).await.ok()??;
        class.metadata.generation
    }

    async fn instance_types(
        &self,
        node_class: &NodeClassReference,
    ) -> Result<Arc<[InstanceType]>, CloudError> {
        if !is_gce_node_class(node_class) {
            return Err(not_a_gce_node_class(node_class));
        }
        let resolved = self.resolve_node_class(&node_class.name).await?;
        let snapshot = self.catalogue().await?;
        Ok(self.instance_types_for(&resolved, &snapshot).into())
    }
}

/// The last segment of a resource URL (`…/zones/us-central1-a` → `us-central1-a`).
pub fn last_segment(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}
