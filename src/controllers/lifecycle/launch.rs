//! Launching a NodeClaim's instance: pick the candidate instance types the claim allows, ask the
//! provider for one, and record what it launched (labels, providerID, capacity) on the claim; a
//! launch that cannot succeed as planned deletes the claim so its pods are planned again.
//!
//! Follows upstream's `pkg/controllers/nodeclaim/lifecycle/launch.go`.

use super::{delete_claim, describe, publish, write_status};
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, NodeClaimStatus, labels};
use crate::cloud::{CloudError, CloudProvider, Instance};
use crate::controllers::{Context, Error, conditions};
use crate::scheduling::InstanceType;
use crate::scheduling::Requirements;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;
use std::time::Duration;
use tracing::{debug, info, warn};

/// The instance types a claim may launch as, cheapest first: those its requirements allow and
/// whose allocatable covers its requests.
pub fn launch_candidates(
    claim: &NodeClaim,
    catalogue: &[InstanceType],
) -> Result<Vec<InstanceType>, Error> {
    let requirements =
        Requirements::from_api(&claim.spec.requirements).map_err(|e| Error::Invalid {
            object: describe(claim),
            reason: e.to_string(),
        })?;
    let requests = crate::resources::ResourceList::from_quantities(&claim.spec.resources.requests)
        .map_err(|e| Error::Invalid {
            object: describe(claim),
            reason: e.to_string(),
        })?;
    let mut candidates: Vec<(f64, &InstanceType)> = catalogue
        .iter()
        .filter(|it| requirements.intersects(&it.requirements).is_ok())
        .filter(|it| requests.fits_in(&it.allocatable()))
        .filter_map(|it| it.cheapest_offering(&requirements).map(|o| (o.price, it)))
        .collect();
    candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
    Ok(candidates.into_iter().map(|(_, it)| it.clone()).collect())
}

