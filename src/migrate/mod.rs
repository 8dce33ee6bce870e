//! `kubectl karpenter migrate cluster-autoscaler`: what Cluster Autoscaler scales today, as
//! NodePools that keep its scheduling contract, following upstream's "Migrating from Cluster
//! Autoscaler" guide: one NodePool per node group, with the group's labels and taints, its
//! zones, architectures and capacity type, and a wider choice of instance types than the group's
//! one or few (the guide's `instance-category In [c, m, r]`, `instance-generation Gt 2` on AWS).
//!
//! This module reads the groups from the Nodes' labels (EKS managed node groups, eksctl node
//! groups, GKE node pools), which works without cloud credentials; what a group's cloud API says
//! (its maximum size, launch template) can only be guessed from its nodes, and the guesses are
//! notes; [`merge`] completes them with what the setup layer read from the cloud API.
//! [`launch_template`] turns an EKS group's AMI type, disk size and launch template into its
//! EC2NodeClass. Nodes Karpenter made, and control-plane nodes, are not in any group.

pub mod launch_template;
pub mod safe_to_evict;

pub(crate) use launch_template::LaunchTemplate;

use crate::apis::CapacityType;
use crate::apis::labels;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The labels that name a node's group, the cloud's node group kind, and the cloud.
const GROUP_LABELS: &[(&str, &str, Cloud)] = &[
    (
        "eks.amazonaws.com/nodegroup",
        "EKS managed node group",
        Cloud::Aws,
    ),
    (
        "alpha.eksctl.io/nodegroup-name",
        "eksctl node group",
        Cloud::Aws,
    ),
    ("cloud.google.com/gke-nodepool", "GKE node pool", Cloud::Gcp),
];

/// Label prefixes a cloud, the kubelet or an autoscaler sets: not the group's own labels.
const MANAGED_LABEL_PREFIXES: &[&str] = &[
    "kubernetes.io/",
    "node.kubernetes.io/",
    "beta.kubernetes.io/",
    "topology.kubernetes.io/",
    "failure-domain.beta.kubernetes.io/",
    "node-role.kubernetes.io/",
    "eks.amazonaws.com/",
    "alpha.eksctl.io/",
    "k8s.io/cloud-provider-aws",
    "cloud.google.com/",
    "topology.gke.io/",
    "karpenter.sh/",
    "kwok.x-k8s.io/",
];

/// Taints a cloud, the node lifecycle or an autoscaler sets: not the group's own.
const MANAGED_TAINT_PREFIXES: &[&str] = &[
    "node.kubernetes.io/",
    "node.cloudprovider.kubernetes.io/",
    "ToBeDeletedByClusterAutoscaler",
    "DeletionCandidateOfClusterAutoscaler",
    "karpenter.sh/",
];

/// The cloud a group runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cloud {
    Aws,
    Gcp,
}

/// What Cluster Autoscaler scales: one node group, as its nodes show it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeGroup {
    pub name: String,
    /// `EKS managed node group`, `GKE node pool`...
    pub kind: String,
    /// The label selecting its nodes (`eks.amazonaws.com/nodegroup=NAME`).
    pub selector: String,
    pub cloud: Option<Cloud>,
    pub nodes: Vec<String>,
    pub instance_types: BTreeSet<String>,
    pub zones: BTreeSet<String>,
    pub architectures: BTreeSet<String>,
    pub capacity_types: BTreeSet<String>,
    /// The labels every node of the group has, beyond what the cloud sets.
    pub labels: BTreeMap<String, String>,
    /// The taints every node of the group has, beyond what the cloud sets.
    pub taints: Vec<Taint>,
    /// Its nodes' CPU capacity summed, in millicores.
    pub cpu_millis: u64,
    /// The CPU of its largest node (or, with none, of its largest instance type), millicores.
    pub node_cpu_millis: u64,
    /// The most nodes the group may have, as its cloud API says.
    pub max_size: Option<u32>,
    /// Whether Cluster Autoscaler may resize it, as its cloud API says (GKE node pools have
    /// autoscaling on or off; EKS groups are always within their sizes).
    pub autoscaled: Option<bool>,
    /// EKS: the group's `amiType` (`AL2023_x86_64_STANDARD`, `CUSTOM`…).
    pub ami_type: Option<String>,
    /// EKS: the group's `diskSize`, GiB (groups without a launch template).
    pub disk_size_gib: Option<u32>,
    /// EKS: the launch template its nodes boot from.
    pub launch_template: Option<LaunchTemplate>,
    /// What reading it from its cloud API could not do.
    pub notes: Vec<String>,
}

