//! The stand-in kubelet of moto's instances: the rig's `cloud_agent::kubelet` with what an EC2
//! instance gives it (the `--node-labels` its user data passes, the Node name EKS gives it).
//! Shared by the in-process AWS agent tests and the two-process failover test.

use karpenter_core::cloud::ProviderId;

/// Registers the Node of each of `cluster`'s launched claims, as its instance's kubelet would,
/// until dropped.
pub(crate) async fn ec2_kubelet(client: kube::Client, cluster: String, ec2: aws_sdk_ec2::Client) {
    karpenter_test_support::cloud_agent::kubelet(client, cluster, aws_node_name, move |id| {
        let ec2 = ec2.clone();
        async move { node_labels_sent(&ec2, &id).await }
    })
    .await;
}

/// The `--node-labels` the instance's user data passes its kubelet, read back from EC2 as the
/// instance would (`DescribeInstanceAttribute userData`).
async fn node_labels_sent(
    ec2: &aws_sdk_ec2::Client,
    id: &ProviderId,
) -> Option<std::collections::BTreeMap<String, String>> {
    use base64::Engine;
    let ProviderId::Aws { instance_id, .. } = id else {
        return None;
    };
    let out = ec2
        .describe_instance_attribute()
        .instance_id(instance_id)
        .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
        .send()
        .await
        .ok()?;
    let encoded = out.user_data()?.value()?;
    let engine = base64::engine::general_purpose::STANDARD;
    let mut text = String::from_utf8(engine.decode(encoded).ok()?).ok()?;
    // moto keeps the launch template's (already encoded) user data as the instance's.
    if !text.contains("--node-labels")
        && let Some(again) = engine
            .decode(text.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
    {
        text = again;
    }
    Some(karpenter_test_support::cloud_agent::node_labels_flag(&text))
}

/// The Node name EKS gives an instance (`ip-<instance id>` stands in for its private DNS name).
fn aws_node_name(id: &ProviderId) -> Option<String> {
    match id {
        ProviderId::Aws { instance_id, .. } => Some(format!("ip-{instance_id}")),
        _ => None,
    }
}
