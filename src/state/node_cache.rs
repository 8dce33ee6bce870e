//! What the library keeps of each Node: [`CachedNode`], the fields the loops and explanations
//! read, with the labels and condition words shared among Nodes through an [`Interner`].
//!
//! The API's `Node` costs 7.1 KB a node even with every unread field dropped (measured with
//! heaptrack on 2,000 trimmed rig Nodes): 1.5 KB is the struct itself, large inline because
//! every field of `NodeSpec` and `NodeStatus` is there whether set or not, and 3.0 KB its 21
//! labels, two owned strings each in a `BTreeMap`. At 5,000 nodes the Node store was ~36 MiB
//! of an agent whose target is 256 MB. A `CachedNode` keeps what is read (name, identity,
//! labels, Karpenter's annotations, finalizers, provider id, cordon, taints, allocatable (parsed) and the
//! type, status and transition time of each condition) and nothing else: what is gone (the
//! capacity, images, addresses, the kubelet's system info and the words of its conditions) is
//! for people, who read it from the API server.
//!
//! It is not a `kube::Resource`: with only some of a Node's metadata, `ResourceExt` would
//! answer for a Node it has not read. The reflector keys it by name through [`Lookup`].

use crate::interner::Interner;
use crate::resources::{QuantityError, ResourceList};
use crate::scheduling::LabelSet;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::Lookup;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The annotation `kubectl apply` keeps a full copy of the object in.
pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A Node as the library reads it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(from = "Node")]
pub struct CachedNode {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`, for writes that must not race another writer.
    pub resource_version: Option<String>,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<Time>,
    /// `metadata.deletionTimestamp`.
    pub deletion_timestamp: Option<Time>,
    /// `metadata.labels`.
    pub labels: LabelSet,
    /// Karpenter's annotations (`karpenter.sh/…`: `do-not-disrupt`, `do-not-sync-taints`...);
    /// the kubelet's and the CSI drivers' are never read.
    pub annotations: BTreeMap<String, String>,
    /// `metadata.finalizers`.
    pub finalizers: Vec<String>,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `status.allocatable`: what pods may use. What the machine has is read from its
    /// NodeClaim (NodePool limits) or, by `kubectl karpenter`, from the API server.
    pub allocatable: Allocatable,
    /// `status.conditions`, less the kubelet's reason, message and heartbeat.
    pub conditions: Vec<NodeConditionState>,
}

/// A Node's `status.allocatable`, parsed once when the watch delivers the Node.
///
/// Every scheduling round reads every Node's: parsed there, the quantities of 5,000 Nodes were
/// a tenth of a round (`cargo bench --bench disruption -- --round`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Allocatable {
    /// The kubelet has not reported it yet (a Node just created).
    #[default]
    NotReported,
    /// Reported.
    Reported(ResourceList),
    /// Reported with a quantity that does not parse, which no kubelet sends.
    Invalid(QuantityError),
}

impl Allocatable {
    /// Parses a Node's `status.allocatable`.
    pub fn of(quantities: Option<&BTreeMap<String, Quantity>>) -> Self {
        match quantities {
            None => Self::NotReported,
            Some(quantities) if quantities.is_empty() => Self::NotReported,
            Some(quantities) => match ResourceList::from_quantities(quantities) {
                Ok(list) => Self::Reported(list),
                Err(e) => Self::Invalid(e),
            },
        }
    }

    /// Whether the kubelet has reported it, valid or not.
    pub(crate) fn is_reported(&self) -> bool {
        !matches!(self, Self::NotReported)
    }

    /// The amounts, when reported and valid.
    pub fn list(&self) -> Option<&ResourceList> {
        match self {
            Self::Reported(list) => Some(list),
            Self::NotReported | Self::Invalid(_) => None,
        }
    }
}

impl From<ResourceList> for Allocatable {
    fn from(list: ResourceList) -> Self {
        Self::Reported(list)
    }
}

/// A Node condition as repair and initialization read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConditionState {
    /// `type` (`Ready`, `MemoryPressure`, a node-problem-detector's own...).
    pub type_: Arc<str>,
    /// `True`, `False` or `Unknown`.
    pub status: Arc<str>,
    /// When the status last changed.
    pub last_transition_time: Option<Time>,
}

impl CachedNode {
    /// What the library keeps of `node`, its repeated strings shared through `interner`.
    pub fn new(node: Node, interner: &mut Interner) -> Self {
        let metadata = node.metadata;
        let spec = node.spec.unwrap_or_default();
        let status = node.status.unwrap_or_default();
        let mut annotations = metadata.annotations.unwrap_or_default();
        annotations.retain(|key, _| key.starts_with("karpenter.sh/"));
        Self {
            name: metadata.name.unwrap_or_default(),
            uid: metadata.uid,
            resource_version: metadata.resource_version,
            creation_timestamp: metadata.creation_timestamp,
            deletion_timestamp: metadata.deletion_timestamp,
            labels: metadata
                .labels
                .as_ref()
                .map(|labels| LabelSet::interned(labels, interner))
                .unwrap_or_default(),
            annotations,
            finalizers: metadata.finalizers.unwrap_or_default(),
            provider_id: spec.provider_id,
            unschedulable: spec.unschedulable.unwrap_or(false),
            taints: spec.taints.unwrap_or_default(),
            allocatable: Allocatable::of(status.allocatable.as_ref()),
            conditions: status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .map(|c| NodeConditionState {
                    type_: interner.get(&c.type_),
                    status: interner.get(&c.status),
                    last_transition_time: c.last_transition_time,
                })
                .collect(),
        }
    }

    /// What the library keeps of each of `nodes` (a listing), their strings shared among them.
    pub fn all(nodes: impl IntoIterator<Item = Node>) -> Vec<Self> {
        let mut interner = Interner::default();
        nodes
            .into_iter()
            .map(|node| Self::new(node, &mut interner))
            .collect()
    }

    /// The value of the label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }

    /// The value of the annotation `key` (Karpenter's only).
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    /// The condition of type `type_`.
    pub fn condition(&self, type_: &str) -> Option<&NodeConditionState> {
        self.conditions.iter().find(|c| &*c.type_ == type_)
    }

    /// A reference to the Node, for the Events recorded on it.
    pub(crate) fn object_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(self.name.clone()),
            uid: self.uid.clone(),
            resource_version: self.resource_version.clone(),
            ..ObjectReference::default()
        }
    }

    /// Whether the kubelet reports the node Ready.
    pub(crate) fn is_ready(&self) -> bool {
        self.condition("Ready")
            .is_some_and(|c| &*c.status == "True")
    }
}

impl From<Node> for CachedNode {
    fn from(node: Node) -> Self {
        Self::new(node, &mut Interner::default())
    }
}

/// The reflector keys cached Nodes as it keys Nodes: by name, with `Node`'s kind and version.
impl Lookup for CachedNode {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Node")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("nodes")
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.resource_version.as_deref().map(Cow::Borrowed)
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        self.uid.as_deref().map(Cow::Borrowed)
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn rig_node(name: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": "u-1", "resourceVersion": "7",
                "labels": {"karpenter.sh/nodepool": "default", "kubernetes.io/hostname": name},
                "annotations": {
                    "karpenter.sh/do-not-disrupt": "true",
                    "node.alpha.kubernetes.io/ttl": "0",
                    LAST_APPLIED: "{}",
                },
                "finalizers": ["karpenter.sh/termination"]},
            "spec": {"providerID": "kwok://n", "unschedulable": true,
                "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "1930m"}, "conditions": [{
                "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                "message": "container runtime is down",
                "lastHeartbeatTime": "2026-12-06T09:05:18Z",
                "lastTransitionTime": "2026-12-06T09:00:00Z",
            }]},
        }))
        .expect("a node")
    }

    #[test]
    fn a_cached_node_keeps_what_disruption_repair_and_scheduling_read() {
        let node = CachedNode::from(rig_node("n"));
        assert_eq!(
            (
                node.name.as_str(),
                node.uid.as_deref(),
                node.resource_version.as_deref()
            ),
            ("n", Some("u-1"), Some("7"))
        );
        assert_eq!(node.label("karpenter.sh/nodepool"), Some("default"));
        let kept: Vec<&String> = node.annotations.keys().collect();
        assert_eq!(kept, vec!["karpenter.sh/do-not-disrupt"]);
        assert_eq!(node.finalizers, ["karpenter.sh/termination"]);
        assert_eq!(node.provider_id.as_deref(), Some("kwok://n"));
        assert!(node.unschedulable);
        assert_eq!(node.taints[0].key, "karpenter.sh/disrupted");
        assert_eq!(node.allocatable.list().map(|a| a.get("cpu")), Some(1930));
        let ready = node.condition("Ready").expect("the Ready condition");
        assert_eq!(&*ready.status, "False");
        assert!(ready.last_transition_time.is_some());
        assert!(!node.is_ready());
    }

    #[test]
    fn nodes_cached_through_one_interner_share_their_pool_and_condition_words() {
        let mut interner = Interner::default();
        let a = CachedNode::new(rig_node("a"), &mut interner);
        let b = CachedNode::new(rig_node("b"), &mut interner);
        assert!(Arc::ptr_eq(
            &a.conditions[0].status,
            &b.conditions[0].status
        ));
        assert_eq!(b.label("kubernetes.io/hostname"), Some("b"));
        // Two keys, the pool, two hostnames, and the condition's type and status.
        assert_eq!(interner.len(), 7);
    }
}
