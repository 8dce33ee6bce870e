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

use super::manifests::{self, AgentSettings, ApplyManifests, Manifest};
use super::{Plan, SetupError, Status, Step, step};
use crate::apis::labels;
use aws_sdk_ec2::error::ProvideErrorMetadata;
use futures::future::BoxFuture;
use serde_json::{Value, json};
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
            scaffold_node_pool: true,
        }
    }

    /// `KarpenterNodeRole-<cluster>`.
    pub fn node_role(&self) -> String {
        format!("KarpenterNodeRole-{}", self.cluster_name)
    }
    /// `KarpenterNodeInstanceProfile-<cluster>`.
    pub fn node_instance_profile(&self) -> String {
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

/// The node role's AWS-managed policies.
pub const NODE_POLICIES: [&str; 4] = [
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryPullOnly",
    "AmazonSSMManagedInstanceCore",
];
/// The inline policy on the controller role.
pub const CONTROLLER_POLICY_NAME: &str = "KarpenterControllerPolicy";

/// What DescribeCluster said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterInfo {
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

/// How nodes running as the node role are let into the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeAccess {
    /// An EKS access entry of type `EC2_LINUX` for the node role (the cluster reads access entries).
    AccessEntry,
    /// A `mapRoles` entry in `kube-system/aws-auth` (the cluster reads only the ConfigMap).
    AwsAuthConfigMap,
}

