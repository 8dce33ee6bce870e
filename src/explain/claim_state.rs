//! A NodeClaim's state: its phase from its conditions (Launched, Registered, Initialized, Ready,
//! as upstream's lifecycle controller sets them) and its Node's readiness, why it is stuck when a
//! condition says so, whether it drifted, is being disrupted or has expired.

use crate::apis::NodeClaim;
use crate::apis::nodeclaim::conditions as cond;
use crate::state::CachedNode;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// Where a claim is in its life, from its conditions (and its node's readiness).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClaimPhase {
    /// Created; no controller has reported on it yet.
    Pending,
    /// Waiting for the instance.
    Launching,
    /// Launched; waiting for its Node to join.
    Registering,
    /// Registered; waiting for the Node to be Ready without startup taints.
    Initializing,
    /// Initialized and Ready.
    Ready,
    /// Initialized, but it or its Node is no longer Ready.
    NotReady,
    /// Being deleted.
    Terminating,
}

impl ClaimPhase {
    /// How many of the three launch steps (Launched, Registered, Initialized) are done.
    pub fn steps_done(self) -> u64 {
        match self {
            Self::Pending | Self::Launching => 0,
            Self::Registering => 1,
            Self::Initializing => 2,
            Self::Ready | Self::NotReady | Self::Terminating => 3,
        }
    }
}

/// A claim's state for a STATE column: its phase, why it is stuck if a condition says so, and
/// whether it drifted.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimState {
    pub phase: ClaimPhase,
    /// The reason of the condition holding it back, when it is not the usual "waiting" one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub drifted: bool,
    /// Its Node carries `karpenter.sh/disrupted`: a disruption is replacing or draining it.
    pub disrupting: bool,
    /// Its `expireAfter` has been reached: the agent deletes it whatever the budgets say.
    pub expiring: bool,
}

impl std::fmt::Display for ClaimState {
    /// `Ready`, `Ready,Drifted`, `Terminating,Disrupting`, `Launching(NodeClassNotReady)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.phase)?;
        if let Some(detail) = &self.detail {
            write!(f, "({detail})")?;
        }
        if self.drifted {
            f.write_str(",Drifted")?;
        }
        if self.disrupting {
            f.write_str(",Disrupting")?;
        }
        if self.expiring {
            f.write_str(",Expiring")?;
        }
        Ok(())
    }
}

/// Reasons controllers give a False/Unknown condition while simply waiting: not worth a mention.
const WAITING_REASONS: &[&str] = &[
    "",
    "AwaitingReconciliation",
    "NotLaunched",
    "NotRegistered",
    "NodeNotFound",
    "NotInitialized",
    "Unknown",
];

/// The state of a claim, from its conditions and its Node. `node` is `None` only when the caller
/// looked for the Node and found none: an initialized claim whose Node is gone is `NotReady`
/// (`NodeDeleted`).
pub(crate) fn claim_state(claim: &NodeClaim, node: Option<&CachedNode>) -> ClaimState {
    let drifted = claim.is_true(cond::DRIFTED);
    let detail_of = |type_: &str| {
        claim
            .condition(type_)
            .filter(|c| c.status != "True" && !WAITING_REASONS.contains(&c.reason.as_str()))
            .map(|c| c.reason.clone())
    };
    let (phase, detail) = if claim.metadata.deletion_timestamp.is_some() {
        (ClaimPhase::Terminating, None)
    } else if claim
        .status
        .as_ref()
        .is_none_or(|s| s.conditions.is_empty())
    {
        (ClaimPhase::Pending, None)
    } else if !claim.is_true(cond::LAUNCHED) {
        (ClaimPhase::Launching, detail_of(cond::LAUNCHED))
    } else if !claim.is_true(cond::REGISTERED) {
        (ClaimPhase::Registering, detail_of(cond::REGISTERED))
    } else if !claim.is_true(cond::INITIALIZED) {
        (ClaimPhase::Initializing, detail_of(cond::INITIALIZED))
    } else {
        let claim_not_ready = claim
            .condition(cond::READY)
            .is_some_and(|c| c.status != "True");
        let node_not_ready = node.is_some_and(|n| !n.is_ready());
        let node_deleted =
            node.is_none() && claim.status.as_ref().is_some_and(|s| s.node_name.is_some());
        if node_deleted {
            (ClaimPhase::NotReady, Some("NodeDeleted".to_owned()))
        } else if claim_not_ready || node_not_ready {
            (
                ClaimPhase::NotReady,
                detail_of(cond::READY)
                    .or_else(|| node_not_ready.then(|| "NodeNotReady".to_owned())),
            )
        } else {
            (ClaimPhase::Ready, None)
        }
    };
    ClaimState {
        phase,
        detail,
        drifted,
        disrupting: node.is_some_and(crate::disruption::disruptability::is_disrupting),
        expiring: false,
    }
}

/// [`claim_state`], also saying whether its `expireAfter` has been reached at `now`.
pub(crate) fn claim_state_at(
    claim: &NodeClaim,
    node: Option<&CachedNode>,
    now: Timestamp,
) -> ClaimState {
    ClaimState {
        expiring: crate::disruption::is_expired(claim, now),
        ..claim_state(claim, node)
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::explain::fixtures::*;
    use serde_json::json;

    #[test]
    fn the_state_comes_from_the_first_condition_not_yet_true() {
        assert_eq!(claim_state(&claim(json!({})), None).to_string(), "Pending");
        let launching = claim(
            json!({"status": {"conditions": [{"type": "Launched", "status": "False", "reason": "NodeClassNotReady", "message": "", "lastTransitionTime": NOW}]}}),
        );
        assert_eq!(
            claim_state(&launching, None).to_string(),
            "Launching(NodeClassNotReady)"
        );
        let registering = claim(json!({"status": {"conditions": [
            {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": NOW},
            {"type": "Registered", "status": "False", "reason": "NotRegistered", "message": "", "lastTransitionTime": NOW}]}}));
        assert_eq!(claim_state(&registering, None).to_string(), "Registering");
        let mut drifted = ours("m.small");
        if let Some(s) = drifted.status.as_mut() {
            s.conditions.push(serde_json::from_value(json!({"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "message": "", "lastTransitionTime": NOW})).expect("condition"));
        }
        assert_eq!(
            claim_state(&drifted, Some(&node("n1", None))).to_string(),
            "Ready,Drifted"
        );
        let mut not_ready = node("n1", None);
        not_ready.conditions[0].status = "False".into();
        assert_eq!(
            claim_state(&ours("m.small"), Some(&not_ready)).to_string(),
            "NotReady(NodeNotReady)"
        );
    }
}
