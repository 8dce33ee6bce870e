//! How long a control loop waits before trying again after a failure: exponential per object
//! (or per loop), bounded, with jitter, and reset by the next success.
//!
//! Follows upstream's workqueue rate limiters: the NodeClaim lifecycle controller retries a
//! failed claim after 1 s, doubling to at most 1 minute
//! (`workqueue.NewTypedItemExponentialFailureRateLimiter(time.Second, time.Minute)` in
//! `pkg/controllers/nodeclaim/lifecycle/controller.go`). Unlike the workqueue, each delay is
//! jittered (between half and all of it), so the claims of one burst that all failed on the
//! same throttled API do not come back in lockstep and throttle it again.
//!
//! A fixed retry (this agent used 5 s for every error) keeps hammering an API that asked to be
//! left alone, and waits too long after a one-off conflict; the per-object count also keeps
//! one broken claim from slowing the others.

use rand::Rng;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// How many keys may be held before the expired ones are dropped.
const PRUNE_ABOVE: usize = 1024;

/// Exponential failure backoff, per key.
#[derive(Debug)]
pub struct FailureBackoff {
    base: Duration,
    max: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    failures: u32,
    retry_at: Instant,
}

impl FailureBackoff {
    /// Backoff from `base`, doubling per consecutive failure, never above `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            entries: Mutex::default(),
        }
    }

    /// Upstream's NodeClaim lifecycle limits: 1 s doubling to 1 minute.
    pub fn lifecycle() -> Self {
        Self::new(Duration::from_secs(1), Duration::from_secs(60))
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock left only counters behind, which stay usable.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a failure of `key` and returns how long to wait before the next attempt.
    pub fn failed(&self, key: &str) -> Duration {
        let mut entries = self.entries();
        if entries.len() >= PRUNE_ABOVE {
            // Keys of objects deleted after a failure never succeed: drop the long-expired ones.
            let now = Instant::now();
            let stale = self.max * 2;
            entries.retain(|_, e| e.retry_at + stale > now);
        }
        let failures = entries.get(key).map_or(0, |e| e.failures).saturating_add(1);
        let delay = jittered(self.ceiling(failures), rand::rng().random_range(0.0..=1.0));
        entries.insert(
            key.to_owned(),
            Entry {
                failures,
                retry_at: Instant::now() + delay,
            },
        );
        delay
    }

    /// How much longer `key` must wait after its last failure, if it must: a change to the
    /// object (often the loop's own status write) wakes its reconcile early, which must not cut
    /// the backoff short.
    pub fn hold(&self, key: &str) -> Option<Duration> {
        let retry_at = self.entries().get(key)?.retry_at;
        let now = Instant::now();
        (retry_at > now).then(|| retry_at - now)
    }

    /// Consecutive failures of `key` so far.
    pub fn failures(&self, key: &str) -> u32 {
        self.entries().get(key).map_or(0, |e| e.failures)
    }

    /// `key` succeeded: its next failure starts from the base delay again.
    pub(crate) fn succeeded(&self, key: &str) {
        self.entries().remove(key);
    }

    /// The delay before jitter after `failures` consecutive failures.
    fn ceiling(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(31);
        self.base
            .checked_mul(1u32 << exponent)
            .map_or(self.max, |d| d.min(self.max))
    }
}

/// Between half and all of `ceiling`, by `fraction` (0 to 1): "equal jitter", which keeps the
/// backoff growing while spreading the retries.
fn jittered(ceiling: Duration, fraction: f64) -> Duration {
    ceiling / 2 + (ceiling / 2).mul_f64(fraction.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_per_failure_up_to_the_maximum_and_resets_on_success() {
        let backoff = FailureBackoff::lifecycle();
        let ceilings: Vec<u64> = (1..=9).map(|n| backoff.ceiling(n).as_secs()).collect();
        assert_eq!(ceilings, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        for _ in 0..5 {
            backoff.failed("claim");
        }
        assert_eq!(backoff.failures("claim"), 5);
        backoff.succeeded("claim");
        assert_eq!(backoff.failures("claim"), 0);
        let first = backoff.failed("claim");
        assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
    }

    #[test]
    fn jitter_keeps_a_delay_between_half_and_all_of_its_ceiling() {
        let ceiling = Duration::from_secs(8);
        assert_eq!(jittered(ceiling, 0.0), Duration::from_secs(4));
        assert_eq!(jittered(ceiling, 1.0), ceiling);
        assert_eq!(jittered(ceiling, 7.0), ceiling);
    }

    #[test]
    fn a_huge_failure_count_stays_at_the_maximum() {
        let backoff = FailureBackoff::new(Duration::from_secs(1), Duration::from_secs(300));
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(300));
    }

    #[tokio::test]
    async fn a_key_is_held_until_its_retry_time_and_others_are_not() {
        let backoff = FailureBackoff::new(Duration::from_millis(40), Duration::from_millis(40));
        let delay = backoff.failed("a");
        assert!(backoff.hold("a").is_some_and(|d| d <= delay));
        assert_eq!(backoff.hold("b"), None);
        tokio::time::sleep(delay).await;
        assert_eq!(backoff.hold("a"), None);
    }
}
