//! The agent's Prometheus metrics (OpenMetrics text on `/metrics`). Names follow upstream
//! Karpenter where a metric means the same thing.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set of error counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
}

/// Label set of the batch counter: what closed the batch (`idle`, `max` or `complete`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabels {
    pub closed_by: String,
}

/// Label set of `karpenter_nodeclaims_disrupted_total`, as upstream: why (`empty`,
/// `underutilized`, `drifted`, `expired`, `interrupted`, …), the NodePool and the capacity type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptedLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
}

/// Label set of `karpenter_voluntary_disruption_decisions_total`, as upstream: the decision
/// (`delete` or `replace`), the reason and the consolidation type (`empty`, `single`, `multi`,
/// or empty for drift).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    pub decision: String,
    pub reason: String,
    pub consolidation_type: String,
}

/// Label set of `karpenter_voluntary_disruption_eligible_nodes`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// Label set of `karpenter_nodepools_allowed_disruptions`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolReasonLabels {
    pub nodepool: String,
    pub reason: String,
}

/// Labels of upstream's Balanced consolidation metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConsolidationLabels {
    /// `approved` or `rejected`.
    pub decision: String,
    pub nodepool: String,
    /// The pool's `consolidationPolicy`.
    pub policy: String,
}

/// A histogram with upstream's `karpenter_consolidation_score` buckets.
fn consolidation_score_histogram() -> Histogram {
    Histogram::new([0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0])
}

/// Every metric the agent exports, registered once.
pub struct Metrics {
    registry: Registry,
    pub nodeclaims_created: Counter,
    pub nodeclaims_launched: Counter,
    pub nodeclaims_initialized: Counter,
    pub nodeclaims_terminated: Counter,
    pub instances_garbage_collected: Counter,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub pods_unschedulable: Gauge,
    pub launch_seconds: Histogram,
    pub scheduling_seconds: Histogram,
    pub pod_unschedulable_to_nodeclaim_seconds: Histogram,
    pub batches: Family<BatchLabels, Counter>,
    pub nodeclaims_disrupted: Family<DisruptedLabels, Counter>,
    pub disruption_decisions: Family<DecisionLabels, Counter>,
    pub disruption_eligible_nodes: Family<ReasonLabels, Gauge>,
    pub nodepools_allowed_disruptions: Family<PoolReasonLabels, Gauge>,
    pub disruption_evaluation_seconds: Histogram,
    /// Balanced pools' move scores (upstream's `karpenter_consolidation_score`).
    pub consolidation_score: Family<ConsolidationLabels, Histogram, fn() -> Histogram>,
    /// Consolidation moves approved or rejected (upstream's `karpenter_consolidation_moves_total`).
    pub consolidation_moves: Family<ConsolidationLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("karpenter");
        let metrics = Self {
            registry: Registry::default(),
            nodeclaims_created: Counter::default(),
            nodeclaims_launched: Counter::default(),
            nodeclaims_initialized: Counter::default(),
            nodeclaims_terminated: Counter::default(),
            instances_garbage_collected: Counter::default(),
            reconcile_errors: Family::default(),
            pods_unschedulable: Gauge::default(),
            launch_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            scheduling_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            // Fine around the 1 s batch idle window, where the target (idle + 100 ms) lies.
            pod_unschedulable_to_nodeclaim_seconds: Histogram::new([
                0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.5, 2.0, 3.0, 5.0, 7.5,
                10.0, 12.5, 15.0, 20.0, 30.0, 60.0,
            ]),
            batches: Family::default(),
            nodeclaims_disrupted: Family::default(),
            disruption_decisions: Family::default(),
            disruption_eligible_nodes: Family::default(),
            nodepools_allowed_disruptions: Family::default(),
            disruption_evaluation_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            consolidation_score: Family::new_with_constructor(consolidation_score_histogram),
            consolidation_moves: Family::default(),
        };
        registry.register(
            "nodeclaims_created",
            "NodeClaims created by provisioning",
            metrics.nodeclaims_created.clone(),
        );
        registry.register(
            "nodeclaims_launched",
            "Instances launched for NodeClaims",
            metrics.nodeclaims_launched.clone(),
        );
        registry.register(
            "nodeclaims_initialized",
            "NodeClaims whose node became ready",
            metrics.nodeclaims_initialized.clone(),
        );
        registry.register(
            "nodeclaims_terminated",
            "NodeClaims whose instance was deleted",
            metrics.nodeclaims_terminated.clone(),
        );
        registry.register(
            "instances_garbage_collected",
            "Instances deleted because no NodeClaim owned them",
            metrics.instances_garbage_collected.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed control-loop passes, by error kind",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "pods_unschedulable",
            "Pending pods the last scheduling round could not place",
            metrics.pods_unschedulable.clone(),
        );
        registry.register(
            "nodeclaims_launch_duration_seconds",
            "Time a cloud launch took",
            metrics.launch_seconds.clone(),
        );
        registry.register(
            "scheduling_duration_seconds",
            "Time one scheduling simulation took",
            metrics.scheduling_seconds.clone(),
        );
        registry.register(
            "pods_unschedulable_to_nodeclaim_seconds",
            "Time from the agent seeing a pod unschedulable to creating the NodeClaim for it",
            metrics.pod_unschedulable_to_nodeclaim_seconds.clone(),
        );
        registry.register(
            "provisioner_batches",
            "Batches of pending pods handed to scheduling, by what closed them",
            metrics.batches.clone(),
        );
        registry.register(
            "nodeclaims_disrupted",
            "NodeClaims disrupted, by reason, NodePool and capacity type",
            metrics.nodeclaims_disrupted.clone(),
        );
        registry.register(
            "voluntary_disruption_decisions",
            "Disruption decisions taken, by decision, reason and consolidation type",
            metrics.disruption_decisions.clone(),
        );
        registry.register(
            "voluntary_disruption_eligible_nodes",
            "Nodes the last disruption pass could disrupt, by reason",
            metrics.disruption_eligible_nodes.clone(),
        );
        registry.register(
            "nodepools_allowed_disruptions",
            "Nodes each NodePool's budgets allow to be disrupted now, by reason",
            metrics.nodepools_allowed_disruptions.clone(),
        );
        registry.register(
            "voluntary_disruption_decision_evaluation_duration_seconds",
            "Time one disruption pass took to decide",
            metrics.disruption_evaluation_seconds.clone(),
        );
        registry.register(
            "consolidation_score",
            "Scores of consolidation moves in Balanced NodePools, by decision, NodePool and policy",
            metrics.consolidation_score.clone(),
        );
        registry.register(
            "consolidation_moves",
            "Consolidation moves approved or rejected, by NodePool and policy",
            metrics.consolidation_moves.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }

    /// The metrics in OpenMetrics text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
