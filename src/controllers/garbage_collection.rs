//! Deletes instances no NodeClaim owns: launched by an agent that crashed before it recorded the
//! launch, or left behind by a claim deleted while its launch was in flight. Instances are
//! money; none may leak.

use super::{Context, Error};
use crate::cloud::CloudProvider;
use kube::ResourceExt;
use std::collections::HashSet;
use std::sync::Arc;
use tracing::{info, warn};

/// Runs garbage collection every `settings.garbage_collection_interval` until cancelled.
pub async fn run<P: CloudProvider + 'static>(ctx: Arc<Context<P>>) {
    let mut interval = tokio::time::interval(ctx.settings.garbage_collection_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        match collect(&ctx).await {
            Ok(0) => {}
            Ok(deleted) => info!(instances = deleted, "garbage-collected orphaned instances"),
            Err(e) => warn!(error = %e, cause = ?std::error::Error::source(&e), "garbage collection failed"),
        }
    }
}

/// One pass: deletes every instance older than the grace period that no NodeClaim owns, and
/// returns how many it deleted.
pub async fn collect<P: CloudProvider>(ctx: &Context<P>) -> Result<usize, Error> {
    let instances = ctx.provider.list().await.map_err(Error::cloud("listing instances"))?;
    // Read the claims after the instances: a claim created in between is then seen, never the
    // other way round.
    let claims = ctx.claims.state();
    let owned_ids: HashSet<String> =
        claims.iter().filter_map(|c| c.status.as_ref().and_then(|s| s.provider_id.clone())).collect();
    let claim_names: HashSet<String> = claims.iter().map(|c| c.name_any()).collect();
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut deleted = 0;
    for instance in instances {
        if owned_ids.contains(&instance.provider_id.to_string()) {
            continue;
        }
        if instance.node_claim.as_ref().is_some_and(|name| claim_names.contains(name)) {
            continue;
        }
        let age = instance.created.map(|t| now.duration_since(t).unsigned_abs());
        if age.is_none_or(|age| age < ctx.settings.garbage_collection_grace) {
            continue;
        }
        info!(provider_id = %instance.provider_id, nodeclaim = ?instance.node_claim, "deleting orphaned instance");
        ctx.provider.delete(&instance.provider_id).await.map_err(Error::cloud("deleting an orphaned instance"))?;
        ctx.metrics.instances_garbage_collected.inc();
        deleted += 1;
    }
    Ok(deleted)
}
