//! Keeps each NodePool's status current: how many nodes it has, the resources they add up to
//! (what its limits are checked against), and whether it is Ready.

use super::{Context, Error, FIELD_MANAGER, conditions};
use crate::apis::{NodePool, NodePoolStatus};
use crate::cloud::CloudProvider;
use crate::state::usage_by_pool;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// Refreshes every NodePool's status every few seconds until cancelled.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>) {
    let mut interval = tokio::time::interval(Duration::from_secs(5));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if let Err(e) = refresh(&ctx).await {
            warn!(error = %e, cause = ?std::error::Error::source(&e), "nodepool status update failed");
        }
    }
}

/// One pass over every pool whose status is out of date.
pub async fn refresh<P: CloudProvider>(ctx: &Context<P>) -> Result<(), Error> {
    let claims = ctx.claims.state();
    let usage = usage_by_pool(claims.iter().map(|c| c.as_ref()));
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    for pool in ctx.pools.state() {
        let name = pool.name_any();
        let (nodes, resources) = usage.get(&name).cloned().unwrap_or_default();
        let mut status = pool.status.clone().unwrap_or_default();
        let resources = resources.to_quantities();
        let fresh = status.nodes == Some(nodes)
            && status.resources == resources
            && conditions::is_true(&status.conditions, "Ready");
        if fresh {
            continue;
        }
        status = NodePoolStatus {
            nodes: Some(nodes),
            resources,
            ..status
        };
        conditions::set(
            &mut status.conditions,
            "Ready",
            true,
            "Ready",
            "",
            pool.metadata.generation,
        );
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
