//! Repair policies: which Node conditions make a node unhealthy, and for how long a provider
//! tolerates them before Karpenter replaces the node (upstream's `cloudprovider.RepairPolicy`,
//! returned by each provider's `RepairPolicies()`; acted on only with the `NodeRepair` gate).

use std::time::Duration;

/// One unhealthy condition and how long it is tolerated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairPolicy {
    /// The Node condition's type (`Ready`, `KernelReady`, ...).
    pub condition_type: &'static str,
    /// The status that means unhealthy (`False`, `Unknown`, `True`).
    pub condition_status: &'static str,
    /// How long the condition must have held (since its last transition) before repair.
    pub toleration: Duration,
}

impl RepairPolicy {
    /// A policy for `condition_type` at `condition_status`, tolerated for `minutes`.
    pub const fn new(
        condition_type: &'static str,
        condition_status: &'static str,
        minutes: u64,
    ) -> Self {
        Self {
            condition_type,
            condition_status,
            toleration: Duration::from_secs(minutes * 60),
        }
    }
}

/// The kubelet's own signal, as upstream's kwok provider and the GKE providers use it: a node
/// that is not Ready (False) or not reporting (Unknown).
pub const fn kubelet_not_ready(minutes: u64) -> [RepairPolicy; 2] {
    [
        RepairPolicy::new("Ready", "False", minutes),
        RepairPolicy::new("Ready", "Unknown", minutes),
    ]
}
