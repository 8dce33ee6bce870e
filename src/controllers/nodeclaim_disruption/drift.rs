//! The `Drifted` condition of every initialized NodeClaim, set with the reason and message of
//! [`crate::disruption::drift::drifted`] and removed when the claim matches its NodePool again,
//! as upstream's `pkg/controllers/nodeclaim/disruption/drift.go`. After the pure checks, the
//! provider is asked whether the machine still matches its node class (upstream's
//! `CloudProvider.IsDrifted`), at most every [`CLOUD_VERDICT_TTL`] per claim, as upstream
//! requeues a claim that is not drifted.
//!
//! Upstream judges every launched claim; this loop judges initialized ones, the only ones
//! disruption considers, so it never writes the status of a claim the lifecycle loop is still
//! writing.

use super::{owned, write_conditions};
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodeClassReference, NodePool, labels};
use crate::cloud::CloudProvider;
use crate::controllers::{Context, conditions};
use crate::disruption::drift::{Drift, DriftReason, drifted};
use crate::scheduling::InstanceType;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// How long the provider's verdict on a claim is trusted before it is asked again.
pub(crate) const CLOUD_VERDICT_TTL: Duration = Duration::from_secs(300);

/// The provider's last verdict per claim UID, with when it was given.
#[derive(Default)]
pub(super) struct Memory(HashMap<String, (Instant, Option<String>)>);

/// Sets or clears `Drifted` on every initialized claim whose verdict changed.
pub(super) async fn reconcile<P: CloudProvider>(
    ctx: &Context<P>,
    memory: &mut Memory,
    now: Timestamp,
) {
    let claims = ctx.cluster.claims.state();
    memory.0.retain(|uid, (at, _)| {
        at.elapsed() < CLOUD_VERDICT_TTL && claims.iter().any(|c| c.uid().as_ref() == Some(uid))
    });
    let pools: HashMap<String, Arc<NodePool>> = ctx
        .cluster
        .pools
        .state()
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    let mut catalogues: HashMap<NodeClassReference, Option<Arc<[InstanceType]>>> = HashMap::new();
    for claim in claims {
        if claim.metadata.deletion_timestamp.is_some()
            || !claim.is_true(cond::INITIALIZED)
            || !owned(ctx, &claim)
            || ctx.own_writes.is_stale(&claim)
        {
            continue;
        }
        let Some(pool) = claim
            .labels()
            .get(labels::NODE_POOL)
            .and_then(|name| pools.get(name))
        else {
            continue;
        };
        let node_class = &pool.spec.template.spec.node_class_ref;
        if !catalogues.contains_key(node_class) {
            let catalogue = match ctx.provider.instance_types(node_class).await {
                Ok(catalogue) => Some(catalogue),
                Err(e) => {
                    // The node class status loop reports a class that is not ready; this pass
                    // judges the claims without the catalogue.
                    debug!(nodepool = %pool.name_any(), error = %e, "no catalogue to judge instance-type drift by");
                    None
                }
            };
            catalogues.insert(node_class.clone(), catalogue);
        }
        let catalogue = catalogues.get(node_class).and_then(Option::as_deref);
        let mut verdict = drifted(&claim, pool, catalogue, now);
        if verdict.is_none() {
            verdict = cloud_verdict(ctx, memory, &claim).await;
        }
        let existing = claim
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let Some(updated) = with_drift(existing, verdict.as_ref(), claim.metadata.generation)
        else {
            continue;
        };
        match &verdict {
            Some(drift) => {
                info!(nodeclaim = %claim.name_any(), reason = %drift.reason, message = %drift.message, "drifted")
            }
            None => info!(nodeclaim = %claim.name_any(), "no longer drifted"),
        }
        if let Err(e) = write_conditions(ctx, &claim, updated).await {
            // A conflict means the claim changed since it was read: the next pass judges it again.
            warn!(nodeclaim = %claim.name_any(), error = %e, cause = ?std::error::Error::source(&e), "could not update the Drifted condition");
        }
    }
}

