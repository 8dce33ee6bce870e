//! A `FailedScheduling` Event for each pod nothing can hold, as upstream's
//! `PodFailedToScheduleEvent` words it ("Failed to schedule pod, …", so queries and dashboards
//! written for upstream find it beside the kube-scheduler's), at most one per pod every
//! [`WARN_AGAIN_AFTER`], and again at once when the reason changes.

use crate::controllers::Context;
use crate::explain::{FAILED_SCHEDULING, FAILED_TO_SCHEDULE};
use crate::scheduling::Plan;
use crate::state::CachedPod;
use kube::runtime::events::{Event, EventType};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tracing::info;

/// When each pod last got a FailedScheduling Event, and what it said, so a pod is not warned
/// about every round, yet hears at once when the reason changes (its claim got bound, and now
/// its volume's zone is the problem).
#[derive(Default)]
pub(super) struct Warned(HashMap<String, (Instant, String)>);

/// How long a pod that was warned about is not warned about again.
const WARN_AGAIN_AFTER: Duration = Duration::from_secs(300);

/// Publishes a FailedScheduling Event (and logs why) for each pod of `pods` the plan could
/// not place, unless it got the same one less than [`WARN_AGAIN_AFTER`] ago.
pub(super) async fn warn_unschedulable<P>(
    ctx: &Context<P>,
    warned: &mut Warned,
    plan: &Plan,
    pods: &[&CachedPod],
) {
    let now = Instant::now();
    warned
        .0
        .retain(|_, (at, _)| now.duration_since(*at) < WARN_AGAIN_AFTER);
    for unschedulable in &plan.unschedulable {
        let Some(pod) = pods.get(unschedulable.pod) else {
            continue;
        };
        let key = pod
            .metadata
            .uid
            .clone()
            .unwrap_or_else(|| unschedulable.pod_name.clone());
        let note = truncate(&unschedulable.to_string(), 1000);
        if warned.0.get(&key).is_some_and(|(_, said)| *said == note) {
            continue;
        }
        warned.0.insert(key, (now, note.clone()));
        info!(pod = %unschedulable.pod_name, reason = %note, "pod cannot be provisioned for");
        let event = Event {
            type_: EventType::Warning,
            reason: FAILED_SCHEDULING.to_owned(),
            note: Some(format!("{FAILED_TO_SCHEDULE}{note}")),
            action: "Provisioning".to_owned(),
            secondary: None,
        };
        // A new reason is a new Event (the Recorder would patch it into the old one's series,
        // old text and all).
        ctx.notices.publish(&event, &pod.object_ref(), &note).await;
    }
}

fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let cut = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…", &text[..cut])
}
