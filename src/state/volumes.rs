//! The PersistentVolumeClaims, PersistentVolumes and StorageClasses the agent watches for
//! volume topology ([`crate::scheduling::volume_topology`]), trimmed to what it reads.
//! Upstream reads the same objects from its informer cache (`volumetopology.go`).

use super::CachedPod;
use crate::scheduling::{PodView, VolumeObjects, VolumeTopology};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::Arc;

/// The three stores.
#[derive(Clone)]
pub struct VolumeStores {
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub classes: Store<StorageClass>,
}

impl VolumeObjects for VolumeStores {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(&ObjectRef::new(name))
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&ObjectRef::new(name))
    }
}

impl VolumeStores {
    /// The volume topology of every pod still running or to run that has claims.
    pub fn topology(&self, pods: &[Arc<CachedPod>]) -> VolumeTopology {
        VolumeTopology::resolve(
            pods.iter()
                .map(AsRef::as_ref)
                .filter(|p| !p.is_terminal() && p.pod_spec().is_some_and(|s| s.volumes.is_some())),
            self,
        )
    }
}

/// Keeps of a claim its name, deletion, the bind-completed annotation, the volume and class it
/// names and its phase.
pub(super) fn trim_claim(claim: &mut PersistentVolumeClaim) {
    let bound = claim.metadata.annotations.as_ref().and_then(|a| {
        a.get(crate::scheduling::volume_topology::BIND_COMPLETED)
            .cloned()
    });
    claim.metadata.annotations = bound.map(|v| {
        [(
            crate::scheduling::volume_topology::BIND_COMPLETED.to_owned(),
            v,
        )]
        .into_iter()
        .collect()
    });
    claim.metadata.labels = None;
    claim.metadata.owner_references = None;
    if let Some(spec) = claim.spec.as_mut() {
        spec.data_source = None;
        spec.data_source_ref = None;
        spec.selector = None;
        spec.resources = None;
    }
    if let Some(status) = claim.status.as_mut() {
        status.capacity = None;
        status.allocated_resources = None;
        status.conditions = None;
        status.modify_volume_status = None;
    }
}

/// Keeps of a volume its name, deletion, node affinity, and whether it is local or a host path.
pub(super) fn trim_volume(volume: &mut PersistentVolume) {
    volume.metadata.annotations = None;
    volume.metadata.labels = None;
    if let Some(spec) = volume.spec.as_mut() {
        spec.csi = None;
        spec.claim_ref = None;
        spec.mount_options = None;
        spec.capacity = None;
    }
    volume.status = None;
}

/// Keeps of a class its name, binding mode and allowed topologies.
pub(super) fn trim_class(class: &mut StorageClass) {
    class.metadata.annotations = None;
    class.metadata.labels = None;
    class.parameters = None;
    class.mount_options = None;
}
