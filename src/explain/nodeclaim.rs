//! The facts behind `kubectl karpenter explain nodeclaim NAME`: one claim with its pool, node,
//! state and price, and why it exists (the pods it was made for, or the pods on its node when the
//! agent did not record them). Which instance type it became is answered in `choice`, what
//! happened to it in `timeline`, and whether it can be disrupted in `disruption`.

use super::choice::instance_choice;
use super::disruption::disruptability;
use super::timeline::timeline;
use super::{
    ClaimState, ClusterObjects, Disruptability, InstanceChoice, NodeIndex, Price, TimelineEntry,
    claim_price, claim_state_at, is_daemon_or_mirror, label, name_of, node_name_of, plural,
    pod_key,
};
use crate::apis::{NodeClaim, human_duration, labels};
use crate::scheduling::PodView;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use std::collections::HashMap;

/// A NodeClaim that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nodeclaim {name:?} not found")]
pub struct NotFound {
    /// The name asked for.
    pub name: String,
    /// The names that do exist, sorted.
    pub existing: Vec<String>,
}

/// Everything `explain nodeclaim NAME` shows.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimExplanation {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    pub state: ClaimState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// Whether this project's agent recorded why it made the claim (its annotations are there).
    pub recorded_by_agent: bool,
    pub why: WhyItExists,
    pub choice: InstanceChoice,
    pub timeline: Vec<TimelineEntry>,
    pub disruption: Disruptability,
}

/// Why a claim exists: the pods it was made for.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WhyItExists {
    /// The agent recorded the pods; otherwise `pods` are the pods on its node now.
    pub recorded: bool,
    pub summary: String,
    pub pods: Vec<PodWhereabouts>,
}

/// A pod and where it is now.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodWhereabouts {
    pub namespace: String,
    pub name: String,
    /// `on this node`, `on node X`, `pending`, `gone`...
    pub now: String,
}

/// Explains the claim called `name`. `cluster` should hold the claim, its NodePool, its Node, the
/// pods on its node and the pods it was made for, the other claims of its pool (for budgets),
/// Events on NodeClaims (for its timeline and for InsufficientCapacity on earlier claims) and
/// PodDisruptionBudgets.
pub fn explain_node_claim(
    cluster: &ClusterObjects,
    name: &str,
    now: Timestamp,
) -> Result<ClaimExplanation, NotFound> {
    let Some(claim) = cluster
        .node_claims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
    else {
        let mut existing: Vec<String> = cluster
            .node_claims
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        existing.sort();
        return Err(NotFound {
            name: name.to_owned(),
            existing,
        });
    };
    let nodes = NodeIndex::new(&cluster.nodes);
    let node = nodes.of(claim);
    let node_name = node
        .map(|n| n.name.clone())
        .or_else(|| claim.status.as_ref().and_then(|s| s.node_name.clone()));
    let pool_name = label(&claim.metadata, labels::NODE_POOL).map(str::to_owned);
    let pool = pool_name.as_deref().and_then(|p| {
        cluster
            .node_pools
            .iter()
            .find(|np| np.metadata.name.as_deref() == Some(p))
    });
    let pods_on_node: Vec<&Pod> = match node_name.as_deref() {
        Some(n) => cluster
            .pods
            .iter()
            .filter(|p| node_name_of(p) == Some(n) && !p.is_terminal())
            .collect(),
        None => Vec::new(),
    };
    let state = claim_state_at(claim, node, now);
    let claim_events: Vec<&Event> = cluster
        .events
        .iter()
        .filter(|e| {
            let o = &e.involved_object;
            let same_uid = match (o.uid.as_deref(), claim.metadata.uid.as_deref()) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            o.kind.as_deref() == Some("NodeClaim") && o.name.as_deref() == Some(name) && same_uid
        })
        .collect();
    let node_events: Vec<&Event> = match node_name.as_deref() {
        Some(n) => cluster
            .events
            .iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Node")
                    && e.involved_object.name.as_deref() == Some(n)
            })
            .collect(),
        None => Vec::new(),
    };
    let recorded = claim.provisioned_for().is_some() || claim.instance_type_options().is_some();

    Ok(ClaimExplanation {
        name: name.to_owned(),
        node_pool: pool_name.clone(),
        instance_type: label(&claim.metadata, labels::INSTANCE_TYPE).map(str::to_owned),
        capacity_type: label(&claim.metadata, labels::CAPACITY_TYPE).map(str::to_owned),
        zone: label(&claim.metadata, labels::ZONE).map(str::to_owned),
        node_name: node_name.clone(),
        provider_id: claim.status.as_ref().and_then(|s| s.provider_id.clone()),
        created_at: claim.metadata.creation_timestamp.as_ref().map(|t| t.0),
        price: claim_price(claim, node, &cluster.list_prices),
        recorded_by_agent: recorded,
        why: why_it_exists(claim, cluster, node_name.as_deref(), &pods_on_node),
        choice: instance_choice(claim, &cluster.events, now),
        timeline: timeline(claim, node, &claim_events, &node_events),
        disruption: {
            let mut d = disruptability(claim, pool, node, &pods_on_node, cluster, now);
            d.notes.extend(what_the_agent_said(&claim_events, now));
            d
        },
        state,
    })
}

