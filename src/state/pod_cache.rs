//! What the agent keeps of each pod in the cluster, and how little.
//!
//! Pods are most of the agent's memory: at 2,000 pods the API's `Pod` type held them at ~6 KB
//! each even with every unread field dropped, because its structs are large inline (a `Pod`
//! is 2.2 KB before anything it points to, each `Container` another 2.1 KB). A [`CachedPod`]
//! is read straight from the watch (nothing else is ever decoded), keeps its own small status,
//! and shares with the other replicas of its controller what they all repeat: the trimmed spec,
//! the labels and the owner references. A Deployment's replicas differ only in their name,
//! identity and the node they are bound to, which are kept apart from what is shared.
//!
//! What sharing saves: a pod's labels cost ~650 bytes even for two of them (a `BTreeMap` leaf
//! is 544 bytes) and its owner reference ~200; with `ObjectMeta`'s unread fields that was ~0.9
//! KB of the 1.55 KB of metadata a pod cost (heaptrack on 2,000 rig pods), some 18 MiB at
//! 20,000 pods.
//!
//! [`CachedPod`] is not a `kube::Resource`: its metadata is a [`PodMeta`], whose labels and
//! owners live behind shared pointers, so `ResourceExt` could not answer for it. The watch
//! decodes a [`WatchedPod`] (a `Resource`), which [`ReplicaParts::cache`] turns into the pod the
//! store keeps, keyed through [`Lookup`].

use crate::scheduling::PodView;
use crate::scheduling::ShapeKey;
use k8s_openapi::api::core::v1::{
    EphemeralVolumeSource, ObjectReference, PersistentVolumeClaimVolumeSource, Pod, PodCondition,
    PodSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use serde::Deserialize;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

/// A pod as the agent caches it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(from = "WirePod")]
pub struct CachedPod {
    pub metadata: PodMeta,
    /// `spec`, less `nodeName`, possibly shared with other pods.
    pub spec: Arc<PodSpec>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    pub status: CachedPodStatus,
}

/// The metadata the agent reads of a pod. Fields have `ObjectMeta`'s names and types, except
/// the two that replicas share.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub creation_timestamp: Option<Time>,
    pub deletion_timestamp: Option<Time>,
    /// Karpenter's annotations and the mirror-pod marker (see [`annotation_kept`]).
    pub annotations: Option<BTreeMap<String, String>>,
    /// `labels`, possibly shared with the other replicas of its controller.
    pub labels: Arc<BTreeMap<String, String>>,
    /// `ownerReferences`, shared likewise.
    pub owner_references: Arc<[OwnerReference]>,
}

impl From<ObjectMeta> for PodMeta {
    fn from(meta: ObjectMeta) -> Self {
        let mut annotations = meta.annotations;
        if let Some(kept) = annotations.as_mut() {
            kept.retain(|key, _| annotation_kept(key));
        }
        Self {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            resource_version: meta.resource_version,
            creation_timestamp: meta.creation_timestamp,
            deletion_timestamp: meta.deletion_timestamp,
            // An emptied map keeps its 544-byte node.
            annotations: annotations.filter(|a| !a.is_empty()),
            labels: Arc::new(meta.labels.unwrap_or_default()),
            owner_references: meta.owner_references.unwrap_or_default().into(),
        }
    }
}

/// The status fields the agent reads: the phase, the kube-scheduler's verdict and readiness.
/// Two `PodCondition`s cost ~370 B a pod, 7 MiB at 20,000 pods; this is a tenth of that.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CachedPodStatus {
    pub phase: Option<String>,
    /// The `PodScheduled` condition, if the kube-scheduler has set one.
    pub scheduled: Option<ScheduledCondition>,
    /// Whether the `Ready` condition is True (upstream's `karpenter_pods_state`).
    pub ready: bool,
    /// `startTime`: a `do-not-disrupt` duration counts from it.
    pub start_time: Option<Time>,
}

/// What provisioning reads of `PodScheduled`: whether the kube-scheduler placed the pod, and
/// why not (`Unschedulable` is the verdict Karpenter acts on).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduledCondition {
    pub status: String,
    pub reason: Option<String>,
}

