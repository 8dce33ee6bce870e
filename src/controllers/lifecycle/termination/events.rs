//! The Events termination publishes, with upstream's reasons and wording
//! (`pkg/controllers/node/termination/terminator/events/events.go`): `FailedDraining` and
//! `TerminationGracePeriodExpiring` and `AwaitingVolumeDetachment` on the Node, `Evicted` and
//! `Disrupted` on each pod.

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType};

fn event(type_: EventType, reason: &str, action: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    }
}

/// The drain is not finished: `waiting` pods are still on the node.
pub(super) fn failed_to_drain(waiting: usize) -> Event {
    event(
        EventType::Warning,
        "FailedDraining",
        "Drain",
        format!("Failed to drain node, {waiting} pods are waiting to be evicted"),
    )
}

/// Evictions a PodDisruptionBudget refused (`pods` as `namespace/name`; not empty).
pub(super) fn refused_by_budget(pods: &[String]) -> Event {
    let first = pods.first().map(String::as_str).unwrap_or_default();
    let more = match pods.len() {
        0 | 1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    event(
        EventType::Warning,
        "FailedDraining",
        "Evict",
        format!("Failed to drain node, evicting pod violates a PDB (Pod={first}{more})"),
    )
}

/// The instance waits until the drained pods' volumes are detached (`names`: the
/// VolumeAttachments, not empty; five named at most, as upstream's `pretty.Slice`).
pub(super) fn awaiting_volume_detachment(names: &[String]) -> Event {
    let shown = if names.len() > 5 {
        format!("{} and {} other(s)", names[..5].join(", "), names.len() - 5)
    } else {
        names.join(", ")
    };
    event(
        EventType::Normal,
        "AwaitingVolumeDetachment",
        "Terminate",
        format!("Awaiting deletion of bound volumeattachments ({shown})"),
    )
}

/// The node's pods will be deleted by `deadline` whatever blocks their eviction.
pub(super) fn grace_period_expiring(deadline: &str) -> Event {
    event(
        EventType::Warning,
        "TerminationGracePeriodExpiring",
        "Drain",
        format!("All pods will be deleted by {deadline}"),
    )
}

/// A pod was evicted; `reason` is why its node goes. A pod no controller owns is not
/// recreated: its Event is a Warning that says so.
pub(super) fn evicted(reason: &str, has_controller: bool) -> Event {
    if has_controller {
        event(
            EventType::Normal,
            "Evicted",
            "Evict",
            format!("Evicted pod: {reason}"),
        )
    } else {
        event(
            EventType::Warning,
            "Evicted",
            "Evict",
            format!("Evicted pod: {reason}; it has no controller, so nothing recreates it"),
        )
    }
}

/// A pod was deleted directly because its node's deadline is near.
pub(super) fn deleted_for_deadline(
    deadline: Timestamp,
    grace_period_seconds: u32,
    pod_grace_period_seconds: Option<i64>,
) -> Event {
    let own = pod_grace_period_seconds.map_or_else(|| "unset".to_owned(), |s| s.to_string());
    event(
        EventType::Normal,
        "Disrupted",
        "Delete",
        format!(
            "Deleting the pod to accommodate the terminationTime {deadline} of the node. The pod \
             was granted {grace_period_seconds} seconds of grace-period of its {own} \
             terminationGracePeriodSeconds. This bypasses the PDB of the pod and the \
             do-not-disrupt annotation."
        ),
    )
}
