//! The node pools of a GKE cluster, as `kubectl karpenter migrate cluster-autoscaler` reads them
//! (`projects.locations.clusters.nodePools.list`): what the pool's nodes cannot say, its
//! autoscaling limits (the NodePool's limit), machine type, zones, spot, labels and taints as
//! configured, and the pools scaled to zero, which have no node to read.

use super::GcpOptions;
use super::gke::container_get;
use crate::migrate::{Cloud, NodeGroup};
use crate::setup::SetupError;
use k8s_openapi::api::core::v1::Taint;
use serde_json::Value;

/// Machine families whose CPUs are Arm (Ampere Altra `t2a`, Google Axion `c4a`, `n4a`).
const ARM_FAMILIES: &[&str] = &["t2a", "c4a", "n4a"];

/// Every node pool of `options.cluster_name`.
pub async fn node_pools(options: &GcpOptions) -> Result<Vec<NodeGroup>, SetupError> {
    let body = container_get(
        options,
        "/nodePools",
        "container.projects.locations.clusters.nodePools.list",
    )
    .await?;
    Ok(body["nodePools"]
        .as_array()
        .map(|pools| pools.iter().filter_map(node_group).collect())
        .unwrap_or_default())
}

/// One node pool as a node group.
fn node_group(pool: &Value) -> Option<NodeGroup> {
    let name = pool["name"].as_str()?.to_owned();
    let config = &pool["config"];
    let machine_type = config["machineType"].as_str().unwrap_or_default();
    let family = machine_type.split('-').next().unwrap_or_default();
    let spot =
        config["spot"].as_bool() == Some(true) || config["preemptible"].as_bool() == Some(true);
    let zones: Vec<String> = pool["locations"]
        .as_array()
        .map(|z| {
            z.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let count = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    let autoscaling = &pool["autoscaling"];
    let autoscaled = autoscaling["enabled"].as_bool() == Some(true);
    let per_zone = |n: u32| n.saturating_mul(u32::try_from(zones.len().max(1)).unwrap_or(u32::MAX));
    // GKE's limits are per zone unless the pool has total ones (`--total-max-nodes`); a pool
    // Cluster Autoscaler does not scale keeps the size it was given, per zone too.
    let max_size = if autoscaled {
        count(&autoscaling["totalMaxNodeCount"])
            .filter(|n| *n > 0)
            .or_else(|| count(&autoscaling["maxNodeCount"]).map(per_zone))
    } else {
        count(&pool["initialNodeCount"]).map(per_zone)
    };
    Some(NodeGroup {
        selector: format!("cloud.google.com/gke-nodepool={name}"),
        kind: "GKE node pool".to_owned(),
        cloud: Some(Cloud::Gcp),
        instance_types: [machine_type.to_owned()]
            .into_iter()
            .filter(|t| !t.is_empty())
            .collect(),
        zones: zones.iter().cloned().collect(),
        architectures: [if ARM_FAMILIES.contains(&family) {
            "arm64"
        } else {
            "amd64"
        }
        .to_owned()]
        .into(),
        capacity_types: [if spot { "spot" } else { "on-demand" }.to_owned()].into(),
        labels: config["labels"]
            .as_object()
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default(),
        taints: config["taints"]
            .as_array()
            .map(|taints| {
                taints
                    .iter()
                    .map(|t| Taint {
                        key: t["key"].as_str().unwrap_or_default().to_owned(),
                        value: t["value"]
                            .as_str()
                            .filter(|v| !v.is_empty())
                            .map(str::to_owned),
                        effect: match t["effect"].as_str() {
                            Some("NO_EXECUTE") => "NoExecute",
                            Some("PREFER_NO_SCHEDULE") => "PreferNoSchedule",
                            _ => "NoSchedule",
                        }
                        .to_owned(),
                        time_added: None,
                    })
                    .collect()
            })
            .unwrap_or_default(),
        max_size,
        autoscaled: Some(autoscaled),
        name,
        ..NodeGroup::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gke_limits_are_per_zone_unless_the_pool_has_total_ones_and_a_fixed_pool_keeps_its_size() {
        let zones = json!(["us-central1-a", "us-central1-b", "us-central1-c"]);
        let per_zone = node_group(
            &json!({"name": "a", "config": {"machineType": "e2-standard-4"}, "locations": zones,
            "autoscaling": {"enabled": true, "minNodeCount": 1, "maxNodeCount": 4}}),
        )
        .unwrap();
        assert_eq!(per_zone.max_size, Some(12));
        let total = node_group(&json!({"name": "b", "config": {"machineType": "t2a-standard-4", "spot": true}, "locations": zones,
            "autoscaling": {"enabled": true, "totalMinNodeCount": 0, "totalMaxNodeCount": 5}})).unwrap();
        assert_eq!(total.max_size, Some(5));
        assert!(total.architectures.contains("arm64"));
        assert!(total.capacity_types.contains("spot"));
        let fixed = node_group(
            &json!({"name": "c", "config": {"machineType": "n2-standard-8",
            "taints": [{"key": "gpu", "value": "", "effect": "NO_EXECUTE"}]},
            "locations": ["us-central1-a"], "initialNodeCount": 2, "autoscaling": {}}),
        )
        .unwrap();
        assert_eq!(fixed.max_size, Some(2));
        assert_eq!(fixed.autoscaled, Some(false));
        assert_eq!(fixed.taints[0].effect, "NoExecute");
        assert_eq!(fixed.taints[0].value, None);
    }
}
