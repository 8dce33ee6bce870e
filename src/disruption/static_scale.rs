//! How a static NodePool (`replicas`) reaches its count: upstream's `static.provisioning` and
//! `static.deprovisioning` controllers (`pkg/controllers/static/`), as a pure function of the
//! judged claims.
//!
//! * Up: claims not being deleted count (a node being replaced counts until it is deleted, so
//!   a static drift's replacement is not doubled); the shortfall is launched, never past
//!   `limits.nodes` counted over every claim of the pool, deleting ones included.
//! * Down: claims not being deleted or disrupted count; the excess goes in upstream's order:
//!   claims not launched yet, then empty nodes, then nodes without `do-not-disrupt` pods, then
//!   the rest, each cheapest to disrupt first. Budgets are not consulted (the count is the
//!   user's decision, as upstream); the termination that follows drains under PDBs and the
//!   termination grace period as for any deletion.

use super::candidate::Candidate;
use super::disruptability::{BlockerKind, is_disrupting};
use crate::apis::NodePool;

/// What a static pool needs now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StaticScale {
    /// How many claims to launch.
    pub launch: u64,
    /// Launches the node limit holds back.
    pub held_by_limit: u64,
    /// Claims to delete, in order.
    pub remove: Vec<String>,
}

/// What `pool` (static) needs, from every judged claim of the cluster and the number of its
/// claims created that the watch has not delivered yet (`unseen`, counted as live, as
/// upstream's node-count reservations are).
pub(crate) fn static_scale(pool: &NodePool, judged: &[Candidate<'_>], unseen: u64) -> StaticScale {
    let Some(replicas) = pool.spec.replicas else {
        return StaticScale::default();
    };
    let replicas = u64::try_from(replicas).unwrap_or_default();
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    let mine: Vec<&Candidate<'_>> = judged
        .iter()
        .filter(|c| {
            c.claim
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::apis::labels::NODE_POOL))
                .map(String::as_str)
                == Some(name)
        })
        .collect();
    let deleting = |c: &Candidate<'_>| c.claim.metadata.deletion_timestamp.is_some();
    let live = count(mine.iter().filter(|c| !deleting(c))) + unseen;
    let mut scale = StaticScale::default();
    if live < replicas {
        let wanted = replicas - live;
        let room = pool.spec.node_limit().map_or(u64::MAX, |limit| {
            limit.saturating_sub(count(mine.iter()) + unseen)
        });
        scale.launch = wanted.min(room);
        scale.held_by_limit = wanted - scale.launch;
        return scale;
    }
    let mut active: Vec<&Candidate<'_>> = mine
        .into_iter()
        .filter(|c| !deleting(c) && !c.node.is_some_and(is_disrupting))
        .collect();
    let excess = (count(active.iter()) + unseen).saturating_sub(replicas);
    if excess == 0 {
        return scale;
    }
    active.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| a.disruption_cost.total_cmp(&b.disruption_cost))
            .then_with(|| a.name().cmp(b.name()))
    });
    scale.remove = active
        .into_iter()
        .take(usize::try_from(excess).unwrap_or(usize::MAX))
        .map(|c| c.name().to_owned())
        .collect();
    scale
}

/// Upstream's scale-down tiers: not launched, empty, no `do-not-disrupt` pod, the rest.
fn rank(c: &Candidate<'_>) -> u8 {
    let launched = c
        .claim
        .status
        .as_ref()
        .is_some_and(|s| s.provider_id.is_some());
    if !launched {
        0
    } else if c.pods.is_empty() {
        1
    } else if !c
        .disruptability
        .blockers
        .iter()
        .any(|b| b.kind == BlockerKind::DoNotDisruptPod)
    {
        2
    } else {
        3
    }
}

fn count<T>(items: impl Iterator<Item = T>) -> u64 {
    u64::try_from(items.count()).unwrap_or(u64::MAX)
}
