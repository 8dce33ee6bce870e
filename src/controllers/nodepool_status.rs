//! Keeps each NodePool's status current: how many nodes it has, the resources they add up to
//! (what its limits are checked against), and whether it is Ready, as upstream's
//! `nodepool/readiness` and `nodepool/counter` controllers: `NodeClassReady` says whether its
//! node class exists and is ready (as its provider resolves it), `ValidationSucceeded` is the
//! API server's (the CRD's rules already refused what upstream's webhook-era validation did),
//! and `Ready` is both. Provisioning launches only from pools that are not un-Ready.
//! `NodeRegistrationHealthy` is what [`super::pool_health`] asks for, as upstream's
//! `nodepool/registrationhealth` controller and lifecycle write it.

use super::{Context, Error, FIELD_MANAGER, conditions};
use crate::apis::NodePool;
use crate::cloud::{CloudError, CloudProvider};

/// Upstream's condition for a pool whose node class exists and is ready.
const NODE_CLASS_READY: &str = "NodeClassReady";
/// Upstream's condition for whether the pool's recent nodes launched and registered.
pub(crate) const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
use crate::state::usage_by_pool;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// Refreshes every NodePool's status every few seconds until cancelled.
pub(crate) async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>) {
    let mut interval = tokio::time::interval(Duration::from_secs(5));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let _pass = ctx
            .health
            .pass(super::names::NODEPOOL_STATUS, ctx.settings.stuck_pass_after);
        if let Err(e) = refresh(&ctx).await {
            warn!(error = %e, cause = ?std::error::Error::source(&e), "nodepool status update failed");
        }
    }
}

/// One pass over every pool whose status is out of date.
pub(crate) async fn refresh<P: CloudProvider>(ctx: &Context<P>) -> Result<(), Error> {
    let claims = ctx.cluster.claims.state();
    let usage = usage_by_pool(claims.iter().map(|c| c.as_ref()));
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    for pool in ctx.cluster.pools.state() {
        let name = pool.name_any();
        let (nodes, resources) = usage.get(&name).cloned().unwrap_or_default();
        let mut status = pool.status.clone().unwrap_or_default();
        let numbers = |list: &crate::resources::ResourceList| -> Vec<(String, f64)> {
            list.iter()
                .map(|(name, amount)| {
                    (name.to_owned(), crate::resources::approximate(name, amount))
                })
                .collect()
        };
        let limits =
            crate::resources::ResourceList::from_quantities(&pool.spec.limits).unwrap_or_default();
        ctx.metrics
            .set_nodepool_resources(&name, &numbers(&resources), &numbers(&limits));
        let resources = resources.to_quantities();
        let class = &pool.spec.template.spec.node_class_ref;
        let class_not_ready = match ctx.provider.instance_types(class).await {
            Ok(_) => None,
            Err(CloudError::NodeClassNotReady { reason, .. }) => Some(reason),
            // A cloud call that failed says nothing about the class: keep what was said.
            Err(_) => {
                if !conditions::is_true(&status.conditions, NODE_CLASS_READY)
                    && status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == NODE_CLASS_READY)
                {
                    continue;
                }
                None
            }
        };
        let before = status.clone();
        status.nodes = Some(nodes);
        status.resources = resources;
        let generation = pool.metadata.generation;
        conditions::set(
            &mut status.conditions,
            "ValidationSucceeded",
            true,
            "ValidationSucceeded",
            "",
            generation,
        );
        match &class_not_ready {
            None => conditions::set(
                &mut status.conditions,
                NODE_CLASS_READY,
                true,
                NODE_CLASS_READY,
                "",
                generation,
            ),
            Some(reason) => conditions::set(
                &mut status.conditions,
                NODE_CLASS_READY,
                false,
                "NodeClassNotReady",
                reason,
                generation,
            ),
        }
        match &class_not_ready {
            None => conditions::set(
                &mut status.conditions,
                "Ready",
                true,
                "Ready",
                "",
                generation,
            ),
            Some(reason) => conditions::set(
                &mut status.conditions,
                "Ready",
                false,
                "NodeClassNotReady",
                &format!("{}/{} {}: {reason}", class.group, class.kind, class.name),
                generation,
            ),
        }
        let class_generation = ctx.provider.node_class_generation(class).await;
        let class_changed =
            class_generation.is_some() && status.node_class_observed_generation != class_generation;
        if class_generation.is_some() {
            status.node_class_observed_generation = class_generation;
        }
        registration_health(ctx, &pool, class_changed, &mut status.conditions);
        if status == before {
            continue;
        }
        let patch = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "status": status});
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::kube(format!(
            "updating the status of NodePool {name}"
        )))?;
    }
    Ok(())
}

/// Sets `NodeRegistrationHealthy` as upstream does: Unknown when the pool is new, or its spec
/// or its node class's changed since the condition was written (`class_changed`: the class's
/// generation differs from `nodeClassObservedGeneration`; the outcomes are forgotten, they were
/// the old spec's), else what the recent outcomes asked for. After a restart the outcomes start
/// from the condition.
fn registration_health<P>(
    ctx: &Context<P>,
    pool: &NodePool,
    class_changed: bool,
    conditions_: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) {
    use super::pool_health::{Health, Verdict};
    let Some(uid) = pool.metadata.uid.as_deref() else {
        return;
    };
    let generation = pool.metadata.generation;
    let current = conditions_
        .iter()
        .find(|c| c.type_ == NODE_REGISTRATION_HEALTHY)
        .cloned();
    let Some(current) = current.filter(|c| c.observed_generation == generation && !class_changed)
    else {
        ctx.pool_health.reset(uid);
        conditions::set_unknown(
            conditions_,
            NODE_REGISTRATION_HEALTHY,
            "AwaitingReconciliation",
            "no node of this spec has launched yet",
            generation,
        );
        return;
    };
    if ctx.pool_health.health(uid) == Health::Unknown && current.status != "Unknown" {
        ctx.pool_health.resume(
            uid,
            current.status == "True",
            current.last_transition_time.0,
        );
    }
    match ctx.pool_health.verdict(uid) {
        Some(Verdict::Healthy) => conditions::set(
            conditions_,
            NODE_REGISTRATION_HEALTHY,
            true,
            NODE_REGISTRATION_HEALTHY,
            "",
            generation,
        ),
        // Upstream leaves a False condition as it was: its reason is the first failure's.
        Some(Verdict::Unhealthy { reason, message }) if current.status != "False" => {
            conditions::set(
                conditions_,
                NODE_REGISTRATION_HEALTHY,
                false,
                &reason,
                &message,
                generation,
            );
        }
        _ => {}
    }
}
