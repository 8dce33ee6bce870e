//! Taints and tolerations with the kube-scheduler's matching rules.
//!
//! A node (or a NodePool's template) blocks a pod unless the pod tolerates every one of its
//! taints. Like upstream Karpenter, `PreferNoSchedule` taints block too until preferences are
//! relaxed; a NodePool's `startupTaints` never block, because they go away once the node's
//! daemons are up.

use k8s_openapi::api::core::v1::{Taint, Toleration};
use std::fmt;

/// `NoSchedule`.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// `PreferNoSchedule`.
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
/// `NoExecute`.
pub const NO_EXECUTE: &str = "NoExecute";

/// Whether a taint is one that a node carries only while it starts (upstream's
/// `KnownEphemeralTaints`): not ready or unreachable until its kubelet reports, the external
/// cloud provider's until it is initialized, Karpenter's own `unregistered`. A Karpenter node
/// that has not finished initializing is planned as if they were gone, as they soon will be.
pub(crate) fn is_known_ephemeral(taint: &Taint) -> bool {
    match (taint.key.as_str(), taint.effect.as_str()) {
        ("node.kubernetes.io/not-ready", NO_SCHEDULE | NO_EXECUTE)
        | ("node.kubernetes.io/unreachable", NO_SCHEDULE) => true,
        ("node.cloudprovider.kubernetes.io/uninitialized", NO_SCHEDULE) => {
            taint.value.as_deref() == Some("true")
        }
        (key, NO_EXECUTE) => key == crate::apis::labels::UNREGISTERED_TAINT_KEY,
        _ => false,
    }
}

/// Whether one toleration matches one taint.
pub(crate) fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    match toleration.operator.as_deref().unwrap_or("Equal") {
        // An empty key with Exists tolerates everything.
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" | "" => {
            key == taint.key
                && toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The first taint none of the tolerations match.
pub fn first_untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)))
}

/// A toleration for every `PreferNoSchedule` taint, what relaxing preferences adds.
pub(crate) fn tolerate_prefer_no_schedule() -> Toleration {
    Toleration {
        operator: Some("Exists".to_owned()),
        effect: Some(PREFER_NO_SCHEDULE.to_owned()),
        ..Toleration::default()
    }
}

/// Prints a taint as `key=value:Effect` (kubectl's notation).
pub(crate) struct DisplayTaint<'a>(pub &'a Taint);

impl fmt::Display for DisplayTaint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.0;
        match t.value.as_deref().filter(|v| !v.is_empty()) {
            Some(value) => write!(f, "{}={}:{}", t.key, value, t.effect),
            None => write!(f, "{}:{}", t.key, t.effect),
        }
    }
}

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect: effect.to_owned(),
            time_added: None,
        }
    }

    fn toleration(
        key: Option<&str>,
        op: &str,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Toleration {
        Toleration {
            key: key.map(str::to_owned),
            operator: Some(op.to_owned()),
            value: value.map(str::to_owned),
            effect: effect.map(str::to_owned),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerations_match_like_the_kube_scheduler() {
        let gpu = taint("nvidia.com/gpu", Some("true"), NO_SCHEDULE);
        assert!(tolerates(
            &toleration(Some("nvidia.com/gpu"), "Equal", Some("true"), None),
            &gpu
        ));
        assert!(tolerates(
            &toleration(Some("nvidia.com/gpu"), "Exists", None, Some(NO_SCHEDULE)),
            &gpu
        ));
        assert!(
            tolerates(&toleration(None, "Exists", None, None), &gpu),
            "empty key + Exists tolerates all"
        );
        assert!(!tolerates(
            &toleration(Some("nvidia.com/gpu"), "Equal", Some("false"), None),
            &gpu
        ));
        assert!(!tolerates(
            &toleration(Some("nvidia.com/gpu"), "Exists", None, Some(NO_EXECUTE)),
            &gpu
        ));
        assert!(!tolerates(
            &toleration(Some("other"), "Exists", None, None),
            &gpu
        ));
    }

    #[test]
    fn the_first_untolerated_taint_is_reported() {
        let taints = [
            taint("a", None, NO_SCHEDULE),
            taint("b", Some("x"), PREFER_NO_SCHEDULE),
        ];
        let tols = [toleration(Some("a"), "Exists", None, None)];
        assert_eq!(
            first_untolerated(&taints, &tols).map(|t| t.key.as_str()),
            Some("b")
        );
        assert_eq!(
            first_untolerated(
                &taints,
                &[
                    toleration(Some("a"), "Exists", None, None),
                    tolerate_prefer_no_schedule()
                ]
            ),
            None
        );
        assert_eq!(DisplayTaint(&taints[1]).to_string(), "b=x:PreferNoSchedule");
    }

    #[test]
    fn only_the_taints_of_a_starting_node_are_known_ephemeral() {
        assert!(is_known_ephemeral(&taint(
            "node.kubernetes.io/not-ready",
            None,
            NO_SCHEDULE
        )));
        assert!(is_known_ephemeral(&taint(
            "node.kubernetes.io/not-ready",
            None,
            NO_EXECUTE
        )));
        assert!(is_known_ephemeral(&taint(
            "node.kubernetes.io/unreachable",
            None,
            NO_SCHEDULE
        )));
        assert!(is_known_ephemeral(&taint(
            "node.cloudprovider.kubernetes.io/uninitialized",
            Some("true"),
            NO_SCHEDULE
        )));
        assert!(is_known_ephemeral(&taint(
            "karpenter.sh/unregistered",
            None,
            NO_EXECUTE
        )));
        assert!(
            !is_known_ephemeral(&taint("node.kubernetes.io/unreachable", None, NO_EXECUTE)),
            "a lost node's eviction taint stays"
        );
        assert!(!is_known_ephemeral(&taint(
            "nvidia.com/gpu",
            Some("true"),
            NO_SCHEDULE
        )));
    }
}