/// The status as the API sends it, less every field no type here names.
#[derive(Default, Deserialize)]
struct WireStatus {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    conditions: Vec<PodCondition>,
    #[serde(default, rename = "startTime")]
    start_time: Option<Time>,
}

impl From<WireStatus> for CachedPodStatus {
    fn from(wire: WireStatus) -> Self {
        let mut status = Self {
            phase: wire.phase,
            start_time: wire.start_time,
            ..Self::default()
        };
        for condition in wire.conditions {
            match condition.type_.as_str() {
                "PodScheduled" => {
                    status.scheduled = Some(ScheduledCondition {
                        status: condition.status,
                        reason: condition.reason,
                    })
                }
                "Ready" => status.ready = condition.status == "True",
                _ => {}
            }
        }
        status
    }
}

/// A pod as the API sends it, less every field no type here names.
#[derive(Deserialize)]
struct WirePod {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<PodSpec>,
    #[serde(default)]
    status: Option<WireStatus>,
}

/// A pod as the watch decodes it, trimmed but not yet sharing anything: what
/// [`ReplicaParts::cache`] turns into a [`CachedPod`]. Never kept.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = Pod)]
#[serde(from = "WirePod")]
pub struct WatchedPod {
    pub metadata: ObjectMeta,
    spec: PodSpec,
    node_name: Option<String>,
    status: CachedPodStatus,
}

impl From<WirePod> for WatchedPod {
    fn from(wire: WirePod) -> Self {
        let mut spec = wire.spec.unwrap_or_default();
        let node_name = spec.node_name.take();
        trim_spec(&mut spec);
        Self {
            metadata: wire.metadata,
            spec,
            node_name,
            status: wire.status.unwrap_or_default().into(),
        }
    }
}

impl From<WatchedPod> for CachedPod {
    fn from(pod: WatchedPod) -> Self {
        Self {
            metadata: pod.metadata.into(),
            spec: Arc::new(pod.spec),
            node_name: pod.node_name,
            status: pod.status,
        }
    }
}

impl From<WirePod> for CachedPod {
    fn from(wire: WirePod) -> Self {
        WatchedPod::from(wire).into()
    }
}

/// Pod annotations a loop reads; every other annotation is dropped.
fn annotation_kept(key: &str) -> bool {
    key.starts_with("karpenter.sh/") || key == crate::apis::labels::MIRROR_POD
}

/// Drops what no loop reads from a pod's spec (commands, env, probes, images, most
/// volumes...). What stays is what scheduling reads: resources, ports, affinity, tolerations,
/// spread, selectors, priority, the scheduler's name, and the names of the claims its
/// volumes use (volume topology).
fn trim_spec(spec: &mut PodSpec) {
    spec.volumes = spec
        .volumes
        .take()
        .map(|volumes| {
            volumes
                .into_iter()
                .filter_map(claim_volume)
                .collect::<Vec<_>>()
        })
        .filter(|volumes| !volumes.is_empty());
    spec.ephemeral_containers = None;
    spec.image_pull_secrets = None;
    spec.security_context = None;
    spec.dns_config = None;
    spec.dns_policy = None;
    spec.readiness_gates = None;
    spec.service_account = None;
    spec.service_account_name = None;
    spec.hostname = None;
    spec.subdomain = None;
    spec.host_aliases = None;
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        container.image = None;
        container.image_pull_policy = None;
        container.termination_message_path = None;
        container.termination_message_policy = None;
        container.working_dir = None;
        container.env = None;
        container.env_from = None;
        container.command = None;
        container.args = None;
        container.volume_mounts = None;
        container.volume_devices = None;
        container.liveness_probe = None;
        container.readiness_probe = None;
        container.startup_probe = None;
        container.lifecycle = None;
        container.security_context = None;
    }
}

impl From<Pod> for CachedPod {
    fn from(pod: Pod) -> Self {
        let status = pod.status.unwrap_or_default();
        WirePod {
            metadata: pod.metadata,
            spec: pod.spec,
            status: Some(WireStatus {
                phase: status.phase,
                conditions: status.conditions.unwrap_or_default(),
                start_time: status.start_time,
            }),
        }
        .into()
    }
}

