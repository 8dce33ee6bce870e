//! The agent's Prometheus metrics (OpenMetrics text on `/metrics`). Where a metric means what
//! one of upstream Karpenter's means, it has upstream's name and label names (v1.15:
//! `pkg/metrics`, `pkg/cloudprovider/metrics`, `pkg/controllers/**/metrics.go`, client-go's
//! `leader_election_master_status`); the test beside this module checks them against
//! `tests/fixtures/upstream-metrics.txt`, taken from there. The rest are this project's own.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;

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
/// `underutilized`, `drifted`, `expired`, `interrupted`, …), the NodePool, the capacity type,
/// the pool's consolidation policy in snake case (consolidation only, else empty) and how the
/// node is drained ([`termination_mode`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptedLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
    pub consolidation_policy: String,
    pub termination_mode: String,
}

/// Upstream's `termination_mode` of a claim: `graceful` without a `terminationGracePeriod`,
/// `forceful` with one of zero, `eventual` otherwise (`DisruptionTerminationMode`).
pub fn termination_mode(termination_grace_period: Option<std::time::Duration>) -> &'static str {
    match termination_grace_period {
        None => "graceful",
        Some(d) if d.is_zero() => "forceful",
        Some(_) => "eventual",
    }
}

/// Label set of `karpenter_nodeclaims_created_total`, as upstream: why (`provisioned`, or the
/// disruption reason of a replacement), the NodePool, and whether `minValues` was relaxed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreatedLabels {
    pub reason: String,
    pub nodepool: String,
    pub min_values_relaxed: String,
}

/// Label set of `karpenter_nodeclaims_terminated_total`, as upstream.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TerminatedLabels {
    pub nodepool: String,
    pub capacity_type: String,
    pub zone: String,
}

/// Label set of `karpenter_nodes_created_total` and `karpenter_nodes_terminated_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub nodepool: String,
    pub zone: String,
}

/// Label set of `karpenter_scheduler_scheduling_duration_seconds`: the controller that
/// simulated (`provisioner`, `disruption`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

/// Label set of `karpenter_scheduler_queue_depth`: the controller and the scheduling run.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub controller: String,
    pub scheduling_id: String,
}

/// Label set of `karpenter_cloudprovider_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudCallLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
}

/// Label set of `karpenter_cloudprovider_pricing_refreshes_total`: `updated`, `empty` (an
/// answer without a price for the region) or `failed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

/// Label set of `karpenter_cloudprovider_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudErrorLabels {
    pub controller: String,
    pub method: String,
    pub provider: String,
    pub error: String,
    pub nodepool: String,
}

/// Label set of `karpenter_nodepools_usage` and `karpenter_nodepools_limit`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource_type: String,
    pub nodepool: String,
}

/// Label set of `karpenter_build_info`, upstream's names: the version, the toolchain
/// (`goversion`, here rustc's), the architecture as Go names it and the commit.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    pub goversion: String,
    pub goarch: String,
    pub commit: String,
}

/// Label set of `karpenter_pods_state`, upstream's: the pod, its first owner (as a self link),
/// its node and whether it is bound, the node's pool, zone, architecture, capacity type and
/// instance type, the pod's phase and readiness, and whether the node is one Karpenter manages.
///
/// There is one series a pod, so at 20,000 pods these are 20,000 label sets, held by the family
/// and by the loop that keeps it current. The values are shared strings (a node's name, zone or
/// instance type is the same for every pod on it) and the flags are `bool`s (written `true` and
/// `false`, as upstream's `strconv.FormatBool`): a set of `String`s cost ~2 KB a pod.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodStateLabels {
    pub name: Arc<str>,
    pub namespace: Arc<str>,
    pub owner: Arc<str>,
    pub node: Arc<str>,
    pub scheduled: bool,
    pub nodepool: Arc<str>,
    pub zone: Arc<str>,
    pub arch: Arc<str>,
    pub capacity_type: Arc<str>,
    pub instance_type: Arc<str>,
    pub phase: Arc<str>,
    pub ready: bool,
    pub managed: bool,
}

/// Label set of client-go's `leader_election_master_status`: the Lease's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    pub name: String,
}

