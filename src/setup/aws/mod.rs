//! `init aws`: the AWS prerequisites of upstream Karpenter's getting-started CloudFormation
//! stack, as steps, plus the Kubernetes objects of the agent.
//!
//! | step | AWS resource |
//! |---|---|
//! | `eks-cluster` | reads the cluster (DescribeCluster): version, VPC, subnets, OIDC issuer |
//! | `node-role` | `KarpenterNodeRole-<cluster>` with AmazonEKSWorkerNodePolicy, AmazonEKS_CNI_Policy, AmazonEC2ContainerRegistryPullOnly, AmazonSSMManagedInstanceCore |
//! | `node-instance-profile` | `KarpenterNodeInstanceProfile-<cluster>` holding the node role |
//! | `spot-service-linked-role` | `AWSServiceRoleForEC2Spot` |
//! | `oidc-provider` (IRSA) | the IAM OIDC provider of the cluster's issuer |
//! | `controller-role` | `KarpenterControllerRole-<cluster>`, trusted by IRSA or EKS Pod Identity |
//! | `controller-policy` | inline least-privilege policy, scoped by tags as upstream scopes it |
//! | `pod-identity-association` (Pod Identity) | the agent's service account → controller role |
//! | `discovery-tags` | `karpenter.sh/discovery=<cluster>` on the cluster's subnets and security groups |
//! | `interruption-queue` | SQS queue `<cluster>`, 300 s retention, SSE, EventBridge may send |
//! | `interruption-rules` | 5 EventBridge rules → the queue |
//! | `node-access` | nodes running as the node role may join: an `EC2_LINUX` access entry when the cluster's authentication mode is `API` or `API_AND_CONFIG_MAP`, else a `mapRoles` entry in `kube-system/aws-auth` (needs the kube client) |
//! | `kubernetes-agent` (with a kube client) | CRDs, namespace, service account, RBAC, Deployment |
//! | `default-nodepool` (with a kube client) | NodePool `default` + EC2NodeClass `default` |
//!
//! One file per AWS service: `eks` reads the cluster and makes the Pod Identity association,
//! `iam` the roles, instance profile and OIDC provider, `policy` the controller's policy
//! document, `ec2` the discovery tags, `interruption` the SQS queue and its EventBridge rules,
//! `node_access` the access entry or aws-auth mapping, and `agent` the Kubernetes objects.
//! This file holds the options, the clients the steps share, and the plan: which steps, in
//! which order.

mod agent;
mod ec2;
mod eks;
mod iam;
mod interruption;
mod node_access;
mod node_groups;
mod policy;

pub(crate) use agent::agent_manifests;
pub use agent::node_pool_manifests;
pub(crate) use eks::ClusterInfo;
pub use iam::NODE_POLICIES;
pub use node_access::MapRolesError;
pub(crate) use node_access::NodeAccess;
pub use node_access::{NODE_GROUPS, map_node_role};
pub use node_groups::node_groups;
pub use policy::CONTROLLER_POLICY_NAME;

use super::manifests::{ApplyManifests, agent_step};
use super::{Plan, SetupError, step};
use crate::apis::labels;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use ec2::{apply_discovery_tags, check_discovery_tags};
use eks::{apply_nothing, apply_pod_identity, check_cluster, check_pod_identity};
use iam::{
    SPOT_ROLE, apply_controller_policy, apply_controller_role, apply_node_instance_profile,
    apply_node_role, apply_oidc_provider, apply_spot_role, check_controller_policy,
    check_controller_role, check_node_instance_profile, check_node_role, check_oidc_provider,
    check_spot_role,
};
use interruption::{apply_queue, apply_rules, check_queue, check_rules};
use node_access::NodeAccessStep;
use std::sync::Arc;

/// How the agent's pods get AWS credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auth {
    /// IAM Roles for Service Accounts: the cluster's OIDC provider.
    Irsa,
    /// EKS Pod Identity: an association made by EKS.
    PodIdentity,
}

/// What `init aws` is asked to do.
#[derive(Clone)]
pub struct AwsOptions {
    pub cluster_name: String,
    pub region: String,
    pub auth: Auth,
    /// Where the agent runs.
    pub namespace: String,
    pub service_account: String,
    /// The agent's container image.
    pub image: String,
    /// Send AWS calls here instead of AWS (tests: moto).
    pub endpoint_url: Option<String>,
    /// With a client, the plan also applies the Kubernetes objects.
    pub kube: Option<kube::Client>,
    /// Whether the plan applies the agent's objects (off for `init --gitops`, which writes
    /// them to files; the plan's manifests still hold them).
    pub apply_manifests: bool,
    /// Whether to scaffold the `default` NodePool and EC2NodeClass.
    pub scaffold_node_pool: bool,
}

