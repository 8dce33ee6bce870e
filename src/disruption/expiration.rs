//! Expiration: when a NodeClaim's `expireAfter` is reached. Upstream v1 expires forcefully
//! (`pkg/controllers/nodeclaim/expiration`, designs/forceful-expiration.md): the claim is
//! deleted when its age reaches `expireAfter`, whatever the disruption budgets say; only its
//! drain, bounded by `terminationGracePeriod`, still honours PodDisruptionBudgets.

use crate::apis::NodeClaim;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// When the claim expires: its creation plus `spec.expireAfter`. `None` for `Never`, an
/// unparsable value (which the CRD's pattern refuses) or a claim not yet created.
pub(crate) fn expires_at(claim: &NodeClaim) -> Option<Timestamp> {
    let after = claim.spec.expire_after.to_duration().ok()??;
    let created = claim.metadata.creation_timestamp.as_ref()?.0;
    created
        .checked_add(SignedDuration::try_from(after).ok()?)
        .ok()
}

/// Whether the claim has expired at `now`.
pub(crate) fn is_expired(claim: &NodeClaim, now: Timestamp) -> bool {
    expires_at(claim).is_some_and(|at| at <= now)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(expire_after: &str) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": {"requirements": [], "expireAfter": expire_after,
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "d"}},
        }))
        .expect("a claim")
    }

    #[test]
    fn a_claim_expires_expire_after_past_its_creation() {
        let at: Timestamp = "2026-12-01T01:30:00Z".parse().expect("time");
        assert_eq!(expires_at(&claim("1h30m")), Some(at));
        assert!(!is_expired(
            &claim("1h30m"),
            "2026-12-01T01:29:59Z".parse().expect("time")
        ));
        assert!(is_expired(&claim("1h30m"), at));
    }

    #[test]
    fn a_claim_that_never_expires_has_no_expiry() {
        assert_eq!(expires_at(&claim("Never")), None);
    }
}
