//! What happened to a NodeClaim and when: its creation, its conditions' transitions, its Node's
//! creation, Events on it and on its Node, and its deletion, in order.

use super::event_time;
use crate::apis::NodeClaim;
use crate::apis::nodeclaim::conditions as cond;
use crate::state::CachedNode;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// One moment in a claim's life.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
    /// `Object`, `Condition` or `Event` (or `Warning` for a warning Event).
    pub source: String,
    /// What happened: `Created`, `Launched=True`, the Event's reason...
    pub what: String,
    pub detail: String,
}

/// The usual order of a claim's conditions, for entries at the same instant.
const CONDITION_ORDER: &[&str] = &[
    cond::LAUNCHED,
    cond::REGISTERED,
    cond::INITIALIZED,
    cond::READY,
];

pub(super) fn timeline(
    claim: &NodeClaim,
    node: Option<&CachedNode>,
    claim_events: &[&Event],
    node_events: &[&Event],
) -> Vec<TimelineEntry> {
    let mut entries: Vec<(usize, TimelineEntry)> = Vec::new();
    if let Some(t) = &claim.metadata.creation_timestamp {
        entries.push((
            0,
            TimelineEntry {
                at: Some(t.0),
                source: "Object".to_owned(),
                what: "Created".to_owned(),
                detail: String::new(),
            },
        ));
    }
    for c in claim.status.iter().flat_map(|s| s.conditions.iter()) {
        let order = CONDITION_ORDER
            .iter()
            .position(|t| *t == c.type_)
            .map_or(20, |p| p + 1);
        let detail = match (c.reason.is_empty(), c.message.is_empty()) {
            (true, true) => String::new(),
            (false, true) => c.reason.clone(),
            (true, false) => c.message.clone(),
            (false, false) => format!("{}: {}", c.reason, c.message),
        };
        entries.push((
            order,
            TimelineEntry {
                at: Some(c.last_transition_time.0),
                source: "Condition".to_owned(),
                what: format!("{}={}", c.type_, c.status),
                detail,
            },
        ));
    }
    if let Some((node, t)) = node.and_then(|n| Some((n, n.creation_timestamp.as_ref()?))) {
        entries.push((
            1,
            TimelineEntry {
                at: Some(t.0),
                source: "Object".to_owned(),
                what: "NodeCreated".to_owned(),
                detail: format!("node {}", node.name),
            },
        ));
    }
    for (event, on) in claim_events
        .iter()
        .map(|e| (e, ""))
        .chain(node_events.iter().map(|e| (e, "node: ")))
    {
        let warning = event.type_.as_deref() == Some("Warning");
        let count = event
            .series
            .as_ref()
            .and_then(|s| s.count)
            .or(event.count)
            .filter(|c| *c > 1);
        let mut detail = format!("{on}{}", event.message.clone().unwrap_or_default());
        if let Some(count) = count {
            detail.push_str(&format!(" (x{count})"));
        }
        entries.push((
            30,
            TimelineEntry {
                at: event_time(event),
                source: if warning { "Warning" } else { "Event" }.to_owned(),
                what: event.reason.clone().unwrap_or_default(),
                detail,
            },
        ));
    }
    if let Some(t) = &claim.metadata.deletion_timestamp {
        entries.push((
            40,
            TimelineEntry {
                at: Some(t.0),
                source: "Object".to_owned(),
                what: "DeletionRequested".to_owned(),
                detail: String::new(),
            },
        ));
    }
    // Stable: entries at the same instant keep the lifecycle order.
    entries.sort_by(|(oa, a), (ob, b)| match (a.at, b.at) {
        (Some(x), Some(y)) => x.cmp(&y).then(oa.cmp(ob)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => oa.cmp(ob),
    });
    entries.into_iter().map(|(_, e)| e).collect()
}
