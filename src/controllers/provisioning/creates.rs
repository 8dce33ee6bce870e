//! The NodeClaim creates a round hands off: they run while the next batch fills, instead of
//! inside the round that planned them.
//!
//! Upstream's provisioner creates a round's claims in parallel and returns only when they are
//! all answered (`Provisioner.CreateNodeClaims`), then records each in its cluster state
//! (`cluster.UpdateNodeClaim`) so the next round counts it before the informer shows it. Here
//! a claim is counted before it is sent: [`RecentClaims`] holds it from the moment the round
//! plans it, so the next round already sees it as in-flight capacity and never plans its pods
//! again, and the round does not wait for the API server's answers. On a saturated API server
//! those answers took 1 to 2 s each (`tests/kwok/scale.sh 20000`): creates were 41 of the 50
//! rounds over 1 s, and every pod that arrived meanwhile waited for them.
//!
//! A create that fails takes its claim back out of [`RecentClaims`], so the next round plans
//! its pods again (the requeue, [`super::REQUEUE_WHILE_PENDING`], not at once: a refusal that
//! stands must not become a loop of creates). Failures are of two kinds:
//! - refused: the API server answered 4xx, so it created nothing. One it gave a reason for (an
//!   admission policy, a ResourceQuota on NodeClaims, a validation rule) is told to each of the
//!   claim's pods as a FailedScheduling Event, where a user looking at a pending pod looks. A
//!   name another claim already holds (409) is not a failure at all: the claim is created
//!   again under a new name at once.
//! - uncertain: no answer, or a server error. The server may have taken the claim, so the
//!   rounds check the watch against the API server for a while ([`Creates::take_uncertain`]).
//!   That check lists every claim each round, seconds of a saturated API server's time at
//!   thousands of claims, so a refusal does not ask for it.

use super::batcher::PendingPods;
use super::claims::{ClaimToCreate, claim_name};
use super::nominated::Nominations;
use super::recent_claims::RecentClaims;
use crate::apis::NodeClaim;
use crate::cloud::CloudProvider;
use crate::controllers::Context;
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{info, warn};

/// How many creates are in flight at once, across rounds (upstream's `ParallelizeUntil` runs
/// up to 16 workers per round; rounds here overlap, so the bound is shared).
const IN_FLIGHT: usize = 16;

/// The creates under way. Dropping it abandons them, as dropping a round mid-create did (the
/// lease was lost): whoever provisions next checks the watch against the API server first.
pub(super) struct Creates {
    rounds: JoinSet<()>,
    slots: Arc<Semaphore>,
    uncertain: Arc<AtomicBool>,
    /// The Nominated Events' rate limit, shared with the rounds ([`Creates::nominations`]).
    nominations: Arc<Nominations>,
}

impl Default for Creates {
    fn default() -> Self {
        Self {
            rounds: JoinSet::new(),
            slots: Arc::new(Semaphore::new(IN_FLIGHT)),
            uncertain: Arc::new(AtomicBool::new(false)),
            nominations: Arc::default(),
        }
    }
}

