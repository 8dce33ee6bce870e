//! One scheduling round (upstream's `Provisioner.Schedule` in
//! `pkg/controllers/provisioning/provisioner.go`): wait until the NodeClaim watch shows every
//! claim the API server has ("cluster state synced"; checked while one may be missing,
//! [`CONFIRM_WINDOW`]), read what only the API and the provider
//! know (each node class's catalogue, the DaemonSets), let [`crate::state::scheduling_input`]
//! turn the stores into the scheduler's input, simulate, and hand the plan's claims to
//! `creates.rs`, which creates them while the next batch fills; the pods it placed on capacity
//! that exists or is coming up are told so (`nominated.rs`).

use super::batcher::PendingPods;
use super::claims::claims_to_create;
use super::creates::Creates;
use super::recent_claims::RecentClaims;
use super::unschedulable::{Warned, warn_unschedulable};
use crate::apis::NodeClaim;
use crate::client::metadata_list;
use crate::cloud::CloudProvider;
use crate::controllers::{Context, Error};
use crate::scheduling::{self, Input, Plan};
use crate::state::{self, CachedPod, Gathered};
use kube::api::ListParams;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// What provisioning remembers between rounds.
pub struct Memory {
    /// Which pods were told they cannot be provisioned for, and what.
    pub(super) warned: Warned,
    /// Until when a round first checks the NodeClaim watch against a quorum list of the API
    /// server's claims ([`claims_synced`]).
    confirm_until: Instant,
    /// Whether a round has found the watch in sync since the provisioner started: the first
    /// round always checks, as the watches' first lists may be served from the API server's
    /// cache, behind what it has stored.
    confirmed_once: bool,
}

impl Memory {
    /// What a provisioner starts with: when `predecessor_may_be_writing` (see
    /// `Settings::predecessor_may_be_writing`), the rounds of the first [`CONFIRM_WINDOW`]
    /// check the watch against the API server; otherwise the first round does.
    pub(super) fn new(predecessor_may_be_writing: bool) -> Self {
        let now = Instant::now();
        Self {
            warned: Warned::default(),
            confirm_until: if predecessor_may_be_writing {
                now + CONFIRM_WINDOW
            } else {
                now
            },
            confirmed_once: false,
        }
    }

    /// Something happened that can leave a claim on the API server the watch has not shown
    /// yet and this agent does not know it created (a create that failed or timed out after
    /// the server took it, a round cut off by an outage, after which the watches relist): the
    /// next rounds check again.
    pub(super) fn confirm_for_a_while(&mut self) {
        self.confirm_until = Instant::now() + CONFIRM_WINDOW;
    }

    fn confirming(&self) -> bool {
        !self.confirmed_once || Instant::now() < self.confirm_until
    }
}

/// How long after the provisioner starts in place of a leader that did not release the Lease,
/// or after a round that failed in part, rounds check the NodeClaim watch against a quorum
/// list. Upstream checks its own informer cache before each round ("cluster state synced"),
/// which costs nothing; this list costs a read of every claim's metadata (4.4 s a round on
/// average at 5,000 claims on the overloaded scale rig, and 0.3 to 3 s with a few hundred in
/// the first two minutes of a 20,000-pod scale-out), so it is only paid while a claim may exist
/// that neither the watch nor [`RecentClaims`] knows: the previous leader's last creates land
/// within seconds of its lease expiring, and an uncertain create is settled well within this
/// (every request is answered or abandoned within `client::REQUEST_TIMEOUT`, 60 s).
const CONFIRM_WINDOW: Duration = Duration::from_secs(120);

/// How long a round waits for the NodeClaim watch to show every claim the API server has.
const SYNC_PATIENCE: Duration = Duration::from_secs(5);

/// Whether every NodeClaim the API server has (a quorum read of the names) is in the store or
/// among the claims this agent has just created. A claim someone else made a moment ago (the
/// agent this one replaced, whose last writes land after this one listed the cluster) would
/// be invisible to the round, which would provide for its pods a second time. Upstream checks
/// the same before each round ("cluster state synced").
async fn claims_synced<P>(ctx: &Context<P>, recent: &RecentClaims) -> Result<bool, Error> {
    // Names only, in pages: each claim's managed fields, decoded, were ~20 KB, so at 2,500
    // claims the whole list held 49 MiB every round (see `client::metadata_list`).
    let listed: Vec<Named> =
        metadata_list::list_metadata::<NodeClaim, _>(&ctx.client, &ListParams::default())
            .await
            .map_err(Error::kube("listing NodeClaims"))?;
    let cached: std::collections::HashSet<String> = ctx
        .cluster
        .claims
        .state()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    Ok(listed.iter().all(|Named { name }| {
        cached.contains(name)
            || recent.contains(name)
            || ctx.cluster.unreadable_claims.contains(name)
    }))
}