impl PodView for CachedPod {
    fn pod_name(&self) -> Option<&str> {
        self.metadata.name.as_deref()
    }

    fn pod_namespace(&self) -> Option<&str> {
        self.metadata.namespace.as_deref()
    }

    fn pod_labels(&self) -> Option<&BTreeMap<String, String>> {
        Some(&self.metadata.labels)
    }

    fn pod_spec(&self) -> Option<&PodSpec> {
        Some(&self.spec)
    }

    fn shape_key(&self) -> Option<ShapeKey> {
        // Addresses, not contents: equal addresses are the same shared values.
        let spec = Arc::as_ptr(&self.spec) as usize;
        let labels = Arc::as_ptr(&self.metadata.labels) as usize;
        Some((spec, labels))
    }

    fn pod_phase(&self) -> Option<&str> {
        self.phase()
    }

    fn pod_owners(&self) -> &[OwnerReference] {
        self.owner_references()
    }

    fn pod_annotation(&self, key: &str) -> Option<&str> {
        self.annotation(key)
    }

    fn pod_started_at(&self) -> Option<Timestamp> {
        self.status.start_time.as_ref().map(|t| t.0)
    }

    fn pod_deleted_at(&self) -> Option<Timestamp> {
        self.metadata.deletion_timestamp.as_ref().map(|t| t.0)
    }

    fn is_ready(&self) -> bool {
        self.status.ready
    }
}

impl kube::runtime::reflector::Lookup for CachedPod {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        self.metadata.name.as_deref().map(Cow::Borrowed)
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        self.metadata.namespace.as_deref().map(Cow::Borrowed)
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.metadata.resource_version.as_deref().map(Cow::Borrowed)
    }

    fn uid(&self) -> Option<Cow<'_, str>> {
        self.metadata.uid.as_deref().map(Cow::Borrowed)
    }
}

impl CachedPod {
    /// `metadata.name`, or the empty string.
    pub fn name_any(&self) -> String {
        self.metadata.name.clone().unwrap_or_default()
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> Option<String> {
        self.metadata.namespace.clone()
    }

    /// `metadata.labels`.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.metadata.labels
    }

    /// `metadata.ownerReferences`.
    pub fn owner_references(&self) -> &[OwnerReference] {
        &self.metadata.owner_references
    }

    /// One of the annotations kept (see [`annotation_kept`]).
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    /// A reference to the pod, for Events about it.
    pub(crate) fn object_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Pod".to_owned()),
            name: self.metadata.name.clone(),
            namespace: self.metadata.namespace.clone(),
            uid: self.metadata.uid.clone(),
            resource_version: self.metadata.resource_version.clone(),
            ..ObjectReference::default()
        }
    }

    /// The owner reference marked as the pod's controller, if any.
    pub fn controller(&self) -> Option<&OwnerReference> {
        self.owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
    }

    /// `status.phase`.
    pub fn phase(&self) -> Option<&str> {
        self.status.phase.as_deref()
    }

    /// Whether the pod's `Ready` condition is True.
    pub(crate) fn is_ready(&self) -> bool {
        self.status.ready
    }

    /// The `PodScheduled` condition.
    pub(crate) fn scheduled_condition(&self) -> Option<&ScheduledCondition> {
        self.status.scheduled.as_ref()
    }
}

/// A volume's claim, all that volume topology reads of it: a `persistentVolumeClaim`'s name,
/// or that the volume is generic ephemeral (its claim is named after the pod and volume).
fn claim_volume(volume: Volume) -> Option<Volume> {
    if let Some(claim) = volume.persistent_volume_claim {
        return Some(Volume {
            name: volume.name,
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.claim_name,
                read_only: None,
            }),
            ..Volume::default()
        });
    }
    volume.ephemeral.map(|_| Volume {
        name: volume.name,
        ephemeral: Some(EphemeralVolumeSource::default()),
        ..Volume::default()
    })
}