impl Creates {
    /// Counts `claims` as in-flight capacity and starts creating them; returns at once.
    pub(super) fn start<P: CloudProvider + 'static>(
        &mut self,
        ctx: &Arc<Context<P>>,
        pending: &Arc<PendingPods>,
        recent: &Arc<RecentClaims>,
        claims: Vec<ClaimToCreate>,
    ) {
        while self.rounds.try_join_next().is_some() {}
        if claims.is_empty() {
            return;
        }
        for planned in &claims {
            recent.record(planned.claim.clone());
        }
        let ctx = ctx.clone();
        let pending = pending.clone();
        let recent = recent.clone();
        let slots = self.slots.clone();
        let uncertain = self.uncertain.clone();
        let nominations = self.nominations.clone();
        self.rounds.spawn(async move {
            let started = Instant::now();
            let planned = claims.len();
            let results: Vec<Outcome> = futures::stream::iter(claims)
                .map(|planned| {
                    let (ctx, pending, recent, slots, uncertain, nominations) =
                        (&ctx, &pending, &recent, &slots, &uncertain, &nominations);
                    async move {
                        // The semaphore is never closed, so a permit always comes.
                        let _permit = slots.acquire().await.ok();
                        let outcome = create(ctx, pending, recent, nominations, planned).await;
                        // At once, not when the round's last create is answered: the next
                        // round may already be starting.
                        if outcome == Outcome::Uncertain {
                            uncertain.store(true, Ordering::Relaxed);
                        }
                        outcome
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect()
                .await;
            let created = results.iter().filter(|o| **o == Outcome::Created).count();
            info!(
                nodeclaims = planned,
                created,
                failed = planned - created,
                create_ms = started.elapsed().as_millis(),
                "created the round's nodeclaims"
            );
        });
    }

    /// Whether a create was left unanswered or met a server error since the last call: the API
    /// server may hold a claim neither the watch nor [`RecentClaims`] knows.
    pub(super) fn take_uncertain(&self) -> bool {
        self.uncertain.swap(false, Ordering::Relaxed)
    }

    /// The Nominated Events' rate limit, which the rounds share with the creates.
    pub(super) fn nominations(&self) -> &Nominations {
        &self.nominations
    }

    /// Waits for every create under way (on shutdown, so none is cut off mid-request).
    pub(super) async fn finish(&mut self) {
        while self.rounds.join_next().await.is_some() {}
    }
}

/// How one create ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Created,
    /// The API server answered that it did not create it.
    Refused,
    /// No answer, or a server error: it may exist.
    Uncertain,
}

/// How many names a claim is tried under before its create counts as refused.
const NAMES: usize = 3;

/// Creates one claim, under a new name if its name is taken.
async fn create<P>(
    ctx: &Context<P>,
    pending: &PendingPods,
    recent: &RecentClaims,
    nominations: &Nominations,
    mut planned: ClaimToCreate,
) -> Outcome {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let mut answer = api.create(&PostParams::default(), &planned.claim).await;
    for _ in 1..NAMES {
        let Err(kube::Error::Api(status)) = &answer else {
            break;
        };
        if status.code != 409 {
            break;
        }
        let taken = planned.claim.name_any();
        recent.forget(&taken);
        planned.claim.metadata.name = Some(claim_name(&planned.node_pool));
        recent.record(planned.claim.clone());
        info!(taken = %taken, nodeclaim = %planned.claim.name_any(), "nodeclaim name taken; creating it under another");
        answer = api.create(&PostParams::default(), &planned.claim).await;
    }
    match answer {
        Ok(claim) => {
            ctx.count_created(&claim, "provisioned");
            for uid in planned.pods.iter().filter_map(|pod| pod.uid.as_deref()) {
                if let Some(waited) = pending.first_claim(uid) {
                    ctx.metrics
                        .pod_unschedulable_to_nodeclaim_seconds
                        .observe(waited.as_secs_f64());
                }
            }
            info!(nodeclaim = %claim.name_any(), nodepool = %planned.node_pool, pods = planned.pods.len(),
                cheapest = ?planned.cheapest, "created nodeclaim");
            let places = format!("nodeclaim/{}", claim.name_any());
            for pod in &planned.pods {
                nominations.nominate(ctx, pod, &places).await;
            }
            Outcome::Created
        }
        Err(e) => {
            let name = planned.claim.name_any();
            recent.forget(&name);
            let refused =
                matches!(&e, kube::Error::Api(status) if (400..500).contains(&status.code));
            warn!(nodeclaim = %name, nodepool = %planned.node_pool, error = %e,
                "could not create nodeclaim; its pods are planned again");
            // Only a refusal the API server gave a reason for is the user's to act on; a
            // timeout, a dropped connection, throttling (429), a name taken (409) or a server
            // error is ours to retry, and an overloaded server would not take the Events.
            if let kube::Error::Api(status) = &e
                && (400..500).contains(&status.code)
                && ![408, 409, 429].contains(&status.code)
            {
                let note = format!(
                    "{}the API server refused NodeClaim {name} (NodePool {}): {}; \
                     its pods are planned again",
                    crate::explain::FAILED_TO_SCHEDULE,
                    planned.node_pool,
                    status.message
                );
                let event = Event {
                    type_: EventType::Warning,
                    reason: crate::explain::FAILED_SCHEDULING.to_owned(),
                    note: Some(note),
                    action: "Provisioning".to_owned(),
                    secondary: None,
                };
                for pod in &planned.pods {
                    // Keyed on the server's message, not the claim's random name: the same
                    // refusal, round after round, is one Event per pod.
                    ctx.notices.publish(&event, pod, &status.message).await;
                }
            }
            if refused {
                Outcome::Refused
            } else {
                Outcome::Uncertain
            }
        }
    }
}
