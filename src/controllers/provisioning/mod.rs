//! Provisioning: pending pods → NodeClaims, split as upstream splits
//! `pkg/controllers/provisioning`: the batcher (`batcher.rs`, upstream's `batcher.go`) gathers
//! pending pods, a round (`round.rs`, upstream's `provisioner.go`) schedules them,
//! `claims.rs` turns the plan into NodeClaim objects, `creates.rs` creates them while the
//! next batch fills, and `nominated.rs` and `unschedulable.rs` tell each pod, as upstream's
//! Events do, where it should schedule or why it cannot.
//!
//! Pods the kube-scheduler marked unschedulable (`PodScheduled=False`, reason `Unschedulable`)
//! start a batch; the batch closes once no new one arrived for `batch_idle` (1 s) or at
//! `batch_max` (10 s). Then one scheduling round simulates the whole cluster (existing nodes,
//! in-flight NodeClaims, every NodePool's catalogue) and creates the NodeClaims of the plan.
//!
//! A batch also closes as soon as it is complete (see [`BurstComplete`]): the kube-scheduler
//! has judged every pod, and the controllers behind the batch's pods (ReplicaSets, Jobs,
//! StatefulSets, ReplicationControllers) have created all the pods they want. Waiting out the
//! idle window then gathers nothing more; it would only delay the whole scale-up by a second.
//! Pods without such a controller (created one by one, by a script or an operator) give no such
//! certainty and keep the idle window, as does a batch no new pod came into (a claim's deletion
//! or the requeue opened it). Before each round, the NodeClaims the API server lists must all
//! be in the cache, or the round waits for the watch (`SYNC_PATIENCE`).
//!
//! In-flight NodeClaims count as capacity in the simulation, so a pod already provided for is
//! never provided for twice, even by a freshly restarted agent. A claim counts from the moment
//! its round plans it: its create is answered while the next batch fills (`creates.rs`).
//!
//! While any pod still waits after a round, another round follows `REQUEUE_WHILE_PENDING`
//! later, as upstream's pod controller requeues every provisionable pod: the kube-scheduler may
//! have filled the claim a pod was planned onto with other pods, and nothing else would wake
//! the batcher for that pod again (its status does not change). A round also starts the moment
//! a claim is first seen initialized, which is when that becomes known (`replan.rs`).

mod batcher;
mod claims;
mod creates;
mod nominated;
mod recent_claims;
#[cfg(test)]
mod reconcile_tests;
mod replan;
mod round;
mod unschedulable;

pub use batcher::PendingPods;
pub use batcher::Wake;
pub(crate) use batcher::{BurstComplete, next_batch};
// Which pods are ours is decided where the scheduler's input is built; tests ask it here.
pub use crate::state::is_provisionable;
pub(crate) use claims::node_claim_for;
pub(crate) use recent_claims::RecentClaims;
pub use replan::Initialized;
pub use round::Memory;

pub(crate) use round::fetch_catalogues;

use super::Context;
use crate::cloud::CloudProvider;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{info, warn};

/// How soon a round follows one that left pods waiting (upstream's pod controller requeues a
/// provisionable pod every 10 s).
pub const REQUEUE_WHILE_PENDING: Duration = Duration::from_secs(10);

/// The longest a batch stays open while a scale-out is under way (the previous round created
/// NodeClaims less than `batch_max` ago). Pods that keep arriving never leave the idle window,
/// so each batch ran to its 10 s maximum and the pods that came first in it waited that long
/// for their claims; once the burst's first claims exist, the next batches close after this
/// (upstream's idle window) instead. Measured with `RIG_SCHEDULER_QPS=500 ARRIVAL=40
/// tests/kwok/scale.sh 2000` (see the issue 18 notes): at 2 s, p99 from unschedulable to the
/// agent's decision was ≤ 2.5 s; at 1 s it is ≤ 1.75 s, in 42 rounds instead of 27, and the
/// fleet's price stays the one-shot plan's, as the pods of a batch still share its claims.
/// Longer where rounds themselves take long: [`streaming_batch_max`].
const STREAMING_BATCH_MAX: Duration = Duration::from_secs(1);

