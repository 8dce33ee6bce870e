//! Provisioning: pending pods → NodeClaims.
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
//! be in the cache, or the round waits for the watch ([`SYNC_PATIENCE`]).
//!
//! In-flight NodeClaims count as capacity in the simulation, so a pod already provided for is
//! never provided for twice, even by a freshly restarted agent.
//!
//! While any pod still waits after a round, another round follows `REQUEUE_WHILE_PENDING`
//! later, as upstream's pod controller requeues every provisionable pod: the kube-scheduler may
//! have filled the claim a pod was planned onto with other pods, and nothing else would wake
//! the batcher for that pod again (its status does not change).

use super::nodepool_status::usage_by_pool;
use super::pod_cache::CachedPod;
use super::{Context, Error};
use crate::apis::{NodeClaim, NodePool, labels};
use crate::cloud::CloudProvider;
use crate::resources::NODES;
use crate::scheduling::InstanceType;
use crate::scheduling::{self, ExistingNode, InFlightClaim, Input, NewClaim, PoolInput};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use rand::Rng;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

/// Whether the kube-scheduler gave up on a pod, so it is ours to provision for.
pub fn is_provisionable(pod: &CachedPod) -> bool {
    let unschedulable = pod
        .scheduled_condition()
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet");
    pod.node_name.is_none() && unschedulable && !daemon && pod.metadata.deletion_timestamp.is_none()
}

/// What woke the batcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A pod turned unschedulable.
    NewPod,
    /// Something else may need a round: start-up, a claim that is gone, a failed round.
    Nudge,
}

/// Tracks pods seen pending and wakes the batcher when a new one shows up.
pub struct PendingPods {
    first_seen: Mutex<HashMap<String, Instant>>,
    wake: mpsc::Sender<Wake>,
}

impl PendingPods {
    /// A tracker and the receiver the batcher waits on.
    pub fn new() -> (Arc<Self>, mpsc::Receiver<Wake>) {
        let (wake, rx) = mpsc::channel(1);
        (
            Arc::new(Self {
                first_seen: Mutex::new(HashMap::new()),
                wake,
            }),
            rx,
        )
    }

    /// Called for every pod the watch delivers.
    pub fn observe(&self, pod: &CachedPod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let mut first_seen = self
            .first_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if is_provisionable(pod) {
            if let std::collections::hash_map::Entry::Vacant(entry) = first_seen.entry(uid) {
                entry.insert(Instant::now());
                debug!(pod = %pod.name_any(), "pod is unschedulable");
                // A full channel already holds a wake-up; nothing is lost by dropping this one.
                let _ = self.wake.try_send(Wake::NewPod);
            }
        } else {
            first_seen.remove(&uid);
        }
    }

    /// Called when a pod is deleted.
    pub fn forget(&self, pod: &CachedPod) {
        if let Some(uid) = &pod.metadata.uid {
            self.first_seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(uid);
        }
    }

    fn first_seen(&self, uid: &str) -> Option<Instant> {
        self.first_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(uid)
            .copied()
    }

    /// Wakes the batcher without a new pod (e.g. once after start-up).
    pub fn nudge(&self) {
        let _ = self.wake.try_send(Wake::Nudge);
    }
}

/// How soon a round follows one that left pods waiting (upstream's pod controller requeues a
/// provisionable pod every 10 s).
pub const REQUEUE_WHILE_PENDING: Duration = Duration::from_secs(10);

/// What closed a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchClose {
    /// No new pod for the idle window (or the watch ended).
    Idle,
    /// The batch reached its longest duration.
    Max,
    /// Every pod the batch's controllers want exists and has the kube-scheduler's verdict.
    Complete,
}

impl BatchClose {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Max => "max",
            Self::Complete => "complete",
        }
    }
}

/// Tells whether the open batch already holds every pod worth waiting for.
pub trait BatchCompletion {
    /// Asked once a new pod has come into the batch, and after each wake-up from then on.
    fn is_complete(&mut self) -> impl std::future::Future<Output = bool> + Send;
}