fn why_it_exists(
    claim: &NodeClaim,
    cluster: &ClusterObjects,
    node_name: Option<&str>,
    pods_on_node: &[&Pod],
) -> WhyItExists {
    let where_is = |pod: &Pod| match node_name_of(pod) {
        Some(n) if Some(n) == node_name => {
            match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some(phase) if phase != "Running" => format!("on this node ({phase})"),
                _ => "on this node".to_owned(),
            }
        }
        Some(n) => format!("on node {n}"),
        None if pod.is_terminal() => "finished".to_owned(),
        None => "pending".to_owned(),
    };
    match claim.provisioned_for() {
        Some(keys) => {
            let by_key: HashMap<String, &Pod> =
                cluster.pods.iter().map(|p| (pod_key(p), p)).collect();
            let pods: Vec<PodWhereabouts> = keys
                .iter()
                .map(|key| {
                    let (namespace, name) = key.split_once('/').unwrap_or(("", key.as_str()));
                    let now = by_key.get(key).map_or_else(
                        || "gone (deleted, or replaced by a new pod)".to_owned(),
                        |p| where_is(p),
                    );
                    PodWhereabouts {
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                        now,
                    }
                })
                .collect();
            let still_here = pods
                .iter()
                .filter(|p| p.now.starts_with("on this node"))
                .count();
            let summary = format!(
                "created by karpenter-agent for {} pending {}; {} of them {} on its node now",
                pods.len(),
                plural(pods.len(), "pod", "pods"),
                still_here,
                if still_here == 1 { "is" } else { "are" }
            );
            WhyItExists {
                recorded: true,
                summary,
                pods,
            }
        }
        None => {
            let mut pods: Vec<PodWhereabouts> = pods_on_node
                .iter()
                .filter(|p| !is_daemon_or_mirror(p))
                .map(|p| PodWhereabouts {
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    name: name_of(&p.metadata),
                    now: where_is(p),
                })
                .collect();
            pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            let summary = match node_name {
                Some(_) => format!(
                    "not recorded: the pods it was created for are not on the claim (it was not created by karpenter-agent, e.g. by upstream Karpenter); {} {} on its node now",
                    pods.len(),
                    plural(pods.len(), "pod runs", "pods run")
                ),
                None => "not recorded: the pods it was created for are not on the claim (it was not created by karpenter-agent, e.g. by upstream Karpenter), and it has no node yet".to_owned(),
            };
            WhyItExists {
                recorded: false,
                summary,
                pods,
            }
        }
    }
}

