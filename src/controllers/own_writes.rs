//! The agent's memory of its own writes to NodeClaims, so a loop does not act twice on a claim
//! the watch has not redelivered yet.
//!
//! A Node or Pod event can reconcile a claim again before the watch has delivered the claim's
//! own update, and reconciling that stale copy would repeat the write: a second registration
//! (a Node patch and a status write), a second launch. Upstream avoids it with optimistic
//! locking on its status patches and, for launches, a cache (here [`super::RecentLaunches`]).
//!
//! Each write remembers the resourceVersion it produced, and the claim counts as stale until the
//! watch delivers that version ([`OwnWrites::observed`]). Remembering only the version read
//! before the write was not enough: under a 20,000-pod scale-out another writer's change (the
//! pod-events loop, disruption's conditions) often reached the cache first, read as fresh while
//! it lacked our write, and 38 % of the registrations were made twice.
//!
//! Resource versions are compared only for equality, as the API asks: the watch delivers every
//! version of an object in order, so seeing ours is what tells the cache has caught up. An entry
//! expires after [`OWN_WRITE_PATIENCE`], so a version the watch skipped (a relist) cannot stall a
//! claim.

use crate::apis::NodeClaim;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a write may go unobserved before the claim is reconciled from the cache anyway.
const OWN_WRITE_PATIENCE: Duration = Duration::from_secs(10);

/// How many versions delivered during a write are kept to match its answer against.
const DELIVERED_DURING_A_WRITE: usize = 8;

/// Each NodeClaim's last write by this agent, by name, until the watch delivers it.
#[derive(Default)]
pub struct OwnWrites(Mutex<HashMap<String, Write>>);

struct Write {
    /// The version the write was made from.
    read: Option<String>,
    /// The version it produced, once the API server answered.
    written: Option<String>,
    /// Versions the watch delivered while the write was in flight (it can beat the answer).
    delivered: Vec<String>,
    at: Instant,
}

/// A write under way (see [`OwnWrites::begin`]); dropped without [`Pending::done`] (the write
/// failed), it is forgotten.
#[must_use = "a write is remembered once `done` is given the written claim"]
pub(crate) struct Pending<'a> {
    writes: &'a OwnWrites,
    name: Option<String>,
    at: Instant,
}

impl OwnWrites {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Write>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts remembering a write to `claim` as it was read.
    pub(crate) fn begin(&self, claim: &NodeClaim) -> Pending<'_> {
        let at = Instant::now();
        let name = claim.metadata.name.clone();
        if let Some(name) = &name {
            let mut writes = self.lock();
            // Expired entries go here: a deleted claim is never looked up again.
            writes.retain(|_, w| at.saturating_duration_since(w.at) < OWN_WRITE_PATIENCE);
            writes.insert(
                name.clone(),
                Write {
                    read: claim.metadata.resource_version.clone(),
                    written: None,
                    delivered: Vec::new(),
                    at,
                },
            );
        }
        Pending {
            writes: self,
            name,
            at,
        }
    }

    /// The watch delivered `claim`: a write that produced this version is caught up.
    pub fn observed(&self, claim: &NodeClaim) {
        let (Some(name), Some(version)) = (&claim.metadata.name, &claim.metadata.resource_version)
        else {
            return;
        };
        let mut writes = self.lock();
        let Some(write) = writes.get_mut(name) else {
            return;
        };
        match &write.written {
            Some(written) if written == version => {
                writes.remove(name);
            }
            Some(_) => {}
            None if write.delivered.len() < DELIVERED_DURING_A_WRITE => {
                write.delivered.push(version.clone());
            }
            None => {}
        }
    }

    /// The claim is gone: nothing of it is awaited.
    pub(crate) fn forget(&self, claim: &NodeClaim) {
        if let Some(name) = &claim.metadata.name {
            self.lock().remove(name);
        }
    }

    /// Whether `claim` is a copy from before this agent's last write to it.
    pub(crate) fn is_stale(&self, claim: &NodeClaim) -> bool {
        self.is_stale_at(claim, Instant::now())
    }

    fn is_stale_at(&self, claim: &NodeClaim, now: Instant) -> bool {
        let Some(name) = &claim.metadata.name else {
            return false;
        };
        let version = claim.metadata.resource_version.as_ref();
        let mut writes = self.lock();
        let stale = writes.get(name).is_some_and(|write| {
            now.saturating_duration_since(write.at) < OWN_WRITE_PATIENCE
                && match &write.written {
                    Some(written) => version != Some(written),
                    // Still in flight (another loop is writing): the copy it was made from.
                    None => version == write.read.as_ref(),
                }
        });
        if !stale {
            writes.remove(name);
        }
        stale
    }
}