impl AwsOptions {
    /// IRSA, namespace and service account `karpenter`, the released agent image, no kube client.
    pub fn new(cluster_name: impl Into<String>, region: impl Into<String>) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            region: region.into(),
            auth: Auth::Irsa,
            namespace: "karpenter".to_owned(),
            service_account: "karpenter".to_owned(),
            image: format!(
                "ghcr.io/kubectl-karpenter/karpenter-agent:v{}",
                env!("CARGO_PKG_VERSION")
            ),
            endpoint_url: None,
            kube: None,
            apply_manifests: true,
            scaffold_node_pool: true,
        }
    }

    /// `KarpenterNodeRole-<cluster>`.
    pub fn node_role(&self) -> String {
        format!("KarpenterNodeRole-{}", self.cluster_name)
    }
    /// `KarpenterNodeInstanceProfile-<cluster>`.
    pub(crate) fn node_instance_profile(&self) -> String {
        format!("KarpenterNodeInstanceProfile-{}", self.cluster_name)
    }
    /// `KarpenterControllerRole-<cluster>`.
    pub fn controller_role(&self) -> String {
        format!("KarpenterControllerRole-{}", self.cluster_name)
    }
    /// The interruption queue's name: the cluster's, as upstream names it.
    pub fn queue_name(&self) -> String {
        self.cluster_name.clone()
    }
}

/// Shared by the steps: clients and what was read once.
struct Ctx {
    options: AwsOptions,
    iam: aws_sdk_iam::Client,
    eks: aws_sdk_eks::Client,
    ec2: aws_sdk_ec2::Client,
    sqs: aws_sdk_sqs::Client,
    sts: aws_sdk_sts::Client,
    events: aws_sdk_eventbridge::Client,
    cluster: tokio::sync::OnceCell<ClusterInfo>,
    account: tokio::sync::OnceCell<String>,
}

const DENIED: [&str; 5] = [
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnauthorizedAccess",
    "AuthFailure",
];

/// Maps an SDK error: permission denied names the IAM action and resource.
fn aws_error<E>(action: &str, resource: &str, error: E) -> SetupError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    if error.code().is_some_and(|c| DENIED.contains(&c)) {
        return SetupError::PermissionDenied {
            action: action.to_owned(),
            resource: resource.to_owned(),
            source: Box::new(error),
        };
    }
    let detail = match (error.code(), error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.to_owned(),
        _ => format!("{}", aws_sdk_ec2::error::DisplayErrorContext(&error)),
    };
    SetupError::Cloud {
        action: format!("{action} on {resource}"),
        detail,
        source: Box::new(error),
    }
}

fn code<E: ProvideErrorMetadata>(error: &E) -> Option<&str> {
    error.code()
}

impl Ctx {
    async fn account(&self) -> Result<&str, SetupError> {
        self.account
            .get_or_try_init(|| async {
                let out = self
                    .sts
                    .get_caller_identity()
                    .send()
                    .await
                    .map_err(|e| aws_error("sts:GetCallerIdentity", "the caller", e))?;
                Ok::<_, SetupError>(out.account().unwrap_or_default().to_owned())
            })
            .await
            .map(String::as_str)
    }

    fn partition(&self) -> &'static str {
        if self.options.region.starts_with("cn-") {
            "aws-cn"
        } else if self.options.region.starts_with("us-gov-") {
            "aws-us-gov"
        } else {
            "aws"
        }
    }

    async fn role_arn(&self, name: &str) -> Result<String, SetupError> {
        Ok(format!(
            "arn:{}:iam::{}:role/{name}",
            self.partition(),
            self.account().await?
        ))
    }
}

