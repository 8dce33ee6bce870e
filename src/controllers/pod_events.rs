//! `status.lastPodEventTime` on NodeClaims, as upstream's `nodeclaim/podevents` keeps it: the
//! last time a pod was bound to the claim's node, finished on it, or left it. Disruption counts
//! `consolidateAfter` from it, and `explain` shows it.
//!
//! The pod watch reports each pod to [`PodEvents::observe`]; a loop writes the times, at most one
//! write per claim per [`DEDUPE`] (upstream's 10 s), with the time of the latest event.

use super::{Context, Error, FIELD_MANAGER};
use crate::apis::NodeClaim;
use crate::scheduling::PodView;
use crate::state::CachedPod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tracing::warn;

/// A claim's time is written at most this often.
pub(crate) const DEDUPE: Duration = Duration::from_secs(10);

/// Where each pod was last seen, and the nodes with pod events not yet written.
#[derive(Default)]
pub(crate) struct PodEvents {
    /// Pod UID → (node it is bound to, whether it has finished).
    placed: Mutex<HashMap<String, (Option<String>, bool)>>,
    /// Node name → time of its latest pod event.
    pending: Mutex<HashMap<String, Timestamp>>,
}

impl PodEvents {
    /// Called for every pod the watch delivers. `initial` is true for the start-up listing,
    /// which records where pods are without counting it as an event (a restart is not one).
    pub(crate) fn observe(&self, pod: &CachedPod, initial: bool) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let node = pod.node_name.clone();
        let terminal = pod.is_terminal();
        let previous = self
            .placed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid, (node.clone(), terminal));
        if initial {
            return;
        }
        let Some(node) = node else { return };
        let event = match previous {
            None => true,
            Some((previous_node, was_terminal)) => {
                previous_node.as_deref() != Some(node.as_str()) || (terminal && !was_terminal)
            }
        };
        if event {
            self.pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(node, Timestamp::now());
        }
    }

    /// Called when a pod is deleted: an event on the node it was bound to.
    pub(crate) fn forget(&self, pod: &CachedPod) {
        let Some(uid) = &pod.metadata.uid else { return };
        let removed = self
            .placed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
        let node = removed
            .and_then(|(node, _)| node)
            .or_else(|| pod.node_name.clone());
        if let Some(node) = node {
            self.pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(node, Timestamp::now());
        }
    }

    fn take(&self) -> HashMap<String, Timestamp> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn put_back(&self, node: String, at: Timestamp) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = pending.entry(node).or_insert(at);
        *entry = (*entry).max(at);
    }
}

/// Writes pending times every couple of seconds until cancelled.
pub(crate) async fn run<P: 'static + Send + Sync>(ctx: Arc<Context<P>>, events: Arc<PodEvents>) {
    let mut interval = tokio::time::interval(Duration::from_secs(2));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let _pass = ctx
            .health
            .pass(super::names::POD_EVENTS, ctx.settings.stuck_pass_after);
        if let Err(e) = flush(&ctx, &events).await {
            warn!(error = %e, cause = ?std::error::Error::source(&e), "writing lastPodEventTime failed; retrying");
        }
    }
}

/// One pass: writes the latest event time of every node whose claim was not written within
/// [`DEDUPE`]; the rest wait for a later pass.
pub(crate) async fn flush<P>(ctx: &Context<P>, events: &PodEvents) -> Result<(), Error> {
    let pending = events.take();
    if pending.is_empty() {
        return Ok(());
    }
    let claims = ctx.cluster.claims.state();
    let by_node: HashMap<&str, &NodeClaim> = claims
        .iter()
        .filter_map(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .map(|n| (n, c.as_ref()))
        })
        .collect();
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let now = Timestamp::now();
    let mut failed = None;
    for (node, at) in pending {
        if failed.is_some() {
            events.put_back(node, at);
            continue;
        }
        // Nodes no claim of ours owns (yet) have nothing to record.
        let Some(claim) = by_node.get(node.as_str()) else {
            continue;
        };
        let last = claim
            .status
            .as_ref()
            .and_then(|s| s.last_pod_event_time.as_ref())
            .map(|t| t.0);
        if last.is_some_and(|last| last >= at) {
            continue;
        }
        if last.is_some_and(|last| now.duration_since(last).unsigned_abs() < DEDUPE) {
            events.put_back(node, at);
            continue;
        }
        let patch = json!({"status": {"lastPodEventTime": Time(at)}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match api
            .patch_status(&claim.name_any(), &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => {
                events.put_back(node, at);
                failed = Some(Error::kube("writing lastPodEventTime")(e));
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, node: Option<&str>, phase: &str) -> CachedPod {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"containers": [], "nodeName": node},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn binding_finishing_and_leaving_are_events_and_the_start_up_listing_is_not() {
        let events = PodEvents::default();
        events.observe(&pod("a", Some("n1"), "Running"), true);
        assert!(events.take().is_empty(), "a restart is not a pod event");
        events.observe(&pod("b", None, "Pending"), false);
        assert!(events.take().is_empty(), "a pending pod is on no node");
        events.observe(&pod("b", Some("n2"), "Pending"), false);
        assert_eq!(events.take().into_keys().collect::<Vec<_>>(), ["n2"]);
        events.observe(&pod("b", Some("n2"), "Running"), false);
        assert!(events.take().is_empty(), "a status change is not an event");
        events.observe(&pod("b", Some("n2"), "Succeeded"), false);
        assert_eq!(events.take().into_keys().collect::<Vec<_>>(), ["n2"]);
        events.forget(&pod("a", Some("n1"), "Running"));
        assert_eq!(events.take().into_keys().collect::<Vec<_>>(), ["n1"]);
    }
}