/// Waits for the next batch: the first wake-up (or `requeue_at`, if it comes first) opens it; it
/// closes once no wake-up came for `idle`, or `max` after it opened, or, once a new pod has
/// come, when `completion` says so (asked after each wake-up). A batch with no new pod keeps
/// the idle window: it reacts to a change (a claim gone, a requeue) whose consequences may
/// still be arriving, such as the deletion of the pods of a namespace being deleted.
/// `None` once the channel closes.
pub async fn next_batch(
    rx: &mut mpsc::Receiver<Wake>,
    idle: Duration,
    max: Duration,
    requeue_at: Option<tokio::time::Instant>,
    completion: &mut impl BatchCompletion,
) -> Option<BatchClose> {
    let opened_by = match requeue_at {
        Some(at) => tokio::select! {
            woken = rx.recv() => woken,
            () = tokio::time::sleep_until(at) => Some(Wake::Nudge),
        },
        None => rx.recv().await,
    };
    let mut new_pods = opened_by? == Wake::NewPod;
    let deadline = tokio::time::Instant::now() + max;
    loop {
        if new_pods && completion.is_complete().await {
            return Some(BatchClose::Complete);
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Some(BatchClose::Max);
        }
        match tokio::time::timeout(idle.min(left), rx.recv()).await {
            Ok(Some(woken_by)) => new_pods |= woken_by == Wake::NewPod,
            Ok(None) => return Some(BatchClose::Idle),
            Err(_) if left <= idle => return Some(BatchClose::Max),
            Err(_) => return Some(BatchClose::Idle),
        }
    }
}

/// Whether the kube-scheduler has yet to judge a pod: unbound, no PodScheduled condition, and
/// meant for the default scheduler (another scheduler's pods are none of ours to wait for).
fn awaits_verdict(pod: &CachedPod) -> bool {
    let default_scheduler = pod
        .spec
        .scheduler_name
        .as_deref()
        .is_none_or(|name| name == "default-scheduler");
    pod.node_name.is_none()
        && default_scheduler
        && pod.scheduled_condition().is_none()
        && pod.metadata.deletion_timestamp.is_none()
}

/// A controller that creates pods, as its pods' owner reference names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodController {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The controllers behind the provisionable pods, each with how many of its pods are alive
/// (not terminating, not finished). `None` while the batch cannot be complete yet: a pod still
/// awaits the kube-scheduler's verdict, or a provisionable pod has no controller.
pub fn batch_controllers(pods: &[Arc<CachedPod>]) -> Option<BTreeMap<PodController, usize>> {
    let controller_of = |pod: &CachedPod| {
        let owner = pod
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))?;
        Some(PodController {
            kind: owner.kind.clone(),
            namespace: pod.namespace().unwrap_or_default(),
            name: owner.name.clone(),
            uid: owner.uid.clone(),
        })
    };
    let mut controllers = BTreeMap::new();
    for pod in pods.iter().map(AsRef::as_ref) {
        if awaits_verdict(pod) {
            return None;
        }
        if is_provisionable(pod) {
            controllers.insert(controller_of(pod)?, 0);
        }
    }
    for pod in pods.iter().map(AsRef::as_ref) {
        if pod.metadata.deletion_timestamp.is_some() || pod.is_terminal() {
            continue;
        }
        if let Some(alive) =
            controller_of(pod).and_then(|controller| controllers.get_mut(&controller))
        {
            *alive += 1;
        }
    }
    Some(controllers)
}

/// How many live pods each controller wants, read once per batch. `None`: not known (a kind
/// this agent does not read, an object that is gone or was replaced, an API error).
#[derive(Default)]
pub struct WantedPods(HashMap<String, Option<usize>>);

impl WantedPods {
    async fn of<P: CloudProvider>(
        &mut self,
        ctx: &Context<P>,
        controller: &PodController,
    ) -> Option<usize> {
        if let Some(known) = self.0.get(&controller.uid) {
            return *known;
        }
        let wanted = match read_wanted_pods(ctx, controller).await {
            Ok(wanted) => wanted,
            Err(e) => {
                debug!(kind = %controller.kind, name = %controller.name, error = %e, "could not read a pod controller");
                None
            }
        };
        self.0.insert(controller.uid.clone(), wanted);
        wanted
    }
}

