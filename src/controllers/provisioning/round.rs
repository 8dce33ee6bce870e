//! One scheduling round (upstream's `Provisioner.Schedule` in
//! `pkg/controllers/provisioning/provisioner.go`): wait until the NodeClaim watch shows every
//! claim the API server has ("cluster state synced"), simulate the whole cluster, create the
//! plan's NodeClaims, and warn about the pods nothing can hold.

use super::batcher::{PendingPods, is_provisionable};
use super::claims::node_claim_for;
use crate::apis::{NodeClaim, NodePool, labels};
use crate::cloud::CloudProvider;
use crate::controllers::{Context, Error};
use crate::resources::NODES;
use crate::scheduling::InstanceType;
use crate::scheduling::{self, ExistingNode, InFlightClaim, Input, PoolInput};
use crate::state::{CachedPod, usage_by_pool};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

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
