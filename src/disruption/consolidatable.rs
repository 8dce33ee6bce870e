//! When consolidation may first consider a NodeClaim: `consolidateAfter` after its last pod
//! event, as upstream's `Consolidatable` condition (`pkg/controllers/nodeclaim/disruption/
//! consolidation.go`). A claim with no pod event yet counts from when it was initialized.

use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodePool};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// When a claim becomes consolidatable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConsolidatableAt {
    /// From this moment on.
    At {
        /// When it becomes (or became) consolidatable.
        at: Timestamp,
        /// The moment `consolidateAfter` counts from: the last pod event, or initialization.
        since: Timestamp,
        /// Whether `since` is the initialization because no pod event was recorded.
        from_initialization: bool,
    },
    /// The pool says `consolidateAfter: Never`.
    Never,
    /// Not initialized yet: nothing to count from.
    NotInitialized,
}

/// When `claim`, a node of `pool`, becomes consolidatable.
pub(crate) fn consolidatable_at(claim: &NodeClaim, pool: &NodePool) -> ConsolidatableAt {
    let after = match pool.spec.disruption.consolidate_after.to_duration() {
        Ok(Some(after)) => SignedDuration::try_from(after).unwrap_or(SignedDuration::ZERO),
        Ok(None) => return ConsolidatableAt::Never,
        // The CRD's pattern refuses such a value; an older schema may have stored one. Read it as
        // upstream's default, 0s.
        Err(_) => SignedDuration::ZERO,
    };
    let last_pod_event = claim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map(|t| t.0);
    let initialized = claim
        .condition(cond::INITIALIZED)
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.0);
    let Some(initialized) = initialized else {
        return ConsolidatableAt::NotInitialized;
    };
    let since = last_pod_event.unwrap_or(initialized);
    ConsolidatableAt::At {
        at: since.checked_add(after).unwrap_or(since),
        since,
        from_initialization: last_pod_event.is_none(),
    }
}
