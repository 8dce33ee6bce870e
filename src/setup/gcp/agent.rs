//! The Kubernetes objects `init gcp` applies or prints: the agent (CRDs, namespace, service
//! account with its Workload Identity annotation or the key's Secret mounted, RBAC (with the
//! approval of its kubelets' certificate requests), Deployment)
//! and a starter NodePool with its GCENodeClass.

use super::gke::{GkeCluster, zone_region};
use super::{GcpAuth, GcpOptions};
use crate::setup::chart::ChartError;
use crate::setup::manifests::{self, AgentSettings, Manifest};
use serde_json::json;

/// The agent's objects for GCP: the CRDs, then the chart rendered with `provider: gcp` (with
/// the approval of its kubelets' certificate requests: GKE approves only the kubelets of its own
/// instance groups, and the agent's VMs are not in one).
pub(crate) fn agent_manifests(options: &GcpOptions) -> Result<Vec<Manifest>, ChartError> {
    let (annotations, credentials_secret) = match options.auth {
        GcpAuth::WorkloadIdentity => (
            vec![(
                "iam.gke.io/gcp-service-account".to_owned(),
                options.gcp_service_account_email(),
            )],
            String::new(),
        ),
        GcpAuth::Key => (Vec::new(), options.key_secret()),
    };
    let mut values = json!({
        "provider": "gcp",
        "settings": {"clusterName": options.cluster_name},
        "gcp": {"project": options.project, "location": options.location, "credentialsSecret": credentials_secret},
    });
    // A zonal cluster's nodes stay in its zone; a regional cluster's go to any zone of the region.
    match zone_region(&options.location) {
        Some(region) => {
            values["gcp"]["region"] = json!(region);
            values["gcp"]["zones"] = json!([options.location]);
        }
        None => values["gcp"]["region"] = json!(options.location),
    }
    let mut objects = manifests::crds();
    objects.extend(manifests::agent(&AgentSettings {
        namespace: options.namespace.clone(),
        service_account: options.service_account.clone(),
        image: options.image.clone(),
        service_account_annotations: annotations,
        values,
    })?);
    Ok(objects)
}

/// A starter NodePool and GCENodeClass, both `default`; with the cluster read, the node class
/// puts nodes on the cluster's subnetwork and pods' secondary range.
pub fn node_pool_manifests(options: &GcpOptions, cluster: Option<&GkeCluster>) -> Vec<Manifest> {
    let mut node_class = json!({
        "apiVersion": "karpenter.k8s.gcp/v1alpha1", "kind": "GCENodeClass", "metadata": {"name": "default"},
        "spec": {
            "imageSelectorTerms": [{"alias": "ContainerOptimizedOS@latest"}],
            "disks": [{"category": "pd-balanced", "sizeGiB": 60, "boot": true}],
            "serviceAccount": options.node_service_account_email(),
            "networkTags": [format!("gke-{}-node", options.cluster_name)],
            "labels": {"karpenter-cluster": options.cluster_name},
        },
    });
    if let Some(cluster) = cluster {
        if !cluster.subnetwork.is_empty() {
            node_class["spec"]["networkConfig"] = json!({"subnetwork": cluster.subnetwork});
        }
        if let Some(range) = &cluster.pod_range {
            node_class["spec"]["subnetRangeName"] = json!(range);
        }
    }
    vec![
        Manifest::new(node_class, "gcenodeclasses"),
        Manifest::new(
            json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                "spec": {
                    "template": {"spec": {
                        "requirements": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                            {"key": "karpenter.k8s.gcp/instance-family", "operator": "In", "values": ["n2", "n2d", "e2", "c3"]},
                        ],
                        "nodeClassRef": {"group": "karpenter.k8s.gcp", "kind": "GCENodeClass", "name": "default"},
                        "expireAfter": "720h",
                    }},
                    "limits": {"cpu": "1000"},
                    "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1m"},
                },
            }),
            "nodepools",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zonal_cluster_keeps_its_nodes_in_its_zone_and_a_regional_one_uses_the_region() {
        assert_eq!(zone_region("us-central1-a"), Some("us-central1"));
        assert_eq!(zone_region("us-central1"), None);
        let env = |location: &str| {
            let objects = agent_manifests(&GcpOptions::new("p", "c", location)).unwrap();
            let deployment = objects
                .iter()
                .find(|m| m.resource.kind == "Deployment")
                .unwrap();
            let env = deployment.object["spec"]["template"]["spec"]["containers"][0]["env"].clone();
            env.as_array()
                .unwrap()
                .iter()
                .filter_map(|e| {
                    Some((
                        e["name"].as_str()?.to_owned(),
                        e["value"].as_str()?.to_owned(),
                    ))
                })
                .collect::<Vec<_>>()
        };
        let zonal = env("europe-west4-b");
        assert!(
            zonal.contains(&("GCP_REGION".to_owned(), "europe-west4".to_owned())),
            "{zonal:?}"
        );
        assert!(
            zonal.contains(&("GCP_ZONES".to_owned(), "europe-west4-b".to_owned())),
            "{zonal:?}"
        );
        let regional = env("europe-west4");
        assert!(
            regional.contains(&("GCP_REGION".to_owned(), "europe-west4".to_owned())),
            "{regional:?}"
        );
        assert!(
            !regional.iter().any(|(k, _)| k == "GCP_ZONES"),
            "{regional:?}"
        );
    }
}