async fn read_wanted_pods<P: CloudProvider>(
    ctx: &Context<P>,
    controller: &PodController,
) -> Result<Option<usize>, kube::Error> {
    use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::ReplicationController;
    let count = |n: Option<i32>| usize::try_from(n.unwrap_or(1)).unwrap_or_default();
    let (namespace, name) = (controller.namespace.as_str(), controller.name.as_str());
    let (uid, wanted) = match controller.kind.as_str() {
        "ReplicaSet" => {
            let rs = Api::<ReplicaSet>::namespaced(ctx.client.clone(), namespace)
                .get(name)
                .await?;
            (rs.metadata.uid, count(rs.spec.and_then(|s| s.replicas)))
        }
        "ReplicationController" => {
            let rc = Api::<ReplicationController>::namespaced(ctx.client.clone(), namespace)
                .get(name)
                .await?;
            (rc.metadata.uid, count(rc.spec.and_then(|s| s.replicas)))
        }
        "StatefulSet" => {
            let set = Api::<StatefulSet>::namespaced(ctx.client.clone(), namespace)
                .get(name)
                .await?;
            let spec = set.spec.unwrap_or_default();
            // OrderedReady (the default) creates the next pod only once this one is Ready:
            // nothing more comes while it is pending.
            let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
            (
                set.metadata.uid,
                if parallel { count(spec.replicas) } else { 0 },
            )
        }
        "Job" => {
            let job = Api::<Job>::namespaced(ctx.client.clone(), namespace)
                .get(name)
                .await?;
            let spec = job.spec.unwrap_or_default();
            let parallelism = count(spec.parallelism);
            let succeeded = count(job.status.and_then(|s| s.succeeded).or(Some(0)));
            let wanted = match spec.completions {
                Some(completions) => {
                    parallelism.min(count(Some(completions)).saturating_sub(succeeded))
                }
                None => parallelism,
            };
            (job.metadata.uid, wanted)
        }
        _ => return Ok(None),
    };
    // A controller recreated under the same name is another controller.
    Ok((uid.as_deref() == Some(controller.uid.as_str())).then_some(wanted))
}

/// The agent's [`BatchCompletion`]: the batch is complete once every pod the kube-scheduler
/// had yet to judge has been judged, every provisionable pod has a controller, and each of those
/// controllers has as many live pods as it wants. Reads each controller once per batch.
pub struct BurstComplete<'a, P> {
    ctx: &'a Context<P>,
    wanted: WantedPods,
}

impl<'a, P: CloudProvider> BurstComplete<'a, P> {
    /// A check for one batch.
    pub fn new(ctx: &'a Context<P>) -> Self {
        Self {
            ctx,
            wanted: WantedPods::default(),
        }
    }
}

impl<P: CloudProvider> BatchCompletion for BurstComplete<'_, P> {
    async fn is_complete(&mut self) -> bool {
        if !self.ctx.settings.batch_close_when_complete {
            return false;
        }
        let Some(controllers) = batch_controllers(&self.ctx.pods.state()) else {
            return false;
        };
        // No provisionable pod left (a requeue after every pod found room): nothing to gather.
        for (controller, alive) in &controllers {
            match self.wanted.of(self.ctx, controller).await {
                Some(want) if *alive >= want => {}
                _ => return false,
            }
        }
        true
    }
}

