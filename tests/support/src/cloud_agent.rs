//! What the cloud providers' integration tests (`tests/aws`, `tests/gcp`) share: one agent on the
//! rig at a time, `kubectl apply`, waiting with a dump of the cluster on timeout, the workload
//! they scale, a stand-in kubelet that registers a Node for each launched instance, and cleaning
//! a pool away through the agent.

use crate::rig::rig;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_core::cloud::ProviderId;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One test at a time for agents and cluster-wide objects.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn apply(yaml: &str) {
    let out = rig().kubectl_with_input(&["apply", "-f", "-"], yaml);
    assert!(
        out.status.success(),
        "kubectl apply failed: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls `check` every 250 ms until it returns a value; on timeout, panics with the cluster's
/// claims, nodes, pods and events, so a failure on a loaded machine can be told apart.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if start.elapsed() >= timeout {
            let state = rig()
                .kubectl()
                .args(["get", "nodeclaims,nodes,pods,events", "-A", "-o", "wide"])
                .output();
            let state = state
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            panic!("timed out after {timeout:?} waiting for {what}\n{state}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A namespace and a Deployment of `replicas` 1-CPU pods that only `pool`'s nodes take.
pub fn workload(namespace: &str, pool: &str, replicas: u32) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: app, namespace: {namespace}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: app}}}}
  template:
    metadata: {{labels: {{app: app}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{test-pool: {pool}}}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: "1"}}}}
"#
    )
}

pub async fn claims_of(client: &kube::Client, pool: &str) -> Vec<NodeClaim> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    api.list(&ListParams::default().labels(&format!("{}={pool}", labels::NODE_POOL)))
        .await
        .expect("claims")
        .items
}

pub async fn running(client: &kube::Client, namespace: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = api.list(&ListParams::default()).await.expect("pods").items;
    pods.into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .collect()
}

/// Stands in for the kubelet of each instance launched for `cluster`'s claims: registers a Node
/// named `node_name(providerID)` with the claim's providerID, capacity and labels (and the kwok
/// label, so kwok keeps it Ready). Instances of another cloud (`node_name` gives `None`) are left.
pub async fn kubelet(
    client: kube::Client,
    cluster: String,
    node_name: fn(&ProviderId) -> Option<String>,
) {
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client);
    loop {
        if let Ok(list) = claims.list(&ListParams::default()).await {
            for claim in list.items {
                let Some(status) = claim.status.clone() else {
                    continue;
                };
                let Some(provider_id) = status.provider_id.clone() else {
                    continue;
                };
                let Some(name) = provider_id
                    .parse::<ProviderId>()
                    .ok()
                    .as_ref()
                    .and_then(node_name)
                else {
                    continue;
                };
                if claim.metadata.deletion_timestamp.is_some()
                    || !claim.name_any().starts_with(&cluster)
                {
                    continue;
                }
                if nodes.get_opt(&name).await.ok().flatten().is_some() {
                    continue;
                }
                let mut node_labels: BTreeMap<String, String> = claim.labels().clone();
                node_labels.insert(
                    labels::KWOK_NODE.to_owned(),
                    labels::KWOK_NODE_FAKE.to_owned(),
                );
                node_labels.insert(labels::HOSTNAME.to_owned(), name.clone());
                let node: Node = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "labels": node_labels, "annotations": {labels::KWOK_NODE: labels::KWOK_NODE_FAKE}},
                    "spec": {"providerID": provider_id, "taints": [{"key": labels::UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}]},
                    "status": {"capacity": status.capacity, "allocatable": status.allocatable,
                               "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.34.0-kwok",
                                            "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "",
                                            "machineID": "", "osImage": "", "systemUUID": ""}},
                }))
                .expect("node");
                let _ = nodes.create(&PostParams::default(), &node).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Deletes the workload's namespace, then the pool's claims through the running agent (which
/// deletes their instances), then the pool and its node class (`ec2nodeclass`, `gcenodeclass`).
pub async fn clean_up(client: &kube::Client, namespace: &str, pool: &str, node_class_kind: &str) {
    rig().kubectl_ok(&["delete", "namespace", namespace, "--wait=false"]);
    rig().kubectl_ok(&[
        "delete",
        "nodeclaims",
        "-l",
        &format!("{}={pool}", labels::NODE_POOL),
        "--wait=false",
    ]);
    wait_for(
        "the pool's claims to be gone",
        Duration::from_secs(60),
        || async { claims_of(client, pool).await.is_empty().then_some(()) },
    )
    .await;
    rig().kubectl_ok(&["delete", "nodepool", pool, "--wait=false"]);
    rig().kubectl_ok(&["delete", node_class_kind, pool, "--wait=false"]);
}