/// The node groups of `nodes`, by name; nodes in no group are counted in the second value.
pub fn node_groups(nodes: &[Node]) -> (Vec<NodeGroup>, usize) {
    let mut groups: BTreeMap<(String, String), NodeGroup> = BTreeMap::new();
    let mut outside = 0;
    for node in nodes {
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        if node_labels.contains_key(labels::NODE_POOL)
            || node_labels.contains_key("node-role.kubernetes.io/control-plane")
        {
            continue;
        }
        let Some((label, kind, cloud, name)) =
            GROUP_LABELS.iter().find_map(|(label, kind, cloud)| {
                node_labels
                    .get(*label)
                    .map(|name| (*label, *kind, *cloud, name.clone()))
            })
        else {
            outside += 1;
            continue;
        };
        let group = groups
            .entry((label.to_owned(), name.clone()))
            .or_insert_with(|| NodeGroup {
                name: name.clone(),
                kind: kind.to_owned(),
                selector: format!("{label}={name}"),
                cloud: Some(cloud),
                labels: own_labels(&node_labels),
                taints: own_taints(node),
                ..NodeGroup::default()
            });
        group
            .nodes
            .push(node.metadata.name.clone().unwrap_or_default());
        let get = |key: &str| node_labels.get(key).cloned();
        group.instance_types.extend(get(labels::INSTANCE_TYPE));
        group.zones.extend(get(labels::ZONE));
        group.architectures.extend(get(labels::ARCH));
        group
            .capacity_types
            .insert(capacity_type(&node_labels).to_string());
        // A label or taint only some nodes have is not the group's.
        let mine = own_labels(&node_labels);
        group.labels.retain(|k, v| mine.get(k) == Some(v));
        let taints = own_taints(node);
        group.taints.retain(|t| taints.contains(t));
        let cpu = node
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("cpu"))
            .and_then(|q| crate::resources::parse(crate::resources::CPU, &q.0).ok())
            .unwrap_or(0);
        group.cpu_millis += cpu;
        group.node_cpu_millis = group.node_cpu_millis.max(cpu);
    }
    (groups.into_values().collect(), outside)
}

/// The groups as the nodes show them, completed by what the cloud API says of them: its
/// instance types, capacity type, labels and taints as configured, its maximum size, and the
/// groups that have no node today.
pub fn merge(from_nodes: Vec<NodeGroup>, from_api: Vec<NodeGroup>) -> Vec<NodeGroup> {
    let mut groups = from_nodes;
    for api in from_api {
        match groups.iter_mut().find(|g| g.selector == api.selector) {
            Some(group) => {
                if !api.instance_types.is_empty() {
                    group.instance_types = api.instance_types;
                }
                group.capacity_types = api.capacity_types;
                group.labels.extend(api.labels);
                if !api.taints.is_empty() {
                    group.taints = api.taints;
                }
                group.max_size = api.max_size;
                group.autoscaled = api.autoscaled;
                if !api.zones.is_empty() {
                    group.zones = api.zones;
                }
                group.ami_type = api.ami_type;
                group.disk_size_gib = api.disk_size_gib;
                group.launch_template = api.launch_template;
                group.notes = api.notes;
            }
            None => groups.push(api),
        }
    }
    groups
}

fn own_labels(node_labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    node_labels
        .iter()
        .filter(|(k, _)| !MANAGED_LABEL_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn own_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| !MANAGED_TAINT_PREFIXES.iter().any(|p| t.key.starts_with(p)))
        .collect()
}

/// The capacity type as the clouds label it: EKS's `eks.amazonaws.com/capacityType`, GKE's spot
/// and preemptible labels, Karpenter's own.
fn capacity_type(node_labels: &BTreeMap<String, String>) -> CapacityType {
    let spot = node_labels
        .get("eks.amazonaws.com/capacityType")
        .is_some_and(|v| v == "SPOT")
        || node_labels
            .get("cloud.google.com/gke-spot")
            .is_some_and(|v| v == "true")
        || node_labels
            .get("cloud.google.com/gke-preemptible")
            .is_some_and(|v| v == "true")
        || node_labels
            .get(labels::CAPACITY_TYPE)
            .is_some_and(|v| v == CapacityType::Spot.as_str());
    if spot {
        CapacityType::Spot
    } else {
        CapacityType::OnDemand
    }
}

