//! What the agent keeps of each Node: the object less what no loop reads (the image list, the
//! volume bookkeeping, `kubectl apply`'s copy of the whole object). The controllers' Node
//! reflector trims every object it caches with [`trim_node`].

use k8s_openapi::api::core::v1::Node;

/// The annotation `kubectl apply` keeps a full copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops the image list and volume bookkeeping from a cached Node.
pub fn trim_node(node: &mut Node) {
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
    }
}
