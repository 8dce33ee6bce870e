//! The EKS managed node groups of a cluster, as `kubectl karpenter migrate cluster-autoscaler`
//! reads them (eks:ListNodegroups, eks:DescribeNodegroup): what the group's nodes cannot say, its
//! maximum size (the NodePool's limit), its instance types, labels and taints as configured, and
//! the groups scaled to zero, which have no node to read.

use super::{AwsOptions, aws_error};
use crate::migrate::{Cloud, NodeGroup};
use crate::setup::SetupError;
use k8s_openapi::api::core::v1::Taint;
use std::time::Duration;

/// Every managed node group of `options.cluster_name`.
pub async fn node_groups(options: &AwsOptions) -> Result<Vec<NodeGroup>, SetupError> {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(options.region.clone()))
        // A machine without credentials or network answers within this, not after minutes.
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(20))
                .build(),
        );
    if let Some(url) = &options.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    let eks = aws_sdk_eks::Client::new(&loader.load().await);
    let cluster = &options.cluster_name;
    let resource = format!("EKS cluster {cluster} in {}", options.region);
    let mut names = Vec::new();
    let mut pages = eks
        .list_nodegroups()
        .cluster_name(cluster)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| aws_error("eks:ListNodegroups", &resource, e))?;
        names.extend(page.nodegroups().iter().cloned());
    }
    let mut groups = Vec::new();
    for name in names {
        let out = eks
            .describe_nodegroup()
            .cluster_name(cluster)
            .nodegroup_name(&name)
            .send()
            .await
            .map_err(|e| {
                aws_error(
                    "eks:DescribeNodegroup",
                    &format!("node group {name} of {resource}"),
                    e,
                )
            })?;
        let Some(group) = out.nodegroup() else {
            continue;
        };
        let spot = group.capacity_type().is_some_and(|c| c.as_str() == "SPOT");
        let arm = group.ami_type().is_some_and(|t| t.as_str().contains("ARM"));
        groups.push(NodeGroup {
            name: name.clone(),
            kind: "EKS managed node group".to_owned(),
            selector: format!("eks.amazonaws.com/nodegroup={name}"),
            cloud: Some(Cloud::Aws),
            instance_types: group.instance_types().iter().cloned().collect(),
            architectures: [if arm { "arm64" } else { "amd64" }.to_owned()].into(),
            capacity_types: [if spot { "spot" } else { "on-demand" }.to_owned()].into(),
            labels: group
                .labels()
                .map(|l| l.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            taints: group
                .taints()
                .iter()
                .map(|t| Taint {
                    key: t.key().unwrap_or_default().to_owned(),
                    value: t.value().map(str::to_owned),
                    effect: match t.effect().map(|e| e.as_str()) {
                        Some("NO_EXECUTE") => "NoExecute",
                        Some("PREFER_NO_SCHEDULE") => "PreferNoSchedule",
                        _ => "NoSchedule",
                    }
                    .to_owned(),
                    time_added: None,
                })
                .collect(),
            max_size: group
                .scaling_config()
                .and_then(|s| s.max_size())
                .and_then(|m| u32::try_from(m).ok()),
            ..NodeGroup::default()
        });
    }
    Ok(groups)
}
