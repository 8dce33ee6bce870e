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

/// Issue 14's scenario: two pods that select `tenant: acme` and tolerate its taint, for a pool
/// restricted to that tenant (see [`tenant_requirement`]).
pub fn tenant_workload(namespace: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: acme, namespace: {namespace}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: acme}}}}
  template:
    metadata: {{labels: {{app: acme}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{tenant: acme}}
      tolerations: [{{key: tenant, operator: Equal, value: acme, effect: NoSchedule}}]
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: 100m}}}}
"#
    )
}

/// The requirement and taint that restrict a pool to the `acme` tenant, to splice into a
/// pool's template spec (a requirement list item, then `taints`, six spaces in).
pub fn tenant_requirement() -> &'static str {
    "        - {key: tenant, operator: In, values: [acme]}\n      taints: [{key: tenant, value: acme, effect: NoSchedule}]"
}

/// Waits until both tenant pods run, then gives a runaway launch loop time to show itself and
/// asserts the pool has exactly one claim whose Node carries `tenant=acme`.
pub async fn assert_tenant_pods_share_one_labelled_node(
    client: &kube::Client,
    namespace: &str,
    pool: &str,
) {
    wait_for(
        "both tenant pods running",
        Duration::from_secs(180),
        || async { (running(client, namespace).await.len() == 2).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let claims = claims_of(client, pool).await;
    assert_eq!(claims.len(), 1, "one node for both pods, no more launched");
    let node_name = claims[0]
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("the claim's node");
    let node = Api::<Node>::all(client.clone())
        .get(&node_name)
        .await
        .expect("the node");
    assert_eq!(
        node.labels().get("tenant").map(String::as_str),
        Some("acme"),
        "{:?}",
        node.labels()
    );
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
/// named `node_name(providerID)` with the claim's providerID and capacity, as a kubelet
/// would: the labels its bootstrap passed (`bootstrap(providerID)` reads the `--node-labels` the
/// launch sent from the cloud, `None` until it can), of those only what a kubelet may set, its
/// own hostname, arch and os, and the instance type and zone a cloud controller manager adds
/// (plus the kwok label, so kwok keeps it Ready). Everything else must come from the agent's
/// registration, so a label the agent forgets is missing here as on a real cluster. Instances of
/// another cloud (`node_name` gives `None`) are left.
pub async fn kubelet<B, F>(
    client: kube::Client,
    cluster: String,
    node_name: fn(&ProviderId) -> Option<String>,
    bootstrap: B,
) where
    B: Fn(ProviderId) -> F,
    F: std::future::Future<Output = Option<BTreeMap<String, String>>>,
{
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
                let Ok(id) = provider_id.parse::<ProviderId>() else {
                    continue;
                };
                let Some(name) = node_name(&id) else {
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
                let Some(sent) = bootstrap(id).await else {
                    continue;
                };
                let mut node_labels = karpenter_core::cloud::kubelet_labels::kubelet_labels(&sent);
                for key in [labels::INSTANCE_TYPE, labels::ZONE] {
                    if let Some(value) = claim.labels().get(key) {
                        node_labels.insert(key.to_owned(), value.clone());
                    }
                }
                node_labels.insert(labels::ARCH.to_owned(), "amd64".to_owned());
                node_labels.insert(labels::OS.to_owned(), "linux".to_owned());
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

/// The labels in a kubelet flag list (`--node-labels=a=b,c=d`, as user data or GCE's
/// `kube-labels` carries them), wherever `text` has them.
pub fn node_labels_flag(text: &str) -> BTreeMap<String, String> {
    let Some(start) = text.find("--node-labels=") else {
        return BTreeMap::new();
    };
    let rest = &text[start + "--node-labels=".len()..];
    let end = rest
        .find(|c: char| c == '"' || c == '\'' || c.is_whitespace())
        .unwrap_or(rest.len());
    kube_labels(&rest[..end])
}

/// `a=b,c=d` as a map.
pub fn kube_labels(list: &str) -> BTreeMap<String, String> {
    list.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Launches `claim` with `provider` as the lifecycle would, without recording the launch on
/// the claim: what an agent that dies right after the cloud's create leaves behind.
pub async fn launch_unrecorded<P: karpenter_core::cloud::CloudProvider>(
    provider: &P,
    claim: &NodeClaim,
) -> karpenter_core::cloud::Instance {
    let catalogue = provider
        .instance_types(&claim.spec.node_class_ref)
        .await
        .expect("catalogue");
    let candidates = karpenter_core::controllers::lifecycle::launch_candidates(claim, &catalogue)
        .expect("candidates");
    provider
        .create(claim, &candidates)
        .await
        .expect("the first launch")
}

/// Waits until `provider` finds `claim` drifted for `reason`. Providers read their node classes
/// from a watch (as upstream from its informer cache), so a change to a class is judged once the
/// watch delivers it, a moment after the write.
pub async fn drifts<P: karpenter_core::cloud::CloudProvider>(
    provider: &P,
    claim: &NodeClaim,
    reason: &str,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let drift = provider.drift(claim).await.expect("drift");
        if drift.as_deref() == Some(reason) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not drifted for {reason} after 10 s: {drift:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes the claim `claim` and waits until it is gone (its instance with it), then the pool
/// and node class (`ec2nodeclass`, `gcenodeclass`) named `pool`.
pub async fn delete_claim_then_pool(
    client: &kube::Client,
    claim: &str,
    pool: &str,
    node_class_kind: &str,
) {
    rig().kubectl_ok(&["delete", "nodeclaim", claim, "--wait=false"]);
    let claims: Api<NodeClaim> = Api::all(client.clone());
    wait_for("the claim gone", Duration::from_secs(60), || async {
        claims
            .get_opt(claim)
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    rig().kubectl_ok(&["delete", "nodepool", pool, "--wait=false"]);
    rig().kubectl_ok(&["delete", node_class_kind, pool, "--wait=false"]);
}

/// Deletes the workload's namespace, then the pool's claims through the running agent (which
/// deletes their instances), then the pool and its node class (`ec2nodeclass`, `gcenodeclass`),
/// which the agent lets go once it has cleaned up after it (its termination finalizer).
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
    wait_for(
        "the node class to be gone",
        Duration::from_secs(60),
        || async {
            rig()
                .kubectl_ok(&[
                    "get",
                    node_class_kind,
                    pool,
                    "--ignore-not-found",
                    "-o",
                    "name",
                ])
                .trim()
                .is_empty()
                .then_some(())
        },
    )
    .await;
}
