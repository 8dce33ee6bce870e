//! Static NodePools (`replicas`), with upstream's `StaticCapacity` gate: every
//! `static_capacity_poll` (5 s) each static pool is brought to its count, as upstream's
//! `static.provisioning` and `static.deprovisioning` controllers do on their watches
//! (`pkg/controllers/static/`). What to launch or remove is [`disruption::static_scale`]'s
//! answer; the claims launched are [`static_claim`]s (no pods, cheapest type first). A removed
//! claim is deleted and drained by termination like any other.
//!
//! With the gate off a static pool launches nothing, as upstream; the pool gets a Warning
//! saying so, since nothing else would tell the user why it stays empty.

use super::Context;
use super::provisioning::node_claim_for;
use crate::apis::{NodeClaim, NodePool};
use crate::cloud::CloudProvider;
use crate::disruption;
use crate::scheduling::static_claim;
use crate::state::Gathered;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long a claim this loop created is counted before the watch delivers it.
const UNSEEN_FOR: Duration = Duration::from_secs(60);

/// Claims this loop created, by pool, until the watch delivers them.
#[derive(Default)]
struct Created(HashMap<String, Vec<(String, Instant)>>);

impl Created {
    /// How many of `pool`'s claims the store does not hold yet; forgets the rest.
    fn unseen(&mut self, pool: &str, store: &[Arc<NodeClaim>]) -> u64 {
        let Some(names) = self.0.get_mut(pool) else {
            return 0;
        };
        names.retain(|(name, at)| {
            at.elapsed() < UNSEEN_FOR
                && !store
                    .iter()
                    .any(|c| c.metadata.name.as_deref() == Some(name))
        });
        u64::try_from(names.len()).unwrap_or(u64::MAX)
    }
}

/// Runs until the task is dropped.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>) {
    let mut created = Created::default();
    loop {
        tokio::time::sleep(ctx.settings.static_capacity_poll).await;
        let _pass = ctx
            .health
            .pass(super::names::STATIC_CAPACITY, ctx.settings.stuck_pass_after);
        pass(&ctx, &mut created).await;
    }
}

async fn pass<P: CloudProvider>(ctx: &Context<P>, created: &mut Created) {
    let pools: Vec<Arc<NodePool>> = ctx
        .cluster
        .pools
        .state()
        .into_iter()
        .filter(|p| p.spec.is_static() && p.metadata.deletion_timestamp.is_none())
        .collect();
    if pools.is_empty() {
        return;
    }
    if !ctx.settings.static_capacity {
        for pool in &pools {
            let note = format!(
                "NodePool {} is static (replicas: {}), but the StaticCapacity feature gate is off, so it launches nothing; run the agent with --feature-gates StaticCapacity=true",
                pool.name_any(),
                pool.spec.replicas.unwrap_or_default()
            );
            notice(
                ctx,
                pool,
                EventType::Warning,
                "StaticCapacityDisabled",
                &note,
            )
            .await;
        }
        return;
    }
    // Static pools launch without a scheduling simulation: no DaemonSets, namespace labels or
    // volumes are read.
    let mut cluster = Gathered {
        pods: ctx.cluster.pods.state(),
        nodes: ctx.cluster.nodes.state(),
        claims: ctx.cluster.claims.state(),
        pools: ctx.cluster.pools.state(),
        ..Gathered::default()
    };
    super::provisioning::fetch_catalogues(ctx, &mut cluster).await;
    // PodDisruptionBudgets do not change what a static pool removes, only how it drains.
    let judged = disruption::judge(&cluster.snapshot(), &[], Timestamp::now());
    for pool in &pools {
        let unseen = created.unseen(&pool.name_any(), &cluster.claims);
        let scale = disruption::static_scale(pool, &judged, unseen);
        if scale.held_by_limit > 0 {
            let note = format!(
                "NodePool {} wants {} more nodes, but limits.nodes holds back {}",
                pool.name_any(),
                scale.launch + scale.held_by_limit,
                scale.held_by_limit
            );
            notice(ctx, pool, EventType::Warning, "NodePoolLimitReached", &note).await;
        }
        if scale.launch > 0 {
            let catalogue = cluster
                .catalogues
                .of(&pool.spec.template.spec.node_class_ref);
            let names = launch(ctx, pool, catalogue, scale.launch).await;
            let now = Instant::now();
            created
                .0
                .entry(pool.name_any())
                .or_default()
                .extend(names.into_iter().map(|n| (n, now)));
        }
        for name in &scale.remove {
            remove(ctx, pool, name).await;
        }
    }
}

async fn launch<P>(
    ctx: &Context<P>,
    pool: &NodePool,
    catalogue: &[crate::scheduling::InstanceType],
    count: u64,
) -> Vec<String> {
    let mut names = Vec::new();
    let plan = match static_claim(pool, catalogue) {
        Ok(plan) => plan,
        Err(why) => {
            notice(ctx, pool, EventType::Warning, "FailedProvisioning", &why).await;
            return names;
        }
    };
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    for _ in 0..count {
        let claim = node_claim_for(&plan, pool, &[]);
        match api.create(&PostParams::default(), &claim).await {
            Ok(created) => {
                ctx.count_created(&created, "provisioned");
                info!(nodepool = %pool.name_any(), nodeclaim = %created.name_any(), cheapest = ?plan.instance_types.first().map(|o| &o.name), "launching a nodeclaim for a static nodepool");
                names.push(created.name_any());
            }
            Err(e) => {
                // The next pass counts again and tries the rest.
                warn!(nodepool = %pool.name_any(), error = %e, "could not create a nodeclaim for a static nodepool");
                break;
            }
        }
    }
    names
}

async fn remove<P>(ctx: &Context<P>, pool: &NodePool, name: &str) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            info!(nodepool = %pool.name_any(), nodeclaim = name, replicas = ?pool.spec.replicas, "removing a nodeclaim a static nodepool no longer needs")
        }
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => {
            warn!(nodepool = %pool.name_any(), nodeclaim = name, error = %e, "could not delete a nodeclaim of a static nodepool")
        }
    }
}

async fn notice<P>(ctx: &Context<P>, pool: &NodePool, type_: EventType, reason: &str, note: &str) {
    warn!(nodepool = %pool.name_any(), reason, note, "static nodepool");
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note.to_owned()),
        action: "Provision".to_owned(),
        secondary: None,
    };
    ctx.notices
        .publish(&event, &pool.object_ref(&()), note)
        .await;
}
