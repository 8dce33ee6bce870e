//! The Kubernetes objects `init aws` applies or prints: the agent (CRDs, namespace, service
//! account with its IRSA annotation, RBAC, Deployment) and a starter NodePool with its
//! EC2NodeClass.

use super::{Auth, AwsOptions};
use crate::apis::labels;
use crate::setup::chart::ChartError;
use crate::setup::manifests::{self, AgentSettings, Manifest};
use serde_json::json;

/// The agent's objects for AWS: the CRDs, then the chart rendered with `provider: aws`.
pub(crate) fn agent_manifests(
    options: &AwsOptions,
    controller_role_arn: &str,
) -> Result<Vec<Manifest>, ChartError> {
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
        values: json!({
            "provider": "aws",
            "settings": {"clusterName": options.cluster_name, "interruptionQueue": options.queue_name()},
            "aws": {"region": options.region},
        }),
    })?);
    Ok(objects)
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
