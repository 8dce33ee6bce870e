//! GKE (container v1) `GET /v1/projects/{project}/locations/{location}/clusters/{cluster}`: the
//! cluster settings `init gcp` reads (Workload Identity pool, network, subnetwork, location,
//! secondary range for pods). Tests seed clusters with [`Container::seed_cluster`].
//!
//! Shapes as Google answers them: `network` and `subnetwork` are short names, the full paths are
//! in `networkConfig`; a cluster without Workload Identity has no `workloadIdentityConfig`; an
//! unknown cluster is a 404 with status NOT_FOUND. Needs `container.clusters.get`, which tests
//! can deny through the Resource Manager's denials.

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
    /// Clusters by (project, location, name), as GKE returns them.
    pub clusters: BTreeMap<(String, String, String), Value>,
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

/// GKE's routes.
pub fn router() -> Router<Shared> {
    Router::new().route(
        "/v1/projects/{project}/locations/{location}/clusters/{cluster}",
        get(get_cluster),
    )
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
    match state
        .container
        .clusters
        .get(&(project, location, cluster.clone()))
    {
        Some(found) => ok(found.clone()),
        None => Err(GoogleError::not_found(format!("Not found: {resource}."))),
    }
}
