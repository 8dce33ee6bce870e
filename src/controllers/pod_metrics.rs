//! Upstream's `karpenter_pods_state` (`pkg/controllers/metrics/pod`): one series per pod, with
//! its owner, node, the node's pool, zone, architecture, capacity type and instance type, and the
//! pod's phase and readiness. Rebuilt from the watched pods and nodes every few seconds; series of
//! pods that are gone, or whose labels changed, are removed, so a scrape never sees a pod twice.

use super::Context;
use crate::apis::labels;
use crate::metrics::PodStateLabels;
use crate::state::CachedPod;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How often the series are brought up to date.
const REFRESH: Duration = Duration::from_secs(10);

/// Keeps `karpenter_pods_state` current until cancelled.
pub async fn run<P: Send + Sync + 'static>(ctx: Arc<Context<P>>) {
    let mut interval = tokio::time::interval(REFRESH);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut published: HashSet<PodStateLabels> = HashSet::new();
    loop {
        interval.tick().await;
        let _pass = ctx
            .health
            .pass(super::names::POD_METRICS, ctx.settings.stuck_pass_after);
        let nodes: HashMap<String, Arc<Node>> = ctx
            .nodes
            .state()
            .into_iter()
            .map(|n| (n.name_any(), n))
            .collect();
        let now: HashSet<PodStateLabels> = ctx
            .pods
            .state()
            .iter()
            .map(|pod| {
                pod_state(
                    pod,
                    pod.node_name
                        .as_deref()
                        .and_then(|n| nodes.get(n))
                        .map(AsRef::as_ref),
                )
            })
            .collect();
        for gone in published.difference(&now) {
            ctx.metrics.pods_state.remove(gone);
        }
        for labels in &now {
            ctx.metrics.pods_state.get_or_create(labels).set(1);
        }
        published = now;
    }
}

/// The labels of one pod's series, as upstream's `makeLabels`.
pub fn pod_state(pod: &CachedPod, node: Option<&Node>) -> PodStateLabels {
    let owner = pod
        .metadata
        .owner_references
        .as_ref()
        .and_then(|o| o.first())
        .map(|o| {
            format!(
                "/apis/{}/namespaces/{}/{}s/{}",
                o.api_version,
                pod.namespace().unwrap_or_default(),
                o.kind.to_lowercase(),
                o.name
            )
        })
        .unwrap_or_default();
    let node_label = |key: &str| {
        node.and_then(|n| n.labels().get(key).cloned())
            .unwrap_or_default()
    };
    let nodepool = node_label(labels::NODE_POOL);
    PodStateLabels {
        name: pod.name_any(),
        namespace: pod.namespace().unwrap_or_default(),
        owner,
        node: pod.node_name.clone().unwrap_or_default(),
        scheduled: pod.node_name.is_some().to_string(),
        zone: node_label(labels::ZONE),
        arch: node_label(labels::ARCH),
        capacity_type: node_label(labels::CAPACITY_TYPE),
        instance_type: node_label(labels::INSTANCE_TYPE),
        phase: pod.phase().unwrap_or_default().to_owned(),
        ready: pod.is_ready().to_string(),
        managed: (!nodepool.is_empty()).to_string(),
        nodepool,
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_running_pod_on_a_karpenter_node_is_labelled_with_its_owner_node_and_the_nodes_offering() {
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9", "uid": "rs"}]},
            "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("a pod");
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-a", "labels": {
                "karpenter.sh/nodepool": "default", "topology.kubernetes.io/zone": "us-west-2a",
                "kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "spot",
                "node.kubernetes.io/instance-type": "m7g.large"}},
        }))
        .expect("a node");
        assert_eq!(
            pod_state(&pod, Some(&node)),
            PodStateLabels {
                name: "web-1".into(),
                namespace: "shop".into(),
                owner: "/apis/apps/v1/namespaces/shop/replicasets/web-7d9".into(),
                node: "node-a".into(),
                scheduled: "true".into(),
                nodepool: "default".into(),
                zone: "us-west-2a".into(),
                arch: "arm64".into(),
                capacity_type: "spot".into(),
                instance_type: "m7g.large".into(),
                phase: "Running".into(),
                ready: "true".into(),
                managed: "true".into(),
            }
        );
    }

    #[test]
    fn a_pending_pod_has_no_node_and_is_not_managed() {
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "job-x", "namespace": "batch", "uid": "u2"},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]},
            "status": {"phase": "Pending"},
        }))
        .expect("a pod");
        let labels = pod_state(&pod, None);
        assert_eq!(
            (
                labels.scheduled.as_str(),
                labels.managed.as_str(),
                labels.owner.as_str(),
                labels.phase.as_str()
            ),
            ("false", "false", "", "Pending")
        );
    }
}
