//! The EC2 provider: launches a NodeClaim's instance with a launch template and an instant
//! CreateFleet, terminates and lists this cluster's instances, and describes the catalogue
//! (DescribeInstanceTypes + offerings + prices) for a node class.
//!
//! Sits under the controllers like every [`CloudProvider`]; also owns what only AWS has: the
//! EC2NodeClass resolution ([`nodeclass`]), the cache of offerings EC2 had no capacity for
//! ([`unavailable`](super::unavailable)) and the interruption queue's SQS side
//! ([`interruption`]). It makes no Kubernetes writes: it reads the EC2NodeClass it resolves, and
//! the controllers write the rest.
//!
//! Where things are: what it is told (`config`), its SDK clients (`clients`) and how their errors
//! read (`errors`); the tags it puts on what it makes (`tags`); what it learns about the cluster
//! (`cluster`); resolved node classes (`nodeclass_cache`, over [`nodeclass`] and the shared
//! [`node_class_resolution`](super::node_class_resolution)); the catalogue (`catalogue_snapshot`,
//! over [`catalogue`]); this cluster's instances (`instances`); a launch (`overrides`,
//! `launch_template`, `launch`); drift ([`drift`]) and what a deleted node class leaves behind
//! (`cleanup`).
//!
//! ```no_run
//! # async fn example(kube: kube::Client) -> Result<(), karpenter_core::cloud::CloudError> {
//! use karpenter_core::cloud::aws::{AwsConfig, AwsProvider};
//! let config = AwsConfig::new("us-west-2", "demo");
//! let provider = AwsProvider::new(config, kube).await;
//! # let _ = provider; Ok(()) }
//! ```

pub mod catalogue;
mod catalogue_snapshot;
mod cleanup;
mod client_token;
mod clients;
mod cluster;
mod config;
pub mod drift;
mod errors;
mod instances;
pub mod interruption;
mod launch;
mod launch_template;
pub mod nodeclass;
mod nodeclass_cache;
mod overrides;
pub mod price_feed;
pub mod pricing;
mod tags;
pub mod userdata;

pub use catalogue_snapshot::CatalogueSnapshot;

pub use clients::Clients;
pub use config::AwsConfig;
pub(crate) use errors::{cloud_error, sdk_error_code};
pub(crate) use tags::{EKS_CLUSTER_NAME_TAG, cluster_tag};

use super::node_classes::NodeClasses;
use super::provider::{
    CloudError, CloudProvider, DeleteOutcome, Instance, ListedInstance, ProviderId,
};
use super::unavailable::UnavailableOfferings;
use crate::apis::{EC2NodeClass, NodeClaim, NodeClassReference, labels};
use crate::scheduling::InstanceType;
use nodeclass_cache::NodeClassResolutions;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use userdata::ClusterBootstrap;

/// Launches and tracks EC2 instances for NodeClaims.
pub struct AwsProvider {
    clients: Clients,
    kube: kube::Client,
    config: AwsConfig,
    unavailable: Arc<UnavailableOfferings>,
    catalogue: tokio::sync::Mutex<Arc<CatalogueSnapshot>>,
    node_classes: NodeClassResolutions,
    classes: NodeClasses<EC2NodeClass>,
    launch_templates: Mutex<HashSet<String>>,
    client_tokens: client_token::ClientTokens,
    k8s_version: tokio::sync::OnceCell<String>,
    bootstrap: tokio::sync::OnceCell<ClusterBootstrap>,
    price_feed: price_feed::PriceFeed,
}

impl AwsProvider {
    /// Reports the live price feed's refreshes in `metrics` (see [`price_feed::PriceFeed::report_to`]).
    pub fn report_prices_to(&self, metrics: Arc<crate::metrics::Metrics>) {
        self.price_feed.report_to(metrics);
    }

    /// A provider using the default credential chain (and `config.endpoint_url`).
    pub async fn new(config: AwsConfig, kube: kube::Client) -> Self {
        let sdk = config.sdk_config().await;
        Self::with_sdk_config(config, &sdk, kube)
    }

    /// A provider with an SDK configuration of your own (tests: static credentials).
    pub fn with_sdk_config(
        config: AwsConfig,
        sdk: &aws_config::SdkConfig,
        kube: kube::Client,
    ) -> Self {
        let clients = Clients::new(sdk, &config.region, &config.cluster_name);
        Self {
            clients,
            classes: NodeClasses::new(kube.clone()),
            kube,
            unavailable: Arc::new(UnavailableOfferings::new(config.unavailable_ttl)),
            node_classes: NodeClassResolutions::new(config.node_class_ttl),
            config,
            catalogue: tokio::sync::Mutex::new(Arc::new(CatalogueSnapshot::default())),
            launch_templates: Mutex::new(HashSet::new()),
            client_tokens: client_token::ClientTokens::default(),
            k8s_version: tokio::sync::OnceCell::new(),
            bootstrap: tokio::sync::OnceCell::new(),
            price_feed: price_feed::PriceFeed::default(),
        }
    }

