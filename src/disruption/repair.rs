//! Node repair: whether a node is unhealthy by its cloud's repair policies (a Node condition
//! at the policy's status since at least its toleration), as upstream's `NodeRepair` gate
//! judges it (`pkg/controllers/node/health/policy.go`).

use crate::cloud::RepairPolicy;
use crate::state::CachedNode;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A node's unhealthy condition, past its toleration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    pub condition_type: String,
    pub condition_status: String,
    /// When the condition last changed to its unhealthy status.
    pub since: Timestamp,
    /// When its policy's toleration ran out.
    pub eligible_at: Timestamp,
}

impl Unhealthy {
    /// "Ready is Unknown since 2026-…, past its 10m toleration".
    pub fn describe(&self) -> String {
        format!(
            "its Node's {} condition has been {} since {} (repair tolerates it until {})",
            self.condition_type, self.condition_status, self.since, self.eligible_at
        )
    }
}

/// The node's condition that makes it due for repair at `now`: of those matching a policy past
/// its toleration, the one due earliest. `None` when the node is healthy or still tolerated.
pub fn unhealthy(
    node: &CachedNode,
    policies: &[RepairPolicy],
    now: Timestamp,
) -> Option<Unhealthy> {
    let conditions = &node.conditions;
    let mut due: Option<Unhealthy> = None;
    for policy in policies {
        let Some(condition) = conditions
            .iter()
            .find(|c| *c.type_ == *policy.condition_type && *c.status == *policy.condition_status)
        else {
            continue;
        };
        // A condition without a transition time cannot be said to have lasted.
        let Some(since) = condition.last_transition_time.as_ref().map(|t| t.0) else {
            continue;
        };
        let Ok(toleration) = SignedDuration::try_from(policy.toleration) else {
            continue;
        };
        let Ok(eligible_at) = since.checked_add(toleration) else {
            continue;
        };
        if eligible_at > now || due.as_ref().is_some_and(|d| d.eligible_at <= eligible_at) {
            continue;
        }
        due = Some(Unhealthy {
            condition_type: condition.type_.to_string(),
            condition_status: condition.status.to_string(),
            since,
            eligible_at,
        });
    }
    due
}

/// Whether any of `node`'s conditions is at a policy's unhealthy status, however long it has
/// held (upstream counts these for its unhealthy-share guard).
pub(crate) fn matches_any(node: &CachedNode, policies: &[RepairPolicy]) -> bool {
    node.conditions.iter().any(|c| {
        policies
            .iter()
            .any(|p| *c.type_ == *p.condition_type && *c.status == *p.condition_status)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cloud::repair::kubelet_not_ready;
    use serde_json::json;

    fn node(status: &str, since: &str) -> CachedNode {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": status, "lastTransitionTime": since}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_node_not_ready_past_its_toleration_is_due_for_repair() {
        let policies = kubelet_not_ready(10);
        let now: Timestamp = "2026-03-02T10:11:00Z".parse().unwrap();
        let due = unhealthy(&node("Unknown", "2026-03-02T10:00:00Z"), &policies, now).unwrap();
        assert_eq!(due.condition_status, "Unknown");
        assert_eq!(due.eligible_at.to_string(), "2026-03-02T10:10:00Z");
    }

    #[test]
    fn a_node_not_ready_within_its_toleration_or_ready_is_left_alone() {
        let policies = kubelet_not_ready(10);
        let now: Timestamp = "2026-03-02T10:05:00Z".parse().unwrap();
        assert_eq!(
            unhealthy(&node("False", "2026-03-02T10:00:00Z"), &policies, now),
            None
        );
        let later: Timestamp = "2026-03-02T12:00:00Z".parse().unwrap();
        assert_eq!(
            unhealthy(&node("True", "2026-03-02T10:00:00Z"), &policies, later),
            None
        );
    }
}
