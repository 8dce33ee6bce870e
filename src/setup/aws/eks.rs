//! EKS: the cluster as DescribeCluster reports it (read once, shared by the steps), the
//! `eks-cluster` step that reads it, and the `pod-identity-association` step (EKS Pod Identity).
//! Node access through access entries lives in [`super::node_access`].

use super::{Ctx, aws_error, code};
use crate::setup::{SetupError, Status};
use futures::future::BoxFuture;

/// What DescribeCluster said.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ClusterInfo {
    pub version: String,
    pub vpc_id: String,
    pub subnet_ids: Vec<String>,
    pub security_group_ids: Vec<String>,
    /// `https://oidc.eks.<region>.amazonaws.com/id/<id>`.
    pub oidc_issuer: Option<String>,
    /// `accessConfig.authenticationMode`: `API`, `API_AND_CONFIG_MAP`, `CONFIG_MAP`, or absent
    /// (clusters made before access entries, and moto).
    pub authentication_mode: Option<String>,
}

impl Ctx {
    pub(super) async fn cluster(&self) -> Result<&ClusterInfo, SetupError> {
        self.cluster
            .get_or_try_init(|| async {
                let name = &self.options.cluster_name;
                let resource = format!("EKS cluster {name} in {}", self.options.region);
                let out = match self.eks.describe_cluster().name(name).send().await {
                    Ok(out) => out,
                    Err(e) if code(&e) == Some("ResourceNotFoundException") => {
                        return Err(SetupError::Missing {
                            resource,
                            hint: "check --cluster and --region, or create the cluster first"
                                .to_owned(),
                        });
                    }
                    Err(e) => return Err(aws_error("eks:DescribeCluster", &resource, e)),
                };
                let cluster = out.cluster();
                let vpc = cluster.and_then(|c| c.resources_vpc_config());
                let mut security_group_ids: Vec<String> = vpc
                    .map(|v| v.security_group_ids().to_vec())
                    .unwrap_or_default();
                if let Some(sg) = vpc.and_then(|v| v.cluster_security_group_id()) {
                    security_group_ids.insert(0, sg.to_owned());
                }
                Ok(ClusterInfo {
                    version: cluster
                        .and_then(|c| c.version())
                        .unwrap_or_default()
                        .to_owned(),
                    vpc_id: vpc.and_then(|v| v.vpc_id()).unwrap_or_default().to_owned(),
                    subnet_ids: vpc.map(|v| v.subnet_ids().to_vec()).unwrap_or_default(),
                    security_group_ids,
                    oidc_issuer: cluster
                        .and_then(|c| c.identity())
                        .and_then(|i| i.oidc())
                        .and_then(|o| o.issuer())
                        .map(str::to_owned),
                    authentication_mode: cluster
                        .and_then(|c| c.access_config())
                        .and_then(|a| a.authentication_mode())
                        .map(|m| m.as_str().to_owned()),
                })
            })
            .await
    }
}

pub(super) fn check_cluster(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let c = ctx.cluster().await?;
        Ok(Status::InPlace(format!(
            "Kubernetes {}, {}, {} subnets, OIDC issuer {}",
            c.version,
            if c.vpc_id.is_empty() {
                "VPC not reported"
            } else {
                c.vpc_id.as_str()
            },
            c.subnet_ids.len(),
            c.oidc_issuer.as_deref().unwrap_or("none")
        )))
    })
}

pub(super) fn apply_nothing(_: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async { Ok(()) })
}

pub(super) fn check_pod_identity(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let o = &ctx.options;
        let out = ctx
            .eks
            .list_pod_identity_associations()
            .cluster_name(&o.cluster_name)
            .namespace(&o.namespace)
            .service_account(&o.service_account)
            .send()
            .await
            .map_err(|e| {
                aws_error(
                    "eks:ListPodIdentityAssociations",
                    &format!("cluster {}", o.cluster_name),
                    e,
                )
            })?;
        Ok(if out.associations().is_empty() {
            Status::Needed(format!(
                "associate {}/{} with role {}",
                o.namespace,
                o.service_account,
                o.controller_role()
            ))
        } else {
            Status::InPlace(format!(
                "{}/{} is associated",
                o.namespace, o.service_account
            ))
        })
    })
}

pub(super) fn apply_pod_identity(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let o = &ctx.options;
        let role_arn = ctx.role_arn(&o.controller_role()).await?;
        ctx.eks
            .create_pod_identity_association()
            .cluster_name(&o.cluster_name)
            .namespace(&o.namespace)
            .service_account(&o.service_account)
            .role_arn(role_arn)
            .send()
            .await
            .map_err(|e| {
                aws_error(
                    "eks:CreatePodIdentityAssociation",
                    &format!("cluster {}", o.cluster_name),
                    e,
                )
            })?;
        Ok(())
    })
}
