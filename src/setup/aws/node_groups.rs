//! The EKS managed node groups of a cluster, as `kubectl karpenter migrate cluster-autoscaler`
//! reads them (eks:ListNodegroups, eks:DescribeNodegroup): what the group's nodes cannot say, its
//! maximum size (the NodePool's limit), its instance types, labels and taints as configured, and
//! the groups scaled to zero, which have no node to read; its subnets' zones
//! (ec2:DescribeSubnets) and its launch template (ec2:DescribeLaunchTemplateVersions), which
//! [`crate::migrate::launch_template`] makes its EC2NodeClass of. The EKS calls must succeed; an
//! EC2 call that fails is a note on the group, and the rest of it is still read.

use super::{AwsOptions, aws_error};
use crate::migrate::launch_template::{BlockDevice, LaunchTemplate, MetadataOptions};
use crate::migrate::{Cloud, NodeGroup};
use crate::setup::SetupError;
use aws_sdk_ec2::types::{Filter, ResourceType};
use k8s_openapi::api::core::v1::Taint;
use std::collections::BTreeMap;
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
    let config = loader.load().await;
    let eks = aws_sdk_eks::Client::new(&config);
    let ec2 = aws_sdk_ec2::Client::new(&config);
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
        let mut notes = Vec::new();
        let zones = match subnet_zones(&ec2, group.subnets()).await {
            Ok(zones) => zones,
            Err(e) => {
                notes.push(format!("{name}: its subnets' zones are unknown ({e})"));
                Vec::new()
            }
        };
        let launch_template = match group.launch_template() {
            Some(spec) => match launch_template(&ec2, spec).await {
                Ok(template) => Some(template),
                Err(e) => {
                    notes.push(format!(
                        "{name}: its launch template could not be read ({e}); the node class is init's"
                    ));
                    None
                }
            },
            None => None,
        };
        // EKS refuses instanceTypes on a group whose launch template sets the type.
        let instance_types = match launch_template
            .as_ref()
            .and_then(|t| t.instance_type.clone())
        {
            Some(from_template) => [from_template].into(),
            None => group.instance_types().iter().cloned().collect(),
        };
        let arm = group.ami_type().is_some_and(|t| t.as_str().contains("ARM"));
        groups.push(NodeGroup {
            name: name.clone(),
            kind: "EKS managed node group".to_owned(),
            selector: format!("eks.amazonaws.com/nodegroup={name}"),
            cloud: Some(Cloud::Aws),
            instance_types,
            zones: zones.into_iter().collect(),
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
            ami_type: group.ami_type().map(|t| t.as_str().to_owned()),
            // EKS's diskSize is the launch template's business when there is one.
            disk_size_gib: group
                .disk_size()
                .filter(|_| launch_template.is_none())
                .and_then(|d| u32::try_from(d).ok()),
            launch_template,
            notes,
            ..NodeGroup::default()
        });
    }
    Ok(groups)
}

/// The zones of a group's subnets, sorted.
async fn subnet_zones(
    ec2: &aws_sdk_ec2::Client,
    subnets: &[String],
) -> Result<Vec<String>, SetupError> {
    if subnets.is_empty() {
        return Ok(Vec::new());
    }
    let out = ec2
        .describe_subnets()
        .filters(
            Filter::builder()
                .name("subnet-id")
                .set_values(Some(subnets.to_vec()))
                .build(),
        )
        .send()
        .await
        .map_err(|e| aws_error("ec2:DescribeSubnets", "the node group's subnets", e))?;
    let mut zones: Vec<String> = out
        .subnets()
        .iter()
        .filter_map(|s| s.availability_zone().map(str::to_owned))
        .collect();
    zones.sort();
    zones.dedup();
    Ok(zones)
}

/// The launch template version a group boots from (its version, else the default one).
async fn launch_template(
    ec2: &aws_sdk_ec2::Client,
    spec: &aws_sdk_eks::types::LaunchTemplateSpecification,
) -> Result<LaunchTemplate, SetupError> {
    let version = spec.version().unwrap_or("$Default").to_owned();
    let label = spec.name().or(spec.id()).unwrap_or_default().to_owned();
    let mut request = ec2.describe_launch_template_versions().versions(&version);
    request = match (spec.id(), spec.name()) {
        (Some(id), _) => request.launch_template_id(id),
        (None, name) => request.set_launch_template_name(name.map(str::to_owned)),
    };
    let out = request.send().await.map_err(|e| {
        aws_error(
            "ec2:DescribeLaunchTemplateVersions",
            &format!("launch template {label}"),
            e,
        )
    })?;
    let found = out.launch_template_versions().first();
    let data = found.and_then(|v| v.launch_template_data());
    let Some(data) = data else {
        return Err(SetupError::Missing {
            resource: format!("version {version} of launch template {label}"),
            hint: "check the node group's launch template".to_owned(),
        });
    };
    let mut security_groups: Vec<String> = data.security_group_ids().to_vec();
    for interface in data.network_interfaces() {
        security_groups.extend(interface.groups().iter().cloned());
    }
    let user_data = data.user_data().and_then(|encoded| {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?;
        String::from_utf8(bytes).ok()
    });
    let tags: BTreeMap<String, String> = data
        .tag_specifications()
        .iter()
        .filter(|t| t.resource_type() == Some(&ResourceType::Instance))
        .flat_map(|t| t.tags())
        .filter_map(|t| {
            Some((
                t.key()?.to_owned(),
                t.value().unwrap_or_default().to_owned(),
            ))
        })
        .collect();
    Ok(LaunchTemplate {
        name: found
            .and_then(|v| v.launch_template_name())
            .unwrap_or(&label)
            .to_owned(),
        version: found
            .and_then(|v| v.version_number())
            .map_or(version, |n| n.to_string()),
        image_id: data.image_id().map(str::to_owned),
        instance_type: data.instance_type().map(|t| t.as_str().to_owned()),
        block_devices: data
            .block_device_mappings()
            .iter()
            .filter_map(|m| {
                let ebs = m.ebs()?;
                Some(BlockDevice {
                    device_name: m.device_name()?.to_owned(),
                    volume_size_gib: ebs.volume_size(),
                    volume_type: ebs.volume_type().map(|t| t.as_str().to_owned()),
                    iops: ebs.iops(),
                    throughput: ebs.throughput(),
                    encrypted: ebs.encrypted(),
                    kms_key_id: ebs.kms_key_id().map(str::to_owned),
                    delete_on_termination: ebs.delete_on_termination(),
                    snapshot_id: ebs.snapshot_id().map(str::to_owned),
                })
            })
            .collect(),
        security_groups,
        metadata_options: data.metadata_options().map(|m| MetadataOptions {
            http_endpoint: m.http_endpoint().map(|v| v.as_str().to_owned()),
            http_tokens: m.http_tokens().map(|v| v.as_str().to_owned()),
            http_put_response_hop_limit: m.http_put_response_hop_limit(),
            http_protocol_ipv6: m.http_protocol_ipv6().map(|v| v.as_str().to_owned()),
        }),
        user_data,
        tags,
        key_name: data.key_name().map(str::to_owned),
    })
}
