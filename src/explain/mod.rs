//! The facts behind `kubectl karpenter status` and `kubectl karpenter explain nodeclaim`: what
//! each NodeClaim costs, what state its conditions put it in, why it exists, which instance types
//! it could have been and why this one won, what happened to it and when, and whether it can be
//! disrupted now (and if not, what blocks it).
//!
//! Everything here is a pure function over API objects and an injected clock, so the plugin, the
//! agent's Events and the tests compute the same answer from the same objects. Nothing here talks
//! to the API server; the caller lists what [`ClusterObjects`] holds.
//!
//! Claims created by this project's agent carry two annotations
//! ([`labels::PROVISIONED_FOR`](crate::apis::labels::PROVISIONED_FOR),
//! [`labels::INSTANCE_TYPE_OPTIONS`](crate::apis::labels::INSTANCE_TYPE_OPTIONS)); claims created by upstream
//! Karpenter (or by hand) do not, and every answer says what can be derived from the object alone.
//!
//! One file per question, each pure facts with no presentation (the plugin words and lays them
//! out): `recorded` (what the agent wrote on a claim), `price` (what a node or claim costs, and
//! where that price came from), `claim_state` (a claim's phase from its conditions), `status` (the
//! `status` report: pools against limits, claims, totals), `nodes` (its node view: every Node's
//! requests against allocatable, summed per pool), `pending` (pending pods and why each
//! waits), `nodeclaim` (`explain nodeclaim`: why the claim exists), `choice` (which instance types
//! it could have been and why this one won), `timeline` (what happened to it and when),
//! `disruption` (whether it can be disrupted now, and what blocks it; a budget's own rules are
//! methods on [`Budget`](crate::apis::Budget)), and durations are worded by
//! [`human_duration`](crate::apis::human_duration). This module holds the objects they read ([`ClusterObjects`]) and small lookups they
//! share.

use crate::apis::{NodeClaim, NodePool};
use crate::scheduling::PodView;
use crate::state::CachedNode;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashMap;

mod choice;
mod claim_state;
mod disruption;
#[cfg(test)]
mod fixtures;
mod nodeclaim;
mod nodes;
mod pending;
mod price;
mod status;
mod timeline;

pub use crate::apis::human_duration;
pub use crate::disruption::Blocker;
pub use crate::disruption::BlockerKind;
pub use crate::disruption::Disruptability;

pub use choice::InstanceChoice;
pub use claim_state::{ClaimPhase, ClaimState};
pub(crate) use claim_state::{claim_state, claim_state_at};

pub use nodeclaim::WhyItExists;
pub use nodeclaim::{ClaimExplanation, NotFound, explain_node_claim};
pub use nodes::{NodeGroup, NodeRow, NodesReport, Usage, nodes_report};
pub use pending::{FAILED_SCHEDULING, is_pending, namespaces_an_event_could_explain, pending_pods};
pub(crate) use pending::{FAILED_TO_SCHEDULE, PendingPod};
pub use price::{HOURS_PER_MONTH, ListPrices, Price, PriceSource};
pub(crate) use price::{claim_price, node_price_or_list};
pub use status::{
    ClaimSummary, LimitUsage, StatusOptions, StatusReport, claim_summary, status_report,
};
pub use status::{NodeUsage, PoolSummary, Totals};
pub(crate) use timeline::TimelineEntry;

/// The API objects an answer is computed from. The caller decides how much to list: `status`
/// lists every pool, claim and node but only unbound pods; `explain` lists one claim's
/// surroundings.
#[derive(Clone, Debug, Default)]
pub struct ClusterObjects {
    pub node_pools: Vec<NodePool>,
    pub node_claims: Vec<NodeClaim>,
    pub nodes: Vec<CachedNode>,
    pub pods: Vec<Pod>,
    pub events: Vec<Event>,
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
    /// Shipped list prices for the types the cluster runs (see [`ListPrices`]).
    pub list_prices: ListPrices,
}

fn label<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        name_of(&pod.metadata)
    )
}

/// When an Event last happened, whichever API wrote it.
pub fn event_time(event: &Event) -> Option<Timestamp> {
    event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref())
        .map(|t| t.0)
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

fn is_daemon_or_mirror(pod: &Pod) -> bool {
    pod.is_daemon_set_pod() || pod.is_mirror()
}

fn node_name_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// Finds a claim's Node: by provider id, else by `status.nodeName`.
struct NodeIndex<'a> {
    by_provider_id: HashMap<&'a str, &'a CachedNode>,
    by_name: HashMap<&'a str, &'a CachedNode>,
}

impl<'a> NodeIndex<'a> {
    fn new(nodes: &'a [CachedNode]) -> Self {
        let mut by_provider_id = HashMap::new();
        let mut by_name = HashMap::new();
        for node in nodes {
            if let Some(id) = node.provider_id.as_deref() {
                by_provider_id.insert(id, node);
            }
            by_name.insert(node.name.as_str(), node);
        }
        Self {
            by_provider_id,
            by_name,
        }
    }

    fn of(&self, claim: &NodeClaim) -> Option<&'a CachedNode> {
        let status = claim.status.as_ref()?;
        status
            .provider_id
            .as_deref()
            .and_then(|id| self.by_provider_id.get(id).copied())
            .or_else(|| {
                status
                    .node_name
                    .as_deref()
                    .and_then(|n| self.by_name.get(n).copied())
            })
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}