impl NodeAccess {
    /// As upstream's getting-started decides: access entries when the cluster's authentication
    /// mode includes the API, else the aws-auth ConfigMap (also when the mode is not reported).
    pub fn for_mode(authentication_mode: Option<&str>) -> Self {
        match authentication_mode {
            Some("API" | "API_AND_CONFIG_MAP") => Self::AccessEntry,
            _ => Self::AwsAuthConfigMap,
        }
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

/// IAM returns policy documents URL-encoded; moto sometimes does not.
fn decode_policy(text: &str) -> Option<Value> {
    serde_json::from_str(text)
        .ok()
        .or_else(|| serde_json::from_str(&percent_decode(text)).ok())
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                    16,
                ) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Ctx {
    async fn cluster(&self) -> Result<&ClusterInfo, SetupError> {
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

    async fn queue_arn(&self) -> Result<String, SetupError> {
        Ok(format!(
            "arn:{}:sqs:{}:{}:{}",
            self.partition(),
            self.options.region,
            self.account().await?,
            self.options.queue_name()
        ))
    }

    async fn oidc_provider_arn(&self) -> Result<Option<(String, String)>, SetupError> {
        let Some(issuer) = self.cluster().await?.oidc_issuer.clone() else {
            return Ok(None);
        };
        let host = issuer.trim_start_matches("https://").to_owned();
        let arn = format!(
            "arn:{}:iam::{}:oidc-provider/{host}",
            self.partition(),
            self.account().await?
        );
        Ok(Some((arn, host)))
    }

    /// The controller role's trust policy.
    async fn trust_policy(&self) -> Result<Value, SetupError> {
        let o = &self.options;
        Ok(match o.auth {
            Auth::Irsa => {
                let Some((arn, host)) = self.oidc_provider_arn().await? else {
                    return Err(SetupError::Missing {
                        resource: format!("the OIDC issuer of cluster {}", o.cluster_name),
                        hint: "the cluster has no OIDC issuer; use --auth pod-identity".to_owned(),
                    });
                };
                json!({"Version": "2012-10-17", "Statement": [{
                    "Effect": "Allow", "Principal": {"Federated": arn}, "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {"StringEquals": {
                        format!("{host}:aud"): "sts.amazonaws.com",
                        format!("{host}:sub"): format!("system:serviceaccount:{}:{}", o.namespace, o.service_account),
                    }},
                }]})
            }
            Auth::PodIdentity => json!({"Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"],
            }]}),
        })
    }

    /// The controller's least-privilege policy (upstream's, less pricing and zonal shift).
    async fn controller_policy(&self) -> Result<Value, SetupError> {
        let (p, r, a, c) = (
            self.partition(),
            self.options.region.as_str(),
            self.account().await?,
            self.options.cluster_name.as_str(),
        );
        let cluster_tag = format!("aws:RequestTag/kubernetes.io/cluster/{c}");
        let resource_cluster_tag = format!("aws:ResourceTag/kubernetes.io/cluster/{c}");
        let launched = |kinds: &[&str]| {
            kinds
                .iter()
                .map(|k| format!("arn:{p}:ec2:{r}:*:{k}/*"))
                .collect::<Vec<_>>()
        };
        Ok(json!({"Version": "2012-10-17", "Statement": [
            {"Sid": "AllowScopedEC2InstanceAccessActions", "Effect": "Allow", "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
             "Resource": [format!("arn:{p}:ec2:{r}::image/*"), format!("arn:{p}:ec2:{r}::snapshot/*"), format!("arn:{p}:ec2:{r}:*:security-group/*"),
                          format!("arn:{p}:ec2:{r}:*:subnet/*"), format!("arn:{p}:ec2:{r}:*:capacity-reservation/*")]},
            {"Sid": "AllowScopedEC2LaunchTemplateAccessActions", "Effect": "Allow", "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
             "Resource": format!("arn:{p}:ec2:{r}:*:launch-template/*"),
             "Condition": {"StringEquals": {resource_cluster_tag.clone(): "owned"}, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}},
            {"Sid": "AllowScopedEC2InstanceActionsWithTags", "Effect": "Allow", "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
             "Resource": launched(&["fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request"]),
             "Condition": {"StringEquals": {cluster_tag.clone(): "owned", "aws:RequestTag/eks:eks-cluster-name": c},
                           "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
            {"Sid": "AllowScopedResourceCreationTagging", "Effect": "Allow", "Action": "ec2:CreateTags",
             "Resource": launched(&["fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request"]),
             "Condition": {"StringEquals": {cluster_tag.clone(): "owned", "aws:RequestTag/eks:eks-cluster-name": c,
                                            "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]},
                           "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
            {"Sid": "AllowScopedResourceTagging", "Effect": "Allow", "Action": "ec2:CreateTags", "Resource": format!("arn:{p}:ec2:{r}:*:instance/*"),
             "Condition": {"StringEquals": {resource_cluster_tag.clone(): "owned"}, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                           "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": c},
                           "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]}}},
            {"Sid": "AllowScopedDeletion", "Effect": "Allow", "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
             "Resource": launched(&["instance", "launch-template"]),
             "Condition": {"StringEquals": {resource_cluster_tag.clone(): "owned"}, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}},
            {"Sid": "AllowRegionalReadActions", "Effect": "Allow",
             "Action": ["ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances", "ec2:DescribeInstanceTypeOfferings",
                        "ec2:DescribeInstanceTypes", "ec2:DescribeInstanceStatus", "ec2:DescribeLaunchTemplates", "ec2:DescribePlacementGroups",
                        "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"],
             "Resource": "*", "Condition": {"StringEquals": {"aws:RequestedRegion": r}}},
            {"Sid": "AllowSSMReadActions", "Effect": "Allow", "Action": "ssm:GetParameter", "Resource": format!("arn:{p}:ssm:{r}::parameter/aws/service/*")},
            {"Sid": "AllowPricingReadActions", "Effect": "Allow", "Action": "pricing:GetProducts", "Resource": "*"},
            {"Sid": "AllowInterruptionQueueActions", "Effect": "Allow", "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
             "Resource": self.queue_arn().await?},
            {"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": "iam:PassRole", "Resource": self.role_arn(&self.options.node_role()).await?,
             "Condition": {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}}},
            {"Sid": "AllowScopedInstanceProfileCreationActions", "Effect": "Allow", "Action": ["iam:CreateInstanceProfile", "iam:TagInstanceProfile"],
             "Resource": format!("arn:{p}:iam::{a}:instance-profile/*"),
             "Condition": {"StringEquals": {cluster_tag: "owned", "aws:RequestTag/eks:eks-cluster-name": c, "aws:RequestTag/topology.kubernetes.io/region": r},
                           "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
            {"Sid": "AllowScopedInstanceProfileActions", "Effect": "Allow",
             "Action": ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
             "Resource": format!("arn:{p}:iam::{a}:instance-profile/*"),
             "Condition": {"StringEquals": {resource_cluster_tag: "owned", "aws:ResourceTag/topology.kubernetes.io/region": r},
                           "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
            {"Sid": "AllowInstanceProfileReadActions", "Effect": "Allow", "Action": "iam:GetInstanceProfile", "Resource": format!("arn:{p}:iam::{a}:instance-profile/*")},
            {"Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow", "Action": "eks:DescribeCluster",
             "Resource": format!("arn:{p}:eks:{r}:{a}:cluster/{c}")},
        ]}))
    }
}

// ---------------------------------------------------------------- steps

fn check_cluster(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
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

fn apply_nothing(_: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async { Ok(()) })
}

async fn role_exists(
    ctx: &Ctx,
    name: &str,
) -> Result<Option<aws_sdk_iam::types::Role>, SetupError> {
    match ctx.iam.get_role().role_name(name).send().await {
        Ok(out) => Ok(out.role().cloned()),
        Err(e) if code(&e) == Some("NoSuchEntity") => Ok(None),
        Err(e) => Err(aws_error("iam:GetRole", &format!("role {name}"), e)),
    }
}

async fn attached_policies(ctx: &Ctx, role: &str) -> Result<Vec<String>, SetupError> {
    let out = ctx
        .iam
        .list_attached_role_policies()
        .role_name(role)
        .send()
        .await
        .map_err(|e| aws_error("iam:ListAttachedRolePolicies", &format!("role {role}"), e))?;
    Ok(out
        .attached_policies()
        .iter()
        .filter_map(|p| p.policy_name().map(str::to_owned))
        .collect())
}

fn check_node_role(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let name = ctx.options.node_role();
        if role_exists(ctx, &name).await?.is_none() {
            return Ok(Status::Needed(format!(
                "create role {name} and attach {}",
                NODE_POLICIES.join(", ")
            )));
        }
        let attached = attached_policies(ctx, &name).await?;
        let missing: Vec<&str> = NODE_POLICIES
            .iter()
            .copied()
            .filter(|p| !attached.iter().any(|a| a == p))
            .collect();
        Ok(if missing.is_empty() {
            Status::InPlace(format!("role {name} with {} policies", NODE_POLICIES.len()))
        } else {
            Status::Needed(format!("attach {} to role {name}", missing.join(", ")))
        })
    })
}

fn apply_node_role(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let name = ctx.options.node_role();
        if role_exists(ctx, &name).await?.is_none() {
            let trust = json!({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]});
            ctx.iam
                .create_role()
                .role_name(&name)
                .assume_role_policy_document(trust.to_string())
                .description(format!(
                    "Nodes launched by kubectl-karpenter in EKS cluster {}",
                    ctx.options.cluster_name
                ))
                .send()
                .await
                .map_err(|e| aws_error("iam:CreateRole", &format!("role {name}"), e))?;
        }
        let attached = attached_policies(ctx, &name).await?;
        for policy in NODE_POLICIES
            .iter()
            .filter(|p| !attached.iter().any(|a| a == *p))
        {
            let arn = format!("arn:{}:iam::aws:policy/{policy}", ctx.partition());
            ctx.iam
                .attach_role_policy()
                .role_name(&name)
                .policy_arn(&arn)
                .send()
                .await
                .map_err(|e| {
                    aws_error("iam:AttachRolePolicy", &format!("{arn} on role {name}"), e)
                })?;
        }
        Ok(())
    })
}

fn check_node_instance_profile(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let (profile, role) = (ctx.options.node_instance_profile(), ctx.options.node_role());
        match ctx
            .iam
            .get_instance_profile()
            .instance_profile_name(&profile)
            .send()
            .await
        {
            Ok(out) => {
                let has_role = out
                    .instance_profile()
                    .is_some_and(|p| p.roles().iter().any(|r| r.role_name() == role));
                Ok(if has_role {
                    Status::InPlace(format!("instance profile {profile} holds {role}"))
                } else {
                    Status::Needed(format!("add role {role} to instance profile {profile}"))
                })
            }
            Err(e) if code(&e) == Some("NoSuchEntity") => Ok(Status::Needed(format!(
                "create instance profile {profile} with role {role}"
            ))),
            Err(e) => Err(aws_error(
                "iam:GetInstanceProfile",
                &format!("instance profile {profile}"),
                e,
            )),
        }
    })
}

fn apply_node_instance_profile(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let (profile, role) = (ctx.options.node_instance_profile(), ctx.options.node_role());
        let resource = format!("instance profile {profile}");
        let existing = match ctx
            .iam
            .get_instance_profile()
            .instance_profile_name(&profile)
            .send()
            .await
        {
            Ok(out) => out.instance_profile().cloned(),
            Err(e) if code(&e) == Some("NoSuchEntity") => None,
            Err(e) => return Err(aws_error("iam:GetInstanceProfile", &resource, e)),
        };
        if existing.is_none() {
            ctx.iam
                .create_instance_profile()
                .instance_profile_name(&profile)
                .send()
                .await
                .map_err(|e| aws_error("iam:CreateInstanceProfile", &resource, e))?;
        }
        if !existing.is_some_and(|p| p.roles().iter().any(|r| r.role_name() == role)) {
            ctx.iam
                .add_role_to_instance_profile()
                .instance_profile_name(&profile)
                .role_name(&role)
                .send()
                .await
                .map_err(|e| aws_error("iam:AddRoleToInstanceProfile", &resource, e))?;
        }
        Ok(())
    })
}

