//! The lifecycle loop's memory of the instances it launched in the last minute, so a NodeClaim
//! read again before its `Launched` status reached the cache is not launched twice.
//!
//! Upstream's launch controller keeps the same memory (`lifecycle/launch.go`: an in-memory cache
//! of the created NodeClaim by UID, one minute long): when the watch is slower than the
//! reconciles (a 20,000-pod scale-out here: a claim's launch status took seconds to come back,
//! and a quarter of the launches were asked of the cloud a second time), the second reconcile
//! writes the remembered instance's status instead of calling the cloud again. [`OwnWrites`]
//! does not cover it: another writer's change (a finalizer, the pool hash) can arrive first and
//! read as fresh while it still lacks the launch.
//!
//! [`OwnWrites`]: super::OwnWrites

use crate::cloud::Instance;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a launch is remembered: upstream's cache expiry.
const REMEMBERED_FOR: Duration = Duration::from_secs(60);

/// The instance launched for each NodeClaim UID in the last [`REMEMBERED_FOR`].
#[derive(Default)]
pub struct RecentLaunches(Mutex<HashMap<String, (Instance, Instant)>>);

impl RecentLaunches {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (Instance, Instant)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that `instance` was launched for the claim with `uid`.
    pub fn launched(&self, uid: &str, instance: &Instance) {
        self.launched_at(uid, instance, Instant::now());
    }

    fn launched_at(&self, uid: &str, instance: &Instance, at: Instant) {
        let mut launches = self.lock();
        // Expired entries go here: a claim is looked up only until its launch is cached.
        launches.retain(|_, (_, when)| at.saturating_duration_since(*when) < REMEMBERED_FOR);
        launches.insert(uid.to_owned(), (instance.clone(), at));
    }

    /// The instance launched for the claim with `uid` in the last minute, if any.
    pub fn get(&self, uid: &str) -> Option<Instance> {
        self.get_at(uid, Instant::now())
    }

    fn get_at(&self, uid: &str, now: Instant) -> Option<Instance> {
        self.lock()
            .get(uid)
            .filter(|(_, when)| now.saturating_duration_since(*when) < REMEMBERED_FOR)
            .map(|(instance, _)| instance.clone())
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use crate::apis::CapacityType;
    use crate::cloud::ProviderId;

    fn instance(id: &str) -> Instance {
        Instance {
            provider_id: format!("kwok://{id}").parse::<ProviderId>().expect("an id"),
            node_claim: Some(id.to_owned()),
            node_pool: None,
            instance_type: "m5.large".to_owned(),
            zone: "us-west-2a".to_owned(),
            capacity_type: CapacityType::Spot,
            image_id: None,
            capacity: Default::default(),
            allocatable: Default::default(),
            labels: Default::default(),
            annotations: Default::default(),
            price: None,
            created: None,
            terminating: false,
        }
    }

    #[test]
    fn a_claim_launched_within_the_minute_gets_its_instance_back_and_later_is_launched_afresh() {
        let launches = RecentLaunches::default();
        let start = Instant::now();
        launches.launched_at("uid-1", &instance("default-abcde"), start);
        assert_eq!(
            launches
                .get_at("uid-1", start + Duration::from_secs(4))
                .map(|i| i.provider_id.to_string()),
            Some("kwok://default-abcde".to_owned())
        );
        assert_eq!(launches.get_at("uid-2", start), None, "another claim");
        assert_eq!(
            launches.get_at("uid-1", start + REMEMBERED_FOR),
            None,
            "forgotten after a minute, as upstream's cache"
        );
        launches.launched_at("uid-2", &instance("default-fghij"), start + REMEMBERED_FOR);
        assert_eq!(launches.lock().len(), 1, "expired launches are dropped");
    }
}
