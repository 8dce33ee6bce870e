//! What the agent keeps of each Node: the object less what no loop reads (its capacity, the
//! image list, the volume bookkeeping, the kubelet's system info, addresses and endpoints, the
//! words and heartbeats of its conditions, annotations other than Karpenter's, `kubectl apply`'s
//! copy of the whole object). The controllers' Node reflector trims every object it caches with
//! [`trim_node`]: at 1,250 nodes the Node store was the largest part of the agent's heap (13 MiB
//! of 88 at the peak of a 5,000-pod scale-out, measured with `tests/agent/heap.sh`).

use k8s_openapi::api::core::v1::Node;

/// The annotation `kubectl apply` keeps a full copy of the object in.
pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no loop reads from a cached Node.
pub fn trim_node(node: &mut Node) {
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        // The loops read Karpenter's own annotations on a Node (`karpenter.sh/do-not-disrupt`,
        // `do-not-repair`, `do-not-sync-taints`); the kubelet's and the CSI drivers' are
        // never read, and each costs two allocations a node.
        annotations.retain(|key, _| key.starts_with("karpenter.sh/"));
    }
    // An emptied map keeps its 544-byte node.
    if node
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.is_empty())
    {
        node.metadata.annotations = None;
    }
    if let Some(status) = node.status.as_mut() {
        // The loops read what pods may use (`allocatable`); what the machine has is read from
        // its NodeClaim (NodePool limits) or, by `kubectl karpenter`, from the API server.
        status.capacity = None;
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.node_info = None;
        status.addresses = None;
        status.daemon_endpoints = None;
        status.config = None;
        status.features = None;
        status.runtime_handlers = None;
        // Repair reads a condition's type, status and transition time; the kubelet's
        // sentence, reason and heartbeat are for people, who read them from the API server.
        for condition in status.conditions.iter_mut().flatten() {
            condition.message = None;
            condition.reason = None;
            condition.last_heartbeat_time = None;
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    #[test]
    fn a_cached_node_keeps_what_disruption_and_repair_read() {
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "annotations": {
                "karpenter.sh/do-not-disrupt": "true",
                "node.alpha.kubernetes.io/ttl": "0",
                LAST_APPLIED: "{}",
            }},
            "status": {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "1930m"}, "conditions": [{
                "type": "Ready", "status": "False", "reason": "KubeletNotReady",
                "message": "container runtime is down",
                "lastHeartbeatTime": "2026-12-06T09:05:18Z",
                "lastTransitionTime": "2026-12-06T09:00:00Z",
            }]},
        }))
        .expect("a node");
        trim_node(&mut node);
        let kept: Vec<&String> = node.annotations().keys().collect();
        assert_eq!(kept, vec!["karpenter.sh/do-not-disrupt"]);
        let status = node.status.expect("status");
        assert_eq!(status.capacity, None);
        assert!(status.allocatable.is_some_and(|a| a.contains_key("cpu")));
        let conditions = status.conditions.expect("conditions");
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].status.as_str()),
            ("Ready", "False")
        );
        assert!(conditions[0].last_transition_time.is_some());
        assert_eq!(conditions[0].message, None);
    }
}