const SPOT_ROLE: &str = "AWSServiceRoleForEC2Spot";
const SPOT_ROLE_PATH: &str = "/aws-service-role/spot.amazonaws.com/";

fn check_spot_role(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        // Found by its path rather than its name, which AWS fixes and look-alikes may not.
        let out = ctx
            .iam
            .list_roles()
            .path_prefix(SPOT_ROLE_PATH)
            .send()
            .await
            .map_err(|e| aws_error("iam:ListRoles", SPOT_ROLE, e))?;
        Ok(match out.roles().first() {
            Some(role) => Status::InPlace(format!("{} exists", role.role_name())),
            None => Status::Needed(format!(
                "create the service-linked role {SPOT_ROLE} (spot.amazonaws.com)"
            )),
        })
    })
}

fn apply_spot_role(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        match ctx
            .iam
            .create_service_linked_role()
            .aws_service_name("spot.amazonaws.com")
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if code(&e) == Some("InvalidInput")
                    && e.message().is_some_and(|m| m.contains("taken")) =>
            {
                Ok(())
            }
            Err(e) if code(&e) == Some("EntityAlreadyExists") => Ok(()),
            Err(e) => Err(aws_error("iam:CreateServiceLinkedRole", SPOT_ROLE, e)),
        }
    })
}

async fn oidc_provider_exists(ctx: &Ctx) -> Result<Option<bool>, SetupError> {
    let Some((arn, _)) = ctx.oidc_provider_arn().await? else {
        return Ok(None);
    };
    let out = ctx
        .iam
        .list_open_id_connect_providers()
        .send()
        .await
        .map_err(|e| aws_error("iam:ListOpenIDConnectProviders", "the account", e))?;
    Ok(Some(
        out.open_id_connect_provider_list()
            .iter()
            .any(|p| p.arn() == Some(arn.as_str())),
    ))
}

fn check_oidc_provider(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        match oidc_provider_exists(ctx).await? {
            None => Err(SetupError::Missing {
                resource: format!("the OIDC issuer of cluster {}", ctx.options.cluster_name),
                hint: "IRSA needs one; use --auth pod-identity".to_owned(),
            }),
            Some(true) => Ok(Status::InPlace(
                "the cluster's OIDC provider is registered in IAM".to_owned(),
            )),
            Some(false) => Ok(Status::Needed(format!(
                "register {} as an IAM OIDC provider",
                ctx.cluster().await?.oidc_issuer.clone().unwrap_or_default()
            ))),
        }
    })
}

fn apply_oidc_provider(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let issuer = ctx.cluster().await?.oidc_issuer.clone().unwrap_or_default();
        match ctx
            .iam
            .create_open_id_connect_provider()
            .url(&issuer)
            .client_id_list("sts.amazonaws.com")
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some("EntityAlreadyExists") => Ok(()),
            Err(e) => Err(aws_error("iam:CreateOpenIDConnectProvider", &issuer, e)),
        }
    })
}