/// The provider's word on `claim` (a changed image, for instance), asked again once the last
/// answer is older than [`CLOUD_VERDICT_TTL`]. A failed call is no verdict.
async fn cloud_verdict<P: CloudProvider>(
    ctx: &Context<P>,
    memory: &mut Memory,
    claim: &NodeClaim,
) -> Option<Drift> {
    let uid = claim.uid()?;
    let reason = match memory.0.get(&uid) {
        Some((_, reason)) => reason.clone(),
        None => match ctx.provider.drift(claim).await {
            Ok(reason) => {
                memory.0.insert(uid, (Instant::now(), reason.clone()));
                reason
            }
            Err(e) => {
                warn!(nodeclaim = %claim.name_any(), error = %e, "could not ask the provider about drift");
                None
            }
        },
    }?;
    Some(Drift {
        message: format!(
            "the {} provider reports {reason}: the machine no longer matches its node class",
            ctx.provider.name()
        ),
        reason: DriftReason::Cloud(reason),
    })
}

/// The claim's conditions with `Drifted` set to `drift` (removed when `None`, as upstream clears
/// it), or `None` when they already say so.
fn with_drift(
    existing: &[Condition],
    drift: Option<&Drift>,
    generation: Option<i64>,
) -> Option<Vec<Condition>> {
    let current = existing.iter().find(|c| c.type_ == cond::DRIFTED);
    match (drift, current) {
        (None, None) => None,
        (None, Some(_)) => Some(
            existing
                .iter()
                .filter(|c| c.type_ != cond::DRIFTED)
                .cloned()
                .collect(),
        ),
        (Some(drift), Some(c))
            if c.status == "True"
                && c.reason == drift.reason.as_str()
                && c.message == drift.message =>
        {
            None
        }
        (Some(drift), _) => {
            let mut updated = existing.to_vec();
            conditions::set(
                &mut updated,
                cond::DRIFTED,
                true,
                drift.reason.as_str(),
                &drift.message,
                generation,
            );
            Some(updated)
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn drift(message: &str) -> Drift {
        Drift {
            reason: DriftReason::NodePoolDrifted,
            message: message.to_owned(),
        }
    }

    #[test]
    fn a_drifted_claim_gets_the_condition_with_upstreams_reason() {
        let mut existing = Vec::new();
        conditions::set(
            &mut existing,
            cond::INITIALIZED,
            true,
            "Initialized",
            "",
            None,
        );
        let updated = with_drift(&existing, Some(&drift("changed")), Some(1)).expect("a change");
        let drifted = updated
            .iter()
            .find(|c| c.type_ == "Drifted")
            .expect("Drifted");
        assert_eq!(
            (drifted.status.as_str(), drifted.reason.as_str()),
            ("True", "NodePoolDrifted")
        );
        assert_eq!(drifted.message, "changed");
        assert_eq!(updated.len(), 2, "the other conditions stay");
    }

    #[test]
    fn a_claim_already_marked_so_is_not_written_again() {
        let updated = with_drift(&[], Some(&drift("changed")), None).expect("a change");
        assert_eq!(with_drift(&updated, Some(&drift("changed")), None), None);
        assert!(with_drift(&updated, Some(&drift("changed again")), None).is_some());
    }

    #[test]
    fn a_claim_that_matches_its_pool_again_loses_the_condition() {
        let mut existing = with_drift(&[], Some(&drift("changed")), None).expect("a change");
        conditions::set(&mut existing, cond::READY, true, "Ready", "", None);
        let cleared = with_drift(&existing, None, None).expect("a change");
        assert!(cleared.iter().all(|c| c.type_ != "Drifted"));
        assert_eq!(cleared.len(), 1);
        assert_eq!(with_drift(&cleared, None, None), None);
    }
}