/// Pods (one line per owner) that select nodes by a node group's cloud label: Karpenter's nodes
/// do not carry it, so those pods would never leave the old groups.
pub fn pods_selecting_groups(pods: &[Pod]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for pod in pods {
        let Some(spec) = &pod.spec else { continue };
        let mut keys: Vec<String> = spec
            .node_selector
            .iter()
            .flat_map(|s| s.keys().cloned())
            .collect();
        if let Some(required) = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
        {
            for term in &required.node_selector_terms {
                keys.extend(
                    term.match_expressions
                        .iter()
                        .flatten()
                        .map(|e| e.key.clone()),
                );
            }
        }
        let Some(key) = keys
            .iter()
            .find(|k| GROUP_LABELS.iter().any(|(label, _, _)| label == k))
        else {
            continue;
        };
        let owner = pod
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .map(|o| format!("{} {}", o.kind, o.name))
            .unwrap_or_else(|| format!("pod {}", pod.metadata.name.as_deref().unwrap_or_default()));
        out.insert(format!(
            "{owner} in {} selects nodes by {key}, which Karpenter's nodes do not carry: select karpenter.sh/nodepool (or a label of its NodePool's template) instead, or its pods stay on the old nodes",
            pod.metadata.namespace.as_deref().unwrap_or("default")
        ));
    }
    out.into_iter().collect()
}

/// A NodePool name from a group name: lowercase letters, digits and dashes, at most 63.
pub fn pool_name(group: &str) -> String {
    let name: String = group
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = name.trim_matches('-');
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_owned()
}

/// AWS instance categories (`m` of `m5.large`) that are general purpose: the guide widens them
/// to c, m and r. Others (GPU, storage, HPC) stay what the group had.
const GENERAL_PURPOSE: &[&str] = &["c", "m", "r", "t"];