/// Hands out, for each pod the watch decodes, the spec, labels and owner references an
/// earlier pod of the same controller already holds, when they are equal: replicas come from
/// one template, so only the pods of the same owner are looked through. The table holds weak
/// references, so what it hands out goes when the last pod holding it does.
#[derive(Default)]
pub struct ReplicaParts {
    by_owner: HashMap<String, OwnerParts>,
    calls: usize,
}

/// What the pods of one controller hold, each kept once per distinct value.
#[derive(Default)]
struct OwnerParts {
    specs: Vec<Weak<PodSpec>>,
    labels: Vec<Weak<BTreeMap<String, String>>>,
    owners: Vec<Weak<[OwnerReference]>>,
}

impl OwnerParts {
    fn is_unused(&self) -> bool {
        let gone = |count: usize| count == 0;
        self.specs.iter().all(|w| gone(w.strong_count()))
            && self.labels.iter().all(|w| gone(w.strong_count()))
            && self.owners.iter().all(|w| gone(w.strong_count()))
    }
}

/// How many pods are cached between two sweeps for owners whose pods are all gone.
const SWEEP_EVERY: usize = 4096;

/// How many distinct values of one part are kept per owner. A StatefulSet's pods each have a
/// label of their own (their name), which no other pod will share: without a bound, each of
/// its pods would be compared with every other.
const DISTINCT_PER_OWNER: usize = 8;

impl ReplicaParts {
    /// The pod the store keeps: `pod`, holding the parts it has in common with its replicas.
    pub fn cache(&mut self, pod: WatchedPod) -> CachedPod {
        let mut cached = CachedPod::from(pod);
        let Some(owner) = cached.controller().map(|o| o.uid.clone()) else {
            return cached;
        };
        self.calls += 1;
        if self.calls.is_multiple_of(SWEEP_EVERY) {
            self.by_owner.retain(|_, parts| !parts.is_unused());
        }
        let parts = self.by_owner.entry(owner).or_default();
        share(&mut parts.specs, &mut cached.spec);
        share(&mut parts.labels, &mut cached.metadata.labels);
        share(&mut parts.owners, &mut cached.metadata.owner_references);
        cached
    }
}

