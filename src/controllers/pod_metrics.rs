//! Upstream's `karpenter_pods_state` (`pkg/controllers/metrics/pod`): one series per pod, with
//! its owner, node, the node's pool, zone, architecture, capacity type and instance type, and the
//! pod's phase and readiness. Rebuilt from the watched pods and nodes every few seconds; series of
//! pods that are gone, or whose labels changed, are removed, so a scrape never sees a pod twice.

use super::Context;
use crate::apis::labels;
use crate::interner::Interner;
use crate::metrics::PodStateLabels;
use crate::state::{CachedNode, CachedPod};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How often the series are brought up to date.
const REFRESH: Duration = Duration::from_secs(10);

/// Keeps `karpenter_pods_state` current until cancelled.
pub(crate) async fn run<P: Send + Sync + 'static>(ctx: Arc<Context<P>>) {
    let mut interval = tokio::time::interval(REFRESH);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut published: HashSet<PodStateLabels> = HashSet::new();
    let mut strings = Interner::default();
    loop {
        interval.tick().await;
        let _pass = ctx
            .health
            .pass(super::names::POD_METRICS, ctx.settings.stuck_pass_after);
        let nodes: HashMap<String, Arc<CachedNode>> = ctx
            .cluster
            .nodes
            .state()
            .into_iter()
            .map(|n| (n.name.clone(), n))
            .collect();
        let now: HashSet<PodStateLabels> = ctx
            .cluster
            .pods
            .state()
            .iter()
            .map(|pod| {
                let node = pod
                    .node_name
                    .as_deref()
                    .and_then(|n| nodes.get(n))
                    .map(AsRef::as_ref);
                pod_state(pod, node, &mut strings)
            })
            .collect();
        for gone in published.difference(&now) {
            ctx.metrics.pods_state.remove(gone);
        }
        for labels in &now {
            ctx.metrics.pods_state.get_or_create(labels).set(1);
        }
        published = now;
        strings.forget_unused();
    }
}

/// The labels of one pod's series, as upstream's `makeLabels`.
pub(crate) fn pod_state(
    pod: &CachedPod,
    node: Option<&CachedNode>,
    strings: &mut Interner,
) -> PodStateLabels {
    let owner = pod
        .owner_references()
        .first()
        .map(|o| {
            strings.get(&format!(
                "/apis/{}/namespaces/{}/{}s/{}",
                o.api_version,
                pod.namespace().unwrap_or_default(),
                o.kind.to_lowercase(),
                o.name
            ))
        })
        .unwrap_or_default();
    let mut node_label = |key: &str| {
        node.and_then(|n| n.label(key))
            .map(|value| strings.get(value))
            .unwrap_or_default()
    };
    let nodepool = node_label(labels::NODE_POOL);
    let zone = node_label(labels::ZONE);
    let arch = node_label(labels::ARCH);
    let capacity_type = node_label(labels::CAPACITY_TYPE);
    let instance_type = node_label(labels::INSTANCE_TYPE);
    PodStateLabels {
        // The one value no other series has.
        name: Arc::from(pod.metadata.name.as_deref().unwrap_or_default()),
        namespace: strings.get(pod.metadata.namespace.as_deref().unwrap_or_default()),
        owner,
        node: strings.get(pod.node_name.as_deref().unwrap_or_default()),
        scheduled: pod.node_name.is_some(),
        zone,
        arch,
        capacity_type,
        instance_type,
        phase: strings.get(pod.phase().unwrap_or_default()),
        ready: pod.is_ready(),
        managed: !nodepool.is_empty(),
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
        let node: CachedNode = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-a", "labels": {
                "karpenter.sh/nodepool": "default", "topology.kubernetes.io/zone": "us-west-2a",
                "kubernetes.io/arch": "arm64", "karpenter.sh/capacity-type": "spot",
                "node.kubernetes.io/instance-type": "m7g.large"}},
        }))
        .expect("a node");
        assert_eq!(
            pod_state(&pod, Some(&node), &mut Interner::default()),
            PodStateLabels {
                name: "web-1".into(),
                namespace: "shop".into(),
                owner: "/apis/apps/v1/namespaces/shop/replicasets/web-7d9".into(),
                node: "node-a".into(),
                scheduled: true,
                nodepool: "default".into(),
                zone: "us-west-2a".into(),
                arch: "arm64".into(),
                capacity_type: "spot".into(),
                instance_type: "m7g.large".into(),
                phase: "Running".into(),
                ready: true,
                managed: true,
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
        let labels = pod_state(&pod, None, &mut Interner::default());
        assert_eq!(
            (
                labels.scheduled,
                labels.managed,
                &*labels.owner,
                &*labels.phase
            ),
            (false, false, "", "Pending")
        );
    }

    #[test]
    fn the_series_reads_as_upstreams_with_true_and_false_spelled_out() {
        let pod: CachedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1"},
            "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": "Pending"},
        }))
        .expect("a pod");
        let metrics = crate::metrics::Metrics::new();
        metrics
            .pods_state
            .get_or_create(&pod_state(&pod, None, &mut Interner::default()))
            .set(1);
        let text = metrics.encode().expect("the exposition");
        let series = text
            .lines()
            .find(|l| l.starts_with("karpenter_pods_state{"))
            .expect("a series");
        assert!(
            series.contains(r#"name="web-1",namespace="shop",owner="",node="",scheduled="false""#)
                && series.contains(r#"phase="Pending",ready="false",managed="false"} 1"#),
            "{series}"
        );
    }

    #[test]
    fn pods_on_one_node_share_its_labels_and_a_gone_node_is_forgotten() {
        let node: CachedNode = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "us-west-2a"}},
        }))
        .expect("a node");
        let mut strings = Interner::default();
        let on_node = |name: &str, strings: &mut Interner| {
            let pod: CachedPod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop"},
                "spec": {"nodeName": "node-a", "containers": [{"name": "app"}]},
            }))
            .expect("a pod");
            pod_state(&pod, Some(&node), strings)
        };
        let (a, b) = (on_node("a", &mut strings), on_node("b", &mut strings));
        assert!(Arc::ptr_eq(&a.zone, &b.zone) && Arc::ptr_eq(&a.node, &b.node));
        drop((a, b));
        strings.forget_unused();
        assert!(strings.is_empty());
    }
}
