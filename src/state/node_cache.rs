//! What the agent keeps of each Node: the object less what no loop reads (the image list, the
//! volume bookkeeping, the kubelet's system info, addresses and endpoints, `kubectl apply`'s
//! copy of the whole object). The controllers' Node reflector trims every object it caches
//! with [`trim_node`]: at 1,250 nodes the Node store was the largest part of the agent's heap
//! (13 MiB of 88 at the peak of a 5,000-pod scale-out, measured with heaptrack).

use k8s_openapi::api::core::v1::Node;

/// The annotation `kubectl apply` keeps a full copy of the object in.
pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no loop reads from a cached Node.
pub fn trim_node(node: &mut Node) {
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.node_info = None;
        status.addresses = None;
        status.daemon_endpoints = None;
        status.config = None;
        status.features = None;
        status.runtime_handlers = None;
    }
}
