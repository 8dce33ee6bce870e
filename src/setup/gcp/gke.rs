//! GKE: the cluster as `clusters.get` reports it (Workload Identity pool, network,
//! subnetwork, pods' range), read over plain REST, and the `gke-cluster` step that reads it.

use super::{Ctx, GcpAuth, GcpOptions};
use crate::setup::{SetupError, Status};
use futures::future::BoxFuture;

/// What GKE `clusters.get` said, as far as `init gcp` needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GkeCluster {
    /// `workloadIdentityConfig.workloadPool` (`<project>.svc.id.goog`); `None` when Workload
    /// Identity is off.
    pub workload_pool: Option<String>,
    /// `networkConfig.network` (`projects/<p>/global/networks/<n>`), else the short name.
    pub network: String,
    /// `networkConfig.subnetwork` (`projects/<p>/regions/<r>/subnetworks/<s>`), the form a
    /// GCENodeClass's `networkConfig.subnetwork` takes.
    pub subnetwork: String,
    /// The cluster's region or zone.
    pub location: String,
    /// `ipAllocationPolicy.clusterSecondaryRangeName`: the pods' range (VPC-native clusters).
    pub pod_range: Option<String>,
}

impl GkeCluster {
    fn from_json(value: &serde_json::Value, project: &str) -> Self {
        let text = |pointer: &str| {
            value
                .pointer(pointer)
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let location = text("/location").unwrap_or_default();
        let region = zone_region(&location).unwrap_or(&location).to_owned();
        Self {
            workload_pool: text("/workloadIdentityConfig/workloadPool"),
            network: text("/networkConfig/network")
                .or_else(|| text("/network"))
                .unwrap_or_default(),
            subnetwork: text("/networkConfig/subnetwork")
                .or_else(|| {
                    text("/subnetwork")
                        .map(|s| format!("projects/{project}/regions/{region}/subnetworks/{s}"))
                })
                .unwrap_or_default(),
            location,
            pod_range: text("/ipAllocationPolicy/clusterSecondaryRangeName"),
        }
    }
}

/// The GKE API's root.
const CONTAINER_ENDPOINT: &str = "https://container.googleapis.com";

/// Reads the cluster with GKE `clusters.get` (at `options.endpoint` without credentials, else
/// Google with Application Default Credentials).
pub async fn read_cluster(options: &GcpOptions) -> Result<GkeCluster, SetupError> {
    let body = container_get(options, "", "container.clusters.get").await?;
    Ok(GkeCluster::from_json(&body, &options.project))
}

/// GETs `{cluster}{suffix}` from the GKE API, `action` naming the call in errors (every GKE read
/// needs `container.clusters.get`).
///
/// Plain REST over reqwest: the official google-cloud-container-v1 crate is not in this build's
/// registry, and reqwest is already compiled for google-cloud-auth.
pub(super) async fn container_get(
    options: &GcpOptions,
    suffix: &str,
    action: &str,
) -> Result<serde_json::Value, SetupError> {
    let o = options;
    let resource = format!(
        "projects/{}/locations/{}/clusters/{}",
        o.project, o.location, o.cluster_name
    );
    let cloud =
        |detail: String, source: Box<dyn std::error::Error + Send + Sync>| SetupError::Cloud {
            action: format!("{action} on {resource}"),
            detail,
            source,
        };
    let base = o
        .endpoint
        .as_deref()
        .unwrap_or(CONTAINER_ENDPOINT)
        .trim_end_matches('/');
    let mut request = reqwest::Client::new()
        .get(format!("{base}/v1/{resource}{suffix}"))
        // A machine without network answers within this, not after minutes.
        .timeout(std::time::Duration::from_secs(20));
    if o.endpoint.is_none() {
        let credentials = google_cloud_auth::credentials::Builder::default()
            .build_access_token_credentials()
            .map_err(|e| cloud(e.to_string(), Box::new(e)))?;
        let token = credentials
            .access_token()
            .await
            .map_err(|e| cloud(e.to_string(), Box::new(e)))?;
        request = request.bearer_auth(token.token);
    }
    let response = request
        .send()
        .await
        .map_err(|e| cloud(e.to_string(), Box::new(e)))?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    match status.as_u16() {
        200 => Ok(body),
        404 => Err(SetupError::Missing {
            resource: format!(
                "GKE cluster {} in {} (project {})",
                o.cluster_name, o.location, o.project
            ),
            hint: "check --cluster, --location and --project".to_owned(),
        }),
        code => {
            let message = body
                .pointer("/error/message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_owned();
            let error: Box<dyn std::error::Error + Send + Sync> =
                format!("HTTP {code}: {message}").into();
            if code == 403 {
                Err(SetupError::PermissionDenied {
                    action: "container.clusters.get".to_owned(),
                    resource,
                    source: error,
                })
            } else {
                Err(cloud(format!("HTTP {code}: {message}"), error))
            }
        }
    }
}

pub(super) fn check_cluster(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let o = &ctx.options;
        let cluster = ctx.cluster.get_or_try_init(|| read_cluster(o)).await?;
        if o.auth == GcpAuth::WorkloadIdentity && cluster.workload_pool.is_none() {
            return Err(SetupError::Missing {
                resource: format!("Workload Identity on GKE cluster {}", o.cluster_name),
                hint: format!(
                    "enable it with: gcloud container clusters update {} --location {} --workload-pool={}.svc.id.goog (or use --auth key)",
                    o.cluster_name, o.location, o.project
                ),
            });
        }
        Ok(Status::InPlace(format!(
            "{}, subnetwork {}, Workload Identity {}",
            cluster.location,
            cluster.subnetwork,
            cluster.workload_pool.as_deref().unwrap_or("off")
        )))
    })
}

pub(super) fn apply_nothing(_: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async { Ok(()) })
}

/// The region of a zone (`us-central1-a` → `us-central1`); `None` for a region.
pub(super) fn zone_region(location: &str) -> Option<&str> {
    let (region, suffix) = location.rsplit_once('-')?;
    (region.contains('-') && suffix.len() == 1 && suffix.chars().all(|c| c.is_ascii_lowercase()))
        .then_some(region)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::gcp::node_pool_manifests;
    use serde_json::json;

    #[test]
    fn the_cluster_read_gives_full_subnetwork_paths_even_when_gke_answers_short_names() {
        let full = json!({"location": "us-central1", "workloadIdentityConfig": {"workloadPool": "p.svc.id.goog"}, "network": "default", "subnetwork": "nodes",
                          "networkConfig": {"network": "projects/p/global/networks/default", "subnetwork": "projects/p/regions/us-central1/subnetworks/nodes"},
                          "ipAllocationPolicy": {"clusterSecondaryRangeName": "pods"}});
        let c = GkeCluster::from_json(&full, "p");
        assert_eq!(
            c.subnetwork,
            "projects/p/regions/us-central1/subnetworks/nodes"
        );
        assert_eq!(c.workload_pool.as_deref(), Some("p.svc.id.goog"));
        let short = GkeCluster::from_json(
            &json!({"location": "europe-west4-b", "network": "vpc", "subnetwork": "sub"}),
            "p",
        );
        assert_eq!(
            short.subnetwork,
            "projects/p/regions/europe-west4/subnetworks/sub"
        );
        assert_eq!(short.workload_pool, None);
        let class =
            &node_pool_manifests(&GcpOptions::new("p", "c", "us-central1"), Some(&c))[0].object;
        assert_eq!(
            class["spec"]["networkConfig"]["subnetwork"],
            "projects/p/regions/us-central1/subnetworks/nodes"
        );
        assert_eq!(class["spec"]["subnetRangeName"], "pods");
    }
}