impl Plan {
    /// The `init aws` plan, with clients from the default credential chain (and
    /// `options.endpoint_url`).
    pub async fn for_aws(options: AwsOptions) -> Plan {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(options.region.clone()));
        if let Some(url) = &options.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        let sdk = loader.load().await;
        Self::for_aws_with(options, &sdk).await
    }

    /// The `init aws` plan with an SDK configuration of your own.
    pub async fn for_aws_with(options: AwsOptions, sdk: &aws_config::SdkConfig) -> Plan {
        let ctx = Arc::new(Ctx {
            iam: aws_sdk_iam::Client::new(sdk),
            eks: aws_sdk_eks::Client::new(sdk),
            ec2: aws_sdk_ec2::Client::new(sdk),
            sqs: aws_sdk_sqs::Client::new(sdk),
            sts: aws_sdk_sts::Client::new(sdk),
            events: aws_sdk_eventbridge::Client::new(sdk),
            cluster: tokio::sync::OnceCell::new(),
            account: tokio::sync::OnceCell::new(),
            options: options.clone(),
        });
        let o = &options;
        let mut steps = vec![
            step(
                &ctx,
                "eks-cluster",
                format!("read EKS cluster {} in {}", o.cluster_name, o.region),
                check_cluster,
                apply_nothing,
            ),
            step(
                &ctx,
                "node-role",
                format!(
                    "IAM role {} with {}",
                    o.node_role(),
                    NODE_POLICIES.join(", ")
                ),
                check_node_role,
                apply_node_role,
            ),
            step(
                &ctx,
                "node-instance-profile",
                format!(
                    "instance profile {} holding the node role",
                    o.node_instance_profile()
                ),
                check_node_instance_profile,
                apply_node_instance_profile,
            ),
            step(
                &ctx,
                "spot-service-linked-role",
                format!("service-linked role {SPOT_ROLE} so spot instances can launch"),
                check_spot_role,
                apply_spot_role,
            ),
        ];
        if o.auth == Auth::Irsa {
            steps.push(step(
                &ctx,
                "oidc-provider",
                "the cluster's OIDC issuer registered as an IAM OIDC provider (IRSA)".to_owned(),
                check_oidc_provider,
                apply_oidc_provider,
            ));
        }
        let trusted_by = match o.auth {
            Auth::Irsa => format!(
                "trusted by service account {}/{} through IRSA",
                o.namespace, o.service_account
            ),
            Auth::PodIdentity => "trusted by EKS Pod Identity".to_owned(),
        };
        steps.push(step(
            &ctx,
            "controller-role",
            format!("IAM role {} {trusted_by}", o.controller_role()),
            check_controller_role,
            apply_controller_role,
        ));
        steps.push(step(&ctx, "controller-policy", format!("least-privilege inline policy {CONTROLLER_POLICY_NAME}, scoped by the cluster's tags"), check_controller_policy, apply_controller_policy));
        if o.auth == Auth::PodIdentity {
            steps.push(step(
                &ctx,
                "pod-identity-association",
                format!(
                    "EKS Pod Identity association {}/{} → {}",
                    o.namespace,
                    o.service_account,
                    o.controller_role()
                ),
                check_pod_identity,
                apply_pod_identity,
            ));
        }
        steps.push(step(
            &ctx,
            "discovery-tags",
            format!(
                "tag the cluster's subnets and security groups {}={}",
                labels::DISCOVERY_TAG,
                o.cluster_name
            ),
            check_discovery_tags,
            apply_discovery_tags,
        ));
        steps.push(step(
            &ctx,
            "interruption-queue",
            format!("SQS queue {} for interruption events", o.queue_name()),
            check_queue,
            apply_queue,
        ));
        steps.push(step(&ctx, "interruption-rules", "EventBridge rules for health, spot interruption, rebalance, state change and capacity reservation events".to_owned(), check_rules, apply_rules));
        // The aws-auth ConfigMap needs the Kubernetes API; without a client the step is planned
        // only for a cluster known to read access entries.
        let access_entries = matches!(ctx.cluster().await, Ok(c) if NodeAccess::for_mode(c.authentication_mode.as_deref()) == NodeAccess::AccessEntry);
        if o.kube.is_some() || access_entries {
            steps.push(Box::new(NodeAccessStep {
                ctx: ctx.clone(),
                kube: o.kube.clone(),
            }));
        }

        // The role ARN is deterministic, but needs the account id; a failure here shows up
        // again, with its cause, in the steps that need the account.
        let role_arn = ctx.role_arn(&o.controller_role()).await.unwrap_or_default();
        let agent = agent_manifests(o, &role_arn);
        let pool = if o.scaffold_node_pool {
            node_pool_manifests(o)
        } else {
            Vec::new()
        };
        steps.extend(agent_step(
            &agent,
            &o.namespace,
            o.kube.as_ref(),
            o.apply_manifests,
        ));
        if let (Ok(_), Some(client), true) =
            (&agent, &o.kube, o.apply_manifests && !pool.is_empty())
        {
            steps.push(Box::new(ApplyManifests {
                name: "default-nodepool".to_owned(),
                description: "NodePool default and EC2NodeClass default (al2023, discovery-tagged subnets and security groups)".to_owned(),
                client: client.clone(),
                manifests: pool.clone(),
            }));
        }
        Plan::new(steps).with_manifests(agent.unwrap_or_default().into_iter().chain(pool).collect())
    }
}
