//! Pods that wait for a node, and why each waits: scheduling gates, a NodeClaim being launched for
//! it, Karpenter's `FailedScheduling` Event, or the scheduler's own PodScheduled condition.
//!
//! Karpenter's `FailedScheduling` is told from the kube-scheduler's by upstream's wording
//! ("Failed to schedule pod, …"), which this agent's Events share, so a cluster run by upstream
//! Karpenter reads the same; `FailedProvisioning`, what this agent said before, is read too.

use super::{
    ClaimPhase, ClaimState, ClusterObjects, NodeIndex, claim_state, event_time, label, name_of,
    node_name_of, pod_key,
};
use crate::apis::{NodeClaim, labels};
use crate::scheduling::PodView;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use std::collections::HashMap;

/// A pod that waits for a node, and why.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PendingPod {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    /// A word: `WaitingForNodeClaim`, `FailedScheduling`, `Unschedulable`, `SchedulingGated`...
    pub reason: String,
    /// The sentence behind it.
    pub message: String,
    /// The claim being launched for it, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
}

/// Whether a pod waits for a node: unbound, not terminal, not being deleted.
pub fn is_pending(pod: &Pod) -> bool {
    node_name_of(pod).is_none() && !pod.is_terminal() && pod.metadata.deletion_timestamp.is_none()
}

/// Pods keyed `namespace/name`, with the claim still coming up that was made for each.
///
/// Which claims are coming up does not depend on their Nodes: `claim_state` reads the Node only
/// once Launched, Registered and Initialized are all true, and then the phase is Ready or
/// NotReady. So `status` can tell without the Node list; with `nodes`, the state also says
/// whether the Node is being disrupted.
fn nominated<'a>(
    claims: &'a [NodeClaim],
    nodes: Option<&NodeIndex>,
) -> HashMap<String, (&'a NodeClaim, ClaimState)> {
    let mut nominated = HashMap::new();
    for claim in claims {
        let state = claim_state(claim, nodes.and_then(|n| n.of(claim)));
        if matches!(
            state.phase,
            ClaimPhase::Ready | ClaimPhase::NotReady | ClaimPhase::Terminating
        ) {
            continue;
        }
        for pod in claim.provisioned_for().unwrap_or_default() {
            nominated.insert(pod, (claim, state.clone()));
        }
    }
    nominated
}

/// The scheduler's PodScheduled condition of a pod it could not place, if it has one.
fn unscheduled(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status != "True")
        })
}

fn scheduling_gates(pod: &Pod) -> Vec<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .into_iter()
        .flatten()
        .map(|g| g.name.as_str())
        .collect()
}

/// Whether [`pending_pods`] would take this pod's reason from Karpenter's Event, were
/// there one: it waits, the scheduler has judged it, it is not gated, and no claim is coming up
/// for it.
fn event_could_explain(pod: &Pod, nominated: &HashMap<String, (&NodeClaim, ClaimState)>) -> bool {
    is_pending(pod)
        && unscheduled(pod).is_some()
        && scheduling_gates(pod).is_empty()
        && !nominated.contains_key(&pod_key(pod))
}

/// The namespaces of the pending pods whose reason Karpenter's Event could give: where
/// `status` has to list Events. Often none, even mid scale-out, since pods waiting for a claim
/// that is coming up get their reason from the claim; Events are the one kind the API server
/// does not cache, so each list of them reads a whole namespace from etcd.
pub fn namespaces_an_event_could_explain<'a>(
    pods: &'a [Pod],
    claims: &[NodeClaim],
) -> std::collections::BTreeSet<&'a str> {
    let nominated = nominated(claims, None);
    pods.iter()
        .filter(|p| event_could_explain(p, &nominated))
        .map(|p| p.metadata.namespace.as_deref().unwrap_or_default())
        .collect()
}

/// The reason of upstream's Event for a pod Karpenter cannot place
/// (`pkg/controllers/provisioning/scheduling/events.go`, `PodFailedToScheduleEvent`).
pub const FAILED_SCHEDULING: &str = "FailedScheduling";
/// The start of that Event's message, which tells it from the kube-scheduler's.
pub(crate) const FAILED_TO_SCHEDULE: &str = "Failed to schedule pod, ";
/// What this agent called that Event before it used upstream's reason.
const LEGACY_FAILED_PROVISIONING: &str = "FailedProvisioning";

/// Why Karpenter could not place the pod, if the Event is Karpenter's saying so (not the
/// kube-scheduler's `FailedScheduling`, which has no such prefix).
fn karpenters_failure(event: &Event) -> Option<&str> {
    let message = event.message.as_deref().unwrap_or_default();
    match event.reason.as_deref()? {
        FAILED_SCHEDULING => message.strip_prefix(FAILED_TO_SCHEDULE),
        LEGACY_FAILED_PROVISIONING => Some(message),
        _ => None,
    }
}

