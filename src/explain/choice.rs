//! What a NodeClaim could have been and why it is what it is: the instance types the agent
//! recorded as fitting (cheapest first) and what became of each, with InsufficientCapacity Events
//! naming why cheaper ones were passed over; for claims without a record, the instance types its
//! requirements allow.

use super::{event_time, human_duration, label, plural};
use crate::apis::RecordedInstanceType;
use crate::apis::nodeclaim::conditions as cond;
use crate::apis::{NodeClaim, RequirementOperator, labels};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// What the claim could have been and why it is what it is.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceChoice {
    /// The agent recorded the options that fitted.
    pub recorded: bool,
    pub summary: String,
    /// Recorded options, cheapest first, with what became of each.
    pub options: Vec<ChoiceOption>,
    /// For claims without recorded options: the instance types its requirements allow (empty when
    /// they allow any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_instance_types: Vec<String>,
}

/// One option and its fate.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChoiceOption {
    #[serde(flatten)]
    pub option: RecordedInstanceType,
    /// `launched`, `no capacity: ...`, `cheaper, not launched: ...`, or empty for the options
    /// behind the launched one.
    pub outcome: String,
    /// Whether this is the launched type.
    pub launched: bool,
}

/// Whether `text` names `word` as a whole token (instance type names contain dots and dashes).
fn mentions(text: &str, word: &str) -> bool {
    text.split(|c: char| {
        c.is_whitespace()
            || c == ','
            || c == ';'
            || c == '('
            || c == ')'
            || c == '"'
            || c == '['
            || c == ']'
    })
    .any(|token| token.trim_end_matches(['.', ':']) == word)
}

pub(super) fn instance_choice(
    claim: &NodeClaim,
    events: &[Event],
    now: Timestamp,
) -> InstanceChoice {
    let launched = label(&claim.metadata, labels::INSTANCE_TYPE);
    let launched_at = claim
        .condition(cond::LAUNCHED)
        .filter(|c| c.status == "True")
        .map(|c| c.last_transition_time.0);
    let Some(options) = claim.instance_type_options() else {
        let allowed: Vec<String> = claim
            .spec
            .requirements
            .iter()
            .filter(|r| {
                labels::normalize(&r.key) == labels::INSTANCE_TYPE
                    && r.operator == RequirementOperator::In
            })
            .flat_map(|r| r.values.iter().map(|v| v.as_str().to_owned()))
            .collect();
        let summary = match (launched, allowed.len()) {
            (Some(t), 0) => format!(
                "not recorded: its requirements allow any instance type; the cloud provider launched {t}"
            ),
            (Some(t), n) => format!(
                "not recorded: its requirements allow {n} instance {} (prices not recorded); the cloud provider launched {t}",
                plural(n, "type", "types")
            ),
            (None, 0) => "not recorded, and it has not launched yet".to_owned(),
            (None, n) => format!(
                "not recorded: its requirements allow {n} instance {}; it has not launched yet",
                plural(n, "type", "types")
            ),
        };
        return InstanceChoice {
            recorded: false,
            summary,
            options: Vec::new(),
            allowed_instance_types: allowed,
        };
    };

    let launched_index = launched.and_then(|t| options.iter().position(|o| o.name == t));
    // InsufficientCapacity events (on any NodeClaim: a claim that got none is deleted and its
    // pods provisioned again) from before this claim launched.
    let cutoff = launched_at.unwrap_or(now);
    let no_capacity = |name: &str| -> Option<String> {
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("InsufficientCapacity"))
            .filter(|e| event_time(e).is_none_or(|at| at <= cutoff))
            .filter(|e| e.message.as_deref().is_some_and(|m| mentions(m, name)))
            .max_by_key(|e| event_time(e))
            .map(|e| {
                let on = e.involved_object.name.as_deref().unwrap_or("?");
                let when = event_time(e)
                    .map(|at| {
                        format!(
                            ", {} before launch",
                            human_duration(cutoff.duration_since(at))
                        )
                    })
                    .unwrap_or_default();
                format!("no capacity (InsufficientCapacity on nodeclaim {on}{when})")
            })
    };
    let mut outcomes: Vec<ChoiceOption> = Vec::new();
    for (i, option) in options.iter().enumerate() {
        let is_launched = Some(i) == launched_index;
        let outcome = if is_launched {
            "launched".to_owned()
        } else if launched_index.is_none_or(|l| i < l) && launched.is_some() {
            no_capacity(&option.name).unwrap_or_else(|| {
                "cheaper, not launched: no InsufficientCapacity event recorded for it (Events expire after an hour)".to_owned()
            })
        } else {
            String::new()
        };
        outcomes.push(ChoiceOption {
            option: option.clone(),
            outcome,
            launched: is_launched,
        });
    }
    let n = options.len();
    let fitted = format!(
        "{n} instance {} fitted its pods",
        plural(n, "type", "types")
    );
    let summary = match (launched, launched_index) {
        (None, _) => match options.first() {
            Some(first) => match first.price {
                Some(price) => format!(
                    "{fitted}; not launched yet, the cheapest is {} at ${price:.4}/hour",
                    first.name
                ),
                None => format!(
                    "{fitted}; not launched yet, the first is {} (its price is unknown)",
                    first.name
                ),
            },
            None => format!("{fitted}; not launched yet"),
        },
        (Some(t), Some(0)) => format!("{fitted}; it launched the cheapest, {t}"),
        (Some(t), Some(i)) => {
            let skipped: Vec<String> = outcomes[..i]
                .iter()
                .map(|o| {
                    if o.outcome.starts_with("no capacity") {
                        format!("{} had no capacity", o.option.name)
                    } else {
                        format!("{} was not launched (no record why)", o.option.name)
                    }
                })
                .collect();
            format!(
                "{fitted}; it launched {t}, option {} of {n}, because {}",
                i + 1,
                skipped.join(", ")
            )
        }
        (Some(t), None) => format!("{fitted}; it launched {t}, which is not among them"),
    };
    let mut summary = summary;
    if let (Some(i), Some(zone), Some(ct)) = (
        launched_index,
        label(&claim.metadata, labels::ZONE),
        label(&claim.metadata, labels::CAPACITY_TYPE),
    ) {
        let option = &options[i];
        if (!option.zone.is_empty() && option.zone != zone)
            || (!option.capacity_type.is_empty() && option.capacity_type != ct)
        {
            summary.push_str(&format!(
                " (as {ct} in {zone}; its cheapest offering was {} in {})",
                option.capacity_type, option.zone
            ));
        }
    }
    InstanceChoice {
        recorded: true,
        summary,
        options: outcomes,
        allowed_instance_types: Vec::new(),
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use crate::explain::ClusterObjects;
    use crate::explain::fixtures::*;

    #[test]
    fn a_cheaper_option_skipped_without_an_event_is_said_to_have_no_record() {
        let cluster = ClusterObjects {
            node_claims: vec![ours("m.large")],
            ..ClusterObjects::default()
        };
        let e = explained(&cluster);
        assert!(
            e.choice
                .summary
                .contains("m.small was not launched (no record why)"),
            "{}",
            e.choice.summary
        );
    }
}