/// How long a batch may stay open while a scale-out is under way: [`STREAMING_BATCH_MAX`], or
/// twice the last round's duration where rounds take longer (tens of thousands of pods), so
/// back-to-back rounds never take more than a third of the agent's time from the API server
/// and the kube-scheduler sharing the control plane's cores; never beyond `batch_max`.
fn streaming_batch_max(last_round: Duration, batch_max: Duration) -> Duration {
    STREAMING_BATCH_MAX.max(last_round * 2).min(batch_max)
}

/// How soon a failed round is tried again (an API server away, a cloud call throttled), doubling
/// per consecutive failure up to the maximum, as upstream's singleton provisioner is requeued
/// through its rate limiter.
const ROUND_RETRY_FIRST: Duration = Duration::from_secs(1);
const ROUND_RETRY_MAX: Duration = Duration::from_secs(30);
const ROUND: &str = "round";

/// Runs provisioning until the wake-up channel closes.
pub async fn run<P: CloudProvider + 'static>(
    ctx: Arc<Context<P>>,
    pending: Arc<PendingPods>,
    recent: Arc<RecentClaims>,
    mut wake: mpsc::Receiver<Wake>,
) {
    let mut memory = Memory::new(ctx.settings.predecessor_may_be_writing);
    let mut creates = creates::Creates::default();
    let mut requeue_at = None;
    let failures = super::backoff::FailureBackoff::new(ROUND_RETRY_FIRST, ROUND_RETRY_MAX);
    let mut last_created: Option<Instant> = None;
    let mut last_round = Duration::ZERO;
    loop {
        let mut completion = BurstComplete::new(&ctx);
        let streaming = last_created.is_some_and(|at| at.elapsed() < ctx.settings.batch_max);
        let max = if streaming {
            streaming_batch_max(last_round, ctx.settings.batch_max)
        } else {
            ctx.settings.batch_max
        };
        let Some(closed_by) = next_batch(
            &mut wake,
            ctx.settings.batch_idle,
            max,
            requeue_at,
            &mut completion,
        )
        .await
        else {
            break;
        };
        ctx.metrics
            .batches
            .get_or_create(&crate::metrics::BatchLabels {
                closed_by: closed_by.as_str().to_owned(),
            })
            .inc();
        requeue_at = None;
        let started = Instant::now();
        let pass = ctx
            .health
            .pass(super::names::PROVISIONER, ctx.settings.stuck_pass_after);
        let result = round::provision(&ctx, &pending, &recent, &mut memory, &mut creates).await;
        last_round = started.elapsed();
        drop(pass);
        if result.is_ok() {
            failures.succeeded(ROUND);
        }
        match result {
            Ok(Some(round)) => {
                info!(
                    pods = round.pods,
                    nodeclaims = round.planned,
                    unschedulable = round.unschedulable,
                    batch_closed_by = closed_by.as_str(),
                    elapsed_ms = started.elapsed().as_millis(),
                    sync_ms = round.timings.sync.as_millis(),
                    gather_ms = round.timings.gather.as_millis(),
                    input_ms = round.timings.input.as_millis(),
                    scheduling_ms = round.timings.solve.as_millis(),
                    "scheduling round"
                );
                if round.pods > 0 {
                    requeue_at = Some(tokio::time::Instant::now() + REQUEUE_WHILE_PENDING);
                }
                if round.planned > 0 {
                    last_created = Some(Instant::now());
                }
            }
            Ok(None) => {}
            Err(e) => {
                memory.confirm_for_a_while();
                let wait = failures.failed(ROUND);
                warn!(error = %e, cause = ?std::error::Error::source(&e), retry_in_ms = wait.as_millis(),
                    "scheduling round failed; retrying");
                pending.nudge();
                tokio::time::sleep(wait).await;
            }
        }
    }
    creates.finish().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streaming_batch_closes_after_a_second_unless_rounds_take_longer() {
        let max = Duration::from_secs(10);
        assert_eq!(
            streaming_batch_max(Duration::from_millis(15), max),
            Duration::from_secs(1)
        );
        assert_eq!(
            streaming_batch_max(Duration::from_millis(1500), max),
            Duration::from_secs(3)
        );
        assert_eq!(streaming_batch_max(Duration::from_secs(30), max), max);
    }
}
