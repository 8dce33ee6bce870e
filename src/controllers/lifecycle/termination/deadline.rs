//! The node's termination deadline: when a claim with `spec.terminationGracePeriod` is deleted,
//! its drain must end by its deletion plus that period; after `deadline - the pod's own
//! terminationGracePeriodSeconds` a pod is deleted directly (see `drain_plan`).
//!
//! As upstream (`nodeclaim/lifecycle`'s `ensureTerminationGracePeriodTerminationTimeAnnotation`),
//! the deadline is written once on the claim as `karpenter.sh/nodeclaim-termination-timestamp`
//! (RFC 3339), so it is visible, survives an agent restart, and a value already there (upstream's
//! node repair sets one) is kept.

use crate::apis::{NodeClaim, labels, parse_duration};
use crate::controllers::{Context, Error, is_not_found};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{info, warn};

/// The deadline the claim's annotation records, if it has a readable one.
fn recorded(claim: &NodeClaim) -> Option<Timestamp> {
    let text = claim
        .annotations()
        .get(labels::NODE_CLAIM_TERMINATION_TIMESTAMP)?;
    match text.parse() {
        Ok(at) => Some(at),
        Err(e) => {
            warn!(nodeclaim = %claim.name_any(), value = %text, error = %e, "ignoring an unreadable termination timestamp");
            None
        }
    }
}

/// The deadline the claim's spec implies: its deletion plus `terminationGracePeriod`.
fn implied(claim: &NodeClaim) -> Option<Timestamp> {
    let deleted = claim.metadata.deletion_timestamp.as_ref()?.0;
    let period = parse_duration(claim.spec.termination_grace_period.as_deref()?).ok()?;
    deleted
        .checked_add(SignedDuration::try_from(period).ok()?)
        .ok()
}

/// RFC 3339 to the second, as Go's `time.RFC3339` writes it.
fn rfc3339(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The claim's termination deadline, writing it on the claim (with a `TerminationGracePeriodExpiring`
/// Event, upstream's wording) the first time. `None` when the claim has no
/// `terminationGracePeriod`: the drain then waits as long as it takes.
pub(super) async fn ensure<P>(
    claim: &NodeClaim,
    ctx: &Context<P>,
) -> Result<Option<Timestamp>, Error> {
    if let Some(at) = recorded(claim) {
        return Ok(Some(at));
    }
    let Some(at) = implied(claim) else {
        return Ok(None);
    };
    // A copy from before our own write: the deadline is the same, the write is done.
    if ctx.own_writes.is_stale(claim) {
        return Ok(Some(at));
    }
    let text = rfc3339(at);
    // The resourceVersion makes this fail (and the reconcile retry) rather than overwrite a
    // deadline someone else wrote meanwhile.
    let patch = json!({"metadata": {
        "annotations": {labels::NODE_CLAIM_TERMINATION_TIMESTAMP: text},
        "resourceVersion": claim.resource_version(),
    }});
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let write = ctx.own_writes.begin(claim);
    match api
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(written) => write.done(&written),
        Err(e) if is_not_found(&e) => return Ok(Some(at)),
        Err(e) => return Err(Error::kube("recording the termination deadline")(e)),
    }
    info!(nodeclaim = %claim.name_any(), deadline = %text, "annotated nodeclaim");
    let event = Event {
        type_: EventType::Warning,
        reason: "TerminationGracePeriodExpiring".to_owned(),
        note: Some(format!("All pods will be deleted by {text}")),
        action: "Terminate".to_owned(),
        secondary: None,
    };
    ctx.notices
        .publish(&event, &claim.object_ref(&()), &text)
        .await;
    Ok(Some(at))
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn claim(grace: Option<&str>, deleted: Option<&str>, annotation: Option<&str>) -> NodeClaim {
        let mut value = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "d"}},
        });
        if let Some(grace) = grace {
            value["spec"]["terminationGracePeriod"] = json!(grace);
        }
        if let Some(deleted) = deleted {
            value["metadata"]["deletionTimestamp"] = json!(deleted);
        }
        if let Some(annotation) = annotation {
            value["metadata"]["annotations"] =
                json!({labels::NODE_CLAIM_TERMINATION_TIMESTAMP: annotation});
        }
        serde_json::from_value(value).expect("a claim")
    }

    #[test]
    fn a_deleted_claim_must_be_drained_by_its_deletion_plus_its_termination_grace_period() {
        let deleted = claim(Some("1h30s"), Some("2026-12-01T00:00:00Z"), None);
        let at = implied(&deleted).expect("a deadline");
        assert_eq!(rfc3339(at), "2026-12-01T01:00:30Z");
    }

    #[test]
    fn a_claim_without_a_termination_grace_period_has_no_deadline() {
        assert_eq!(
            implied(&claim(None, Some("2026-12-01T00:00:00Z"), None)),
            None
        );
        assert_eq!(implied(&claim(Some("10m"), None, None)), None);
    }

    #[test]
    fn a_recorded_deadline_wins_over_the_one_the_spec_implies() {
        let repaired = claim(
            Some("1h"),
            Some("2026-12-01T00:00:00Z"),
            Some("2026-12-01T00:00:05Z"),
        );
        assert_eq!(
            recorded(&repaired).map(rfc3339).as_deref(),
            Some("2026-12-01T00:00:05Z")
        );
        assert_eq!(recorded(&claim(Some("1h"), None, Some("yesterday"))), None);
    }
}