    /// The AWS clients (shared with the interruption handler).
    pub fn clients(&self) -> &Clients {
        &self.clients
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &AwsConfig {
        &self.config
    }

    /// The shared cache of offerings with no capacity (the interruption handler adds to it).
    pub fn unavailable_offerings(&self) -> Arc<UnavailableOfferings> {
        self.unavailable.clone()
    }
}

fn is_ec2_node_class(reference: &NodeClassReference) -> bool {
    reference.kind == "EC2NodeClass" && reference.group == labels::AWS_GROUP
}

impl CloudProvider for AwsProvider {
    fn name(&self) -> &'static str {
        "aws"
    }

    /// Upstream's AWS provider (`pkg/cloudprovider/cloudprovider.go` `RepairPolicies`): the
    /// kubelet's Ready condition for 30 minutes, and the conditions the EKS node monitoring
    /// agent reports (accelerated hardware after 10 minutes, the rest after 30).
    fn repair_policies(&self) -> Vec<crate::cloud::RepairPolicy> {
        use crate::cloud::RepairPolicy;
        let mut policies = crate::cloud::repair::kubelet_not_ready(30).to_vec();
        policies.extend([
            RepairPolicy::new("AcceleratedHardwareReady", "False", 10),
            RepairPolicy::new("StorageReady", "False", 30),
            RepairPolicy::new("NetworkingReady", "False", 30),
            RepairPolicy::new("KernelReady", "False", 30),
            RepairPolicy::new("ContainerRuntimeReady", "False", 30),
        ]);
        policies
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        candidates: &[InstanceType],
    ) -> Result<Instance, CloudError> {
        let reference = &claim.spec.node_class_ref;
        if !is_ec2_node_class(reference) {
            return Err(CloudError::NodeClassNotReady {
                name: reference.name.clone(),
                reason: format!(
                    "{}/{} is not an EC2NodeClass; the aws provider launches only those",
                    reference.group, reference.kind
                ),
            });
        }
        let resolved = self.resolve_node_class(&reference.name).await?;
        let snapshot = self.catalogue().await?;
        let bootstrap = self.cluster_bootstrap().await?.clone();
        launch::launch(self, claim, candidates, &resolved, &snapshot, &bootstrap).await
    }

    async fn delete(&self, id: &ProviderId) -> Result<DeleteOutcome, CloudError> {
        let ProviderId::Aws { instance_id, .. } = id else {
            return Ok(DeleteOutcome::Gone);
        };
        self.terminate_instance(instance_id).await
    }

    async fn get(&self, id: &ProviderId) -> Result<Option<Instance>, CloudError> {
        let ProviderId::Aws { instance_id, .. } = id else {
            return Ok(None);
        };
        self.instance(instance_id).await
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, CloudError> {
        self.cluster_instances().await
    }

    async fn node_class_generation(&self, node_class: &NodeClassReference) -> Option<i64> {
        if !(is_ec2_node_class(node_class)) {
            return None;
        }
        let class = self.classes.get(&node_class.name).await.ok()??;
        class.metadata.generation
    }

    async fn instance_types(
        &self,
        node_class: &NodeClassReference,
    ) -> Result<Arc<[InstanceType]>, CloudError> {
        if !is_ec2_node_class(node_class) {
            return Err(CloudError::NodeClassNotReady {
                name: node_class.name.clone(),
                reason: format!(
                    "{}/{} is not an EC2NodeClass; the aws provider serves only those",
                    node_class.group, node_class.kind
                ),
            });
        }
        let resolved = self.resolve_node_class(&node_class.name).await?;
        let snapshot = self.catalogue().await?;
        Ok(self.instance_types_for(&resolved, &snapshot).into())
    }

    /// Upstream's AWS `IsDrifted`: static fields, image, then the instance's security groups
    /// and subnet (see [`drift`]).
    async fn drift(&self, claim: &NodeClaim) -> Result<Option<String>, CloudError> {
        let reference = &claim.spec.node_class_ref;
        if !is_ec2_node_class(reference) {
            return Ok(None);
        }
        self.is_drifted(claim).await
    }
}