/// Runs provisioning until the wake-up channel closes.
pub async fn run<P: CloudProvider + 'static>(
    ctx: Arc<Context<P>>,
    pending: Arc<PendingPods>,
    recent: Arc<RecentClaims>,
    mut wake: mpsc::Receiver<Wake>,
) {
    let mut memory = Memory::default();
    let mut requeue_at = None;
    loop {
        let mut completion = BurstComplete::new(&ctx);
        let Some(closed_by) = next_batch(
            &mut wake,
            ctx.settings.batch_idle,
            ctx.settings.batch_max,
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
        match provision(&ctx, &pending, &recent, &mut memory).await {
            Ok(Some(round)) => {
                info!(
                    pods = round.pods,
                    nodeclaims = round.created,
                    unschedulable = round.unschedulable,
                    batch_closed_by = closed_by.as_str(),
                    elapsed_ms = started.elapsed().as_millis(),
                    "scheduling round"
                );
                if round.pods > 0 {
                    requeue_at = Some(tokio::time::Instant::now() + REQUEUE_WHILE_PENDING);
                }
            }
            Ok(None) => {}
            Err(e) => {
                warn!(error = %e, cause = ?std::error::Error::source(&e), "scheduling round failed; retrying");
                pending.nudge();
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// What provisioning remembers between rounds.
#[derive(Default)]
pub struct Memory {
    /// When each pod last got a FailedProvisioning Event, so a pod is not warned about every round.
    last_warned: HashMap<String, Instant>,
}

/// Claims this agent created that the NodeClaim watch has not delivered yet. Under load a watch
/// can lag a round behind; without these, the next round would provision the same pods again.
/// An entry goes as soon as the watch reports the claim (created or deleted): from then on the
/// reflector's store is the truth.
#[derive(Default)]
pub struct RecentClaims(Mutex<HashMap<String, (Instant, Arc<NodeClaim>)>>);

/// The longest a created claim counts as capacity without the watch confirming it.
const RECENT_CLAIM_MEMORY: Duration = Duration::from_secs(60);

impl RecentClaims {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<NodeClaim>)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn record(&self, claim: NodeClaim) {
        self.lock()
            .insert(claim.name_any(), (Instant::now(), Arc::new(claim)));
    }

    /// Called for every NodeClaim the watch delivers, applied or deleted.
    pub fn seen(&self, claim: &NodeClaim) {
        if let Some(name) = &claim.metadata.name {
            self.lock().remove(name);
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }

    fn unconfirmed(&self) -> Vec<Arc<NodeClaim>> {
        let mut claims = self.lock();
        claims.retain(|_, (at, _)| at.elapsed() < RECENT_CLAIM_MEMORY);
        claims.values().map(|(_, claim)| claim.clone()).collect()
    }
}

/// How long a round waits for the NodeClaim watch to show every claim the API server has.
const SYNC_PATIENCE: Duration = Duration::from_secs(5);

/// Whether every NodeClaim the API server has (a quorum read of the names) is in the store or
/// among the claims this agent has just created. A claim someone else made a moment ago (the
/// agent this one replaced, whose last writes land after this one listed the cluster) would
/// be invisible to the round, which would provide for its pods a second time. Upstream checks
/// the same before each round ("cluster state synced").
async fn claims_synced<P>(ctx: &Context<P>, recent: &RecentClaims) -> Result<bool, Error> {
    let listed = Api::<NodeClaim>::all(ctx.client.clone())
        .list_metadata(&ListParams::default())
        .await
        .map_err(Error::kube("listing NodeClaims"))?;
    let cached: std::collections::HashSet<String> = ctx
        .claims
        .state()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    Ok(listed
        .items
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .all(|name| cached.contains(name) || recent.contains(name)))
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Round {
    pub pods: usize,
    pub created: usize,
    pub failed: usize,
    pub unschedulable: usize,
}

/// A deterministic hash of a NodePool's template, less the fields upstream leaves out
/// (requirements), stamped on its claims so drift can be detected later.
pub fn node_pool_hash(pool: &NodePool) -> String {
    let mut template = serde_json::to_value(&pool.spec.template).unwrap_or_default();
    if let Some(spec) = template
        .get_mut("spec")
        .and_then(serde_json::Value::as_object_mut)
    {
        spec.remove("requirements");
    }
    // FNV-1a over the canonical JSON text (serde_json orders object keys).
    let text = template.to_string();
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    hash.to_string()
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

/// The NodeClaim object for a planned claim.
pub fn node_claim_for(plan: &NewClaim, pool: &NodePool, pods: &[&CachedPod]) -> NodeClaim {
    let mut annotations = pool.spec.template.metadata.annotations.clone();
    annotations.insert(labels::NODE_POOL_HASH.to_owned(), node_pool_hash(pool));
    annotations.insert(
        labels::NODE_POOL_HASH_VERSION.to_owned(),
        labels::NODE_POOL_HASH_VERSION_VALUE.to_owned(),
    );
    let pod_names: Vec<String> = plan
        .pods
        .iter()
        .filter_map(|&i| pods.get(i))
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    annotations.insert(
        labels::PROVISIONED_FOR.to_owned(),
        serde_json::Value::from(pod_names).to_string(),
    );
    let options: Vec<serde_json::Value> = plan
        .instance_types
        .iter()
        .take(20)
        .map(|o| serde_json::json!({"name": o.name, "price": o.price, "zone": o.zone, "capacityType": o.capacity_type}))
        .collect();
    annotations.insert(
        labels::INSTANCE_TYPE_OPTIONS.to_owned(),
        serde_json::Value::from(options).to_string(),
    );
    let mut claim_labels = plan.labels.clone();
    claim_labels.insert(labels::NODE_POOL.to_owned(), pool.name_any());
    NodeClaim {
        metadata: ObjectMeta {
            name: Some(format!("{}-{}", pool.name_any(), random_suffix())),
            labels: Some(claim_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![labels::TERMINATION_FINALIZER.to_owned()]),
            owner_references: pool.controller_owner_ref(&()).map(|mut owner| {
                // The pool owns its claims for garbage collection, but deleting a pool must not
                // block on them.
                owner.block_owner_deletion = Some(false);
                owner.controller = Some(false);
                vec![owner]
            }),
            ..ObjectMeta::default()
        },
        spec: plan.to_node_claim_spec(pool),
        status: None,
    }
}

/// One scheduling round. Returns `None` when nothing was pending.
pub async fn provision<P: CloudProvider>(
    ctx: &Context<P>,
    pending: &PendingPods,
    recent: &RecentClaims,
    memory: &mut Memory,
) -> Result<Option<Round>, Error> {
    let all_pods = ctx.pods.state();
    let pending_pods: Vec<&CachedPod> = all_pods
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| is_provisionable(p))
        .collect();
    if pending_pods.is_empty() {
        ctx.metrics.pods_unschedulable.set(0);
        return Ok(None);
    }
    let synced_by = Instant::now() + SYNC_PATIENCE;
    while !claims_synced(ctx, recent).await? {
        if Instant::now() >= synced_by {
            return Err(Error::NotSynced("NodeClaim"));
        }
        debug!("waiting for the NodeClaim watch to catch up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pools: Vec<Arc<NodePool>> = {
        let mut pools = ctx.pools.state();
        pools.retain(|p| p.metadata.deletion_timestamp.is_none());
        pools.sort_by_key(|p| p.name_any());
        pools
    };
    let mut claims = ctx.claims.state();
    for claim in recent.unconfirmed() {
        if !claims
            .iter()
            .any(|c| c.metadata.name == claim.metadata.name)
        {
            claims.push(claim);
        }
    }
    let nodes = ctx.nodes.state();

    // One catalogue per node class.
    let mut catalogues: BTreeMap<(String, String, String), Arc<[InstanceType]>> = BTreeMap::new();
    for class in pools
        .iter()
        .map(|p| &p.spec.template.spec.node_class_ref)
        .chain(claims.iter().map(|c| &c.spec.node_class_ref))
    {
        let key = (class.group.clone(), class.kind.clone(), class.name.clone());
        if catalogues.contains_key(&key) {
            continue;
        }
        match ctx.provider.instance_types(class).await {
            Ok(types) => {
                catalogues.insert(key, types);
            }
            Err(e) => {
                warn!(node_class = %class.name, error = %e, "no instance types for node class")
            }
        }
    }
    let catalogue_of = |class: &crate::apis::NodeClassReference| {
        catalogues
            .get(&(class.group.clone(), class.kind.clone(), class.name.clone()))
            .map(AsRef::as_ref)
            .unwrap_or(&[])
    };

    let mut pods_by_node: HashMap<&str, Vec<&CachedPod>> = HashMap::new();
    for pod in all_pods.iter().map(AsRef::as_ref) {
        if pod.is_terminal() {
            continue;
        }
        if let Some(node) = pod.node_name.as_deref() {
            pods_by_node.entry(node).or_default().push(pod);
        }
    }
    let claim_by_provider_id: HashMap<&str, &NodeClaim> = claims
        .iter()
        .filter_map(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .map(|id| (id, c.as_ref()))
        })
        .collect();

    let mut existing = Vec::new();
    let mut registered_ids = std::collections::HashSet::new();
    // Pods already bound to the Node of a claim that still counts as in flight.
    let mut pods_of_in_flight: HashMap<&str, Vec<&CachedPod>> = HashMap::new();
    for node in nodes
        .iter()
        .map(AsRef::as_ref)
        .filter(|n| schedulable_node(n))
    {
        let name = node.name_any();
        let pods = pods_by_node.remove(name.as_str()).unwrap_or_default();
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let reports_allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .is_some_and(|a| !a.is_empty());
        if !reports_allocatable {
            // A Node that has not reported what it holds yet (just created) would stand in for
            // its claim as an empty node; its claim keeps counting as in flight instead.
            if let Some(id) = provider_id.filter(|id| claim_by_provider_id.contains_key(id)) {
                pods_of_in_flight.insert(id, pods);
            }
            continue;
        }
        let Ok(mut candidate) = ExistingNode::from_node(node, pods) else {
            continue;
        };
        if let Some(claim) = provider_id.and_then(|id| claim_by_provider_id.get(id)) {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            registered_ids.extend(provider_id.map(str::to_owned));
            // Taints that go away once a Karpenter node finishes starting do not keep pods off
            // it: without this, a round right after launch would plan new claims for pods
            // that already have room on the just-registered node.
            let starting = !claim.is_true("Initialized");
            candidate.taints.retain(|t| {
                let startup = claim
                    .spec
                    .startup_taints
                    .iter()
                    .any(|s| s.key == t.key && s.effect == t.effect);
                t.key != labels::UNREGISTERED_TAINT_KEY
                    && !startup
                    && !(starting && crate::scheduling::taints::is_known_ephemeral(t))
            });
        }
        existing.push(candidate);
    }
    let mut in_flight = Vec::new();
    for claim in claims
        .iter()
        .map(AsRef::as_ref)
        .filter(|c| c.metadata.deletion_timestamp.is_none())
    {
        let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
        if provider_id
            .as_ref()
            .is_some_and(|id| registered_ids.contains(id))
        {
            continue;
        }
        let bound = provider_id
            .as_deref()
            .and_then(|id| pods_of_in_flight.remove(id))
            .unwrap_or_default();
        match InFlightClaim::from_node_claim(claim, catalogue_of(&claim.spec.node_class_ref), bound)
        {
            Ok(mut flight) => {
                // Before launch the claim holds at least what it was sized for.
                let launched = claim
                    .status
                    .as_ref()
                    .is_some_and(|s| !s.allocatable.is_empty());
                if !launched
                    && let Ok(requests) = crate::resources::ResourceList::from_quantities(
                        &claim.spec.resources.requests,
                    )
                {
                    flight.allocatable = flight.allocatable.max_by_resource(&requests);
                }
                in_flight.push(flight);
            }
            Err(e) => {
                debug!(nodeclaim = %claim.name_any(), error = %e, "in-flight claim left out of the simulation")
            }
        }
    }

    let usage = usage_by_pool(claims.iter().map(AsRef::as_ref));
    let node_pools: Vec<PoolInput> = pools
        .iter()
        .map(|pool| {
            let mut input =
                PoolInput::new(pool, catalogue_of(&pool.spec.template.spec.node_class_ref));
            if let Some((count, resources)) = usage.get(&pool.name_any()) {
                input.usage = resources
                    .clone()
                    .with(NODES, u64::try_from(*count).unwrap_or_default());
            }
            input
        })
        .collect();

    let daemon_sets = Api::<DaemonSet>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("listing DaemonSets"))?;
    let daemon_pods: Vec<Pod> = daemon_sets
        .items
        .iter()
        .filter_map(|ds| ds.spec.as_ref())
        .map(|spec| Pod {
            metadata: spec.template.metadata.clone().unwrap_or_default(),
            spec: spec.template.spec.clone(),
            status: None,
        })
        .collect();

    let input = Input {
        pods: pending_pods.clone(),
        node_pools,
        nodes: existing,
        in_flight,
        daemon_set_pods: daemon_pods.iter().collect(),
        ..Input::default()
    };
    let started = Instant::now();
    let plan = scheduling::schedule(&input);
    ctx.metrics
        .scheduling_seconds
        .observe(started.elapsed().as_secs_f64());

    for placement in &plan.existing {
        debug!(target_kind = ?placement.target, name = %placement.name, pods = placement.pods.len(), "pods fit on existing capacity");
    }
    let mut round = Round {
        pods: pending_pods.len(),
        unschedulable: plan.unschedulable.len(),
        ..Round::default()
    };
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let to_create: Vec<(usize, NodeClaim)> = plan
        .new_claims
        .iter()
        .enumerate()
        .filter_map(|(i, planned)| {
            let pool = pools.iter().find(|p| p.name_any() == planned.node_pool)?;
            Some((i, node_claim_for(planned, pool, &pending_pods)))
        })
        .collect();
    let results: Vec<(usize, Result<NodeClaim, kube::Error>)> =
        futures::stream::iter(to_create.into_iter().map(|(i, claim)| {
            let api = api.clone();
            async move { (i, api.create(&PostParams::default(), &claim).await) }
        }))
        .buffer_unordered(16)
        .collect()
        .await;
    for (index, result) in results {
        let Some(planned) = plan.new_claims.get(index) else {
            continue;
        };
        match result {
            Ok(claim) => {
                round.created += 1;
                recent.record(claim.clone());
                ctx.metrics.nodeclaims_created.inc();
                let now = Instant::now();
                for pod in planned.pods.iter().filter_map(|&i| pending_pods.get(i)) {
                    if let Some(seen) = pod
                        .metadata
                        .uid
                        .as_deref()
                        .and_then(|uid| pending.first_seen(uid))
                    {
                        ctx.metrics
                            .pod_unschedulable_to_nodeclaim_seconds
                            .observe(now.duration_since(seen).as_secs_f64());
                    }
                }
                info!(nodeclaim = %claim.name_any(), nodepool = %planned.node_pool, pods = planned.pods.len(),
                    cheapest = ?planned.instance_types.first().map(|o| &o.name), "created nodeclaim");
            }
            Err(e) => {
                round.failed += 1;
                warn!(nodepool = %planned.node_pool, error = %e, "could not create nodeclaim");
            }
        }
    }

    ctx.metrics
        .pods_unschedulable
        .set(i64::try_from(plan.unschedulable.len()).unwrap_or(i64::MAX));
    let now = Instant::now();
    memory
        .last_warned
        .retain(|_, at| now.duration_since(*at) < Duration::from_secs(300));
    for unschedulable in &plan.unschedulable {
        let Some(pod) = pending_pods.get(unschedulable.pod) else {
            continue;
        };
        let key = pod
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| unschedulable.pod_name.clone());
        if memory.last_warned.contains_key(&key) {
            continue;
        }
        memory.last_warned.insert(key, now);
        let note = truncate(&unschedulable.to_string(), 1000);
        info!(pod = %unschedulable.pod_name, reason = %note, "pod cannot be provisioned for");
        let event = Event {
            type_: EventType::Warning,
            reason: "FailedProvisioning".to_owned(),
            note: Some(note),
            action: "Provisioning".to_owned(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&event, &pod.object_ref(&())).await {
            warn!(pod = %unschedulable.pod_name, error = %e, "could not publish event");
        }
    }
    Ok(Some(round))
}

fn schedulable_node(node: &Node) -> bool {
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let disrupted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY));
    node.metadata.deletion_timestamp.is_none() && !cordoned && !disrupted
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let cut = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…", &text[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    // Generous outer bounds only keep a broken batcher from hanging the test run.
    const NEVER: Duration = Duration::from_secs(30);

    /// Complete from the `n`th question on (never, if `n` is 0).
    struct CompleteAt(usize, usize);

    impl BatchCompletion for CompleteAt {
        async fn is_complete(&mut self) -> bool {
            self.1 += 1;
            self.0 > 0 && self.1 >= self.0
        }
    }

    #[tokio::test]
    async fn a_requeue_opens_a_batch_without_any_new_pod() {
        let (_wake, mut rx) = mpsc::channel::<Wake>(1);
        let requeue_at = tokio::time::Instant::now() + Duration::from_millis(20);
        let opened = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(10),
                Duration::from_millis(100),
                Some(requeue_at),
                &mut CompleteAt(0, 0),
            ),
        )
        .await;
        assert_eq!(
            opened.ok(),
            Some(Some(BatchClose::Idle)),
            "the requeue should have started a round"
        );
    }

    #[tokio::test]
    async fn without_a_requeue_the_batcher_waits_for_a_pod_and_stops_when_the_watch_ends() {
        let (wake, mut rx) = mpsc::channel::<Wake>(1);
        wake.try_send(Wake::NewPod).ok();
        let opened = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(10),
                Duration::from_millis(100),
                None,
                &mut CompleteAt(0, 0),
            ),
        )
        .await;
        assert_eq!(opened.ok(), Some(Some(BatchClose::Idle)));
        drop(wake);
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(10),
                Duration::from_millis(100),
                None,
                &mut CompleteAt(0, 0),
            ),
        )
        .await;
        assert_eq!(
            closed.ok(),
            Some(None),
            "a closed channel ends provisioning"
        );
    }

    #[tokio::test]
    async fn a_complete_batch_closes_without_waiting_out_the_idle_window() {
        let (wake, mut rx) = mpsc::channel::<Wake>(1);
        wake.try_send(Wake::NewPod).ok();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            wake.send(Wake::NewPod).await.ok();
            wake
        });
        // Complete on the second question: after the wake-up that brought the last pod.
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(&mut rx, NEVER, NEVER, None, &mut CompleteAt(2, 0)),
        )
        .await;
        assert_eq!(closed.ok(), Some(Some(BatchClose::Complete)));
        drop(sender.await);
    }

    #[tokio::test]
    async fn a_batch_without_a_new_pod_keeps_the_idle_window() {
        let (wake, mut rx) = mpsc::channel::<Wake>(1);
        wake.try_send(Wake::Nudge).ok();
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(20),
                NEVER,
                None,
                &mut CompleteAt(1, 0),
            ),
        )
        .await;
        assert_eq!(closed.ok(), Some(Some(BatchClose::Idle)));
        // A new pod in a batch a nudge opened lets it close as complete.
        wake.try_send(Wake::Nudge).ok();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            wake.send(Wake::NewPod).await.ok();
            wake
        });
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(&mut rx, NEVER, NEVER, None, &mut CompleteAt(1, 0)),
        )
        .await;
        assert_eq!(closed.ok(), Some(Some(BatchClose::Complete)));
        drop(sender.await);
    }

    #[tokio::test]
    async fn pods_that_keep_coming_are_cut_off_at_the_longest_batch() {
        let (wake, mut rx) = mpsc::channel::<Wake>(1);
        wake.try_send(Wake::NewPod).ok();
        let sender = tokio::spawn(async move {
            while wake.send(Wake::NewPod).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(200),
                Duration::from_millis(50),
                None,
                &mut CompleteAt(0, 0),
            ),
        )
        .await;
        assert_eq!(closed.ok(), Some(Some(BatchClose::Max)));
        drop(rx);
        sender.await.ok();
    }

    fn pod(
        name: &str,
        owner: Option<(&str, &str)>,
        node: Option<&str>,
        scheduled: Option<(&str, &str)>,
    ) -> Arc<CachedPod> {
        let owner_references: Vec<serde_json::Value> = owner
            .map(|(kind, uid)| serde_json::json!({"apiVersion": "apps/v1", "kind": kind, "name": format!("{kind}-{uid}"), "uid": uid, "controller": true}))
            .into_iter()
            .collect();
        let conditions: Vec<serde_json::Value> = scheduled
            .map(|(status, reason)| serde_json::json!({"type": "PodScheduled", "status": status, "reason": reason}))
            .into_iter()
            .collect();
        let pod = serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "ownerReferences": owner_references},
            "spec": {"containers": [{"name": "c"}], "nodeName": node},
            "status": {"conditions": conditions},
        });
        Arc::new(serde_json::from_value(pod).expect("a pod"))
    }

    const UNSCHEDULABLE: Option<(&str, &str)> = Some(("False", "Unschedulable"));

    #[test]
    fn a_batch_counts_every_live_pod_of_its_controllers() {
        let pods = [
            pod("web-1", Some(("ReplicaSet", "rs")), None, UNSCHEDULABLE),
            pod("web-2", Some(("ReplicaSet", "rs")), None, UNSCHEDULABLE),
            pod(
                "web-3",
                Some(("ReplicaSet", "rs")),
                Some("node-a"),
                Some(("True", "")),
            ),
            pod(
                "other",
                Some(("ReplicaSet", "other")),
                Some("node-a"),
                Some(("True", "")),
            ),
        ];
        let controllers = batch_controllers(&pods).expect("every pod judged");
        let counts: Vec<(&str, usize)> = controllers
            .iter()
            .map(|(c, n)| (c.uid.as_str(), *n))
            .collect();
        assert_eq!(
            counts,
            [("rs", 3)],
            "only the pending pods' controllers, with all their live pods"
        );
    }

    #[test]
    fn a_batch_is_not_complete_while_a_pod_awaits_the_schedulers_verdict() {
        let pods = [
            pod("web-1", Some(("ReplicaSet", "rs")), None, UNSCHEDULABLE),
            pod("web-2", Some(("ReplicaSet", "rs")), None, None),
        ];
        assert_eq!(batch_controllers(&pods), None);
    }

    #[test]
    fn a_pending_pod_without_a_controller_keeps_the_idle_window() {
        let pods = [
            pod("web-1", Some(("ReplicaSet", "rs")), None, UNSCHEDULABLE),
            pod("bare", None, None, UNSCHEDULABLE),
        ];
        assert_eq!(batch_controllers(&pods), None);
    }
}