impl Pending<'_> {
    /// The write succeeded and the API server answered with `written`.
    pub(crate) fn done(mut self, written: &NodeClaim) {
        let Some(name) = self.name.take() else {
            return;
        };
        let mut writes = self.writes.lock();
        // Another write to the claim began since (another loop): that one is remembered.
        let Some(write) = writes.get_mut(&name).filter(|w| w.at == self.at) else {
            return;
        };
        let version = written.metadata.resource_version.clone();
        // A write that changed nothing made no version to wait for; one the watch already
        // delivered is caught up.
        if version.is_none()
            || version == write.read
            || version
                .as_ref()
                .is_some_and(|v| write.delivered.contains(v))
        {
            writes.remove(&name);
        } else {
            write.written = version;
            write.delivered = Vec::new();
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            let mut writes = self.writes.lock();
            if writes.get(&name).is_some_and(|w| w.at == self.at) {
                writes.remove(&name);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn claim(version: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "resourceVersion": version},
            "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "d"}, "requirements": []},
        }))
        .expect("a claim")
    }

    #[test]
    fn a_claim_is_stale_until_the_watch_delivers_the_version_our_write_made() {
        let writes = OwnWrites::default();
        writes.begin(&claim("10")).done(&claim("12"));
        assert!(
            writes.is_stale(&claim("10")),
            "the copy the write was made from"
        );
        // Another writer's change reached the cache before ours: still without our write.
        writes.observed(&claim("11"));
        assert!(writes.is_stale(&claim("11")));
        writes.observed(&claim("12"));
        assert!(!writes.is_stale(&claim("12")));
        // And once caught up, a later version is fresh too.
        assert!(!writes.is_stale(&claim("13")));
    }

    #[test]
    fn a_version_the_watch_delivered_before_the_answer_counts_as_caught_up() {
        let writes = OwnWrites::default();
        let pending = writes.begin(&claim("10"));
        writes.observed(&claim("12"));
        pending.done(&claim("12"));
        assert!(!writes.is_stale(&claim("12")));
        assert!(!writes.is_stale(&claim("13")));
    }

    #[test]
    fn a_write_that_changed_nothing_or_failed_leaves_the_claim_fresh() {
        let writes = OwnWrites::default();
        writes.begin(&claim("10")).done(&claim("10"));
        assert!(!writes.is_stale(&claim("10")));
        drop(writes.begin(&claim("10")));
        assert!(!writes.is_stale(&claim("10")));
    }

    #[test]
    fn a_write_the_watch_never_delivers_stops_holding_the_claim_after_the_patience() {
        let writes = OwnWrites::default();
        writes.begin(&claim("10")).done(&claim("12"));
        let later = Instant::now() + OWN_WRITE_PATIENCE;
        assert!(!writes.is_stale_at(&claim("11"), later));
    }

    #[test]
    fn a_deleted_claim_is_forgotten() {
        let writes = OwnWrites::default();
        writes.begin(&claim("10")).done(&claim("12"));
        writes.forget(&claim("11"));
        assert!(!writes.is_stale(&claim("10")));
    }
}
