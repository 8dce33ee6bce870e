//! The kwok simulation provider: an "instance" is a Node object that the real kwok controller
//! keeps Ready, so pods bound to it run, and nothing costs money. It exercises every controller
//! exactly as a cloud would, which makes it the provider of the local demo and the integration
//! tests.
//!
//! The one provider that writes to Kubernetes, by design: creating and deleting Node objects is
//! its simulated cloud's API (as upstream's kwok provider does), not a write on the controllers'
//! behalf. Every other `cloud` module only reads the node class it needs.

pub mod catalogue;

use super::node_classes::NodeClasses;
use super::provider::{
    CloudError, CloudProvider, DeleteOutcome, Instance, ListedInstance, ProviderId,
};
use crate::apis::{CapacityType, KWOKNodeClass, NodeClaim, NodeClassReference, labels};
use crate::client::metadata_list;
use crate::resources::ResourceList;
use crate::scheduling::Requirements;
use crate::scheduling::{InstanceType, Offering};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, NodeSystemInfo, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What listing the simulated instances reads of each Node.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListedMeta {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
}

/// Upstream's simulated node fault (`KWOKUnhealthyCondition` in its kwok provider).
pub const KWOK_UNHEALTHY: &str = "KWOKUnhealthy";

/// Launches Node objects for kwok to animate.
#[derive(Clone)]
pub struct KwokProvider {
    client: Client,
    nodes: Api<Node>,
    node_classes: Arc<NodeClasses<KWOKNodeClass>>,
    catalogue: Arc<[InstanceType]>,
}

impl KwokProvider {
    /// A provider with the built-in catalogue of real AWS and GCP shapes.
    pub fn new(client: Client) -> Self {
        Self::with_catalogue(client, catalogue::catalogue())
    }

    /// A provider with a catalogue of your own.
    pub(crate) fn with_catalogue(client: Client, catalogue: Vec<InstanceType>) -> Self {
        Self {
            nodes: Api::all(client.clone()),
            node_classes: Arc::new(NodeClasses::new(client.clone())),
            client,
            catalogue: catalogue.into(),
        }
    }

    fn instance_from_node(&self, node: &Node) -> Option<Instance> {
        let status = node.status.as_ref();
        let quantities = |q: Option<
            &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >| {
            q.and_then(|q| ResourceList::from_quantities(q).ok())
                .unwrap_or_default()
        };
        let capacity = quantities(status.and_then(|s| s.capacity.as_ref()));
        let allocatable = quantities(status.and_then(|s| s.allocatable.as_ref()));
        self.instance_from_metadata(&node.metadata, capacity, allocatable)
    }

    /// The instance a simulated node's metadata describes, with the resources given.
    fn instance_from_metadata(
        &self,
        metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        capacity: ResourceList,
        allocatable: ResourceList,
    ) -> Option<Instance> {
        let labels = metadata.labels.clone().unwrap_or_default();
        if labels.get(labels::KWOK_NODE).map(String::as_str) != Some(labels::KWOK_NODE_FAKE) {
            return None;
        }
        let name = metadata.name.clone()?;
        Some(Instance {
            provider_id: ProviderId::Kwok { name: name.clone() },
            node_claim: labels.get(NODE_CLAIM_LABEL).cloned(),
            node_pool: labels.get(labels::NODE_POOL).cloned(),
            instance_type: labels
                .get(labels::INSTANCE_TYPE)
                .cloned()
                .unwrap_or_default(),
            zone: labels.get(labels::ZONE).cloned().unwrap_or_default(),
            // kwok's nodes carry the label their launch gave them; on-demand without one.
            capacity_type: labels
                .get(labels::CAPACITY_TYPE)
                .and_then(|v| v.parse().ok())
                .unwrap_or(CapacityType::OnDemand),
            image_id: None,
            capacity,
            allocatable,
            price: labels
                .get(labels::INSTANCE_PRICE)
                .and_then(|p| p.parse().ok()),
            created: metadata.creation_timestamp.as_ref().map(|t| t.0),
            terminating: metadata.deletion_timestamp.is_some(),
            labels,
            annotations: BTreeMap::new(),
        })
    }
}

/// Whether a resource is an extended one (a device plugin's, e.g. `nvidia.com/gpu`).
fn is_extended(resource: &str) -> bool {
    resource.contains('/') && !resource.contains("kubernetes.io/")
}

/// Label on simulated nodes naming the NodeClaim they were launched for (the cloud "tag").
pub(crate) const NODE_CLAIM_LABEL: &str = "karpenter.kwok.sh/nodeclaim";