fn check_controller_role(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let name = ctx.options.controller_role();
        let Some(role) = role_exists(ctx, &name).await? else {
            return Ok(Status::Needed(format!(
                "create role {name} trusted by {:?}",
                ctx.options.auth
            )));
        };
        let want = ctx.trust_policy().await?;
        let have = role.assume_role_policy_document().and_then(decode_policy);
        Ok(if have.as_ref() == Some(&want) {
            Status::InPlace(format!("role {name}"))
        } else {
            Status::Needed(format!("update the trust policy of role {name}"))
        })
    })
}

fn apply_controller_role(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let name = ctx.options.controller_role();
        let trust = ctx.trust_policy().await?.to_string();
        if role_exists(ctx, &name).await?.is_none() {
            ctx.iam
                .create_role()
                .role_name(&name)
                .assume_role_policy_document(trust)
                .description(format!(
                    "The kubectl-karpenter agent of EKS cluster {}",
                    ctx.options.cluster_name
                ))
                .send()
                .await
                .map_err(|e| aws_error("iam:CreateRole", &format!("role {name}"), e))?;
        } else {
            ctx.iam
                .update_assume_role_policy()
                .role_name(&name)
                .policy_document(trust)
                .send()
                .await
                .map_err(|e| aws_error("iam:UpdateAssumeRolePolicy", &format!("role {name}"), e))?;
        }
        Ok(())
    })
}

fn check_controller_policy(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let role = ctx.options.controller_role();
        let want = ctx.controller_policy().await?;
        let have = match ctx
            .iam
            .get_role_policy()
            .role_name(&role)
            .policy_name(CONTROLLER_POLICY_NAME)
            .send()
            .await
        {
            Ok(out) => decode_policy(out.policy_document()),
            Err(e) if code(&e) == Some("NoSuchEntity") => None,
            Err(e) => return Err(aws_error("iam:GetRolePolicy", &format!("role {role}"), e)),
        };
        Ok(if have.as_ref() == Some(&want) {
            Status::InPlace(format!("{CONTROLLER_POLICY_NAME} on role {role}"))
        } else if have.is_some() {
            Status::Needed(format!("update {CONTROLLER_POLICY_NAME} on role {role}"))
        } else {
            Status::Needed(format!("put {CONTROLLER_POLICY_NAME} on role {role}"))
        })
    })
}

fn apply_controller_policy(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let role = ctx.options.controller_role();
        let document = ctx.controller_policy().await?.to_string();
        ctx.iam
            .put_role_policy()
            .role_name(&role)
            .policy_name(CONTROLLER_POLICY_NAME)
            .policy_document(document)
            .send()
            .await
            .map_err(|e| aws_error("iam:PutRolePolicy", &format!("role {role}"), e))?;
        Ok(())
    })
}

fn check_pod_identity(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
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

fn apply_pod_identity(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
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

/// Subnets and security groups of the cluster that lack the discovery tag.
async fn untagged(ctx: &Ctx) -> Result<Vec<String>, SetupError> {
    let cluster = ctx.cluster().await?;
    let mut missing = Vec::new();
    let has_tag = |tags: &[aws_sdk_ec2::types::Tag]| {
        tags.iter().any(|t| {
            t.key() == Some(labels::DISCOVERY_TAG)
                && t.value() == Some(ctx.options.cluster_name.as_str())
        })
    };
    if !cluster.subnet_ids.is_empty() {
        let out = ctx
            .ec2
            .describe_subnets()
            .set_subnet_ids(Some(cluster.subnet_ids.clone()))
            .send()
            .await
            .map_err(|e| aws_error("ec2:DescribeSubnets", "the cluster's subnets", e))?;
        for s in out.subnets() {
            if !has_tag(s.tags()) {
                missing.extend(s.subnet_id().map(str::to_owned));
            }
        }
    }
    if !cluster.security_group_ids.is_empty() {
        let out = ctx
            .ec2
            .describe_security_groups()
            .set_group_ids(Some(cluster.security_group_ids.clone()))
            .send()
            .await
            .map_err(|e| {
                aws_error(
                    "ec2:DescribeSecurityGroups",
                    "the cluster's security groups",
                    e,
                )
            })?;
        for g in out.security_groups() {
            if !has_tag(g.tags()) {
                missing.extend(g.group_id().map(str::to_owned));
            }
        }
    }
    Ok(missing)
}

fn check_discovery_tags(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let missing = untagged(ctx).await?;
        let tag = format!("{}={}", labels::DISCOVERY_TAG, ctx.options.cluster_name);
        Ok(if missing.is_empty() {
            Status::InPlace(format!(
                "the cluster's subnets and security groups carry {tag}"
            ))
        } else {
            Status::Needed(format!("tag {} with {tag}", missing.join(", ")))
        })
    })
}

fn apply_discovery_tags(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let missing = untagged(ctx).await?;
        if missing.is_empty() {
            return Ok(());
        }
        ctx.ec2
            .create_tags()
            .set_resources(Some(missing.clone()))
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key(labels::DISCOVERY_TAG)
                    .value(&ctx.options.cluster_name)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| aws_error("ec2:CreateTags", &missing.join(", "), e))?;
        Ok(())
    })
}

async fn queue_url(ctx: &Ctx) -> Result<Option<String>, SetupError> {
    let name = ctx.options.queue_name();
    match ctx.sqs.get_queue_url().queue_name(&name).send().await {
        Ok(out) => Ok(out.queue_url().map(str::to_owned)),
        Err(e)
            if code(&e).is_some_and(|c| {
                c.contains("NonExistentQueue") || c.contains("QueueDoesNotExist")
            }) =>
        {
            Ok(None)
        }
        Err(e) => Err(aws_error("sqs:GetQueueUrl", &format!("queue {name}"), e)),
    }
}

