//! What the agent keeps of each pod in the cluster, and how little.
//!
//! Pods are most of the agent's memory: at 2,000 pods the API's `Pod` type held them at ~6 KB
//! each even with every unread field dropped, because its structs are large inline (a `Pod`
//! is 2.2 KB before anything it points to, each `Container` another 2.1 KB). A [`CachedPod`]
//! is read straight from the watch (nothing else is ever decoded), keeps its own small status,
//! and shares one trimmed spec among the pods that have the same one: a Deployment's replicas
//! differ only in metadata and the node they are bound to, which is kept apart from the spec.

use crate::scheduling::PodView;
use k8s_openapi::api::core::v1::{
    EphemeralVolumeSource, PersistentVolumeClaimVolumeSource, Pod, PodCondition, PodSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A pod as the agent caches it.
#[derive(Resource, Clone, Debug, Default, Deserialize)]
#[resource(inherit = Pod)]
#[serde(from = "WirePod")]
pub struct CachedPod {
    pub metadata: ObjectMeta,
    /// `spec`, less `nodeName`, possibly shared with other pods.
    pub spec: Arc<PodSpec>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    pub status: CachedPodStatus,
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
}

impl From<WireStatus> for CachedPodStatus {
    fn from(wire: WireStatus) -> Self {
        let mut status = Self {
            phase: wire.phase,
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

impl From<WirePod> for CachedPod {
    fn from(wire: WirePod) -> Self {
        let mut metadata = wire.metadata;
        if let Some(annotations) = metadata.annotations.as_mut() {
            annotations.retain(|key, _| annotation_kept(key));
        }
        // An emptied map keeps its 544-byte node.
        if metadata.annotations.as_ref().is_some_and(|a| a.is_empty()) {
            metadata.annotations = None;
        }
        metadata.generate_name = None;
        metadata.managed_fields = None;
        let mut spec = wire.spec.unwrap_or_default();
        let node_name = spec.node_name.take();
        trim_spec(&mut spec);
        Self {
            metadata,
            spec: Arc::new(spec),
            node_name,
            status: wire.status.unwrap_or_default().into(),
        }
    }
}

/// Pod annotations a loop reads; every other annotation is dropped.
fn annotation_kept(key: &str) -> bool {
    key.starts_with("karpenter.sh/") || key == "kubernetes.io/config.mirror"
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
            }),
        }
        .into()
    }
}

impl PodView for CachedPod {
    fn pod_meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn pod_spec(&self) -> Option<&PodSpec> {
        Some(&self.spec)
    }
}

impl CachedPod {
    /// `status.phase`.
    pub fn phase(&self) -> Option<&str> {
        self.status.phase.as_deref()
    }

    /// Whether the pod has finished (Succeeded or Failed).
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase(), Some("Succeeded" | "Failed"))
    }

    /// Whether the pod's `Ready` condition is True.
    pub fn is_ready(&self) -> bool {
        self.status.ready
    }

    /// The `PodScheduled` condition.
    pub fn scheduled_condition(&self) -> Option<&ScheduledCondition> {
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

/// Hands out one shared spec per distinct trimmed spec, per controller: replicas come from one
/// template, so equal specs are looked for only among the pods of the same owner.
#[derive(Default)]
pub struct SharedSpecs(Mutex<SpecsByOwner>);

#[derive(Default)]
struct SpecsByOwner {
    specs: HashMap<String, Vec<Weak<PodSpec>>>,
    calls: usize,
}

/// How many pods are shared between two sweeps for owners whose pods are all gone.
const SWEEP_EVERY: usize = 4096;

impl SharedSpecs {
    /// Replaces the pod's spec with an equal one already held by a pod of the same controller.
    pub fn share(&self, pod: &mut CachedPod) {
        let Some(owner) = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
        else {
            return;
        };
        let mut by_owner = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        by_owner.calls += 1;
        if by_owner.calls.is_multiple_of(SWEEP_EVERY) {
            by_owner
                .specs
                .retain(|_, specs| specs.iter().any(|spec| spec.strong_count() > 0));
        }
        let known = by_owner.specs.entry(owner.uid.clone()).or_default();
        known.retain(|spec| spec.strong_count() > 0);
        if let Some(shared) = known
            .iter()
            .filter_map(Weak::upgrade)
            .find(|spec| **spec == *pod.spec)
        {
            pod.spec = shared;
        } else {
            known.push(Arc::downgrade(&pod.spec));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(name: &str, node: Option<&str>, cpu: &str) -> CachedPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name,
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
        let pod = replica("web-1", Some("node-a"), "1");
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
        assert_eq!(
            pod.metadata.owner_references.as_ref().map(Vec::len),
            Some(1)
        );
        assert_eq!(pod.metadata.managed_fields, None);
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
        let plain = replica("web-1", None, "1");
        assert_eq!(plain.spec.volumes, None);
    }

    #[test]
    fn replicas_with_the_same_spec_share_it_and_others_do_not() {
        let specs = SharedSpecs::default();
        let mut pods = [
            replica("web-1", None, "1"),
            replica("web-2", Some("node-a"), "1"),
            replica("web-3", None, "2"),
        ];
        for pod in &mut pods {
            specs.share(pod);
        }
        assert!(
            Arc::ptr_eq(&pods[0].spec, &pods[1].spec),
            "bound or not, equal specs are one"
        );
        assert!(
            !Arc::ptr_eq(&pods[0].spec, &pods[2].spec),
            "a different spec stays apart"
        );
    }

    #[test]
    fn a_pod_from_the_api_converts_like_one_from_the_watch() {
        let watched = replica("web-1", Some("node-a"), "1");
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
