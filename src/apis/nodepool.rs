//! `karpenter.sh/v1` NodePool: the template NodeClaims are made from, how they may be disrupted,
//! and the limits on what the pool may launch. Field for field as upstream, so manifests written
//! for upstream Karpenter apply unchanged.

use super::common::{
    NillableDuration, NodeClassReference, NodeSelectorRequirementWithMinValues, add_rules,
    requirement_list_rules,
};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A NodePool launches nodes for pods that cannot be scheduled. One pool can launch many shapes
/// of node: the template constrains them, pods narrow them further.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    doc = "NodePool is the Schema for the NodePools API: the template NodeClaims are made from, their limits and how they may be disrupted",
    plural = "nodepools",
    singular = "nodepool",
    status = "NodePoolStatus",
    category = "karpenter",
    printcolumn = r#"{"name":"NodeClass","type":"string","jsonPath":".spec.template.spec.nodeClassRef.name"}"#,
    printcolumn = r#"{"name":"Nodes","type":"string","jsonPath":".status.nodes"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight","priority":1}"#,
    printcolumn = r#"{"name":"CPU","type":"string","jsonPath":".status.resources.cpu","priority":1}"#,
    printcolumn = r#"{"name":"Memory","type":"string","jsonPath":".status.resources.memory","priority":1}"#,
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = spec_rules)]
pub struct NodePoolSpec {
    /// The template of what NodeClaims from this pool may be.
    pub template: NodeClaimTemplate,
    /// How Karpenter may disrupt this pool's nodes.
    #[serde(default = "Disruption::upstream_default")]
    // Upstream's default names only consolidateAfter; the API server fills the rest from the
    // fields' own defaults, so both give the same object.
    #[schemars(extend("default" = {"consolidateAfter": "0s"}))]
    pub disruption: Disruption,
    /// Upper bounds on what the pool may launch in total (cpu, memory, nodes, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
    /// Higher weights are tried first; no weight counts as 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// A static pool: keep exactly this many nodes, whatever is pending (upstream's alpha
    /// `StaticCapacity` feature). Consolidation does not apply to them, only `limits.nodes`
    /// may be set, and a pool cannot switch between static and dynamic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// Upstream's rules for static pools (`pkg/apis/v1/nodepool.go`), word for word.
fn spec_rules(schema: &mut schemars::Schema) {
    add_rules(
        schema,
        &[
            (
                "has(self.replicas) == has(oldSelf.replicas)",
                "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
            ),
            (
                "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
                "only 'limits.nodes' is supported on static NodePools",
            ),
            (
                "!has(self.replicas) || !has(self.weight)",
                "'weight' is not supported on static NodePools",
            ),
        ],
    );
}

impl NodePoolSpec {
    /// Whether this is a static pool (`replicas` set).
    pub(crate) fn is_static(&self) -> bool {
        self.replicas.is_some()
    }

    /// `limits.nodes`, if set and readable (the only limit a static pool may have).
    pub fn node_limit(&self) -> Option<u64> {
        let quantity = self.limits.get(crate::resources::NODES)?;
        crate::resources::parse(crate::resources::NODES, &quantity.0).ok()
    }
}

/// The template of a NodeClaim: labels and annotations for its node, and its spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// Labels and annotations put on every NodeClaim and node of the pool.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    /// What every NodeClaim of the pool must satisfy.
    pub spec: NodeClaimTemplateSpec,
}

/// The part of ObjectMeta a template may set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels for the nodes. Kubernetes and Karpenter domains are restricted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = template_label_rules)]
    pub labels: BTreeMap<String, String>,
    /// Annotations for the nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-map-type" = "granular"))]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