/// The Events the agent's disruption controller publishes on a claim.
const DISRUPTION_EVENTS: &[&str] = &[
    "DisruptionBlocked",
    "Unconsolidatable",
    "DisruptionLaunching",
    "DisruptionWaitingReadiness",
    "DisruptionTerminating",
];

/// The disruption controller's last word on the claim, if any: what it decided or why it kept
/// the claim, from the simulation `explain` cannot run without the provider's catalogue.
fn what_the_agent_said(events: &[&Event], now: Timestamp) -> Option<String> {
    let last = events
        .iter()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| DISRUPTION_EVENTS.contains(&r))
        })
        .max_by_key(|e| super::event_time(e))?;
    let ago = super::event_time(last)
        .map(|t| format!(" {} ago", human_duration(now.duration_since(t))))
        .unwrap_or_default();
    Some(format!(
        "the agent said{ago} ({}): {}",
        last.reason.as_deref().unwrap_or_default(),
        last.message.as_deref().unwrap_or_default()
    ))
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::explain::fixtures::*;
    use serde_json::json;

    #[test]
    fn an_unknown_name_lists_the_names_that_exist() {
        let cluster = ClusterObjects {
            node_claims: vec![ours("m.small")],
            ..ClusterObjects::default()
        };
        let err = explain_node_claim(&cluster, "nope", at(NOW)).expect_err("unknown");
        assert_eq!(err.existing, vec!["default-abcde".to_owned()]);
    }

    #[test]
    fn a_claim_of_ours_names_its_pods_and_why_its_type_won() {
        let cluster = ClusterObjects {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![ours("m.large")],
            nodes: vec![node("n1", Some("0.2"))],
            pods: vec![
                pod("web-1", Some("n1"), json!({})),
                pod("web-2", None, json!({})),
            ],
            events: vec![event(
                "NodeClaim",
                "default-zzzzz",
                "InsufficientCapacity",
                "no capacity for m.small; the pods will be provisioned again",
                "2026-03-02T08:59:30Z",
            )],
            ..ClusterObjects::default()
        };
        let e = explained(&cluster);
        assert!(e.recorded_by_agent);
        assert_eq!(
            e.why
                .pods
                .iter()
                .map(|p| p.now.as_str())
                .collect::<Vec<_>>(),
            ["on this node", "pending"]
        );
        assert!(
            e.choice.summary.contains("m.small had no capacity"),
            "{}",
            e.choice.summary
        );
        assert!(
            e.choice.options[0]
                .outcome
                .contains("nodeclaim default-zzzzz"),
            "{:?}",
            e.choice.options[0]
        );
        assert!(e.choice.options[1].launched);
    }

    #[test]
    fn a_claim_upstream_made_is_explained_from_the_object_alone() {
        let upstream = claim(json!({
            "metadata": {"labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]}]},
            "status": {"nodeName": "n1", "providerID": "kwok://n1", "conditions": ready_conditions("2026-03-02T09:01:00Z")},
        }));
        let cluster = ClusterObjects {
            node_pools: vec![consolidatable_pool()],
            node_claims: vec![upstream],
            nodes: vec![node("n1", None)],
            pods: vec![pod("api-0", Some("n1"), json!({}))],
            ..ClusterObjects::default()
        };
        let e = explained(&cluster);
        assert!(!e.recorded_by_agent);
        assert!(
            e.why.summary.starts_with("not recorded"),
            "{}",
            e.why.summary
        );
        assert_eq!(e.why.pods.len(), 1);
        assert_eq!(e.choice.allowed_instance_types, ["m5.large", "m5.xlarge"]);
        assert_eq!(e.price, None);
        let what: Vec<&str> = e.timeline.iter().map(|t| t.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "Created",
                "NodeCreated",
                "Launched=True",
                "Registered=True",
                "Initialized=True",
                "Ready=True"
            ]
        );
    }
}