async fn queue_policy(ctx: &Ctx) -> Result<Value, SetupError> {
    let arn = ctx.queue_arn().await?;
    Ok(
        json!({"Version": "2012-10-17", "Id": "EC2InterruptionPolicy", "Statement": [
            {"Effect": "Allow", "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]}, "Action": "sqs:SendMessage", "Resource": arn},
            {"Sid": "DenyHTTP", "Effect": "Deny", "Action": "sqs:*", "Resource": arn, "Condition": {"Bool": {"aws:SecureTransport": false}}, "Principal": "*"},
        ]}),
    )
}

fn check_queue(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let name = ctx.options.queue_name();
        let Some(url) = queue_url(ctx).await? else {
            return Ok(Status::Needed(format!("create SQS queue {name}")));
        };
        let out = ctx
            .sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
            .send()
            .await
            .map_err(|e| aws_error("sqs:GetQueueAttributes", &format!("queue {name}"), e))?;
        let attributes = out.attributes().cloned().unwrap_or_default();
        let retention = attributes
            .get(&aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod)
            .map(String::as_str);
        let policy = attributes
            .get(&aws_sdk_sqs::types::QueueAttributeName::Policy)
            .and_then(|p| serde_json::from_str::<Value>(p).ok());
        Ok(
            if retention == Some("300") && policy == Some(queue_policy(ctx).await?) {
                Status::InPlace(format!("queue {name}"))
            } else {
                Status::Needed(format!("set retention and policy of queue {name}"))
            },
        )
    })
}

fn apply_queue(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let name = ctx.options.queue_name();
        let resource = format!("queue {name}");
        let url = match queue_url(ctx).await? {
            Some(url) => url,
            None => ctx
                .sqs
                .create_queue()
                .queue_name(&name)
                .attributes(A::SqsManagedSseEnabled, "true")
                .send()
                .await
                .map_err(|e| aws_error("sqs:CreateQueue", &resource, e))?
                .queue_url()
                .unwrap_or_default()
                .to_owned(),
        };
        ctx.sqs
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(A::MessageRetentionPeriod, "300")
            .attributes(A::Policy, queue_policy(ctx).await?.to_string())
            .send()
            .await
            .map_err(|e| aws_error("sqs:SetQueueAttributes", &resource, e))?;
        Ok(())
    })
}

