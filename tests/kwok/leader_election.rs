//! Leader election against the real API server, as the agent's ServiceAccount (so the Role
//! `init` installs is what allows it), with short timings: one candidate leads, the other takes
//! over only once the leader's record is a lease duration old, at once after a release, and a
//! leader that cannot renew gives up within its renew deadline.

use k8s_openapi::api::coordination::v1::Lease;
use karpenter_core::controllers::leader_election::{ElectionConfig, LEASE_NAME, LeaderElector};
use karpenter_test_support::rig::rig;
use kube::Api;
use kube::api::{Patch, PatchParams};
use std::time::Duration;

const NAMESPACE: &str = "karpenter";

/// The Lease is one per namespace: the tests here take turns.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

async fn candidate(identity: &str) -> LeaderElector {
    let mut config = ElectionConfig::new(NAMESPACE, identity);
    config.lease_duration = Duration::from_secs(4);
    config.renew_deadline = Duration::from_secs(2);
    config.retry_period = Duration::from_millis(250);
    LeaderElector::new(
        rig().agent_client().await,
        config,
        karpenter_core::client::Fence::default(),
    )
}

async fn lease() -> Lease {
    Api::<Lease>::namespaced(rig().client().await, NAMESPACE)
        .get(LEASE_NAME)
        .await
        .expect("the Lease")
}

fn seconds_between(
    earlier: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime,
    later: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime,
) -> f64 {
    (later.0 - earlier.0)
        .total(k8s_openapi::jiff::Unit::Millisecond)
        .expect("a span in milliseconds")
        / 1000.0
}

/// Starts each test from a Lease nobody holds.
async fn released(identity: &str) {
    let elector = candidate(identity).await;
    elector.acquire(|_| {}).await;
    elector.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_candidate_waits_out_a_silent_leaders_lease_then_takes_over() {
    let _turn = one_at_a_time().await;
    released("setup").await;
    let a = candidate("agent-a").await;
    let b = candidate("agent-b").await;
    assert!(a.try_acquire_or_renew().await.expect("a tries"));
    assert!(
        !b.try_acquire_or_renew().await.expect("b tries"),
        "the Lease is a's"
    );
    assert_eq!(b.holder().as_deref(), Some("agent-a"));

    // a renews for a while, then stops without a word (as after kill -9).
    let renewing = tokio::spawn(async move {
        a.renew().await;
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    renewing.abort();
    let last = lease().await.spec.expect("spec");
    assert_eq!(last.holder_identity.as_deref(), Some("agent-a"));

    b.acquire(|_| {}).await;
    assert!(
        b.took_over(),
        "b took the Lease from a holder that never released it: a's last writes may still land"
    );
    let taken = lease().await.spec.expect("spec");
    assert_eq!(taken.holder_identity.as_deref(), Some("agent-b"));
    assert_eq!(
        taken.lease_transitions,
        last.lease_transitions.map(|t| t + 1)
    );
    let waited = seconds_between(
        last.renew_time.as_ref().expect("renewed"),
        taken.acquire_time.as_ref().expect("acquired"),
    );
    assert!(
        waited >= 4.0,
        "b took the Lease {waited:.1}s after a's last renewal, before the 4s lease ran out"
    );
    b.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_is_taken_at_once_by_the_next_candidate() {
    let _turn = one_at_a_time().await;
    released("setup").await;
    let a = candidate("agent-a").await;
    let b = candidate("agent-b").await;
    assert!(a.try_acquire_or_renew().await.expect("a tries"));
    assert!(!b.try_acquire_or_renew().await.expect("b tries"));
    a.release().await.expect("released");
    assert_eq!(lease().await.spec.expect("spec").holder_identity, None);
    assert!(
        b.try_acquire_or_renew().await.expect("b tries again"),
        "nobody holds a released Lease"
    );
    assert!(
        !b.took_over(),
        "a released the Lease after its loops stopped: nothing of a's is still on the way"
    );
    b.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_another_holder_took_gives_up_within_its_renew_deadline() {
    let _turn = one_at_a_time().await;
    released("setup").await;
    let a = candidate("agent-a").await;
    assert!(a.try_acquire_or_renew().await.expect("a tries"));
    // Another replica holds the Lease now, as after a partition that outlasted a's lease.
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    Api::<Lease>::namespaced(rig().client().await, NAMESPACE)
        .patch(
            LEASE_NAME,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {
                "holderIdentity": "agent-z", "renewTime": now, "acquireTime": now,
            }})),
        )
        .await
        .expect("patched");
    let lost = tokio::time::timeout(Duration::from_secs(30), a.renew())
        .await
        .expect("a gives up");
    assert!(lost.contains("held by agent-z"), "{lost}");
    assert!(!a.is_leader());
    // Not a's to release any more.
    a.release().await.expect("nothing to do");
    assert_eq!(
        lease().await.spec.expect("spec").holder_identity.as_deref(),
        Some("agent-z")
    );
}