/// Picks the cheapest offering of the candidates that the claim's requirements allow.
pub(crate) fn cheapest_launchable<'a>(
    claim_requirements: &Requirements,
    candidates: &'a [InstanceType],
) -> Option<(&'a InstanceType, &'a crate::scheduling::Offering)> {
    candidates
        .iter()
        .filter_map(|it| {
            it.cheapest_offering(claim_requirements)
                .map(|offering| (it, offering))
        })
        .fold(None, |best, (it, offering)| match best {
            Some((_, b)) if b.price <= offering.price => best,
            _ => Some((it, offering)),
        })
}

fn single_values(requirements: &Requirements) -> BTreeMap<String, String> {
    requirements
        .iter()
        .filter_map(|r| {
            let mut values = r.values();
            match (values.next(), values.next(), r.operator()) {
                (Some(value), None, crate::apis::RequirementOperator::In) => {
                    Some((r.key().to_owned(), value.to_owned()))
                }
                _ => None,
            }
        })
        .collect()
}

/// What the instance type fixes (arch, os, family, CPU...), with the offering: the launch's
/// answer, which the lifecycle records on the claim.
fn launch_labels(instance_type: &InstanceType, offering: &Offering) -> BTreeMap<String, String> {
    let mut type_labels = single_values(&instance_type.requirements);
    type_labels.insert(labels::INSTANCE_TYPE.to_owned(), instance_type.name.clone());
    type_labels.insert(labels::ZONE.to_owned(), offering.zone.clone());
    type_labels.insert(
        labels::CAPACITY_TYPE.to_owned(),
        offering.capacity_type.to_string(),
    );
    type_labels
}

/// The Node's labels as a kubelet registers it: the claim's labels it may set (its
/// `--node-labels`), its own arch, os and hostname, and the instance type and zone a cloud
/// controller manager adds. The rest (custom requirement values, the type's Karpenter labels)
/// must come from the agent's registration, as on a real cloud.
fn node_labels(
    claim: &NodeClaim,
    claim_name: &str,
    type_labels: &BTreeMap<String, String>,
    offering: &Offering,
) -> BTreeMap<String, String> {
    let mut node_labels = crate::cloud::kubelet_labels::kubelet_labels(claim.labels());
    for key in [
        labels::ARCH,
        labels::OS,
        labels::INSTANCE_TYPE,
        labels::ZONE,
        labels::CAPACITY_TYPE,
    ] {
        if let Some(value) = type_labels.get(key) {
            node_labels.insert(key.to_owned(), value.clone());
        }
    }
    node_labels.insert(labels::HOSTNAME.to_owned(), claim_name.to_owned());
    node_labels.insert(
        labels::KWOK_NODE.to_owned(),
        labels::KWOK_NODE_FAKE.to_owned(),
    );
    node_labels.insert(NODE_CLAIM_LABEL.to_owned(), claim_name.to_owned());
    // Never a made-up figure on a label users and eks-node-viewer read.
    if let Some(price) = offering.known_price() {
        node_labels.insert(labels::INSTANCE_PRICE.to_owned(), format!("{price:.4}"));
    }
    node_labels
}

/// The claim's taints and startup taints, and the one every node registers with.
fn node_taints(claim: &NodeClaim) -> Vec<Taint> {
    let mut taints: Vec<Taint> = claim.spec.taints.clone();
    taints.extend(claim.spec.startup_taints.iter().cloned());
    taints.push(Taint {
        key: labels::UNREGISTERED_TAINT_KEY.to_owned(),
        effect: "NoExecute".to_owned(),
        ..Taint::default()
    });
    taints
}

/// `list` with the extended resources at zero, as a kubelet reports them before their device
/// plugin registers.
fn zeroed(list: &BTreeMap<String, Quantity>) -> BTreeMap<String, Quantity> {
    list.iter()
        .map(|(k, v)| {
            let v = if is_extended(k) {
                Quantity("0".to_owned())
            } else {
                v.clone()
            };
            (k.clone(), v)
        })
        .collect()
}

