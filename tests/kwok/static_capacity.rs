//! Static NodePools (`replicas`, the `StaticCapacity` gate) as a user sees them on the rig: the
//! pool holds its count with nothing pending, pods land on its nodes without new ones, `kubectl
//! scale nodepool` moves the count both ways, and a template edit replaces its node with a new
//! one before the old one goes.

use super::{
    Agent, apply, clean_up, deployment, exclusive, kwok_pool, pool_claims, running_pods, wait_for,
};
use karpenter_core::controllers::Settings;
use karpenter_test_support::rig::rig;
use kube::ResourceExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const POOL: &str = "static-pool";

/// The pool's claims that are not being deleted and whose nodes are initialized.
async fn initialized(client: &kube::Client) -> Vec<String> {
    pool_claims(client, POOL)
        .await
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none() && c.is_true("Initialized"))
        .map(|c| c.name_any())
        .collect()
}

fn scale(replicas: u32) {
    rig().kubectl_ok(&["scale", "nodepool", POOL, &format!("--replicas={replicas}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_pool_holds_its_count_scales_both_ways_and_replaces_a_drifted_node_first() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start_with(Settings {
        static_capacity: true,
        static_capacity_poll: Duration::from_secs(1),
        disruption_poll: Duration::from_secs(2),
        garbage_collection_interval: Duration::from_secs(2),
        garbage_collection_grace: Duration::from_secs(2),
        ..Settings::default()
    })
    .await;
    apply(&kwok_pool(POOL, "  replicas: 2", ""));
    wait_for(
        "2 nodes with nothing pending",
        Duration::from_secs(120),
        || async { (initialized(&client).await.len() == 2).then_some(()) },
    )
    .await;

    // Small pods land on the static nodes; the pool launches nothing for them.
    apply(&deployment("static-test", "small", POOL, 2, "100m"));
    wait_for("2 running pods", Duration::from_secs(120), || async {
        (running_pods(&client, "static-test").await.len() == 2).then_some(())
    })
    .await;
    assert_eq!(
        pool_claims(&client, POOL).await.len(),
        2,
        "no claims for pods"
    );

    scale(3);
    wait_for(
        "3 nodes after scaling up",
        Duration::from_secs(120),
        || async { (initialized(&client).await.len() == 3).then_some(()) },
    )
    .await;
    scale(1);
    wait_for(
        "1 claim left after scaling down",
        Duration::from_secs(180),
        || async { (pool_claims(&client, POOL).await.len() == 1).then_some(()) },
    )
    .await;
    let before = initialized(&client).await;
    assert_eq!(before.len(), 1);

    // A template edit drifts the node; its replacement comes up before it goes.
    super::set_template_label(POOL, "release", "two");
    let most = Arc::new(AtomicUsize::new(0));
    let fewest_initialized = Arc::new(AtomicUsize::new(usize::MAX));
    wait_for(
        "the drifted node replaced",
        Duration::from_secs(240),
        || {
            let (client, most, fewest, before) = (
                client.clone(),
                most.clone(),
                fewest_initialized.clone(),
                before.clone(),
            );
            async move {
                let claims = pool_claims(&client, POOL).await;
                most.fetch_max(claims.len(), Ordering::SeqCst);
                let now = initialized(&client).await;
                fewest.fetch_min(now.len(), Ordering::SeqCst);
                (claims.len() == 1 && now.len() == 1 && now != before).then_some(())
            }
        },
    )
    .await;
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "a static pool of 1 had {} claims at once while replacing",
        most.load(Ordering::SeqCst)
    );
    assert_eq!(
        fewest_initialized.load(Ordering::SeqCst),
        1,
        "the replacement was initialized before the drifted node went"
    );
    // The pool keeps its count against any deletion: scale it to zero before cleaning up.
    scale(0);
    wait_for(
        "no claims left at zero replicas",
        Duration::from_secs(120),
        || async { pool_claims(&client, POOL).await.is_empty().then_some(()) },
    )
    .await;
    clean_up(&client, "static-test", POOL).await;
}
