//! GKE (container v1): `GET /v1/projects/{project}/locations/{location}/clusters/{cluster}`, the
//! cluster settings `init gcp` reads (Workload Identity pool, network, subnetwork, location,
//! secondary range for pods), and `GET …/clusters/{cluster}/nodePools`, the node pools
//! `migrate cluster-autoscaler` reads (machine type, labels, taints, spot, zones, autoscaling
//! limits). Tests seed clusters with [`Container::seed_cluster`] and their node pools with
//! [`Container::seed_node_pool`].
//!
//! Shapes as Google answers them: `network` and `subnetwork` are short names, the full paths are
//! in `networkConfig`; a cluster without Workload Identity has no `workloadIdentityConfig`; the
//! cluster carries its node pools in `nodePools` too; a node pool's `autoscaling` has only
//! `enabled`, and either per-zone (`minNodeCount`, `maxNodeCount`) or total limits
//! (`totalMinNodeCount`, `totalMaxNodeCount`), never both; taint effects are `NO_SCHEDULE`,
//! `PREFER_NO_SCHEDULE`, `NO_EXECUTE`; an unknown cluster is a 404 with status NOT_FOUND. Both
//! calls need `container.clusters.get` (Google's IAM reference: listing node pools needs no
//! permission of its own), which tests can deny through the Resource Manager's denials.

use crate::wire::{ApiResult, GoogleError, ok};
use crate::{Shared, lock};
use axum::Router;
use axum::extract::{Path, State as Ext};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// GKE's part of the fake's state.
#[derive(Debug, Default)]
pub struct Container {
    /// Clusters by (project, location, name), as GKE returns them (without `nodePools`).
    pub clusters: BTreeMap<(String, String, String), Value>,
    /// Each cluster's node pools, by the cluster's key.
    pub node_pools: BTreeMap<(String, String, String), Vec<Value>>,
}

/// How Cluster Autoscaler may size a seeded node pool.
#[derive(Clone, Copy, Debug)]
pub enum Autoscaling {
    /// Off: the pool keeps its size.
    Off,
    /// Per-zone limits (`gcloud --min-nodes/--max-nodes`).
    PerZone { min: u32, max: u32 },
    /// Limits for the whole pool (`--total-min-nodes/--total-max-nodes`).
    Total { min: u32, max: u32 },
}

/// A node pool to seed: what `gcloud container node-pools create` would be given.
#[derive(Clone, Debug)]
pub struct NodePoolSeed<'a> {
    pub name: &'a str,
    pub machine_type: &'a str,
    /// Its zones; empty takes the cluster's.
    pub locations: &'a [&'a str],
    pub node_count: u32,
    pub autoscaling: Autoscaling,
    pub spot: bool,
    pub labels: &'a [(&'a str, &'a str)],
    /// (key, value, effect as Kubernetes writes it: `NoSchedule`…).
    pub taints: &'a [(&'a str, &'a str, &'a str)],
}

impl Container {
    /// A cluster on network/subnetwork `default` (or `subnetwork`), with Workload Identity on
    /// when `workload_identity`, and pods in secondary range `pods`.
    pub fn seed_cluster(
        &mut self,
        project: &str,
        location: &str,
        name: &str,
        workload_identity: bool,
        subnetwork: &str,
    ) {
        let region = location
            .rsplit_once('-')
            .filter(|(r, s)| r.contains('-') && s.len() == 1)
            .map_or(location, |(r, _)| r);
        let mut cluster = json!({
            "name": name,
            "location": location,
            "zone": location,
            "status": "RUNNING",
            "network": "default",
            "subnetwork": subnetwork,
            "networkConfig": {
                "network": format!("projects/{project}/global/networks/default"),
                "subnetwork": format!("projects/{project}/regions/{region}/subnetworks/{subnetwork}"),
            },
            "ipAllocationPolicy": {"useIpAliases": true, "clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services"},
            "selfLink": format!("https://container.googleapis.com/v1/projects/{project}/locations/{location}/clusters/{name}"),
        });
        if workload_identity {
            cluster["workloadIdentityConfig"] =
                json!({"workloadPool": format!("{project}.svc.id.goog")});
        }
        self.clusters.insert(
            (project.to_owned(), location.to_owned(), name.to_owned()),
            cluster,
        );
    }
}