/// Upstream's duration buckets (controller-runtime's, plus long ones).
fn duration_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
    ])
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
    pub nodeclaims_created: Family<CreatedLabels, Counter>,
    pub nodeclaims_launched: Counter,
    pub nodeclaims_initialized: Counter,
    pub nodeclaims_terminated: Family<TerminatedLabels, Counter>,
    pub nodes_created: Family<NodeLabels, Counter>,
    pub nodes_terminated: Family<NodeLabels, Counter>,
    pub instances_garbage_collected: Counter,
    /// NodeClaims the agent cannot decode: garbage collection keeps their instances.
    pub nodeclaims_unreadable: Gauge,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub pods_unschedulable: Gauge,
    pub launch_seconds: Histogram,
    pub scheduling_seconds: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    pub scheduler_queue_depth: Family<QueueLabels, Gauge>,
    pub cloudprovider_duration: Family<CloudCallLabels, Histogram, fn() -> Histogram>,
    pub cloudprovider_errors: Family<CloudErrorLabels, Counter>,
    /// Refreshes of the live price feed, by outcome (this project's; upstream logs only).
    pub pricing_refreshes: Family<OutcomeLabels, Counter>,
    /// When the live price feed last updated the prices (Unix seconds; 0: never).
    pub pricing_last_update: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub nodepools_usage: Family<ResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub nodepools_limit: Family<ResourceLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub build_info: Family<BuildLabels, Gauge>,
    /// 1 while this replica holds the leader-election Lease, 0 otherwise.
    pub leader_election_master_status: Family<LeaseLabels, Gauge>,
    /// One series of 1 per pod (upstream's `karpenter_pods_state`).
    pub pods_state: Family<PodStateLabels, Gauge>,
    pub pod_unschedulable_to_nodeclaim_seconds: Histogram,
    /// Upstream's `karpenter_pods_scheduling_decision_duration_seconds`.
    pub pod_scheduling_decision_seconds: Histogram,
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
    /// Counts one refresh of a live price feed (`updated`, `empty` or `failed`), and on
    /// `updated` sets the time of the last update.
    pub(crate) fn count_pricing_refresh(&self, outcome: &str) {
        self.pricing_refreshes
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
        if outcome == "updated" {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.pricing_last_update.set(now);
        }
    }

    pub fn new() -> Self {
        let mut root = Registry::default();
        let metrics = Self {
            registry: Registry::default(),
            nodeclaims_created: Family::default(),
            nodeclaims_launched: Counter::default(),
            nodeclaims_initialized: Counter::default(),
            nodeclaims_terminated: Family::default(),
            nodes_created: Family::default(),
            nodes_terminated: Family::default(),
            instances_garbage_collected: Counter::default(),
            nodeclaims_unreadable: Gauge::default(),
            reconcile_errors: Family::default(),
            pods_unschedulable: Gauge::default(),
            launch_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 14)),
            scheduling_seconds: Family::new_with_constructor(duration_histogram),
            scheduler_queue_depth: Family::default(),
            cloudprovider_duration: Family::new_with_constructor(duration_histogram),
            cloudprovider_errors: Family::default(),
            pricing_refreshes: Family::default(),
            pricing_last_update: Gauge::default(),
            nodepools_usage: Family::default(),
            nodepools_limit: Family::default(),
            build_info: Family::default(),
            leader_election_master_status: Family::default(),
            pods_state: Family::default(),
            // Fine around the 1 s batch idle window, where the target (idle + 100 ms) lies.
            pod_unschedulable_to_nodeclaim_seconds: Histogram::new([
                0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3, 1.5, 2.0, 3.0, 5.0, 7.5,
                10.0, 12.5, 15.0, 20.0, 30.0, 60.0,
            ]),
            pod_scheduling_decision_seconds: duration_histogram(),
            batches: Family::default(),
            nodeclaims_disrupted: Family::default(),
            disruption_decisions: Family::default(),
            disruption_eligible_nodes: Family::default(),
            nodepools_allowed_disruptions: Family::default(),
            disruption_evaluation_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            consolidation_score: Family::new_with_constructor(consolidation_score_histogram),
            consolidation_moves: Family::default(),
        };
        root.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            metrics.leader_election_master_status.clone(),
        );
        let registry = root.sub_registry_with_prefix("karpenter");
        registry.register(
            "build_info",
            "A metric with a constant '1' value labeled by version from which karpenter was built",
            metrics.build_info.clone(),
        );
        metrics
            .build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
                goversion: format!("rust{}", env!("CARGO_PKG_RUST_VERSION")),
                goarch: go_arch().to_owned(),
                commit: option_env!("KARPENTER_COMMIT")
                    .unwrap_or_default()
                    .to_owned(),
            })
            .set(1);
        registry.register(
            "nodeclaims_created",
            "Number of nodeclaims created in total, by reason, NodePool and whether minValues was relaxed",
            metrics.nodeclaims_created.clone(),
        );
        registry.register(
            "pods_state",
            "Pod state is the current state of pods, labeled by the pod, its owner, its node and the node's pool, zone, architecture, capacity type and instance type, and the pod's phase and readiness",
            metrics.pods_state.clone(),
        );
        registry.register(
            "nodes_created",
            "Number of nodes created in total, by NodePool and zone",
            metrics.nodes_created.clone(),
        );
        registry.register(
            "nodes_terminated",
            "Number of nodes terminated in total, by NodePool and zone",
            metrics.nodes_terminated.clone(),
        );
        registry.register(
            "scheduler_queue_depth",
            "The number of pods currently waiting to be scheduled",
            metrics.scheduler_queue_depth.clone(),
        );
        registry.register(
            "cloudprovider_pricing_refreshes",
            "Refreshes of the cloud's live on-demand prices, by outcome (updated, empty, failed); after empty or failed the last good prices stay",
            metrics.pricing_refreshes.clone(),
        );
        registry.register(
            "cloudprovider_pricing_last_update_timestamp_seconds",
            "When the cloud's live on-demand prices were last updated, in Unix seconds (0: never, the shipped prices are in use)",
            metrics.pricing_last_update.clone(),
        );
        registry.register(
            "cloudprovider_duration_seconds",
            "Duration of cloud provider method calls, by controller, method and provider",
            metrics.cloudprovider_duration.clone(),
        );
        registry.register(
            "cloudprovider_errors",
            "Total number of errors returned from CloudProvider calls",
            metrics.cloudprovider_errors.clone(),
        );
        registry.register(
            "nodepools_usage",
            "The amount of resources that have been provisioned for a nodepool, by resource type",
            metrics.nodepools_usage.clone(),
        );
        registry.register(
            "nodepools_limit",
            "Limits specified on the nodepool that restrict the quantity of resources provisioned, by resource type",
            metrics.nodepools_limit.clone(),
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
            "Number of nodeclaims terminated in total, by NodePool, capacity type and zone",
            metrics.nodeclaims_terminated.clone(),
        );
        registry.register(
            "instances_garbage_collected",
            "Instances deleted because no NodeClaim owned them",
            metrics.instances_garbage_collected.clone(),
        );
        registry.register(
            "nodeclaims_unreadable",
            "NodeClaims the agent cannot decode; garbage collection keeps the instances they name",
            metrics.nodeclaims_unreadable.clone(),
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
            "scheduler_scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in seconds",
            metrics.scheduling_seconds.clone(),
        );
        registry.register(
            "pods_unschedulable_to_nodeclaim_seconds",
            "Time from the agent seeing a pod unschedulable to creating the first NodeClaim for it",
            metrics.pod_unschedulable_to_nodeclaim_seconds.clone(),
        );
        registry.register(
            "pods_scheduling_decision_duration_seconds",
            "The time it takes for Karpenter to first try to schedule a pod after it's been seen.",
            metrics.pod_scheduling_decision_seconds.clone(),
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
            registry: root,
            ..metrics
        }
    }

    /// Records `usage` and `limits` (resource name → value in base units: cores, bytes, pods,
    /// nodes) of `nodepool`, dropping resources it no longer has.
    pub(crate) fn set_nodepool_resources(
        &self,
        nodepool: &str,
        usage: &[(String, f64)],
        limits: &[(String, f64)],
    ) {
        for (family, values) in [
            (&self.nodepools_usage, usage),
            (&self.nodepools_limit, limits),
        ] {
            for (resource, value) in values {
                family
                    .get_or_create(&ResourceLabels {
                        resource_type: resource.clone(),
                        nodepool: nodepool.to_owned(),
                    })
                    .set(*value);
            }
        }
    }

    /// The metrics in OpenMetrics text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The machine's architecture as Go's `GOARCH` names it (upstream's `goarch` label).
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// The agent's own metrics: upstream has none that means the same.
    const PROJECT_ONLY: &[&str] = &[
        "karpenter_nodeclaims_launched_total",
        "karpenter_nodeclaims_initialized_total",
        "karpenter_nodeclaims_launch_duration_seconds",
        "karpenter_instances_garbage_collected_total",
        "karpenter_nodeclaims_unreadable",
        "karpenter_reconcile_errors_total",
        "karpenter_pods_unschedulable",
        "karpenter_pods_unschedulable_to_nodeclaim_seconds",
        "karpenter_provisioner_batches_total",
        "karpenter_cloudprovider_pricing_refreshes_total",
        "karpenter_cloudprovider_pricing_last_update_timestamp_seconds",
    ];

    /// Metrics with upstream's name whose labels differ, and why.
    const LABEL_DIFFERENCES: &[(&str, &str)] = &[(
        "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
        "one pass decides every method at once: there is no single reason or consolidation type to label it with",
    )];

    /// Upstream's metrics: name → label names (`None`: not recorded, not exported here).
    fn upstream() -> BTreeMap<String, Option<BTreeSet<String>>> {
        include_str!("../tests/fixtures/upstream-metrics.txt")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|line| {
                let (name, labels) = line.split_once(' ').unwrap_or((line, ""));
                let labels = (labels != "-").then(|| {
                    labels
                        .split(',')
                        .filter(|l| !l.is_empty())
                        .map(str::to_owned)
                        .collect()
                });
                (name.to_owned(), labels)
            })
            .collect()
    }

    /// The metrics with one series in every family, so the text shows each one's labels.
    fn every_family_touched() -> Metrics {
        let m = Metrics::new();
        let s = || "x".to_owned();
        m.pricing_refreshes
            .get_or_create(&OutcomeLabels { outcome: s() })
            .inc();
        m.nodeclaims_created
            .get_or_create(&CreatedLabels {
                reason: s(),
                nodepool: s(),
                min_values_relaxed: s(),
            })
            .inc();
        m.nodeclaims_launched.inc();
        m.nodeclaims_initialized.inc();
        m.nodeclaims_terminated
            .get_or_create(&TerminatedLabels {
                nodepool: s(),
                capacity_type: s(),
                zone: s(),
            })
            .inc();
        m.nodes_created
            .get_or_create(&NodeLabels {
                nodepool: s(),
                zone: s(),
            })
            .inc();
        m.nodes_terminated
            .get_or_create(&NodeLabels {
                nodepool: s(),
                zone: s(),
            })
            .inc();
        m.instances_garbage_collected.inc();
        m.reconcile_errors
            .get_or_create(&ErrorLabels { kind: s() })
            .inc();
        m.pods_unschedulable.set(1);
        m.launch_seconds.observe(1.0);
        m.scheduling_seconds
            .get_or_create(&ControllerLabels { controller: s() })
            .observe(1.0);
        m.scheduler_queue_depth
            .get_or_create(&QueueLabels {
                controller: s(),
                scheduling_id: s(),
            })
            .set(1);
        m.cloudprovider_duration
            .get_or_create(&CloudCallLabels {
                controller: s(),
                method: s(),
                provider: s(),
            })
            .observe(1.0);
        m.cloudprovider_errors
            .get_or_create(&CloudErrorLabels {
                controller: s(),
                method: s(),
                provider: s(),
                error: s(),
                nodepool: s(),
            })
            .inc();
        m.set_nodepool_resources("x", &[(s(), 1.0)], &[(s(), 2.0)]);
        m.leader_election_master_status
            .get_or_create(&LeaseLabels { name: s() })
            .set(1);
        m.pods_state
            .get_or_create(&PodStateLabels::default())
            .set(1);
        m.pod_unschedulable_to_nodeclaim_seconds.observe(1.0);
        m.pod_scheduling_decision_seconds.observe(1.0);
        m.batches
            .get_or_create(&BatchLabels { closed_by: s() })
            .inc();
        m.nodeclaims_disrupted
            .get_or_create(&DisruptedLabels {
                reason: s(),
                nodepool: s(),
                capacity_type: s(),
                consolidation_policy: s(),
                termination_mode: s(),
            })
            .inc();
        m.disruption_decisions
            .get_or_create(&DecisionLabels {
                decision: s(),
                reason: s(),
                consolidation_type: s(),
            })
            .inc();
        m.disruption_eligible_nodes
            .get_or_create(&ReasonLabels { reason: s() })
            .set(1);
        m.nodepools_allowed_disruptions
            .get_or_create(&PoolReasonLabels {
                nodepool: s(),
                reason: s(),
            })
            .set(1);
        m.disruption_evaluation_seconds.observe(1.0);
        let consolidation = ConsolidationLabels {
            decision: s(),
            nodepool: s(),
            policy: s(),
        };
        m.consolidation_score
            .get_or_create(&consolidation)
            .observe(1.0);
        m.consolidation_moves.get_or_create(&consolidation).inc();
        m
    }

    /// Exported metric name → label names, read from the text a scrape gets.
    fn exported(metrics: &Metrics) -> BTreeMap<String, BTreeSet<String>> {
        let text = metrics.encode().expect("encoded");
        let histograms: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.strip_suffix(" histogram"))
            .collect();
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let mut name = &line[..end];
            for suffix in ["_bucket", "_count", "_sum"] {
                if let Some(base) = name.strip_suffix(suffix)
                    && histograms.contains(base)
                {
                    name = base;
                }
            }
            let labels: BTreeSet<String> = line
                .get(end..)
                .and_then(|rest| rest.strip_prefix('{'))
                .and_then(|rest| rest.split_once('}'))
                .map(|(inside, _)| {
                    inside
                        .split(',')
                        .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.to_owned()))
                        .filter(|k| k != "le")
                        .collect()
                })
                .unwrap_or_default();
            out.entry(name.to_owned()).or_default().extend(labels);
        }
        out
    }

    #[test]
    fn metrics_named_as_upstreams_carry_upstreams_labels_and_the_rest_are_the_projects_own() {
        let upstream = upstream();
        let mut problems = Vec::new();
        for (name, labels) in exported(&every_family_touched()) {
            match upstream.get(&name) {
                Some(Some(expected)) if *expected == labels => {}
                Some(_) if LABEL_DIFFERENCES.iter().any(|(n, _)| *n == name) => {}
                Some(Some(expected)) => problems.push(format!(
                    "{name} has labels {labels:?}, upstream's has {expected:?}"
                )),
                Some(None) => problems.push(format!(
                    "{name} is upstream's, but the fixture does not record its labels"
                )),
                None if PROJECT_ONLY.contains(&name.as_str()) => {}
                None => problems.push(format!(
                    "{name} is neither upstream's nor listed as the project's own (a misspelt upstream name?)"
                )),
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn the_agent_exports_upstreams_provisioning_cloud_and_nodepool_metrics() {
        let exported = exported(&every_family_touched());
        for name in [
            "karpenter_build_info",
            "karpenter_nodeclaims_created_total",
            "karpenter_nodeclaims_terminated_total",
            "karpenter_nodeclaims_disrupted_total",
            "karpenter_nodes_created_total",
            "karpenter_nodes_terminated_total",
            "karpenter_scheduler_scheduling_duration_seconds",
            "karpenter_scheduler_queue_depth",
            "karpenter_cloudprovider_duration_seconds",
            "karpenter_cloudprovider_errors_total",
            "karpenter_nodepools_usage",
            "karpenter_nodepools_limit",
            "karpenter_nodepools_allowed_disruptions",
            "leader_election_master_status",
            "karpenter_pods_state",
        ] {
            assert!(exported.contains_key(name), "{name} is not exported");
        }
    }

    #[test]
    fn build_info_says_the_version_once() {
        let text = Metrics::new().encode().expect("encoded");
        let line = text
            .lines()
            .find(|l| l.starts_with("karpenter_build_info{"))
            .expect("build_info");
        assert!(
            line.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))),
            "{line}"
        );
        assert!(line.ends_with(" 1"), "{line}");
    }
}
