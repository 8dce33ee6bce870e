//! The controller's least-privilege IAM policy document: upstream Karpenter's
//! `KarpenterControllerPolicy` (its getting-started CloudFormation stack), scoped by the
//! cluster's tags as upstream scopes it. The `controller-policy` step in [`super::iam`] puts it
//! on the controller role.

use super::Ctx;
use crate::setup::SetupError;
use serde_json::{Value, json};

/// The inline policy on the controller role.
pub const CONTROLLER_POLICY_NAME: &str = "KarpenterControllerPolicy";

impl Ctx {
    /// The controller's least-privilege policy (upstream's, less zonal shift).
    pub(super) async fn controller_policy(&self) -> Result<Value, SetupError> {
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
