//! Whether a NodeClaim's node can be disrupted now, and if not what blocks it: upstream's
//! candidate filter (`pkg/controllers/disruption/types.go` `NewCandidate`, `helpers.go`
//! `GetCandidates`) and the conditions each method adds (`consolidateAfter` and the
//! consolidation policy for consolidation, `Drifted` for drift), each against the pool's budgets.
//!
//! The disruption controller takes its candidates from [`disruptability`], and `kubectl
//! karpenter explain nodeclaim` prints the same value, so the two cannot disagree about a node.
//! Whether consolidation then removes a candidate depends on whether its pods fit elsewhere
//! for less, which [`super::decision`] simulates.

use super::budgets::{Allowance, allowance};
use super::consolidatable::{ConsolidatableAt, consolidatable_at};
use super::protection::{self, PodBlock, node_do_not_disrupt};
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{
    ConsolidationPolicy, DisruptionReason, NodeClaim, NodePool, human_duration, labels,
};
use crate::scheduling::PodView;
use crate::state::{CachedNode, CachedPod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde::Serialize;

/// Whether a claim can be disrupted now.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Disruptability {
    /// Nothing found blocks every way of disrupting it. Whether consolidation then removes it
    /// depends on whether its pods fit elsewhere for less.
    pub disruptable_now: bool,
    /// Consolidation may consider it now, for this reason (`Empty` or `Underutilized`).
    pub consolidation: Option<DisruptionReason>,
    /// It has drifted and its pool's budgets let drift replace it now.
    pub drift: bool,
    pub blockers: Vec<Blocker>,
    pub notes: Vec<String>,
}

/// Something that keeps a claim's node from being disrupted.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    pub kind: BlockerKind,
    pub message: String,
}

/// The kinds of [`Blocker`].
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockerKind {
    /// Already being deleted.
    Terminating,
    /// Its node carries `karpenter.sh/disrupted`: a disruption is under way.
    Disrupting,
    /// Not initialized yet: disruption only considers initialized nodes.
    NotInitialized,
    /// Launched for pods that are still pending: the kube-scheduler is about to bind them.
    Nominated,
    /// `karpenter.sh/do-not-disrupt` on the node or the claim.
    DoNotDisruptNode,
    /// `karpenter.sh/do-not-disrupt` on a pod of the node.
    DoNotDisruptPod,
    /// A PodDisruptionBudget covering a pod of the node allows no disruption.
    PodDisruptionBudget,
    /// The NodePool's disruption budgets allow no more disruptions now.
    Budget,
    /// `consolidateAfter` has not passed since the last pod event.
    ConsolidateAfter,
    /// `consolidateAfter: Never`.
    ConsolidationDisabled,
    /// `consolidationPolicy: WhenEmpty` and pods run on it.
    NotEmpty,
    /// Its NodePool does not exist.
    NoNodePool,
    /// Its NodePool is static (`replicas`): consolidation does not apply to it.
    StaticNodePool,
}

/// Pods that count as the node's workload: they would have to go elsewhere if it went
/// (upstream's `IsReschedulable`: not finished, not being deleted, not a DaemonSet's or a
/// static pod).
pub(crate) fn is_reschedulable(pod: &CachedPod) -> bool {
    !pod.is_daemon_set_pod()
        && !pod.is_mirror()
        && !pod.is_terminal()
        && pod.metadata.deletion_timestamp.is_none()
}

/// Whether a node carries the taint of a disruption under way.
pub(crate) fn is_disrupting(node: &CachedNode) -> bool {
    node.taints
        .iter()
        .any(|t| t.key == labels::DISRUPTED_TAINT_KEY)
}

fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// What a claim's disruptability is judged from.
pub struct ClaimView<'a> {
    pub claim: &'a NodeClaim,
    /// Its NodePool, if it exists.
    pub pool: Option<&'a NodePool>,
    /// Its Node, once registered.
    pub node: Option<&'a CachedNode>,
    /// Every pod bound to its node.
    pub pods: &'a [&'a CachedPod],
    /// Every claim of its pool (itself included).
    pub pool_claims: &'a [&'a NodeClaim],
    /// Whether a claim's node is being disrupted (carries `karpenter.sh/disrupted`).
    pub disrupting: &'a dyn Fn(&NodeClaim) -> bool,
    /// Whether the pod `namespace/name` exists and waits to be bound.
    pub pending: &'a dyn Fn(&str) -> bool,
}

/// How long after its initialization a node stays reserved for the pending pods it was
/// launched for. Upstream marks such nodes nominated for the pods' next scheduling attempts;
/// a bound keeps a pod that never binds from pinning the node for ever.
pub(crate) const NOMINATION: SignedDuration = SignedDuration::from_mins(5);