/// Replaces `value` with an equal one from `known`, or records it there.
fn share<T: PartialEq + ?Sized>(known: &mut Vec<Weak<T>>, value: &mut Arc<T>) {
    known.retain(|shared| shared.strong_count() > 0);
    if let Some(shared) = known
        .iter()
        .filter_map(Weak::upgrade)
        .find(|shared| **shared == **value)
    {
        *value = shared;
    } else if known.len() < DISTINCT_PER_OWNER {
        known.push(Arc::downgrade(value));
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn replica(name: &str, node: Option<&str>, cpu: &str) -> WatchedPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name,
                         "labels": {"app": "web", "pod-template-hash": "5d8f7c9b4"},
                         "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-12-06T00:00:00Z", "karpenter.sh/do-not-disrupt": "true"},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-1", "controller": true}],
                         "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"},
                {"type": "Ready", "status": "False"}]},
        }))
        .expect("a pod")
    }

    #[test]
    fn a_cached_pod_keeps_what_the_agent_reads() {
        let pod = CachedPod::from(replica("web-1", Some("node-a"), "1"));
        assert_eq!(pod.node_name.as_deref(), Some("node-a"));
        assert_eq!(
            pod.spec.node_name, None,
            "the node name lives beside the spec, so replicas can share it"
        );
        assert_eq!(pod.phase(), Some("Pending"));
        assert_eq!(
            pod.scheduled_condition(),
            Some(&ScheduledCondition {
                status: "False".to_owned(),
                reason: Some("Unschedulable".to_owned()),
            })
        );
        assert!(!pod.is_ready());
        assert_eq!(pod.controller().map(|o| o.name.as_str()), Some("web"));
        assert_eq!(pod.labels().get("app").map(String::as_str), Some("web"));
        assert_eq!(pod.annotation("karpenter.sh/do-not-disrupt"), Some("true"));
        assert_eq!(
            pod.metadata.annotations.as_ref().map(BTreeMap::len),
            Some(1),
            "annotations no loop reads are dropped"
        );
        assert_eq!(
            pod.spec.containers[0].image, None,
            "what no loop reads is dropped"
        );
        assert!(
            pod.spec.containers[0].resources.is_some(),
            "what scheduling reads stays"
        );
    }

    #[test]
    fn a_cached_pod_keeps_only_the_claims_its_volumes_use() {
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "shop"},
            "spec": {"containers": [{"name": "db"}], "volumes": [
                {"name": "config", "configMap": {"name": "db"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0", "readOnly": true}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]},
        }))
        .expect("a pod");
        let claims: Vec<String> = crate::scheduling::volume_topology::claim_names(&pod).collect();
        assert_eq!(claims, ["data-db-0", "db-0-scratch"]);
        let volumes = pod.spec.volumes.as_deref().unwrap_or_default();
        assert_eq!(volumes.len(), 2, "the configMap is dropped");
        assert_eq!(
            volumes[1].ephemeral,
            Some(EphemeralVolumeSource::default()),
            "the claim template is dropped"
        );
        let plain = CachedPod::from(replica("web-1", None, "1"));
        assert_eq!(plain.spec.volumes, None);
    }

    #[test]
    fn replicas_share_their_spec_labels_and_owner_and_what_differs_stays_apart() {
        let mut parts = ReplicaParts::default();
        let mut other_labels = replica("web-3", None, "2");
        other_labels
            .metadata
            .labels
            .get_or_insert_default()
            .insert("canary".to_owned(), "true".to_owned());
        let pods = [
            replica("web-1", None, "1"),
            replica("web-2", Some("node-a"), "1"),
            other_labels,
        ]
        .map(|pod| parts.cache(pod));
        assert!(
            Arc::ptr_eq(&pods[0].spec, &pods[1].spec),
            "bound or not, equal specs are one"
        );
        assert!(Arc::ptr_eq(
            &pods[0].metadata.labels,
            &pods[1].metadata.labels
        ));
        assert!(Arc::ptr_eq(
            &pods[0].metadata.owner_references,
            &pods[2].metadata.owner_references
        ));
        assert!(
            !Arc::ptr_eq(&pods[0].spec, &pods[2].spec),
            "a different spec stays apart"
        );
        assert!(!Arc::ptr_eq(
            &pods[0].metadata.labels,
            &pods[2].metadata.labels
        ));
        assert_eq!(
            pods[2].labels().get("canary").map(String::as_str),
            Some("true")
        );
        assert_eq!(pods[1].metadata.name.as_deref(), Some("web-2"));
        assert_eq!(pods[1].node_name.as_deref(), Some("node-a"));
    }

    #[test]
    fn a_controller_whose_pods_each_differ_keeps_a_bounded_table() {
        let mut parts = ReplicaParts::default();
        let pods: Vec<CachedPod> = (0..100)
            .map(|i| {
                let mut pod = replica(&format!("db-{i}"), None, "1");
                pod.metadata.labels.get_or_insert_default().insert(
                    "statefulset.kubernetes.io/pod-name".to_owned(),
                    format!("db-{i}"),
                );
                parts.cache(pod)
            })
            .collect();
        let owner = parts.by_owner.get("rs-1").expect("the owner's parts");
        assert_eq!(owner.labels.len(), DISTINCT_PER_OWNER);
        assert_eq!(owner.specs.len(), 1);
        assert_eq!(pods[99].labels().len(), 3, "each pod keeps its own labels");
    }

    #[test]
    fn a_pod_from_the_api_converts_like_one_from_the_watch() {
        let watched = CachedPod::from(replica("web-1", Some("node-a"), "1"));
        let api: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1"},
            "spec": {"nodeName": "node-a", "containers": [{"name": "app"}]},
            "status": {"conditions": [{"type": "PodScheduled", "status": "True", "message": "x"}]},
        }))
        .expect("a pod");
        let converted = CachedPod::from(api);
        assert_eq!(converted.node_name, watched.node_name);
        assert_eq!(
            converted.scheduled_condition().map(|c| c.status.as_str()),
            Some("True")
        );
    }
}
