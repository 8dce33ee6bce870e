//! Planning a pod again as soon as the room it was planned into is known to be gone.
//!
//! A round plans a pending pod onto an in-flight NodeClaim. When that claim's node comes up,
//! the kube-scheduler may fill it with other pods (it does not know the plan), and the pod,
//! still pending, waits for a new round; its status need not change, so no pod event starts
//! one. Upstream requeues every provisionable pod every 10 s; here the NodeClaim watch also
//! starts a round the moment a claim first shows `Initialized=True`, which is when that becomes
//! known (the pods the node can take are bound right then). A round that finds the pods fit
//! where they are creates nothing, so the extra round costs one simulation.

use crate::apis::NodeClaim;
use crate::apis::nodeclaim::conditions as cond;
use crate::controllers::conditions;
use std::collections::HashSet;
use std::sync::Mutex;

/// The claims seen initialized, so each one starts a round once.
#[derive(Debug, Default)]
pub struct Initialized(Mutex<HashSet<String>>);

impl Initialized {
    fn names(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // Only names are behind the lock; a panic elsewhere leaves them usable.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether this delivery of `claim` is the first to show it initialized.
    pub(crate) fn newly(&self, claim: &NodeClaim) -> bool {
        let Some(name) = &claim.metadata.name else {
            return false;
        };
        let initialized = claim
            .status
            .as_ref()
            .is_some_and(|s| conditions::is_true(&s.conditions, cond::INITIALIZED));
        initialized && self.names().insert(name.clone())
    }

    /// Marks `claim` as seen without starting a round (a claim listed at start-up, already
    /// initialized: nothing was planned onto it by this agent).
    pub fn seen(&self, claim: &NodeClaim) {
        let _ = self.newly(claim);
    }

    /// `claim` is gone.
    pub(crate) fn forget(&self, claim: &NodeClaim) {
        if let Some(name) = &claim.metadata.name {
            self.names().remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, initialized: bool) -> NodeClaim {
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
        }))
        .expect("a claim");
        if initialized {
            let mut status = crate::apis::NodeClaimStatus::default();
            conditions::set(
                &mut status.conditions,
                cond::INITIALIZED,
                true,
                "Initialized",
                "",
                None,
            );
            claim.status = Some(status);
        }
        claim
    }

    #[test]
    fn a_claim_starts_a_round_the_first_time_it_shows_initialized_only() {
        let seen = Initialized::default();
        assert!(!seen.newly(&claim("a", false)), "not initialized yet");
        assert!(seen.newly(&claim("a", true)), "initialized now");
        assert!(!seen.newly(&claim("a", true)), "a later update of it");
        seen.forget(&claim("a", true));
        assert!(
            seen.newly(&claim("a", true)),
            "a new claim of the same name"
        );
        seen.seen(&claim("b", true));
        assert!(!seen.newly(&claim("b", true)), "listed at start-up");
    }
}