/// Pods that wait for a node, with the reason each waits, oldest first.
pub fn pending_pods(cluster: &ClusterObjects) -> Vec<PendingPod> {
    // Claims still coming up, by the pods they were made for.
    let nodes = NodeIndex::new(&cluster.nodes);
    let nominated = nominated(&cluster.node_claims, Some(&nodes));
    // The newest of Karpenter's events per pod.
    let mut failed: HashMap<String, (Option<Timestamp>, &Event)> = HashMap::new();
    for event in &cluster.events {
        let object = &event.involved_object;
        if karpenters_failure(event).is_none() || object.kind.as_deref() != Some("Pod") {
            continue;
        }
        let key = format!(
            "{}/{}",
            object.namespace.as_deref().unwrap_or_default(),
            object.name.as_deref().unwrap_or_default()
        );
        let at = event_time(event);
        if failed.get(&key).is_none_or(|(seen, _)| at > *seen) {
            failed.insert(key, (at, event));
        }
    }
    let mut out: Vec<PendingPod> = cluster
        .pods
        .iter()
        .filter(|p| is_pending(p))
        .map(|pod| {
            let key = pod_key(pod);
            let created_at = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let scheduled = unscheduled(pod);
            let gates = scheduling_gates(pod);
            let (reason, message, node_claim) = if !gates.is_empty() {
                (
                    "SchedulingGated".to_owned(),
                    format!("waiting for scheduling gates: {}", gates.join(", ")),
                    None,
                )
            } else if let Some((claim, state)) = nominated.get(&key) {
                let name = name_of(&claim.metadata);
                let what = label(&claim.metadata, labels::INSTANCE_TYPE)
                    .map(|t| format!(" ({t})"))
                    .unwrap_or_default();
                (
                    "WaitingForNodeClaim".to_owned(),
                    format!("nodeclaim {name}{what} is {state}"),
                    Some(name),
                )
            } else if let Some((_, event)) = failed.get(&key).filter(|(at, _)| {
                event_could_explain(pod, &nominated) && at.is_some_and(|at| Some(at) >= created_at)
            }) {
                (
                    FAILED_SCHEDULING.to_owned(),
                    karpenters_failure(event).unwrap_or_default().to_owned(),
                    None,
                )
            } else if let Some(condition) = scheduled {
                (
                    condition
                        .reason
                        .clone()
                        .filter(|r| !r.is_empty())
                        .unwrap_or_else(|| "Unscheduled".to_owned()),
                    condition.message.clone().unwrap_or_default(),
                    None,
                )
            } else {
                (
                    "Pending".to_owned(),
                    "not seen by the scheduler yet".to_owned(),
                    None,
                )
            };
            PendingPod {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: name_of(&pod.metadata),
                created_at,
                reason,
                message,
                node_claim,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.namespace.cmp(&b.namespace))
            .then_with(|| a.name.cmp(&b.name))
    });
    out
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::explain::fixtures::*;
    use serde_json::json;

    #[test]
    fn pending_pods_say_what_they_wait_for() {
        let mut coming = ours("m.small");
        coming.status = serde_json::from_value(json!({"conditions": [{"type": "Launched", "status": "False", "reason": "NotLaunched", "message": "", "lastTransitionTime": NOW}]})).expect("status");
        let unschedulable = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}]}});
        let cluster = ClusterObjects {
            node_claims: vec![coming],
            pods: vec![
                pod("web-1", None, unschedulable.clone()),
                pod("huge", None, unschedulable.clone()),
                pod("plain", None, unschedulable),
                pod(
                    "gated",
                    None,
                    json!({"spec": {"schedulingGates": [{"name": "example.com/wait"}]}}),
                ),
                pod("running", Some("n1"), json!({})),
            ],
            events: vec![
                event(
                    "Pod",
                    "huge",
                    "FailedScheduling",
                    "Failed to schedule pod, no NodePool fits: cpu 500 > 64",
                    NOW,
                ),
                // The kube-scheduler's, which the condition already says.
                event(
                    "Pod",
                    "plain",
                    "FailedScheduling",
                    "0/3 nodes are available: 3 Insufficient cpu.",
                    NOW,
                ),
            ],
            ..ClusterObjects::default()
        };
        let reasons: Vec<(String, String)> = pending_pods(&cluster)
            .into_iter()
            .map(|p| (p.name, p.reason))
            .collect();
        let reason = |name: &str| {
            reasons
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, r)| r.as_str())
        };
        assert_eq!(reason("web-1"), Some("WaitingForNodeClaim"));
        assert_eq!(reason("huge"), Some("FailedScheduling"));
        assert_eq!(reason("plain"), Some("Unschedulable"));
        assert_eq!(reason("gated"), Some("SchedulingGated"));
        assert_eq!(reason("running"), None);
    }

    #[test]
    fn events_are_needed_only_for_judged_pods_no_claim_is_coming_up_for() {
        let mut coming = ours("m.small");
        coming.status = serde_json::from_value(json!({"conditions": [{"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": NOW}, {"type": "Registered", "status": "False", "reason": "NotRegistered", "message": "", "lastTransitionTime": NOW}]})).expect("status");
        let unschedulable = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}]}});
        let waiting_for_claims = vec![
            pod("web-1", None, unschedulable.clone()),
            pod("web-2", None, unschedulable.clone()),
            pod("new", None, json!({})),
            pod(
                "gated",
                None,
                json!({"spec": {"schedulingGates": [{"name": "example.com/wait"}]}}),
            ),
            pod("running", Some("n1"), json!({})),
        ];
        assert!(
            namespaces_an_event_could_explain(&waiting_for_claims, std::slice::from_ref(&coming))
                .is_empty(),
            "pods with a claim coming up, gated or not yet judged need no Event"
        );

        let mut stuck = waiting_for_claims.clone();
        stuck.push(pod(
            "huge",
            None,
            json!({"metadata": {"namespace": "batch"}, "status": unschedulable["status"]}),
        ));
        assert_eq!(
            namespaces_an_event_could_explain(&stuck, std::slice::from_ref(&coming))
                .into_iter()
                .collect::<Vec<_>>(),
            vec!["batch"]
        );
        // Once the claim is Ready, the pods it was made for are no longer waiting on it.
        assert_eq!(
            namespaces_an_event_could_explain(&waiting_for_claims, &[ours("m.small")])
                .into_iter()
                .collect::<Vec<_>>(),
            vec!["default"]
        );
    }
}
