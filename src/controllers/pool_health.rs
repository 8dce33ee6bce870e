//! Whether each NodePool's nodes come up: the outcomes of its last four launches, in memory, and
//! the `NodeRegistrationHealthy` condition they call for.
//!
//! Follows upstream's `pkg/state/nodepoolhealth` (a ring buffer of four outcomes per pool; half
//! or more failures is unhealthy), fed as upstream's lifecycle feeds it: a claim that registers
//! is a success (`registration.go`), a claim deleted for its launch or registration timeout is
//! a failure (`liveness.go`). A success whose buffer reads healthy asks for the condition True;
//! a failure whose buffer reads unhealthy asks for False with the failed launch's reason.
//! [`super::nodepool_status`] writes the condition with the rest of the pool's status, so the
//! pool's status has one writer; it also resets the buffer when the pool's spec changes and
//! fills an empty buffer from the condition after a restart, as upstream's
//! `nodepool/registrationhealth` controller does.
//!
//! One addition, from the design's follow-up (`designs/noderegistrationhealthy-status-condition.md`,
//! "assign lower priority to NodePools marked with NodeRegistrationHealthy: False"): for
//! [`DEPRIORITIZED_FOR`] after its last failure, an unhealthy pool is tried after every healthy
//! pool, so a lower-weight fallback pool takes the pods instead of each of them waiting out
//! another launch timeout on a pool whose launches cannot succeed. Upstream keeps choosing the
//! heavier pool. The unhealthy pool is still used for pods no other pool can hold, and is
//! preferred again once the window has passed (its next launch decides) or its spec changes.

use k8s_openapi::jiff::Timestamp;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// How many outcomes are kept per pool (upstream's `BufferSize`).
const OUTCOMES: usize = 4;

/// How long after its last failed launch an unhealthy pool is tried last: two of upstream's
/// registration timeouts, the window the design gives a failure before it expires.
pub(crate) const DEPRIORITIZED_FOR: Duration = Duration::from_secs(30 * 60);

/// What the recent outcomes say about a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// No outcome since start-up or since its spec changed.
    Unknown,
    Healthy,
    Unhealthy,
}

/// The condition the outcomes ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Healthy,
    Unhealthy { reason: String, message: String },
}

#[derive(Debug, Default)]
struct Tracker {
    outcomes: VecDeque<bool>,
    verdict: Option<Verdict>,
    last_failure: Option<Timestamp>,
}

impl Tracker {
    fn health(&self) -> Health {
        health_of(&self.outcomes)
    }

