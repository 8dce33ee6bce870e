//! The NodeClaims this agent created that the NodeClaim watch has not delivered yet: capacity
//! the next round must count, or it would provide for the same pods again.

use crate::apis::NodeClaim;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Claims this agent created that the NodeClaim watch has not delivered yet. Under load a watch
/// can lag a round behind; without these, the next round would provision the same pods again.
/// An entry goes as soon as the watch reports the claim (created or deleted): from then on the
/// reflector's store is the truth.
#[derive(Default)]
pub struct RecentClaims(Mutex<HashMap<String, (Instant, Arc<NodeClaim>)>>);

/// The longest a created claim counts as capacity without the watch confirming it.
const RECENT_CLAIM_MEMORY: Duration = Duration::from_secs(60);

impl RecentClaims {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<NodeClaim>)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts `claim` as capacity from now on: called before it is created.
    pub(super) fn record(&self, claim: NodeClaim) {
        self.lock()
            .insert(claim.name_any(), (Instant::now(), Arc::new(claim)));
    }

    /// Stops counting the claim named `name`: its create failed.
    pub(super) fn forget(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Called for every NodeClaim the watch delivers, applied or deleted.
    pub fn seen(&self, claim: &NodeClaim) {
        if let Some(name) = &claim.metadata.name {
            self.lock().remove(name);
        }
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }

    pub(super) fn unconfirmed(&self) -> Vec<Arc<NodeClaim>> {
        let mut claims = self.lock();
        claims.retain(|_, (at, _)| at.elapsed() < RECENT_CLAIM_MEMORY);
        claims.values().map(|(_, claim)| claim.clone()).collect()
    }
}