/// What [`claims_synced`] reads of each NodeClaim the API server has.
#[derive(serde::Deserialize)]
struct Named {
    name: String,
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Round {
    pub pods: usize,
    /// The new claims it planned; they are being created when the round returns.
    pub planned: usize,
    pub unschedulable: usize,
    /// Where the round's time went: waiting for the NodeClaim watch to be in sync, reading
    /// the catalogues and DaemonSets, building the scheduler's input, and the scheduler
    /// itself. The creates are timed where they run (`creates.rs`). At 20,000 pods one round's
    /// "input" took 684 ms on the loaded rig while the benchmark builds the same input in
    /// 15–23 ms, so the reading and the building are timed apart.
    pub timings: Timings,
}

/// How long each part of a round took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timings {
    pub sync: Duration,
    /// Reading the stores and the catalogues: waits on the cloud provider and the runtime.
    pub gather: Duration,
    /// Building the scheduler's input from them: CPU only.
    pub input: Duration,
    pub solve: Duration,
}

/// Runs `f`, a long synchronous computation (the scheduler at 20,000 pods takes seconds),
/// without holding up the tasks that share its worker thread (watches, the Lease renewal): on
/// a multi-threaded runtime the worker hands them over first. A current-thread runtime (tests)
/// has no other worker to hand them to, so `f` just runs.
fn compute<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// One scheduling round: its new claims are in `creates` when it returns. Returns `None` when
/// nothing was pending.
pub(super) async fn provision<P: CloudProvider + 'static>(
    ctx: &Arc<Context<P>>,
    pending: &Arc<PendingPods>,
    recent: &Arc<RecentClaims>,
    memory: &mut Memory,
    creates: &mut Creates,
) -> Result<Option<Round>, Error> {
    let pods = ctx.cluster.pods.state();
    if !pods.iter().any(|pod| state::is_provisionable(pod)) {
        ctx.metrics.pods_unschedulable.set(0);
        return Ok(None);
    }
    let mut timings = Timings::default();
    let started = Instant::now();
    if creates.take_uncertain() {
        memory.confirm_for_a_while();
    }
    if memory.confirming() {
        wait_for_claims_synced(ctx, recent).await?;
        memory.confirmed_once = true;
    }
    timings.sync = started.elapsed();
    let started = Instant::now();
    let claims = claims_with_unconfirmed(ctx, recent);
    let mut cluster = ctx.cluster.gather(pods, claims);
    fetch_catalogues(ctx, &mut cluster).await;
    timings.gather = started.elapsed();
    let started = Instant::now();
    let mut input = compute(|| state::scheduling_input(&cluster.snapshot()));
    deprioritize_failing_pools(ctx, &mut input);
    timings.input = started.elapsed();
    let started = Instant::now();
    let plan = compute(|| simulate(ctx, &input));
    timings.solve = started.elapsed();
    observe_decisions(ctx, pending, &plan, &input);

    let claims = claims_to_create(&plan, &input);
    let round = Round {
        pods: input.pods.len(),
        planned: claims.len(),
        unschedulable: plan.unschedulable.len(),
        timings,
    };
    creates.start(ctx, pending, recent, claims);
    ctx.metrics
        .pods_unschedulable
        .set(i64::try_from(plan.unschedulable.len()).unwrap_or(i64::MAX));
    warn_unschedulable(ctx, &mut memory.warned, &plan, &input.pods).await;
    creates
        .nominations()
        .nominate_existing(ctx, &plan, &input)
        .await;
    Ok(Some(round))
}

/// Marks the pools whose recent launches failed, so a fallback pool takes their pods
/// (`controllers::pool_health`).
fn deprioritize_failing_pools<P>(ctx: &Context<P>, input: &mut Input<'_, CachedPod>) {
    let now = k8s_openapi::jiff::Timestamp::now();
    for pool in &mut input.node_pools {
        if let Some(uid) = pool.node_pool.metadata.uid.as_deref()
            && ctx.pool_health.deprioritized(uid, now)
        {
            debug!(nodepool = %kube::ResourceExt::name_any(pool.node_pool), "recent launches failed; trying this pool last");
            pool.deprioritized = true;
        }
    }
}