/// Whether the claim can be disrupted now, and what blocks it.
pub fn disruptability(
    view: &ClaimView<'_>,
    pdbs: &[PodDisruptionBudget],
    now: Timestamp,
) -> Disruptability {
    let claim = view.claim;
    let mut d = Disruptability {
        disruptable_now: false,
        consolidation: None,
        drift: false,
        blockers: Vec::new(),
        notes: Vec::new(),
    };
    let block =
        |d: &mut Disruptability, kind, message: String| d.blockers.push(Blocker { kind, message });
    if claim.metadata.deletion_timestamp.is_some() {
        block(
            &mut d,
            BlockerKind::Terminating,
            "it is already being deleted".to_owned(),
        );
        return d;
    }
    if view.node.is_some_and(is_disrupting) {
        block(
            &mut d,
            BlockerKind::Disrupting,
            format!(
                "its node carries {}: a disruption is under way",
                labels::DISRUPTED_TAINT_KEY
            ),
        );
        return d;
    }
    if !claim.is_true(cond::INITIALIZED) || view.node.is_none() {
        // The launch step it waits for, named as `status` names it.
        let step = if claim
            .status
            .as_ref()
            .is_none_or(|s| s.conditions.is_empty())
        {
            "Pending"
        } else if !claim.is_true(cond::LAUNCHED) {
            "Launching"
        } else if !claim.is_true(cond::REGISTERED) || view.node.is_none() {
            "Registering"
        } else {
            "Initializing"
        };
        block(
            &mut d,
            BlockerKind::NotInitialized,
            format!("it is not initialized yet ({step}); only initialized nodes are disrupted"),
        );
        return d;
    }
    let initialized_at = claim
        .condition(cond::INITIALIZED)
        .map(|c| c.last_transition_time.0);
    if initialized_at.is_some_and(|at| now.duration_since(at) < NOMINATION)
        && let Some(pod) = claim
            .provisioned_for()
            .unwrap_or_default()
            .into_iter()
            .find(|p| (view.pending)(p))
    {
        block(
            &mut d,
            BlockerKind::Nominated,
            format!("it was launched for pod {pod}, which is not bound yet"),
        );
        return d;
    }
    let node_says = view
        .node
        .and_then(|n| n.annotation(labels::DO_NOT_DISRUPT))
        .map(|v| ("node", v));
    let claim_says = annotation(&claim.metadata, labels::DO_NOT_DISRUPT).map(|v| ("nodeclaim", v));
    if let Some((on, _)) = node_says
        .or(claim_says)
        .filter(|(_, v)| node_do_not_disrupt(Some(v)))
    {
        block(
            &mut d,
            BlockerKind::DoNotDisruptNode,
            format!("the {on} has {}: \"true\"", labels::DO_NOT_DISRUPT),
        );
    }
    let node_blocked = !d.blockers.is_empty();
    let workload: Vec<&CachedPod> = view
        .pods
        .iter()
        .copied()
        .filter(|p| is_reschedulable(p))
        .collect();
    // Upstream evicts a pod without a controller like any other; nothing recreates it, so
    // `explain` says so before it happens.
    let uncontrolled: Vec<String> = workload
        .iter()
        .filter(|p| !p.has_controller())
        .map(|p| {
            format!(
                "{}/{}",
                p.pod_namespace().unwrap_or_default(),
                p.pod_name().unwrap_or_default()
            )
        })
        .collect();
    if !uncontrolled.is_empty() {
        d.notes.push(format!(
            "{} no controller: disrupting this node deletes {} and nothing recreates {}",
            match uncontrolled.as_slice() {
                [one] => format!("pod {one} has"),
                many => format!("pods {} have", many.join(", ")),
            },
            if uncontrolled.len() == 1 {
                "it"
            } else {
                "them"
            },
            if uncontrolled.len() == 1 {
                "it"
            } else {
                "them"
            },
        ));
    }
    // Every pod on the node counts here, DaemonSet and static pods too (upstream's
    // `ValidatePodsDisruptable`): the drain waits on the same pods.
    let pod_blockers = protection::pod_blockers(view.pods, pdbs, now);
    for blocker in &pod_blockers {
        let kind = match blocker.why {
            PodBlock::DoNotDisrupt { .. } => BlockerKind::DoNotDisruptPod,
            PodBlock::Budget(_) | PodBlock::SeveralBudgets(_) => BlockerKind::PodDisruptionBudget,
        };
        block(&mut d, kind, blocker.describe());
    }
    // Eventual disruption (drift) of a claim with a `terminationGracePeriod` is bounded by it
    // rather than blocked by its pods (upstream's `EventualDisruptionClass`): the drain waits
    // on them until the deadline, then deletes them.
    let eventual_ok =
        !node_blocked && (pod_blockers.is_empty() || claim.spec.termination_grace_period.is_some());
    let common_blocked = !d.blockers.is_empty();

    let Some(pool) = view.pool else {
        let message = match claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODE_POOL))
        {
            Some(p) => format!("its NodePool {p} does not exist, so no disruption method applies"),
            None => format!(
                "it has no {} label, so no disruption method applies",
                labels::NODE_POOL
            ),
        };
        block(&mut d, BlockerKind::NoNodePool, message);
        return d;
    };
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let disruption = &pool.spec.disruption;
    let budget =
        |reason| -> Allowance { allowance(pool, view.pool_claims, view.disrupting, reason, now) };

    // Consolidation.
    let reason = if workload.is_empty() {
        DisruptionReason::Empty
    } else {
        DisruptionReason::Underutilized
    };
    let mut consolidation: Vec<Blocker> = Vec::new();
    // Upstream leaves static pools out of emptiness and consolidation (their node count is
    // the user's); drift, expiry and repair still replace their nodes.
    if let Some(replicas) = pool.spec.replicas {
        consolidation.push(Blocker {
            kind: BlockerKind::StaticNodePool,
            message: format!(
                "NodePool {pool_name} is static (replicas: {replicas}): consolidation does not apply to it"
            ),
        });
    } else if disruption.consolidation_policy == ConsolidationPolicy::WhenEmpty
        && !workload.is_empty()
    {
        consolidation.push(Blocker {
            kind: BlockerKind::NotEmpty,
            message: format!(
                "NodePool {pool_name} consolidates only empty nodes (WhenEmpty) and {} {} on it",
                workload.len(),
                if workload.len() == 1 {
                    "pod runs"
                } else {
                    "pods run"
                }
            ),
        });
    }
    match consolidatable_at(claim, pool) {
        ConsolidatableAt::Never => consolidation.push(Blocker {
            kind: BlockerKind::ConsolidationDisabled,
            message: format!("NodePool {pool_name} has consolidateAfter: Never"),
        }),
        ConsolidatableAt::At {
            at,
            since,
            from_initialization,
        } => {
            if from_initialization {
                d.notes.push(
                    "lastPodEventTime is not set; consolidateAfter is counted from when it was initialized"
                        .to_owned(),
                );
            }
            if at > now {
                consolidation.push(Blocker {
                    kind: BlockerKind::ConsolidateAfter,
                    message: format!(
                        "consolidateAfter is {}: the last pod event was {} ago, so consolidation considers it in {}",
                        disruption.consolidate_after.0,
                        human_duration(now.duration_since(since)),
                        human_duration(at.duration_since(now))
                    ),
                });
            }
        }
        ConsolidatableAt::NotInitialized => {}
    }
    if consolidation.is_empty()
        && let Some(message) = budget(reason).blocked(&pool_name, reason)
    {
        consolidation.push(Blocker {
            kind: BlockerKind::Budget,
            message,
        });
    }
    let consolidation_ok = consolidation.is_empty();
    d.blockers.extend(consolidation);

    // Drift.
    if claim.is_true(cond::DRIFTED) {
        match budget(DisruptionReason::Drifted).blocked(&pool_name, DisruptionReason::Drifted) {
            Some(message) => d.blockers.push(Blocker {
                kind: BlockerKind::Budget,
                message,
            }),
            None => {
                d.drift = eventual_ok;
                d.notes.push(
                    "it has drifted: it can be replaced regardless of consolidation".to_owned(),
                );
                if d.drift && !pod_blockers.is_empty() {
                    d.notes.push(format!(
                        "its protected pods do not hold back drift: the drain waits on them for at most its terminationGracePeriod ({})",
                        claim.spec.termination_grace_period.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
    }
    if consolidation_ok && !common_blocked {
        d.consolidation = Some(reason);
        d.notes.push(format!(
            "consolidation may consider it ({reason:?}); whether it is removed depends on whether its pods fit elsewhere for less"
        ));
    }
    if let Some(at) = super::expires_at(claim) {
        d.notes.push(if at > now {
            format!(
                "it expires in {} (expireAfter {}); expiry does not wait for budgets",
                human_duration(at.duration_since(now)),
                claim.spec.expire_after.0
            )
        } else {
            format!(
                "it expired {} ago (expireAfter {})",
                human_duration(now.duration_since(at)),
                claim.spec.expire_after.0
            )
        });
    }
    d.disruptable_now = (!common_blocked && consolidation_ok) || d.drift;
    d
}
