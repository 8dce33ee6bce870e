//! Status conditions as Kubernetes expects them: one per type, `lastTransitionTime` moves only
//! when the status does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Sets a condition, keeping its transition time when its status does not change.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    put(conditions, type_, status, reason, message, generation);
}

/// Sets a condition to Unknown: the outcome is not known yet (upstream marks a launch that
/// failed for a reason other than capacity so, and tries again).
pub(crate) fn set_unknown(
    conditions: &mut Vec<Condition>,
    type_: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    put(conditions, type_, "Unknown", reason, message, generation);
}

fn put(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let status = status.to_owned();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now;
            }
            existing.status = status;
            existing.reason = reason.to_owned();
            existing.message = message.to_owned();
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status,
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: now,
            observed_generation: generation,
        }),
    }
}

/// Whether a condition is present and True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// When a condition last changed, if present.
pub fn since(conditions: &[Condition], type_: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.last_transition_time.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_moves_only_when_the_status_changes() {
        let mut conditions = Vec::new();
        set(&mut conditions, "Launched", false, "Pending", "", None);
        let first = conditions[0].last_transition_time.clone();
        set(
            &mut conditions,
            "Launched",
            false,
            "StillPending",
            "waiting",
            None,
        );
        assert_eq!(conditions[0].last_transition_time, first);
        assert_eq!(conditions[0].reason, "StillPending");
        std::thread::sleep(std::time::Duration::from_millis(2));
        set(&mut conditions, "Launched", true, "Launched", "", Some(1));
        assert_ne!(conditions[0].last_transition_time, first);
        assert!(is_true(&conditions, "Launched"));
        assert_eq!(conditions.len(), 1);
    }
}
