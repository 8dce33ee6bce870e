//! Releasing what an interrupted disruption left behind (upstream's start of every
//! `disruption.Controller.Reconcile`, `pkg/controllers/disruption/controller.go`): a command
//! taints its candidates `karpenter.sh/disrupted:NoSchedule` and marks their claims'
//! `DisruptionReason` while it runs in memory; if the agent is killed, loses its Lease or fails
//! an API call half-way, nothing else would take them off, and the node would never be
//! consolidated, drifted or repaired again while holding a budget slot for good.
//!
//! So every pass (the first one right after start-up) takes the taint off every node, and the
//! condition off every claim, that no command in memory holds and that is not being deleted
//! (termination taints the nodes it drains). The nodes of the commands in flight (`queue.rs`)
//! are passed in and kept. Replacements an interrupted command launched are ordinary
//! claims of their pool: the pods of a candidate move to one if consolidation runs again, and
//! an empty one is consolidated as any empty node is.

use super::queue::set_disrupted_taint;
use crate::apis::NodeClaim;
use crate::apis::nodeclaim::conditions as cond;
use crate::controllers::{Context, Error};
use crate::disruption::disruptability::is_disrupting;
use kube::ResourceExt;
use tracing::info;

/// Takes the disruption taint and `DisruptionReason` off what no command holds.
pub(super) async fn release<P>(
    ctx: &Context<P>,
    held: &std::collections::HashSet<String>,
) -> Result<(), Error> {
    let claims = ctx.cluster.claims.state();
    let claim_of = |node: &str, provider_id: Option<&str>| {
        claims.iter().find(|c| {
            let status = c.status.as_ref();
            status.and_then(|s| s.node_name.as_deref()) == Some(node)
                || (provider_id.is_some()
                    && status.and_then(|s| s.provider_id.as_deref()) == provider_id)
        })
    };
    for node in ctx.cluster.nodes.state() {
        if !is_disrupting(&node) || node.deletion_timestamp.is_some() || held.contains(&node.name) {
            continue;
        }
        let claim = claim_of(&node.name, node.provider_id.as_deref());
        if claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some()) {
            continue;
        }
        // The store may still show a taint this pass already took off: the live Node decides.
        if set_disrupted_taint(ctx, &node.name, false).await? {
            info!(node = %node.name, "removed the karpenter.sh/disrupted taint no disruption holds (an interrupted disruption left it)");
        }
    }
    let held_claim = |c: &NodeClaim| {
        c.status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| held.contains(n))
    };
    for claim in claims
        .iter()
        .filter(|c| is_stranded_mark(c) && !held_claim(c))
    {
        let conditions = claim
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ != cond::DISRUPTION_REASON)
            .collect();
        crate::controllers::nodeclaim_disruption::write_conditions(ctx, claim, conditions).await?;
        info!(nodeclaim = %claim.name_any(), "cleared the DisruptionReason of a disruption that did not finish");
    }
    Ok(())
}

/// A claim marked for a disruption that never deleted it.
fn is_stranded_mark(claim: &NodeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_none()
        && claim.condition(cond::DISRUPTION_REASON).is_some()
}
