//! NodePool readiness as a user sees it on the rig: a pool whose node class does not exist is
//! not Ready (`NodeClassReady` False, with why), launches nothing, and its pending pod's Event
//! says so; once the class exists the pool turns Ready and the pod runs.

use super::{
    Agent, apply, clean_up, deployment, exclusive, failed_provisioning, kwok_pool, pool_claims,
    running_pods, wait_for,
};
use karpenter_core::apis::NodePool;
use karpenter_test_support::rig::rig;
use kube::api::Api;
use std::time::Duration;

const POOL: &str = "classless-pool";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_its_node_class_is_not_ready_says_why_and_launches_once_the_class_exists() {
    let _guard = exclusive().await;
    let client = rig().client().await;
    let _agent = Agent::start().await;
    let manifest = kwok_pool(POOL, "", "");
    let (class, pool) = manifest.split_once("---").expect("class, then pool");
    apply(pool);
    let pools: Api<NodePool> = Api::all(client.clone());
    let why = wait_for(
        "the pool to be not Ready",
        Duration::from_secs(60),
        || async {
            let status = pools.get(POOL).await.ok()?.status?;
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
            let class_ready = status
                .conditions
                .iter()
                .find(|c| c.type_ == "NodeClassReady")?;
            (ready.status == "False" && class_ready.status == "False")
                .then(|| ready.message.clone())
        },
    )
    .await;
    assert!(why.contains("does not exist"), "{why}");

    apply(&deployment("classless-test", "app", POOL, 1, "100m"));
    let message = failed_provisioning(&client, "classless-test", None, "not ready").await;
    assert!(message.contains(POOL), "{message}");
    assert!(
        pool_claims(&client, POOL).await.is_empty(),
        "a claim was made"
    );

    apply(class);
    wait_for(
        "the pod running once the class exists",
        Duration::from_secs(120),
        || async { (running_pods(&client, "classless-test").await.len() == 1).then_some(()) },
    )
    .await;
    clean_up(&client, "classless-test", POOL).await;
}