/// The interruption rules: (suffix, event pattern).
fn rules(cluster: &str) -> Vec<(String, Value)> {
    [
        ("HealthEvent", json!({"source": ["aws.health"], "detail-type": ["AWS Health Event"]})),
        ("SpotInterruption", json!({"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]})),
        ("Rebalance", json!({"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]})),
        ("InstanceStateChange", json!({"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]})),
        ("CapacityReservationInterruption", json!({"source": ["aws.ec2"], "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"]})),
    ]
    .into_iter()
    .map(|(suffix, pattern)| {
        let mut name = format!("karpenter-{cluster}-{suffix}");
        if name.len() > 64 {
            // Rule names are at most 64 characters; keep them unique per cluster.
            let hash = crate::cloud::aws::nodeclass::fnv1a(cluster.as_bytes());
            name = format!("karpenter-{hash:016x}-{suffix}");
        }
        (name, pattern)
    })
    .collect()
}

/// Rules missing, or not pointing at the queue.
async fn rules_missing(ctx: &Ctx) -> Result<Vec<String>, SetupError> {
    let queue_arn = ctx.queue_arn().await?;
    let mut missing = Vec::new();
    for (name, pattern) in rules(&ctx.options.cluster_name) {
        let rule = match ctx.events.describe_rule().name(&name).send().await {
            Ok(out) => Some(out),
            Err(e) if code(&e) == Some("ResourceNotFoundException") => None,
            Err(e) => return Err(aws_error("events:DescribeRule", &format!("rule {name}"), e)),
        };
        let pattern_ok = rule
            .as_ref()
            .and_then(|r| r.event_pattern())
            .and_then(|p| serde_json::from_str::<Value>(p).ok())
            == Some(pattern);
        let target_ok = if pattern_ok {
            let targets = ctx
                .events
                .list_targets_by_rule()
                .rule(&name)
                .send()
                .await
                .map_err(|e| aws_error("events:ListTargetsByRule", &format!("rule {name}"), e))?;
            targets.targets().iter().any(|t| t.arn() == queue_arn)
        } else {
            false
        };
        if !target_ok {
            missing.push(name);
        }
    }
    Ok(missing)
}

fn check_rules(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let missing = rules_missing(ctx).await?;
        Ok(if missing.is_empty() {
            Status::InPlace("5 EventBridge rules send to the queue".to_owned())
        } else {
            Status::Needed(format!("create {}", missing.join(", ")))
        })
    })
}

fn apply_rules(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let queue_arn = ctx.queue_arn().await?;
        let missing = rules_missing(ctx).await?;
        for (name, pattern) in rules(&ctx.options.cluster_name)
            .into_iter()
            .filter(|(n, _)| missing.contains(n))
        {
            ctx.events
                .put_rule()
                .name(&name)
                .event_pattern(pattern.to_string())
                .description(format!(
                    "kubectl-karpenter interruption events for cluster {}",
                    ctx.options.cluster_name
                ))
                .send()
                .await
                .map_err(|e| aws_error("events:PutRule", &format!("rule {name}"), e))?;
            let target = aws_sdk_eventbridge::types::Target::builder()
                .id("KarpenterInterruptionQueueTarget")
                .arn(&queue_arn)
                .build()
                .map_err(|e| SetupError::Cloud {
                    action: format!("building the target of rule {name}"),
                    detail: e.to_string(),
                    source: Box::new(e),
                })?;
            ctx.events
                .put_targets()
                .rule(&name)
                .targets(target)
                .send()
                .await
                .map_err(|e| aws_error("events:PutTargets", &format!("rule {name}"), e))?;
        }
        Ok(())
    })
}

// ---------------------------------------------------------------- node access

/// Where EKS reads IAM-to-Kubernetes mappings when access entries are off.
pub const AWS_AUTH_NAMESPACE: &str = "kube-system";
/// The ConfigMap of those mappings.
pub const AWS_AUTH_NAME: &str = "aws-auth";
/// The Kubernetes groups a node's role maps to (what EKS gives an `EC2_LINUX` access entry).
pub const NODE_GROUPS: [&str; 2] = ["system:bootstrappers", "system:nodes"];
/// The user name a node's role maps to (EKS fills in the instance's private DNS name).
pub const NODE_USERNAME: &str = "system:node:{{EC2PrivateDNSName}}";

/// Why `mapRoles` could not be edited.
#[derive(Debug, thiserror::Error)]
#[error("data.mapRoles of ConfigMap kube-system/aws-auth is not a YAML list of role mappings: {0}")]
pub struct MapRolesError(String);

/// `mapRoles` with the node role mapped as a node; `None` when it already is.
///
/// Every existing entry is kept. A block-style list gets the new entry appended as text, so the
/// existing entries (and comments) stay byte for byte; an entry for the role with groups missing
/// gets them added, and then the list is written out again.
pub fn map_node_role(map_roles: &str, role_arn: &str) -> Result<Option<String>, MapRolesError> {
    let mut entries: Vec<Value> = if map_roles.trim().is_empty() {
        Vec::new()
    } else {
        serde_saphyr::from_str::<Option<Vec<Value>>>(map_roles)
            .map_err(|e| MapRolesError(e.to_string()))?
            .unwrap_or_default()
    };
    let has_groups = |entry: &Value| {
        let groups: Vec<&str> = entry["groups"]
            .as_array()
            .map(|g| g.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        NODE_GROUPS.iter().all(|g| groups.contains(g))
    };
    match entries
        .iter_mut()
        .find(|e| e["rolearn"].as_str() == Some(role_arn))
    {
        Some(entry) if has_groups(entry) => Ok(None),
        Some(entry) => {
            let mut groups: Vec<Value> = entry["groups"].as_array().cloned().unwrap_or_default();
            for g in NODE_GROUPS {
                if !groups.iter().any(|have| have.as_str() == Some(g)) {
                    groups.push(json!(g));
                }
            }
            entry["groups"] = Value::Array(groups);
            serde_saphyr::to_string(&entries)
                .map(Some)
                .map_err(|e| MapRolesError(e.to_string()))
        }
        None => {
            let addition = format!(
                "- rolearn: {role_arn}\n  username: {NODE_USERNAME}\n  groups:\n  - {}\n  - {}\n",
                NODE_GROUPS[0], NODE_GROUPS[1]
            );
            // The first line that is not blank or a comment says whether the list is block style.
            let first = map_roles
                .lines()
                .map(str::trim_start)
                .find(|l| !l.is_empty() && !l.starts_with('#'));
            if first.is_none_or(|l| l.starts_with("- ")) {
                let mut text = map_roles.to_owned();
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&addition);
                Ok(Some(text))
            } else {
                entries.push(
                    json!({"rolearn": role_arn, "username": NODE_USERNAME, "groups": NODE_GROUPS}),
                );
                serde_saphyr::to_string(&entries)
                    .map(Some)
                    .map_err(|e| MapRolesError(e.to_string()))
            }
        }
    }
}

/// Lets nodes running as the node role join the cluster: an access entry or an aws-auth entry,
/// whichever the cluster's authentication mode reads.
struct NodeAccessStep {
    ctx: Arc<Ctx>,
    kube: Option<kube::Client>,
}

/// Attempts at the aws-auth write before giving up on a busy ConfigMap.
const AWS_AUTH_ATTEMPTS: usize = 5;

impl NodeAccessStep {
    async fn mode(&self) -> Result<NodeAccess, SetupError> {
        Ok(NodeAccess::for_mode(
            self.ctx.cluster().await?.authentication_mode.as_deref(),
        ))
    }

    fn config_maps(&self) -> Result<kube::Api<k8s_openapi::api::core::v1::ConfigMap>, SetupError> {
        match &self.kube {
            Some(client) => Ok(kube::Api::namespaced(client.clone(), AWS_AUTH_NAMESPACE)),
            None => Err(SetupError::Missing {
                resource: "a Kubernetes client".to_owned(),
                hint: format!(
                    "the cluster reads only ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}, which init edits through the Kubernetes API"
                ),
            }),
        }
    }

    /// The ConfigMap (if any) and `mapRoles` as it should be (`None`: already right).
    async fn aws_auth(
        &self,
    ) -> Result<
        (
            Option<k8s_openapi::api::core::v1::ConfigMap>,
            Option<String>,
        ),
        SetupError,
    > {
        let role_arn = self.ctx.role_arn(&self.ctx.options.node_role()).await?;
        let existing = self
            .config_maps()?
            .get_opt(AWS_AUTH_NAME)
            .await
            .map_err(|source| SetupError::Kube {
                action: format!("reading ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}"),
                source,
            })?;
        let map_roles = existing
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("mapRoles"))
            .cloned()
            .unwrap_or_default();
        let wanted = map_node_role(&map_roles, &role_arn).map_err(|e| SetupError::Missing {
            resource: format!("a readable ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}"),
            hint: format!("{e}; fix it by hand, then re-run"),
        })?;
        Ok((existing, wanted))
    }

    async fn access_entry(&self) -> Result<Option<String>, SetupError> {
        let o = &self.ctx.options;
        let role_arn = self.ctx.role_arn(&o.node_role()).await?;
        match self
            .ctx
            .eks
            .describe_access_entry()
            .cluster_name(&o.cluster_name)
            .principal_arn(&role_arn)
            .send()
            .await
        {
            Ok(out) => Ok(Some(
                out.access_entry()
                    .and_then(|e| e.r#type())
                    .unwrap_or("STANDARD")
                    .to_owned(),
            )),
            Err(e) if code(&e) == Some("ResourceNotFoundException") => Ok(None),
            Err(e) => Err(aws_error(
                "eks:DescribeAccessEntry",
                &format!("cluster {}", o.cluster_name),
                e,
            )),
        }
    }
}

impl Step for NodeAccessStep {
    fn name(&self) -> &str {
        "node-access"
    }

    fn describe(&self) -> String {
        format!(
            "let nodes running as {} join the cluster: an EC2_LINUX access entry, or (authentication mode CONFIG_MAP) a mapRoles entry in {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}",
            self.ctx.options.node_role()
        )
    }

    fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>> {
        Box::pin(async move {
            let role = self.ctx.options.node_role();
            match self.mode().await? {
                NodeAccess::AccessEntry => match self.access_entry().await? {
                    Some(kind) if kind == "EC2_LINUX" => Ok(Status::InPlace(format!(
                        "EC2_LINUX access entry for {role}"
                    ))),
                    Some(kind) => Err(SetupError::Missing {
                        resource: format!("an EC2_LINUX access entry for role {role}"),
                        hint: format!(
                            "the role has an access entry of type {kind}, which nodes cannot join with and EKS cannot change; delete it (aws eks delete-access-entry --cluster-name {} --principal-arn ...) and re-run",
                            self.ctx.options.cluster_name
                        ),
                    }),
                    None => Ok(Status::Needed(format!(
                        "create an EC2_LINUX access entry for {role}"
                    ))),
                },
                NodeAccess::AwsAuthConfigMap => Ok(match self.aws_auth().await? {
                    (_, None) => Status::InPlace(format!(
                        "{AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME} maps {role} to {}",
                        NODE_GROUPS.join(", ")
                    )),
                    (None, Some(_)) => Status::Needed(format!(
                        "create ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME} mapping {role} as a node"
                    )),
                    (Some(_), Some(_)) => Status::Needed(format!(
                        "map {role} as a node in {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}, keeping its other entries"
                    )),
                }),
            }
        })
    }

    fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>> {
        Box::pin(async move {
            let o = &self.ctx.options;
            if self.mode().await? == NodeAccess::AccessEntry {
                if self.access_entry().await?.is_some() {
                    return Ok(());
                }
                let role_arn = self.ctx.role_arn(&o.node_role()).await?;
                self.ctx
                    .eks
                    .create_access_entry()
                    .cluster_name(&o.cluster_name)
                    .principal_arn(&role_arn)
                    .r#type("EC2_LINUX")
                    .send()
                    .await
                    .map_err(|e| {
                        aws_error(
                            "eks:CreateAccessEntry",
                            &format!("cluster {}", o.cluster_name),
                            e,
                        )
                    })?;
                return Ok(());
            }
            let api = self.config_maps()?;
            let id = format!("ConfigMap {AWS_AUTH_NAMESPACE}/{AWS_AUTH_NAME}");
            // Read-modify-write with the resourceVersion: a concurrent edit (eksctl, another
            // node group) makes the write conflict, and the entry is added to the new version.
            for attempt in 1..=AWS_AUTH_ATTEMPTS {
                let (existing, Some(map_roles)) = self.aws_auth().await? else {
                    return Ok(());
                };
                let result = match existing {
                    Some(mut config_map) => {
                        config_map
                            .data
                            .get_or_insert_with(Default::default)
                            .insert("mapRoles".to_owned(), map_roles);
                        api.replace(
                            AWS_AUTH_NAME,
                            &kube::api::PostParams::default(),
                            &config_map,
                        )
                        .await
                        .map(drop)
                    }
                    None => {
                        let config_map = k8s_openapi::api::core::v1::ConfigMap {
                            metadata: kube::api::ObjectMeta {
                                name: Some(AWS_AUTH_NAME.to_owned()),
                                namespace: Some(AWS_AUTH_NAMESPACE.to_owned()),
                                ..Default::default()
                            },
                            data: Some([("mapRoles".to_owned(), map_roles)].into()),
                            ..Default::default()
                        };
                        api.create(&kube::api::PostParams::default(), &config_map)
                            .await
                            .map(drop)
                    }
                };
                match result {
                    Ok(()) => return Ok(()),
                    Err(kube::Error::Api(status))
                        if (status.code == 409) && attempt < AWS_AUTH_ATTEMPTS =>
                    {
                        tracing::warn!(
                            attempt,
                            "aws-auth changed while it was edited; reading it again"
                        );
                    }
                    Err(source) => {
                        return Err(SetupError::Kube {
                            action: format!("writing {id}"),
                            source,
                        });
                    }
                }
            }
            Ok(())
        })
    }
}

/// The agent's objects for AWS: its Deployment runs `karpenter-agent run --provider aws`.
pub fn agent_manifests(options: &AwsOptions, controller_role_arn: &str) -> Vec<Manifest> {
    let annotations = match options.auth {
        Auth::Irsa => vec![(
            "eks.amazonaws.com/role-arn".to_owned(),
            controller_role_arn.to_owned(),
        )],
        Auth::PodIdentity => Vec::new(),
    };
    let mut objects = manifests::crds();
    objects.extend(manifests::agent(&AgentSettings {
        namespace: options.namespace.clone(),
        service_account: options.service_account.clone(),
        image: options.image.clone(),
        service_account_annotations: annotations,
        args: vec!["run".to_owned(), "--provider".to_owned(), "aws".to_owned()],
        env: vec![
            ("CLUSTER_NAME".to_owned(), options.cluster_name.clone()),
            ("AWS_REGION".to_owned(), options.region.clone()),
            ("INTERRUPTION_QUEUE".to_owned(), options.queue_name()),
        ],
        credentials_secret: None,
    }));
    objects
}

/// A starter NodePool and EC2NodeClass, both `default`.
pub fn node_pool_manifests(options: &AwsOptions) -> Vec<Manifest> {
    let discovery = json!({labels::DISCOVERY_TAG: options.cluster_name});
    vec![
        Manifest::new(
            json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
                "spec": {
                    "role": options.node_role(),
                    "amiSelectorTerms": [{"alias": "al2023@latest"}],
                    "subnetSelectorTerms": [{"tags": discovery}],
                    "securityGroupSelectorTerms": [{"tags": discovery}],
                },
            }),
            "ec2nodeclasses",
        ),
        Manifest::new(
            json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                "spec": {
                    "template": {"spec": {
                        "requirements": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                            {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                        ],
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
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
        if let Some(client) = &o.kube {
            steps.push(Box::new(ApplyManifests {
                name: "kubernetes-agent".to_owned(),
                description: format!(
                    "CRDs, namespace {}, service account, RBAC and the agent's Deployment",
                    o.namespace
                ),
                client: client.clone(),
                manifests: agent.clone(),
            }));
            if !pool.is_empty() {
                steps.push(Box::new(ApplyManifests {
                    name: "default-nodepool".to_owned(),
                    description: "NodePool default and EC2NodeClass default (al2023, discovery-tagged subnets and security groups)".to_owned(),
                    client: client.clone(),
                    manifests: pool.clone(),
                }));
            }
        }
        Plan::new(steps).with_manifests(agent.into_iter().chain(pool).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iam_policy_documents_decode_whether_or_not_they_are_url_encoded() {
        let doc = json!({"Version": "2012-10-17", "Statement": []});
        assert_eq!(decode_policy(&doc.to_string()), Some(doc.clone()));
        let encoded = "%7B%22Version%22%3A%222012-10-17%22%2C%22Statement%22%3A%5B%5D%7D";
        assert_eq!(decode_policy(encoded), Some(doc));
    }

    #[test]
    fn nodes_join_through_access_entries_when_the_cluster_reads_them_and_through_aws_auth_otherwise()
     {
        assert_eq!(NodeAccess::for_mode(Some("API")), NodeAccess::AccessEntry);
        assert_eq!(
            NodeAccess::for_mode(Some("API_AND_CONFIG_MAP")),
            NodeAccess::AccessEntry
        );
        assert_eq!(
            NodeAccess::for_mode(Some("CONFIG_MAP")),
            NodeAccess::AwsAuthConfigMap
        );
        assert_eq!(NodeAccess::for_mode(None), NodeAccess::AwsAuthConfigMap);
    }

    const NODE_ARN: &str = "arn:aws:iam::123456789012:role/KarpenterNodeRole-demo";

    fn parse(text: &str) -> Vec<Value> {
        serde_saphyr::from_str(text).unwrap()
    }

    #[test]
    fn the_node_role_is_appended_to_map_roles_keeping_every_entry_byte_for_byte() {
        let existing = "# managed node group\n- rolearn: arn:aws:iam::123456789012:role/ng-1\n  username: system:node:{{EC2PrivateDNSName}}\n  groups:\n    - system:bootstrappers\n    - system:nodes\n";
        let updated = map_node_role(existing, NODE_ARN).unwrap().unwrap();
        assert!(updated.starts_with(existing), "{updated}");
        let entries = parse(&updated);
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[1],
            json!({"rolearn": NODE_ARN, "username": NODE_USERNAME, "groups": NODE_GROUPS})
        );
        assert_eq!(
            map_node_role(&updated, NODE_ARN).unwrap(),
            None,
            "a second run changes nothing"
        );
    }

    #[test]
    fn an_empty_or_flow_style_map_roles_gets_the_node_role_too() {
        assert_eq!(
            parse(&map_node_role("", NODE_ARN).unwrap().unwrap()).len(),
            1
        );
        let flow = r#"[{"rolearn": "arn:aws:iam::1:role/a", "username": "a", "groups": ["g"]}]"#;
        let entries = parse(&map_node_role(flow, NODE_ARN).unwrap().unwrap());
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["rolearn"], "arn:aws:iam::1:role/a");
    }

    #[test]
    fn an_entry_for_the_node_role_without_the_node_groups_gets_them_and_a_broken_map_roles_is_named()
     {
        let partial = format!("- rolearn: {NODE_ARN}\n  username: x\n  groups: [custom]\n");
        let entries = parse(&map_node_role(&partial, NODE_ARN).unwrap().unwrap());
        assert_eq!(entries.len(), 1);
        assert_eq!(
            entries[0]["groups"],
            json!(["custom", "system:bootstrappers", "system:nodes"])
        );
        assert!(map_node_role("rolearn: [unclosed", NODE_ARN).is_err());
    }

    #[test]
    fn rule_names_stay_within_64_characters() {
        for (name, _) in rules(&"x".repeat(100)) {
            assert!(name.len() <= 64, "{name}");
        }
        assert_eq!(rules("demo")[1].0, "karpenter-demo-SpotInterruption");
    }
}