impl Container {
    /// Adds a node pool to a seeded cluster, as GKE reports it.
    ///
    /// # Panics
    /// When the cluster was not seeded: a test mistake.
    #[allow(clippy::panic)]
    pub fn seed_node_pool(
        &mut self,
        project: &str,
        location: &str,
        cluster: &str,
        pool: &NodePoolSeed<'_>,
    ) {
        let key = (project.to_owned(), location.to_owned(), cluster.to_owned());
        if !self.clusters.contains_key(&key) {
            panic!("seed cluster {cluster} before its node pools");
        }
        let zones: Vec<String> = if pool.locations.is_empty() {
            // A regional cluster's default: three of the region's zones; a zonal one: its zone.
            if location.matches('-').count() == 2 {
                vec![location.to_owned()]
            } else {
                ["a", "b", "c"]
                    .iter()
                    .map(|z| format!("{location}-{z}"))
                    .collect()
            }
        } else {
            pool.locations.iter().map(|z| (*z).to_owned()).collect()
        };
        let autoscaling = match pool.autoscaling {
            Autoscaling::Off => json!({}),
            Autoscaling::PerZone { min, max } => {
                json!({"enabled": true, "minNodeCount": min, "maxNodeCount": max, "locationPolicy": "BALANCED"})
            }
            Autoscaling::Total { min, max } => {
                json!({"enabled": true, "totalMinNodeCount": min, "totalMaxNodeCount": max, "locationPolicy": "ANY"})
            }
        };
        let taints: Vec<Value> = pool
            .taints
            .iter()
            .map(|(key, value, effect)| {
                let effect = match *effect {
                    "NoExecute" => "NO_EXECUTE",
                    "PreferNoSchedule" => "PREFER_NO_SCHEDULE",
                    _ => "NO_SCHEDULE",
                };
                json!({"key": key, "value": value, "effect": effect})
            })
            .collect();
        let mut config = json!({
            "machineType": pool.machine_type,
            "diskSizeGb": 100,
            "diskType": "pd-balanced",
            "imageType": "COS_CONTAINERD",
            "oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"],
            "serviceAccount": "default",
        });
        if !pool.labels.is_empty() {
            config["labels"] = pool
                .labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        if !taints.is_empty() {
            config["taints"] = taints.into();
        }
        if pool.spot {
            config["spot"] = true.into();
        }
        let name = pool.name;
        let value = json!({
            "name": name,
            "config": config,
            "initialNodeCount": pool.node_count,
            "locations": zones,
            "autoscaling": autoscaling,
            "management": {"autoUpgrade": true, "autoRepair": true},
            "status": "RUNNING",
            "selfLink": format!("https://container.googleapis.com/v1/projects/{project}/locations/{location}/clusters/{cluster}/nodePools/{name}"),
        });
        self.node_pools.entry(key).or_default().push(value);
    }
}

/// GKE's routes.
pub fn router() -> Router<Shared> {
    Router::new()
        .route(
            "/v1/projects/{project}/locations/{location}/clusters/{cluster}",
            get(get_cluster),
        )
        .route(
            "/v1/projects/{project}/locations/{location}/clusters/{cluster}/nodePools",
            get(list_node_pools),
        )
}

async fn list_node_pools(
    Ext(state): Ext<Shared>,
    Path((project, location, cluster)): Path<(String, String, String)>,
) -> ApiResult {
    let state = lock(&state);
    let resource = format!("projects/{project}/locations/{location}/clusters/{cluster}");
    state
        .resource_manager
        .denials
        .check("container.clusters.get", &resource)?;
    let key = (project, location, cluster);
    if !state.container.clusters.contains_key(&key) {
        return Err(GoogleError::not_found(format!("Not found: {resource}.")));
    }
    let pools = state
        .container
        .node_pools
        .get(&key)
        .cloned()
        .unwrap_or_default();
    ok(json!({"nodePools": pools}))
}

async fn get_cluster(
    Ext(state): Ext<Shared>,
    Path((project, location, cluster)): Path<(String, String, String)>,
) -> ApiResult {
    let state = lock(&state);
    let resource = format!("projects/{project}/locations/{location}/clusters/{cluster}");
    state
        .resource_manager
        .denials
        .check("container.clusters.get", &resource)?;
    let key = (project, location, cluster);
    match state.container.clusters.get(&key) {
        Some(found) => {
            let mut found = found.clone();
            if let Some(pools) = state.container.node_pools.get(&key) {
                found["nodePools"] = pools.clone().into();
            }
            ok(found)
        }
        None => Err(GoogleError::not_found(format!("Not found: {resource}."))),
    }
}
