//! What the agent's probes answer: ready once its caches have listed the cluster, and not
//! alive once one of its loops has stopped, so the kubelet restarts it.

use crate::exclusive;
use karpenter_core::cloud::kwok::KwokProvider;
use karpenter_core::controllers::{self, Health, Settings};
use karpenter_core::metrics::Metrics;
use karpenter_test_support::rig::rig;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_fails_once_a_control_loop_has_stopped_and_names_it() {
    let _guard = exclusive().await;
    let client = rig().agent_client().await;
    let health = Arc::new(Health::default());
    assert!(health.readiness().is_err(), "not ready before it starts");
    let running = controllers::start_with(
        client.clone(),
        Arc::new(KwokProvider::new(client)),
        Settings::default(),
        Arc::new(Metrics::new()),
        health.clone(),
    )
    .await;
    assert_eq!(health.readiness(), Ok(()), "ready once the caches listed");
    assert_eq!(health.liveness(), Ok(()));

    running.abort(controllers::names::GARBAGE_COLLECTION);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        health.liveness(),
        Err("the nodeclaim.garbagecollection loop stopped".to_owned())
    );

    // Stopping the agent on purpose is not a failure of its loops.
    let health_after = running.ctx.health.clone();
    drop(running);
    assert_eq!(health_after.liveness(), Ok(()));
}