fn template_label_rules(schema: &mut schemars::Schema) {
    schema.insert("maxProperties".to_owned(), 100.into());
    schema.insert("x-kubernetes-map-type".to_owned(), "atomic".into());
    schema.insert(
        "additionalProperties".to_owned(),
        serde_json::json!({"type": "string", "maxLength": 63, "pattern": "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"}),
    );
    add_rules(
        schema,
        &[
            (
                r#"self.all(x, x in ["beta.kubernetes.io/instance-type", "failure-domain.beta.kubernetes.io/region", "beta.kubernetes.io/os", "beta.kubernetes.io/arch", "failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone", "topology.kubernetes.io/region", "kubernetes.io/arch", "kubernetes.io/os", "node.kubernetes.io/windows-build"] || x.find("^([^/]+)").endsWith("node.kubernetes.io") || x.find("^([^/]+)").endsWith("node-restriction.kubernetes.io") || !x.find("^([^/]+)").endsWith("kubernetes.io"))"#,
                r#"label domain "kubernetes.io" is restricted"#,
            ),
            (
                r#"self.all(x, x.find("^([^/]+)").endsWith("kops.k8s.io") || !x.find("^([^/]+)").endsWith("k8s.io"))"#,
                r#"label domain "k8s.io" is restricted"#,
            ),
            (
                r#"self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !x.find("^([^/]+)").endsWith("karpenter.sh"))"#,
                r#"label domain "karpenter.sh" is restricted"#,
            ),
            (
                r#"self.all(x, x != "karpenter.sh/nodepool")"#,
                r#"label "karpenter.sh/nodepool" is restricted"#,
            ),
            (
                r#"self.all(x, x != "kubernetes.io/hostname")"#,
                r#"label "kubernetes.io/hostname" is restricted"#,
            ),
        ],
    );
}

/// Requirements in a template may not pin the pool or the hostname: Karpenter sets those.
fn template_requirement_rules(schema: &mut schemars::Schema) {
    requirement_list_rules(schema);
    add_rules(
        schema,
        &[
            (
                r#"self.all(x, x.key != "karpenter.sh/nodepool")"#,
                r#"label "karpenter.sh/nodepool" is restricted"#,
            ),
            (
                r#"self.all(x, x.key != "kubernetes.io/hostname")"#,
                r#"label "kubernetes.io/hostname" is restricted"#,
            ),
        ],
    );
}

/// A NodeClaim spec without resource requests: users do not size nodes, pods do.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints on every node; pods must tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints present only while a node starts (removed by a daemon); pods need not tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Constraints on the nodes' labels: instance types, zones, capacity types, architectures...
    #[schemars(transform = template_requirement_rules)]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The node class with the cloud-specific settings.
    #[schemars(transform = node_class_ref_immutable_parts)]
    pub node_class_ref: NodeClassReference,
    /// How long a node may take to drain before its pods are deleted regardless of PDBs and
    /// `karpenter.sh/do-not-disrupt`. Unset: wait for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^([0-9]+(s|m|h))+$"))]
    pub termination_grace_period: Option<String>,
    /// How long a node lives before it is replaced, or `Never`.
    #[serde(default = "NillableDuration::default_expire_after")]
    pub expire_after: NillableDuration,
}

fn node_class_ref_immutable_parts(schema: &mut schemars::Schema) {
    add_rules(
        schema,
        &[
            (
                "self.group == oldSelf.group",
                "nodeClassRef.group is immutable",
            ),
            (
                "self.kind == oldSelf.kind",
                "nodeClassRef.kind is immutable",
            ),
        ],
    );
}

/// Which nodes consolidation may remove.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only nodes with no workload pods.
    WhenEmpty,
    /// Empty nodes, and nodes whose pods fit elsewhere for less.
    #[default]
    WhenEmptyOrUnderutilized,
    /// Like `WhenEmptyOrUnderutilized`, but a move must save enough to be worth its disruption.
    Balanced,
}

/// The disruption methods a budget can be limited to.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
    /// Node repair: a node condition the cloud names unhealthy held past its toleration
    /// (upstream's `NodeRepair` gate).
    Unhealthy,
}

