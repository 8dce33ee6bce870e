//! Pods with persistent volumes, as a user sees them on the rig: a pod whose claim is bound to a
//! zonal PersistentVolume gets a node in that zone and runs (the real kube-scheduler's volume
//! binding agrees); a `WaitForFirstConsumer` claim gets a node in a zone its StorageClass
//! allows, which the kube-scheduler then selects for provisioning; a volume in a zone no
//! NodePool offers, and a claim that does not exist, leave their pods pending with the reason
//! in an Event and launch nothing.

use super::{Agent, apply, exclusive, failed_provisioning, kwok_pool, pool_claims, wait_for};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use karpenter_core::apis::{NodeClaim, labels};
use karpenter_test_support::rig::rig;
use kube::api::Api;
use std::time::Duration;

const POOL: &str = "vol-pool";
const NS: &str = "vol-test";

/// A pod using `claim`, restricted to the test pool.
fn pod(name: &str, claim: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {NS}}}
spec:
  terminationGracePeriodSeconds: 0
  nodeSelector: {{test-pool: {POOL}}}
  containers:
    - name: pause
      image: registry.k8s.io/pause:3.10
      resources: {{requests: {{cpu: 100m}}}}
      volumeMounts: [{{name: data, mountPath: /data}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]
"#
    )
}

/// A PersistentVolume in `zone`, pre-bound to the claim `claim`, and that claim.
fn zonal_volume(name: &str, claim: &str, zone: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: vol-test-manual
  persistentVolumeReclaimPolicy: Delete
  claimRef: {{namespace: {NS}, name: {claim}}}
  hostPath: {{path: /tmp/{name}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{{key: topology.kubernetes.io/zone, operator: In, values: [{zone}]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {claim}, namespace: {NS}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: vol-test-manual
  volumeName: {name}
  resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}

fn manifests() -> String {
    let mut out = format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: vol-test-late}}
provisioner: example.com/provisioned-by-the-test
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
  - matchLabelExpressions: [{{key: topology.kubernetes.io/zone, values: [us-west-2a]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data-late, namespace: {NS}}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: vol-test-late
  resources: {{requests: {{storage: 1Gi}}}}
"#
    );
    out.push_str("---");
    out.push_str(&zonal_volume("vol-test-pv-b", "data-b", "us-west-2b"));
    out.push_str("---");
    out.push_str(&zonal_volume("vol-test-pv-c", "data-c", "us-west-2c"));
    for (name, claim) in [
        ("db-b", "data-b"),
        ("db-late", "data-late"),
        ("db-c", "data-c"),
        ("db-missing", "data-missing"),
    ] {
        out.push_str("---");
        out.push_str(&pod(name, claim));
    }
    out
}

fn zone_of(claim: &NodeClaim) -> Option<&str> {
    claim
        .metadata
        .labels
        .as_ref()?
        .get(labels::ZONE)
        .map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_with_zonal_volumes_get_nodes_in_their_volumes_zones_and_impossible_ones_say_why() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&kwok_pool(
        POOL,
        "",
        "        - {key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a, us-west-2b]}",
    ));
    apply(&manifests());

    // The bound volume's pod runs in its zone: the kube-scheduler's volume binding checks the
    // volume's node affinity against the node's labels.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let node = wait_for("db-b running", Duration::from_secs(120), || async {
        let pod = pods.get("db-b").await.ok()?;
        let running = pod.status.as_ref()?.phase.as_deref() == Some("Running");
        running.then(|| pod.spec?.node_name).flatten()
    })
    .await;
    let claims = pool_claims(&client, POOL).await;
    let claim_b = claims
        .iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&node))
        .expect("db-b's node is a claim of the pool");
    assert_eq!(zone_of(claim_b), Some("us-west-2b"));

    // The late-binding claim gets a node in the zone its class allows, and the kube-scheduler
    // picks that node for the volume (the annotation a CSI provisioner waits for).
    let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let selected = wait_for(
        "the late-binding claim's node selected",
        Duration::from_secs(120),
        || async {
            let claim = claims_api.get("data-late").await.ok()?;
            claim
                .metadata
                .annotations?
                .get("volume.kubernetes.io/selected-node")
                .cloned()
        },
    )
    .await;
    let claims = pool_claims(&client, POOL).await;
    let claim_late = claims
        .iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&selected))
        .expect("the selected node is a claim of the pool");
    assert_eq!(zone_of(claim_late), Some("us-west-2a"));

    // A volume in a zone the pool does not offer, and a claim that does not exist.
    failed_provisioning(
        &client,
        NS,
        Some("db-c"),
        "its volumes allow only nodes with topology.kubernetes.io/zone In [us-west-2c]",
    )
    .await;
    failed_provisioning(
        &client,
        NS,
        Some("db-missing"),
        "persistentvolumeclaim vol-test/data-missing not found",
    )
    .await;
    assert_eq!(
        pool_claims(&client, POOL).await.len(),
        2,
        "only db-b and db-late got nodes"
    );

    super::clean_up(&client, NS, POOL).await;
    for args in [
        [
            "delete",
            "pv",
            "vol-test-pv-b",
            "vol-test-pv-c",
            "--wait=false",
        ]
        .as_slice(),
        ["delete", "storageclass", "vol-test-late", "--wait=false"].as_slice(),
    ] {
        let _ = rig().kubectl().args(args).output();
    }
}
