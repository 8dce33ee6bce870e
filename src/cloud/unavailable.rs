//! Offerings a cloud recently had no capacity for (EC2 insufficient capacity, GCE stockouts and
//! quota errors), so the next launches skip them. Shared by the aws and gcp providers.
//!
//! Keyed as upstream keys its ICE cache, `capacity-type:instance-type:zone`, and forgotten after
//! three minutes (upstream's `UnavailableOfferingsTTL`): long enough that provisioning re-plans
//! around the hole, short enough that capacity coming back is used again. A provider reports a
//! cached offering as `available: false` in its catalogue, so explanations can say why.

use crate::apis::CapacityType;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upstream's TTL.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(180);

/// A shared set of offerings with no capacity, each forgotten after the TTL.
#[derive(Debug)]
pub struct UnavailableOfferings {
    ttl: Duration,
    until: Mutex<HashMap<String, Instant>>,
}

impl Default for UnavailableOfferings {
    fn default() -> Self {
        Self::new(DEFAULT_TTL)
    }
}

/// The cache key of an offering.
pub fn key(capacity_type: CapacityType, instance_type: &str, zone: &str) -> String {
    format!("{capacity_type}:{instance_type}:{zone}")
}

impl UnavailableOfferings {
    /// An empty cache whose entries last `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            until: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks an offering unavailable from now until the TTL runs out.
    pub fn mark(&self, capacity_type: CapacityType, instance_type: &str, zone: &str) {
        self.mark_at(capacity_type, instance_type, zone, Instant::now());
    }

    /// Marks an offering unavailable from `now` (for tests with a clock of their own).
    pub(crate) fn mark_at(
        &self,
        capacity_type: CapacityType,
        instance_type: &str,
        zone: &str,
        now: Instant,
    ) {
        tracing::debug!(
            %capacity_type,
            instance_type,
            zone,
            ttl_s = self.ttl.as_secs(),
            "offering marked unavailable"
        );
        self.entries()
            .insert(key(capacity_type, instance_type, zone), now + self.ttl);
    }

    /// Whether an offering is still marked unavailable.
    pub(crate) fn is_unavailable(
        &self,
        capacity_type: CapacityType,
        instance_type: &str,
        zone: &str,
    ) -> bool {
        self.is_unavailable_at(capacity_type, instance_type, zone, Instant::now())
    }

    /// Whether an offering is still marked unavailable at `now`.
    pub(crate) fn is_unavailable_at(
        &self,
        capacity_type: CapacityType,
        instance_type: &str,
        zone: &str,
        now: Instant,
    ) -> bool {
        let mut entries = self.entries();
        entries.retain(|_, until| *until > now);
        entries.contains_key(&key(capacity_type, instance_type, zone))
    }

    /// The keys currently cached (for logs and tests).
    pub fn keys(&self) -> Vec<String> {
        let now = Instant::now();
        let mut entries = self.entries();
        entries.retain(|_, until| *until > now);
        let mut keys: Vec<String> = entries.keys().cloned().collect();
        keys.sort();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offering_is_unavailable_for_the_ttl_and_then_comes_back() {
        let cache = UnavailableOfferings::default();
        let start = Instant::now();
        cache.mark_at(CapacityType::Spot, "m5.large", "us-west-2a", start);
        assert!(cache.is_unavailable_at(
            CapacityType::Spot,
            "m5.large",
            "us-west-2a",
            start + Duration::from_secs(179)
        ));
        assert!(!cache.is_unavailable_at(CapacityType::OnDemand, "m5.large", "us-west-2a", start));
        assert!(!cache.is_unavailable_at(CapacityType::Spot, "m5.large", "us-west-2b", start));
        assert!(!cache.is_unavailable_at(
            CapacityType::Spot,
            "m5.large",
            "us-west-2a",
            start + Duration::from_secs(181)
        ));
    }
}