/// How and when Karpenter may disrupt a pool's nodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = disruption_rules)]
pub struct Disruption {
    /// How long a node must have had no pod scheduled or removed before consolidation considers
    /// it, or `Never`.
    #[serde(default = "Disruption::default_consolidate_after")]
    pub consolidate_after: NillableDuration,
    /// Which nodes consolidation may remove.
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// With `Balanced`: how much disruption a move may cost for its savings. A move passes when
    /// its share of the pool's disruption is at most this many times its share of the pool's
    /// price (upstream's `k`, default 2; designs/balanced-consolidation.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0, "exclusiveMinimum" = true))]
    pub consolidation_threshold: Option<f64>,
    /// Caps on how many nodes may be disrupted at once; the most restrictive active one wins.
    #[serde(default = "Budget::upstream_default_list")]
    #[schemars(transform = budget_list_rules)]
    pub budgets: Vec<Budget>,
}

fn disruption_rules(schema: &mut schemars::Schema) {
    add_rules(
        schema,
        &[(
            "!has(self.consolidationThreshold) || (has(self.consolidationPolicy) && self.consolidationPolicy == 'Balanced')",
            "consolidationThreshold is only allowed with consolidationPolicy Balanced",
        )],
    );
}

fn budget_list_rules(schema: &mut schemars::Schema) {
    schema.insert("maxItems".to_owned(), 50.into());
    schema.insert("x-kubernetes-list-type".to_owned(), "atomic".into());
    // `nodes` has a default, so it is always there; upstream names it required all the same.
    if let Some(items) = schema
        .get_mut("items")
        .and_then(serde_json::Value::as_object_mut)
    {
        items.insert("required".to_owned(), serde_json::json!(["nodes"]));
    }
    add_rules(
        schema,
        &[(
            "self.all(x, has(x.schedule) == has(x.duration))",
            "'schedule' must be set with 'duration'",
        )],
    );
}

impl Disruption {
    /// Upstream's `consolidateAfter` default: at once.
    fn default_consolidate_after() -> NillableDuration {
        NillableDuration("0s".to_owned())
    }

    /// What upstream fills in when `disruption` is left out.
    pub(crate) fn upstream_default() -> Self {
        Self {
            consolidate_after: NillableDuration("0s".to_owned()),
            consolidation_policy: ConsolidationPolicy::default(),
            consolidation_threshold: None,
            budgets: Budget::upstream_default_list(),
        }
    }
}

/// A cap on the number of a pool's nodes that may be disrupted at once, optionally only during
/// a cron window and only for some reasons.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Which disruption reasons the budget applies to; all when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxItems" = 50, "x-kubernetes-list-type" = "set"))]
    pub reasons: Option<Vec<DisruptionReason>>,
    /// A node count (`5`) or a percentage of the pool (`10%`, rounded up).
    #[serde(default = "Budget::default_nodes")]
    #[schemars(extend("pattern" = r"^((100|[0-9]{1,2})%|[0-9]+)$"))]
    pub nodes: String,
    /// When the budget starts to apply: cron syntax in UTC, or `@daily` and friends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "pattern" = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
    ))]
    pub schedule: Option<String>,
    /// How long the budget applies after each schedule hit (hours and minutes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"))]
    pub duration: Option<String>,
}

impl Budget {
    fn default_nodes() -> String {
        "10%".to_owned()
    }

    /// `[{nodes: 10%}]`, upstream's default.
    pub(crate) fn upstream_default_list() -> Vec<Self> {
        vec![Self {
            reasons: None,
            nodes: Self::default_nodes(),
            schedule: None,
            duration: None,
        }]
    }
}

/// What a NodePool reports about itself.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Resources of the pool's nodes, summed (what limits are checked against).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    /// How many nodes the pool has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// The generation of the node class last seen by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// ValidationSucceeded, NodeClassReady, NodeRegistrationHealthy and Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