/// The NodePool for one group, on the node class `node_class` (group, kind, name), with notes
/// on what it had to guess.
pub fn node_pool(group: &NodeGroup, node_class: &Value, notes: &mut Vec<String>) -> Value {
    let name = pool_name(&group.name);
    let mut requirements = vec![
        json!({"key": labels::OS, "operator": "In", "values": ["linux"]}),
        json!({"key": labels::CAPACITY_TYPE, "operator": "In", "values": group.capacity_types}),
    ];
    if !group.architectures.is_empty() {
        requirements
            .push(json!({"key": labels::ARCH, "operator": "In", "values": group.architectures}));
    }
    if !group.zones.is_empty() {
        requirements.push(json!({"key": labels::ZONE, "operator": "In", "values": group.zones}));
    }
    match group.cloud {
        Some(Cloud::Aws) => {
            let categories: BTreeSet<String> = group
                .instance_types
                .iter()
                .map(|t| t.chars().take_while(char::is_ascii_alphabetic).collect())
                .collect();
            if !categories.is_empty()
                && categories
                    .iter()
                    .all(|c| GENERAL_PURPOSE.contains(&c.as_str()))
            {
                requirements.push(json!({"key": labels::AWS_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m", "r"]}));
                requirements.push(json!({"key": labels::AWS_INSTANCE_GENERATION, "operator": "Gt", "values": ["2"]}));
            } else if !group.instance_types.is_empty() {
                let families: BTreeSet<&str> = group
                    .instance_types
                    .iter()
                    .filter_map(|t| t.split('.').next())
                    .collect();
                requirements.push(json!({"key": labels::AWS_INSTANCE_FAMILY, "operator": "In", "values": families}));
                notes.push(format!(
                    "{} {}: instance families {} kept as they are (not general purpose)",
                    group.kind,
                    group.name,
                    families.iter().copied().collect::<Vec<_>>().join(", ")
                ));
            }
        }
        Some(Cloud::Gcp) => {
            let mut families: BTreeSet<String> = group
                .instance_types
                .iter()
                .filter_map(|t| t.split('-').next().map(str::to_owned))
                .collect();
            let general = ["e2", "n1", "n2", "n2d", "c3", "t2a", "t2d"];
            if families.iter().all(|f| general.contains(&f.as_str())) {
                families.extend(["e2", "n2", "n2d", "c3"].map(str::to_owned));
            }
            if !families.is_empty() {
                requirements.push(json!({"key": labels::GCP_INSTANCE_FAMILY, "operator": "In", "values": families}));
            }
        }
        None => {}
    }
    let mut template = json!({
        "spec": {
            "requirements": requirements,
            "nodeClassRef": node_class,
        }
    });
    if !group.labels.is_empty() {
        template["metadata"] = json!({"labels": group.labels});
    }
    if !group.taints.is_empty() {
        template["spec"]["taints"] = json!(group.taints);
    }
    // The group's maximum size (from its cloud API) times its nodes' size; without it, twice
    // the CPU its nodes have today.
    let cores = match group.max_size {
        Some(max) if group.node_cpu_millis > 0 => {
            (u64::from(max) * group.node_cpu_millis).div_ceil(1000)
        }
        _ => {
            let cores = (group.cpu_millis * 2).div_ceil(1000);
            notes.push(format!(
                "{} {}: limits.cpu {cores} is twice its nodes' CPU today; set it from the group's maximum size (max nodes x CPU per node)",
                group.kind, group.name
            ));
            cores
        }
    };
    if group.autoscaled == Some(false) {
        notes.push(format!(
            "{} {}: autoscaling is off, so Cluster Autoscaler never resized it; limits.cpu {cores} keeps it at its size today, and unlike the group its NodePool scales within that (raise the limit to let it grow)",
            group.kind, group.name
        ));
    }
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": template,
            "limits": {"cpu": cores.to_string()},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, node_labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": node_labels},
            "spec": {"taints": taints},
            "status": {"capacity": {"cpu": "2"}},
        }))
        .unwrap()
    }

    #[test]
    fn nodes_group_by_their_node_group_label_with_what_all_of_them_share() {
        let nodes = [
            node(
                "a",
                json!({"eks.amazonaws.com/nodegroup": "general", "node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-west-2a", "kubernetes.io/arch": "amd64", "team": "a", "only-a": "x"}),
                json!([{"key": "dedicated", "value": "a", "effect": "NoSchedule"}, {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
            ),
            node(
                "b",
                json!({"eks.amazonaws.com/nodegroup": "general", "node.kubernetes.io/instance-type": "m5.xlarge", "topology.kubernetes.io/zone": "us-west-2b", "kubernetes.io/arch": "amd64", "team": "a", "eks.amazonaws.com/capacityType": "ON_DEMAND"}),
                json!([{"key": "dedicated", "value": "a", "effect": "NoSchedule"}]),
            ),
            node("k", json!({"karpenter.sh/nodepool": "default"}), json!([])),
            node("loose", json!({"kubernetes.io/arch": "amd64"}), json!([])),
        ];
        let (groups, outside) = node_groups(&nodes);
        assert_eq!(outside, 1);
        assert_eq!(groups.len(), 1);
        let group = &groups[0];
        assert_eq!(group.nodes, ["a", "b"]);
        assert_eq!(
            group.labels,
            BTreeMap::from([("team".to_owned(), "a".to_owned())])
        );
        assert_eq!(group.taints.len(), 1);
        assert_eq!(group.zones.len(), 2);
        assert_eq!(group.cpu_millis, 4000);

        let mut notes = Vec::new();
        let pool = node_pool(
            group,
            &json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}),
            &mut notes,
        );
        assert_eq!(pool["metadata"]["name"], "general");
        assert_eq!(pool["spec"]["limits"]["cpu"], "8");
        let requirements = pool["spec"]["template"]["spec"]["requirements"]
            .as_array()
            .unwrap();
        assert!(requirements.contains(&json!({"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]})));
        assert!(requirements.contains(
            &json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]})
        ));
        assert_eq!(
            pool["spec"]["template"]["metadata"]["labels"],
            json!({"team": "a"})
        );
    }

    #[test]
    fn a_gpu_group_keeps_its_families_and_names_become_valid() {
        let group = NodeGroup {
            name: "GPU_Workers".to_owned(),
            kind: "EKS managed node group".to_owned(),
            cloud: Some(Cloud::Aws),
            instance_types: BTreeSet::from(["g5.xlarge".to_owned()]),
            capacity_types: BTreeSet::from(["spot".to_owned()]),
            ..NodeGroup::default()
        };
        let mut notes = Vec::new();
        let pool = node_pool(&group, &json!({}), &mut notes);
        assert_eq!(pool["metadata"]["name"], "gpu-workers");
        let requirements = pool["spec"]["template"]["spec"]["requirements"]
            .as_array()
            .unwrap();
        assert!(requirements.contains(
            &json!({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g5"]})
        ));
        assert!(notes.iter().any(|n| n.contains("g5 kept")), "{notes:?}");
    }
}
