//! What the provider learns about the cluster it serves, once per process: the API server's
//! Kubernetes version (for the EKS AMI aliases) and what nodes need to join (endpoint, CA,
//! service CIDR), from the configuration or else EKS DescribeCluster, as upstream resolves
//! them (`ResolveClusterEndpoint` in `pkg/operator/operator.go`, `ResolveClusterCIDR` in
//! `pkg/providers/launchtemplate`).

use super::AwsProvider;
use super::errors::cloud_error;
use super::userdata::ClusterBootstrap;
use crate::cloud::CloudError;

impl AwsProvider {
    /// `major.minor` of the API server, for the EKS AMI aliases.
    pub(super) async fn kubernetes_version(&self) -> Result<&str, CloudError> {
        self.k8s_version
            .get_or_try_init(|| async {
                let info = self
                    .kube
                    .apiserver_version()
                    .await
                    .map_err(|e| CloudError::api("reading the Kubernetes version", e))?;
                let minor: String = info
                    .minor
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                Ok::<_, CloudError>(format!("{}.{minor}", info.major))
            })
            .await
            .map(String::as_str)
    }

    /// What nodes need to join the cluster (config first, else EKS DescribeCluster).
    pub(super) async fn cluster_bootstrap(&self) -> Result<&ClusterBootstrap, CloudError> {
        self.bootstrap
            .get_or_try_init(|| async {
                let c = &self.config;
                if let (Some(endpoint), Some(ca)) = (&c.cluster_endpoint, &c.cluster_ca_bundle) {
                    return Ok(ClusterBootstrap {
                        name: c.cluster_name.clone(),
                        endpoint: endpoint.clone(),
                        ca_bundle: ca.clone(),
                        service_cidr: c
                            .service_cidr
                            .clone()
                            .unwrap_or_else(|| "10.100.0.0/16".to_owned()),
                    });
                }
                let out = self
                    .clients
                    .eks
                    .describe_cluster()
                    .name(&c.cluster_name)
                    .send()
                    .await
                    .map_err(|e| {
                        cloud_error(
                            "reading the EKS cluster (eks:DescribeCluster) for node bootstrap",
                            e,
                        )
                    })?;
                let cluster = out.cluster();
                Ok(ClusterBootstrap {
                    name: c.cluster_name.clone(),
                    endpoint: c
                        .cluster_endpoint
                        .clone()
                        .or_else(|| cluster.and_then(|x| x.endpoint()).map(str::to_owned))
                        .unwrap_or_default(),
                    ca_bundle: c
                        .cluster_ca_bundle
                        .clone()
                        .or_else(|| {
                            cluster
                                .and_then(|x| x.certificate_authority())
                                .and_then(|a| a.data())
                                .map(str::to_owned)
                        })
                        .unwrap_or_default(),
                    service_cidr: c
                        .service_cidr
                        .clone()
                        .or_else(|| {
                            cluster
                                .and_then(|x| x.kubernetes_network_config())
                                .and_then(|n| n.service_ipv4_cidr())
                                .map(str::to_owned)
                        })
                        .unwrap_or_else(|| "10.100.0.0/16".to_owned()),
                })
            })
            .await
    }
}
