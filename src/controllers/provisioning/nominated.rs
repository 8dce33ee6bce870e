//! A `Nominated` Event on each pod the agent plans a node for, as upstream publishes it
//! (`pkg/controllers/provisioning/scheduling/events.go`, `NominatePodEvent`): "Pod should schedule
//! on: nodeclaim/NAME" once its new claim is created, and "…: nodeclaim/NAME, node/NAME" (or the
//! part that exists) for a pod planned onto capacity that is already there or coming up. Like
//! upstream's, one pod hears it at most once every two minutes (the Event recorder's dedupe) and
//! the whole agent publishes at most 5 a second in bursts of 10 (`PodNominationRateLimiter`): a
//! scale-out of thousands of pods must not become thousands of API writes.

use crate::controllers::Context;
use crate::scheduling::{Input, Plan, Target};
use crate::state::CachedPod;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Upstream's reason.
const NOMINATED: &str = "Nominated";

/// Upstream's `PodNominationRateLimiter`: a token bucket of 10 that refills at 5 a second.
const PER_SECOND: f64 = 5.0;
const BURST: f64 = 10.0;

/// The Nominated Events' token bucket, shared by every round and every create.
///
/// Written here rather than taken from a crate: the one well-kept rate limiter (`governor`) is
/// not in this build's registry, and what is needed is client-go's `TryAccept` on one bucket,
/// a dozen lines.
pub(super) struct Nominations {
    bucket: Mutex<Bucket>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Default for Nominations {
    fn default() -> Self {
        Self {
            bucket: Mutex::new(Bucket {
                tokens: BURST,
                at: Instant::now(),
            }),
        }
    }
}

impl Nominations {
    /// Takes a token if there is one at `now`.
    fn try_accept(&self, now: Instant) -> bool {
        let mut bucket = self
            .bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * PER_SECOND;
        bucket.tokens = (bucket.tokens + refill).min(BURST);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }

    /// Whether a token is left at `now`, without taking it: when the bucket is empty a round of
    /// thousands of pods skips them all at the cost of a lock each.
    fn has_token(&self, now: Instant) -> bool {
        let bucket = self
            .bucket
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        bucket.tokens + now.saturating_duration_since(bucket.at).as_secs_f64() * PER_SECOND >= 1.0
    }

    /// Tells `pod` where it should schedule: `places` are `nodeclaim/NAME` and `node/NAME`.
    pub(super) async fn nominate<P>(&self, ctx: &Context<P>, pod: &ObjectReference, places: &str) {
        if !self.has_token(Instant::now()) {
            return;
        }
        let event = Event {
            type_: EventType::Normal,
            reason: NOMINATED.to_owned(),
            note: Some(format!("Pod should schedule on: {places}")),
            action: "Provisioning".to_owned(),
            secondary: None,
        };
        // Upstream's dedupe key is the reason and the pod: one a pod every two minutes,
        // whatever it names.
        ctx.notices
            .publish_if(&event, pod, "", || self.try_accept(Instant::now()))
            .await;
    }

    /// Nominates the pods `plan` placed on registered nodes and on claims still coming up.
    pub(super) async fn nominate_existing<P>(
        &self,
        ctx: &Context<P>,
        plan: &Plan,
        input: &Input<'_, CachedPod>,
    ) {
        if plan.existing.is_empty() {
            return;
        }
        // Upstream names the node's claim beside the node.
        let claims_by_node: HashMap<String, String> = ctx
            .cluster
            .claims
            .state()
            .iter()
            .filter_map(|claim| {
                let node = claim.status.as_ref()?.node_name.clone()?;
                Some((node, claim.metadata.name.clone()?))
            })
            .collect();
        for placement in &plan.existing {
            let places = match placement.target {
                Target::InFlightClaim => format!("nodeclaim/{}", placement.name),
                Target::Node => match claims_by_node.get(&placement.name) {
                    Some(claim) => format!("nodeclaim/{claim}, node/{}", placement.name),
                    None => format!("node/{}", placement.name),
                },
            };
            for pod in placement.pods.iter().filter_map(|&i| input.pods.get(i)) {
                self.nominate(ctx, &pod.object_ref(), &places).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_bucket_lets_a_burst_of_ten_through_then_five_a_second() {
        let nominations = Nominations::default();
        let start = Instant::now();
        let burst = (0..20).filter(|_| nominations.try_accept(start)).count();
        assert_eq!(burst, 10);
        let a_second_later = start + Duration::from_secs(1);
        let then = (0..20)
            .filter(|_| nominations.try_accept(a_second_later))
            .count();
        assert_eq!(then, 5);
        let much_later = start + Duration::from_secs(60);
        let refilled = (0..20)
            .filter(|_| nominations.try_accept(much_later))
            .count();
        assert_eq!(refilled, 10, "the bucket holds no more than its burst");
    }
}