/// The Node kwok animates for the claim `claim_name`.
fn simulated_node(
    claim_name: &str,
    node_labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    capacity: BTreeMap<String, Quantity>,
    allocatable: BTreeMap<String, Quantity>,
) -> Node {
    let arch = node_labels
        .get(labels::ARCH)
        .cloned()
        .unwrap_or_else(|| "amd64".to_owned());
    Node {
        metadata: ObjectMeta {
            name: Some(claim_name.to_owned()),
            labels: Some(node_labels),
            annotations: Some(BTreeMap::from([(
                labels::KWOK_NODE.to_owned(),
                labels::KWOK_NODE_FAKE.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(
                ProviderId::Kwok {
                    name: claim_name.to_owned(),
                }
                .to_string(),
            ),
            taints: Some(taints),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(capacity),
            allocatable: Some(allocatable),
            node_info: Some(NodeSystemInfo {
                architecture: arch,
                operating_system: "linux".to_owned(),
                kubelet_version: "v1.34.0-kwok".to_owned(),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}

impl KwokProvider {
    /// Creates the simulated node, then has the simulated device plugin report the extended
    /// resources (`device_plugin`: the status patch, and after how long).
    async fn create_node(
        &self,
        node: &Node,
        claim_name: &str,
        device_plugin: Option<(serde_json::Value, std::time::Duration)>,
    ) -> Result<Node, CloudError> {
        match self.nodes.create(&PostParams::default(), node).await {
            Ok(node) => {
                if let Some((patch, delay)) = device_plugin {
                    let (nodes, name) = (self.nodes.clone(), claim_name.to_owned());
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        if let Err(e) = nodes
                            .patch_status(&name, &PatchParams::default(), &Patch::Strategic(patch))
                            .await
                        {
                            tracing::warn!(node = %name, error = %e, "the simulated device plugin could not register");
                        }
                    });
                }
                Ok(node)
            }
            // A restart between launching and recording the launch: adopt what is there.
            Err(kube::Error::Api(status)) if status.code == 409 => self
                .nodes
                .get(claim_name)
                .await
                .map_err(|e| CloudError::api("reading the simulated node", e)),
            Err(e) => Err(CloudError::api("creating the simulated node", e)),
        }
    }
}

impl CloudProvider for KwokProvider {
    fn name(&self) -> &'static str {
        "kwok"
    }

    /// Upstream's kwok provider: the kubelet's Ready condition, tolerated 10 minutes.
    /// Upstream's kwok policies: the kubelet's Ready condition for 10 minutes, and the
    /// simulated fault `KWOKUnhealthy=True` for 30 seconds (upstream's e2e tests set it).
    fn repair_policies(&self) -> Vec<crate::cloud::RepairPolicy> {
        let mut policies = crate::cloud::repair::kubelet_not_ready(10).to_vec();
        policies.push(crate::cloud::RepairPolicy {
            condition_type: KWOK_UNHEALTHY,
            condition_status: "True",
            toleration: std::time::Duration::from_secs(30),
        });
        policies
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        candidates: &[InstanceType],
    ) -> Result<Instance, CloudError> {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        let class_name = &claim.spec.node_class_ref.name;
        let class = self
            .node_classes
            .get(class_name)
            .await
            .map_err(|e| CloudError::api("reading the KWOKNodeClass", e))?;
        let Some(class) = class else {
            return Err(CloudError::NodeClassNotReady {
                name: class_name.clone(),
                reason: format!("KWOKNodeClass {class_name} does not exist"),
            });
        };
        let requirements = Requirements::from_api(&claim.spec.requirements)
            .map_err(|e| CloudError::api("reading the NodeClaim's requirements", e))?;
        let Some((instance_type, offering)) = cheapest_launchable(&requirements, candidates) else {
            return Err(CloudError::InsufficientCapacity {
                offerings: candidates.iter().map(|it| it.name.clone()).collect(),
            });
        };
        let delay = class.spec.registration_delay();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }

        let type_labels = launch_labels(instance_type, offering);
        let node_labels = node_labels(claim, &claim_name, &type_labels, offering);
        // A kubelet reports extended resources (GPUs) as zero until their device plugin
        // registers; the simulated device plugin below reports them after the class's delay.
        let capacity = instance_type.capacity.to_quantities();
        let allocatable = instance_type.allocatable().to_quantities();
        let device_plugin = capacity.keys().any(|r| is_extended(r)).then(|| {
            (
                json!({"status": {"capacity": capacity.clone(), "allocatable": allocatable.clone()}}),
                class.spec.device_plugin_delay(),
            )
        });
        let node = simulated_node(
            &claim_name,
            node_labels,
            node_taints(claim),
            zeroed(&capacity),
            zeroed(&allocatable),
        );
        let created = self.create_node(&node, &claim_name, device_plugin).await?;
        self.instance_from_node(&created)
            .map(|instance| Instance {
                labels: type_labels,
                // What the machine has, not what its kubelet reports yet (GPUs at zero).
                capacity: instance_type.capacity.clone(),
                allocatable: instance_type.allocatable(),
                ..instance
            })
            .ok_or_else(|| CloudError::NodeClassNotReady {
                name: class_name.clone(),
                reason: format!(
                    "node {claim_name} exists but was not created by the kwok provider"
                ),
            })
    }

    async fn delete(&self, id: &ProviderId) -> Result<DeleteOutcome, CloudError> {
        let ProviderId::Kwok { name } = id else {
            return Ok(DeleteOutcome::Gone);
        };
        // A simulated machine stops when its Node is deleted; what stays is the Node object,
        // held by the termination finalizer. So a Node already being deleted is a machine that
        // is gone (as EC2 answers `terminated` to a second TerminateInstances).
        let existing = self
            .nodes
            .get_opt(name)
            .await
            .map_err(|e| CloudError::api("reading the simulated node", e))?;
        match existing {
            None => return Ok(DeleteOutcome::Gone),
            Some(node) if node.metadata.deletion_timestamp.is_some() => {
                return Ok(DeleteOutcome::Gone);
            }
            Some(_) => {}
        }
        match self.nodes.delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(DeleteOutcome::Terminating),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(DeleteOutcome::Gone),
            Err(e) => Err(CloudError::api("deleting the simulated node", e)),
        }
    }

    async fn get(&self, id: &ProviderId) -> Result<Option<Instance>, CloudError> {
        let ProviderId::Kwok { name } = id else {
            return Ok(None);
        };
        let node = self
            .nodes
            .get_opt(name)
            .await
            .map_err(|e| CloudError::api("reading the simulated node", e))?;
        Ok(node.as_ref().and_then(|n| self.instance_from_node(n)))
    }

    async fn list(&self) -> Result<Vec<ListedInstance>, CloudError> {
        let selector = format!(
            "{}={},{}",
            labels::KWOK_NODE,
            labels::KWOK_NODE_FAKE,
            NODE_CLAIM_LABEL
        );
        // Metadata only: a page of whole Nodes (conditions, images, the kubelet's status) was
        // 8.5 MiB of the agent's peak heap at 1,250 nodes (heaptrack, `tests/kwok/heap.sh`);
        // and of the metadata only what a listing holds, in pages (see `client::metadata_list`):
        // kwok's managed fields on a Node are larger decoded than the rest of it.
        let listed: Vec<ListedMeta> = metadata_list::list_metadata::<Node, _>(
            &self.client,
            &ListParams::default().labels(&selector),
        )
        .await
        .map_err(|e| CloudError::api("listing the simulated nodes", e))?;
        Ok(listed
            .into_iter()
            .filter(|n| {
                n.labels.get(labels::KWOK_NODE).map(String::as_str) == Some(labels::KWOK_NODE_FAKE)
            })
            .map(|mut n| ListedInstance {
                provider_id: ProviderId::Kwok { name: n.name },
                node_claim: n.labels.remove(NODE_CLAIM_LABEL),
                created: n.creation_timestamp.map(|t| t.0),
                terminating: n.deletion_timestamp.is_some(),
            })
            .collect())
    }

    /// The catalogue, for a KWOKNodeClass that exists (as upstream's kwok provider resolves
    /// the class before it answers).
    async fn node_class_generation(&self, node_class: &NodeClassReference) -> Option<i64> {
        if !(node_class.group == labels::KWOK_GROUP && node_class.kind == "KWOKNodeClass") {
            return None;
        }
        let class = self.node_classes.get(&node_class.name).await.ok()??;
        class.metadata.generation
    }

    async fn instance_types(
        &self,
        node_class: &NodeClassReference,
    ) -> Result<Arc<[InstanceType]>, CloudError> {
        if node_class.group != labels::KWOK_GROUP || node_class.kind != "KWOKNodeClass" {
            return Err(CloudError::NodeClassNotReady {
                name: node_class.name.clone(),
                reason: format!(
                    "{}/{} is not a KWOKNodeClass; the kwok provider serves only those",
                    node_class.group, node_class.kind
                ),
            });
        }
        match self.node_classes.get(&node_class.name).await {
            Ok(Some(_)) => Ok(self.catalogue.clone()),
            Ok(None) => Err(CloudError::NodeClassNotReady {
                name: node_class.name.clone(),
                reason: format!("KWOKNodeClass {} does not exist", node_class.name),
            }),
            Err(e) => Err(CloudError::api("reading the KWOKNodeClass", e)),
        }
    }
}
