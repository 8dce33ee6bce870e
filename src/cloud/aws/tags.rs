//! The tags the provider puts on what it makes in EC2 and finds its own things by: the
//! cluster's ownership tag, the EKS cluster name, the NodeClaim, and the launch templates'
//! cluster tag, as upstream's AWS provider names them. The controller policy's conditions
//! (`setup::aws`) rely on the same keys.

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use std::collections::BTreeMap;

/// Tag on everything launched for a cluster: `kubernetes.io/cluster/<name>` = `owned`.
pub(crate) fn cluster_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}
/// The tag EKS reads the cluster name from.
pub(crate) const EKS_CLUSTER_NAME_TAG: &str = "eks:eks-cluster-name";
/// The tag naming an instance's NodeClaim (the NodePool tag is [`labels::NODE_POOL`]).
///
/// [`labels::NODE_POOL`]: crate::apis::labels::NODE_POOL
pub(crate) const NODE_CLAIM_TAG: &str = "karpenter.sh/nodeclaim";
/// The tag naming the cluster on launch templates (upstream's `karpenter.k8s.aws/cluster`).
pub(crate) const LAUNCH_TEMPLATE_CLUSTER_TAG: &str = "karpenter.k8s.aws/cluster";

/// `tags` as the tag specification of one resource type in a create request.
pub(super) fn tag_specification(
    resource: ResourceType,
    tags: &BTreeMap<String, String>,
) -> TagSpecification {
    tags.iter()
        .fold(
            TagSpecification::builder().resource_type(resource),
            |b, (k, v)| b.tags(tag(k, v)),
        )
        .build()
}

fn tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build()
}