pub(super) async fn launch<P: CloudProvider>(
    claim: &NodeClaim,
    status: NodeClaimStatus,
    ctx: &Context<P>,
) -> Result<Action, Error> {
    // Launched already, but the watch has not brought the status back: write it again rather
    // than ask the cloud for a second instance (upstream's launch cache).
    if let Some(instance) = claim
        .metadata
        .uid
        .as_deref()
        .and_then(|uid| ctx.recent_launches.get(uid))
    {
        debug!(nodeclaim = %claim.name_any(), provider_id = %instance.provider_id,
            "launched a moment ago; recording the launch again");
        record_launch(claim, status, &instance, ctx).await?;
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let catalogue = match ctx
        .provider
        .instance_types(&claim.spec.node_class_ref)
        .await
    {
        Ok(catalogue) => catalogue,
        Err(CloudError::NodeClassNotReady { reason, .. }) => {
            return give_up_launch(claim, ctx, "NodeClassNotReady", &reason).await;
        }
        Err(e) => return launch_failed(claim, status, ctx, "listing instance types", e).await,
    };
    let candidates = launch_candidates(claim, &catalogue)?;
    let started = std::time::Instant::now();
    match ctx.provider.create(claim, &candidates).await {
        Ok(instance) => {
            if let Some(uid) = &claim.metadata.uid {
                ctx.recent_launches.launched(uid, &instance);
            }
            record_launch(claim, status, &instance, ctx).await?;
            ctx.metrics.nodeclaims_launched.inc();
            ctx.metrics
                .launch_seconds
                .observe(started.elapsed().as_secs_f64());
            info!(nodeclaim = %claim.name_any(), instance_type = %instance.instance_type, zone = %instance.zone,
                capacity_type = %instance.capacity_type, provider_id = %instance.provider_id, "launched");
            let note = format!(
                "launched {} ({}) in {} as {}",
                instance.instance_type, instance.capacity_type, instance.zone, instance.provider_id
            );
            publish(ctx, claim, EventType::Normal, "Launched", &note).await;
            Ok(Action::requeue(Duration::from_secs(5)))
        }
        Err(CloudError::InsufficientCapacity { offerings }) => {
            let note = format!(
                "no capacity for {}; the pods will be provisioned again",
                offerings.join(", ")
            );
            give_up_launch(claim, ctx, "InsufficientCapacity", &note).await
        }
        Err(CloudError::NodeClassNotReady { reason, .. }) => {
            give_up_launch(claim, ctx, "NodeClassNotReady", &reason).await
        }
        Err(e) => launch_failed(claim, status, ctx, "launching the instance", e).await,
    }
}

/// The longest condition message upstream writes (`truncateMessage` in `launch.go`).
const MAX_MESSAGE_CHARS: usize = 300;

/// A launch that failed for another reason (throttling, a cloud or network error, a missing
/// permission) is tried again with backoff, as upstream's `launch.go` does. Upstream sets
/// `Launched=Unknown` with reason `LaunchFailed` and the error; this also records a Warning
/// Event, so `kubectl describe nodeclaim` and `kubectl get events` say why nothing launched.
/// Both are written only when the error changed: a write wakes the claim's reconcile, which
/// would otherwise cut the backoff short.
async fn launch_failed<P>(
    claim: &NodeClaim,
    mut status: NodeClaimStatus,
    ctx: &Context<P>,
    action: &str,
    error: CloudError,
) -> Result<Action, Error> {
    let error = Error::cloud(action)(error);
    let message = truncated(&error_chain(&error), MAX_MESSAGE_CHARS);
    let unchanged = status.conditions.iter().any(|c| {
        c.type_ == cond::LAUNCHED
            && c.status == "Unknown"
            && c.reason == LAUNCH_FAILED
            && c.message == message
    });
    if !unchanged {
        publish(ctx, claim, EventType::Warning, LAUNCH_FAILED, &message).await;
        conditions::set_unknown(
            &mut status.conditions,
            cond::LAUNCHED,
            LAUNCH_FAILED,
            &message,
            claim.metadata.generation,
        );
        if let Err(e) = write_status(claim, &status, ctx).await {
            warn!(nodeclaim = %claim.name_any(), error = %e, "could not record the failed launch");
        }
    }
    Err(error)
}

/// Upstream's reason for a launch that failed and will be tried again.
const LAUNCH_FAILED: &str = "LaunchFailed";

/// An error and its causes on one line, as a user reads them in a condition.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// At most `max` characters of `text`, the cut marked with an ellipsis.
fn truncated(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// A launch that cannot succeed as planned deletes the claim, as upstream's `launch.go` does:
/// the provider has already cached the offerings that had no capacity, and provisioning plans
/// the claim's pods again once the claim is gone (the claim watch nudges it), so they land on
/// what is available now instead of waiting on this claim. Waiting in place would pin the pods
/// to a plan made before the failure.
async fn give_up_launch<P>(
    claim: &NodeClaim,
    ctx: &Context<P>,
    reason: &str,
    note: &str,
) -> Result<Action, Error> {
    warn!(nodeclaim = %claim.name_any(), reason, %note, "launch failed; deleting the nodeclaim");
    publish(ctx, claim, EventType::Warning, reason, note).await;
    delete_claim(claim, ctx).await?;
    Ok(Action::await_change())
}

async fn record_launch<P>(
    claim: &NodeClaim,
    mut status: NodeClaimStatus,
    instance: &Instance,
    ctx: &Context<P>,
) -> Result<(), Error> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    // What the launch chose goes onto the claim, as upstream copies the labels and annotations
    // its provider's `Create` returned: every label of the instance type (arch, os, family,
    // CPU count, GPU...), its zone and capacity type, and the node class's hash. Registration
    // then syncs the labels onto the Node.
    let mut launch_labels = instance.labels.clone();
    launch_labels.insert(
        labels::INSTANCE_TYPE.to_owned(),
        instance.instance_type.clone(),
    );
    launch_labels.insert(labels::ZONE.to_owned(), instance.zone.clone());
    launch_labels.insert(
        labels::CAPACITY_TYPE.to_owned(),
        instance.capacity_type.to_string(),
    );
    let label_patch = json!({"metadata": {
        "labels": launch_labels,
        "annotations": instance.annotations,
    }});
    api.patch(
        &claim.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&label_patch),
    )
    .await
    .map_err(Error::kube("labelling the nodeclaim"))?;
    status.provider_id = Some(instance.provider_id.to_string());
    status.image_id = instance.image_id.clone();
    status.capacity = instance.capacity.to_quantities();
    status.allocatable = instance.allocatable.to_quantities();
    conditions::set(
        &mut status.conditions,
        cond::LAUNCHED,
        true,
        "Launched",
        "",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::REGISTERED,
        false,
        "NotRegistered",
        "waiting for the node to register",
        claim.metadata.generation,
    );
    conditions::set(
        &mut status.conditions,
        cond::READY,
        false,
        "NotRegistered",
        "waiting for the node to register",
        claim.metadata.generation,
    );
    write_status(claim, &status, ctx).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_launch_reads_as_its_whole_cause_chain_cut_at_the_condition_limit() {
        let error = Error::cloud("launching the instance")(CloudError::Throttled {
            source: "RequestLimitExceeded: Request limit exceeded.".into(),
        });
        assert_eq!(
            error_chain(&error),
            "launching the instance failed: throttled by the cloud API: RequestLimitExceeded: Request limit exceeded."
        );
        let long = "é".repeat(400);
        let cut = truncated(&long, MAX_MESSAGE_CHARS);
        assert_eq!(cut.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(truncated("short", MAX_MESSAGE_CHARS), "short");
    }
}
