//! What this project's agent records on the NodeClaims it creates, as two annotations: the pods
//! a claim was made for ([`labels::PROVISIONED_FOR`]) and the instance types that fitted them,
//! cheapest first ([`labels::INSTANCE_TYPE_OPTIONS`]). Claims created by upstream Karpenter (or by
//! hand) carry neither, and every reader here says `None` for them.

use crate::apis::{NodeClaim, labels};
use serde::{Deserialize, Serialize};

/// One instance type a claim could launch as, as the agent records it in
/// [`labels::INSTANCE_TYPE_OPTIONS`] (cheapest first).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeOption {
    pub name: String,
    /// Hourly price of its cheapest offering within the claim's requirements; `null` when no
    /// price is known for it (it was still an option, ranked after the priced ones).
    #[serde(default)]
    pub price: Option<f64>,
    #[serde(default)]
    pub zone: String,
    #[serde(default)]
    pub capacity_type: String,
}

/// The options the agent recorded on a claim; `None` when it recorded none (a claim created by
/// upstream Karpenter or by hand) or the annotation is unreadable.
pub fn instance_type_options(claim: &NodeClaim) -> Option<Vec<InstanceTypeOption>> {
    let text = claim
        .metadata
        .annotations
        .as_ref()?
        .get(labels::INSTANCE_TYPE_OPTIONS)?;
    serde_json::from_str(text).ok()
}

/// The pods (`namespace/name`) the agent created a claim for; `None` when not recorded.
pub fn provisioned_for(claim: &NodeClaim) -> Option<Vec<String>> {
    let text = claim
        .metadata
        .annotations
        .as_ref()?
        .get(labels::PROVISIONED_FOR)?;
    serde_json::from_str(text).ok()
}
