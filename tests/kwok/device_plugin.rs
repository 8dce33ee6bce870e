//! Extended resources as a user sees them on the rig: a GPU node's kubelet reports its GPUs as
//! zero until the device plugin registers them (the kwok class's `devicePluginDelay`); until
//! then its claim is not Initialized (`ResourceNotRegistered`) and the agent launches no second
//! GPU node for the pod that is waiting for the first.

use super::{Agent, apply, clean_up, exclusive, kwok_pool, pool_claims, running_pods, wait_for};
use karpenter_test_support::rig::rig;
use std::time::Duration;

const POOL: &str = "gpu-pool";

fn gpu_pod() -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: gpu-test}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: trainer, namespace: gpu-test}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: trainer}}}}
  template:
    metadata: {{labels: {{app: trainer}}}}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {{test-pool: {POOL}}}
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources: {{requests: {{cpu: 100m}}, limits: {{nvidia.com/gpu: "1"}}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_node_waits_for_its_device_plugin_and_no_second_one_is_launched_meanwhile() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    apply(&kwok_pool(POOL, "", "").replace(
        "metadata: {name: gpu-pool}\nspec: {}",
        "metadata: {name: gpu-pool}\nspec: {devicePluginDelay: 25s}",
    ));
    apply(&gpu_pod());
    let waiting = wait_for(
        "the claim to wait for its GPUs",
        Duration::from_secs(90),
        || async {
            pool_claims(&client, POOL).await.into_iter().find_map(|c| {
                let condition = c.condition("Initialized")?;
                (condition.reason == "ResourceNotRegistered").then(|| condition.message.clone())
            })
        },
    )
    .await;
    assert!(waiting.contains("nvidia.com/gpu"), "{waiting}");
    // Provisioning rounds run every few seconds: a pod that looked unplaced would get a node.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        pool_claims(&client, POOL).await.len(),
        1,
        "a second GPU node was launched while the first one's device plugin was starting"
    );
    wait_for(
        "the GPU pod running on the initialized node",
        Duration::from_secs(90),
        || async {
            let initialized = pool_claims(&client, POOL)
                .await
                .iter()
                .any(|c| c.is_true("Initialized"));
            let running = running_pods(&client, "gpu-test").await.len() == 1;
            (initialized && running).then_some(())
        },
    )
    .await;
    assert_eq!(pool_claims(&client, POOL).await.len(), 1);
    clean_up(&client, "gpu-test", POOL).await;
}
