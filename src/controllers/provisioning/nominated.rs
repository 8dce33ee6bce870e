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
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use std::collections::HashMap;
use std::num::NonZeroU32;

/// Upstream's reason.
const NOMINATED: &str = "Nominated";

/// Upstream's `PodNominationRateLimiter`: a token bucket of 10 that refills at 5 a second
/// (governor's cell rate is the same bucket).
const PER_SECOND: NonZeroU32 = NonZeroU32::MIN.saturating_add(4);
const BURST: NonZeroU32 = NonZeroU32::MIN.saturating_add(9);

/// The Nominated Events' rate limit, shared by every round and every create.
pub(super) struct Nominations {
    limiter: DefaultDirectRateLimiter,
}

impl Default for Nominations {
    fn default() -> Self {
        Self {
            limiter: RateLimiter::direct(Quota::per_second(PER_SECOND).allow_burst(BURST)),
        }
    }
}

impl Nominations {
    /// Tells `pod` where it should schedule: `places` are `nodeclaim/NAME` and `node/NAME`.
    pub(super) async fn nominate<P>(&self, ctx: &Context<P>, pod: &ObjectReference, places: &str) {
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
            .publish_if(&event, pod, "", || self.limiter.check().is_ok())
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

    #[test]
    fn the_agent_publishes_a_burst_of_ten_nominations_then_waits_for_the_bucket() {
        let nominations = Nominations::default();
        let burst = (0..20)
            .filter(|_| nominations.limiter.check().is_ok())
            .count();
        assert_eq!(burst, 10);
    }
}