    fn push(&mut self, success: bool) {
        if self.outcomes.len() == OUTCOMES {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back(success);
    }
}

fn health_of(outcomes: &VecDeque<bool>) -> Health {
    if outcomes.is_empty() {
        return Health::Unknown;
    }
    let failures = outcomes.iter().filter(|ok| !**ok).count();
    // Upstream divides by the buffer's size, not by how many outcomes it holds: one failure
    // alone is not unhealthy, two are.
    if failures * 2 >= OUTCOMES {
        Health::Unhealthy
    } else {
        Health::Healthy
    }
}

/// Every pool's recent launch outcomes, by NodePool UID.
#[derive(Debug, Default)]
pub struct PoolHealth {
    pools: Mutex<HashMap<String, Tracker>>,
}

impl PoolHealth {
    fn pools(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tracker>> {
        // A panic while holding the lock left only counters behind, which stay usable.
        self.pools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A claim of the pool registered its Node.
    pub(crate) fn registered(&self, pool_uid: &str) {
        let mut pools = self.pools();
        let tracker = pools.entry(pool_uid.to_owned()).or_default();
        tracker.push(true);
        if tracker.health() == Health::Healthy {
            tracker.verdict = Some(Verdict::Healthy);
        }
    }

    /// A claim of the pool was given up on: its launch or its registration timed out. `reason`
    /// and `message` say why, for the condition.
    pub(crate) fn failed(&self, pool_uid: &str, reason: &str, message: &str, at: Timestamp) {
        let mut pools = self.pools();
        let tracker = pools.entry(pool_uid.to_owned()).or_default();
        tracker.push(false);
        tracker.last_failure = Some(at);
        if tracker.health() == Health::Unhealthy {
            tracker.verdict = Some(Verdict::Unhealthy {
                reason: reason.to_owned(),
                message: message.to_owned(),
            });
        }
    }

    /// What the recent outcomes say about the pool.
    pub(crate) fn health(&self, pool_uid: &str) -> Health {
        self.pools()
            .get(pool_uid)
            .map_or(Health::Unknown, Tracker::health)
    }

    /// The condition the last outcome asked for, if any since the last reset.
    pub(crate) fn verdict(&self, pool_uid: &str) -> Option<Verdict> {
        self.pools().get(pool_uid).and_then(|t| t.verdict.clone())
    }

    /// Forgets the pool's outcomes: its spec changed, so they say nothing about it now.
    pub(crate) fn reset(&self, pool_uid: &str) {
        self.pools().remove(pool_uid);
    }

    /// After a restart the buffer is empty: start from what the condition said (True as one
    /// success; False as two failures, the last at the condition's transition), as upstream's
    /// `SetStatus` does. An empty buffer and no condition stay unknown.
    pub(crate) fn resume(&self, pool_uid: &str, healthy: bool, since: Timestamp) {
        let mut pools = self.pools();
        let tracker = pools.entry(pool_uid.to_owned()).or_default();
        if !tracker.outcomes.is_empty() {
            return;
        }
        if healthy {
            tracker.push(true);
        } else {
            tracker.push(false);
            tracker.push(false);
            tracker.last_failure = Some(since);
        }
    }

    /// Whether provisioning should try the pool after every healthy one now.
    pub(crate) fn deprioritized(&self, pool_uid: &str, now: Timestamp) -> bool {
        let pools = self.pools();
        let Some(tracker) = pools.get(pool_uid) else {
            return false;
        };
        tracker.health() == Health::Unhealthy
            && tracker
                .last_failure
                .is_some_and(|at| now.duration_since(at).unsigned_abs() < DEPRIORITIZED_FOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("a valid timestamp")
    }

    #[test]
    fn one_failed_launch_is_tolerated_and_a_second_marks_the_pool_unhealthy_with_its_reason() {
        let health = PoolHealth::default();
        health.failed("uid", "LaunchFailed", "UnauthorizedOperation", at(0));
        assert_eq!(health.health("uid"), Health::Healthy);
        assert_eq!(health.verdict("uid"), None);
        assert!(!health.deprioritized("uid", at(1)));
        health.failed("uid", "LaunchFailed", "UnauthorizedOperation", at(60));
        assert_eq!(health.health("uid"), Health::Unhealthy);
        assert_eq!(
            health.verdict("uid"),
            Some(Verdict::Unhealthy {
                reason: "LaunchFailed".to_owned(),
                message: "UnauthorizedOperation".to_owned()
            })
        );
        assert!(health.deprioritized("uid", at(61)));
    }

    #[test]
    fn an_unhealthy_pool_is_tried_first_again_once_its_last_failure_is_half_an_hour_old() {
        let health = PoolHealth::default();
        health.failed("uid", "LaunchFailed", "denied", at(0));
        health.failed("uid", "LaunchFailed", "denied", at(10));
        assert!(health.deprioritized("uid", at(10 + 29 * 60)));
        assert!(!health.deprioritized("uid", at(10 + 30 * 60)));
    }

    #[test]
    fn registrations_bring_an_unhealthy_pool_back_only_once_failures_are_under_half() {
        let health = PoolHealth::default();
        health.failed(
            "uid",
            "RegistrationFailed",
            "Failed to register node",
            at(0),
        );
        health.failed(
            "uid",
            "RegistrationFailed",
            "Failed to register node",
            at(0),
        );
        health.registered("uid");
        health.registered("uid");
        // [false, false, true, true]: two of four failed.
        assert_eq!(health.health("uid"), Health::Unhealthy);
        health.registered("uid");
        assert_eq!(health.health("uid"), Health::Healthy);
        assert_eq!(health.verdict("uid"), Some(Verdict::Healthy));
    }

    #[test]
    fn after_a_restart_the_condition_seeds_an_empty_buffer_and_a_reset_forgets_it() {
        let health = PoolHealth::default();
        health.resume("uid", false, at(0));
        assert_eq!(health.health("uid"), Health::Unhealthy);
        assert!(health.deprioritized("uid", at(60)));
        health.resume("uid", true, at(0));
        assert_eq!(
            health.health("uid"),
            Health::Unhealthy,
            "only an empty buffer is seeded"
        );
        health.reset("uid");
        assert_eq!(health.health("uid"), Health::Unknown);
        assert!(!health.deprioritized("uid", at(60)));
    }
}