/// Waits up to [`SYNC_PATIENCE`] for [`claims_synced`].
async fn wait_for_claims_synced<P>(ctx: &Context<P>, recent: &RecentClaims) -> Result<(), Error> {
    let synced_by = Instant::now() + SYNC_PATIENCE;
    while !claims_synced(ctx, recent).await? {
        if Instant::now() >= synced_by {
            return Err(Error::NotSynced("NodeClaim"));
        }
        debug!("waiting for the NodeClaim watch to catch up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The store's NodeClaims and those this agent created that the watch has not delivered yet.
fn claims_with_unconfirmed<P>(ctx: &Context<P>, recent: &RecentClaims) -> Vec<Arc<NodeClaim>> {
    let mut claims = ctx.cluster.claims.state();
    let unconfirmed = recent.unconfirmed();
    if unconfirmed.is_empty() {
        return claims;
    }
    // A set, not a scan per claim: in a burst hundreds of claims await the watch at 5,000 held.
    let held: rustc_hash::FxHashSet<&str> = claims
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    let missing: Vec<Arc<NodeClaim>> = unconfirmed
        .into_iter()
        .filter(|c| c.metadata.name.as_deref().is_none_or(|n| !held.contains(n)))
        .collect();
    claims.extend(missing);
    claims
}

/// Fetches the catalogue of each node class `cluster`'s live pools and claims name from the
/// provider. A class the provider cannot list has none: its pools launch nothing this round,
/// the rest go on.
pub(crate) async fn fetch_catalogues<P: CloudProvider>(ctx: &Context<P>, cluster: &mut Gathered) {
    let provider = &*ctx.provider;
    let failed = cluster
        .fetch_catalogues(|class| async move { provider.instance_types(&class).await })
        .await;
    for (class, e) in failed {
        warn!(node_class = %class.name, error = %e, "no instance types for node class");
    }
}

/// The pods this plan decides on for the first time: how long each waited for it.
fn observe_decisions<P>(
    ctx: &Context<P>,
    pending: &PendingPods,
    plan: &Plan,
    input: &Input<'_, CachedPod>,
) {
    let decided = plan
        .existing
        .iter()
        .flat_map(|placement| &placement.pods)
        .chain(plan.new_claims.iter().flat_map(|claim| &claim.pods))
        .copied()
        .chain(plan.unschedulable.iter().map(|u| u.pod))
        .filter_map(|i| input.pods.get(i)?.metadata.uid.as_deref());
    for waited in pending.first_decisions(decided) {
        ctx.metrics
            .pod_scheduling_decision_seconds
            .observe(waited.as_secs_f64());
    }
}

/// Runs the scheduler, timed.
fn simulate<P>(ctx: &Context<P>, input: &Input<'_, CachedPod>) -> Plan {
    use std::sync::atomic::{AtomicU64, Ordering};
    // Upstream's `karpenter_scheduler_queue_depth`: the round's pods while it runs, one series
    // per scheduling run, removed when it ends.
    static SCHEDULING_RUNS: AtomicU64 = AtomicU64::new(0);
    let queue = crate::metrics::QueueLabels {
        controller: "provisioner".to_owned(),
        scheduling_id: SCHEDULING_RUNS.fetch_add(1, Ordering::Relaxed).to_string(),
    };
    ctx.metrics
        .scheduler_queue_depth
        .get_or_create(&queue)
        .set(i64::try_from(input.pods.len()).unwrap_or(i64::MAX));
    let started = Instant::now();
    let plan = scheduling::schedule(input);
    ctx.metrics.scheduler_queue_depth.remove(&queue);
    ctx.metrics
        .scheduling_seconds
        .get_or_create(&crate::metrics::ControllerLabels {
            controller: "provisioner".to_owned(),
        })
        .observe(started.elapsed().as_secs_f64());
    for placement in &plan.existing {
        debug!(target_kind = ?placement.target, name = %placement.name, pods = placement.pods.len(), "pods fit on existing capacity");
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_predecessor_only_the_first_round_and_those_after_a_doubtful_create_check_the_watch()
     {
        let mut memory = Memory::new(false);
        assert!(memory.confirming(), "the first round checks");
        memory.confirmed_once = true;
        assert!(!memory.confirming(), "the next ones trust the watch");
        memory.confirm_for_a_while();
        assert!(memory.confirming(), "until a create's outcome is unknown");
    }

    #[test]
    fn after_taking_over_from_a_silent_leader_the_rounds_check_the_watch_for_a_while() {
        let mut memory = Memory::new(true);
        memory.confirmed_once = true;
        assert!(memory.confirming());
        memory.confirm_until = Instant::now();
        assert!(!memory.confirming());
    }
}
