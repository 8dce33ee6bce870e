//! The launch template one launch uses per AMI: named by a hash of everything in it, so a
//! template is never changed in place, only made anew; looked up in the provider's memory, then
//! in EC2, and created when neither has it. Upstream's `pkg/providers/launchtemplate`
//! (`ensureLaunchTemplate`, `createLaunchTemplate`, `generateNetworkInterfaces`,
//! `blockDeviceMappings`).

use super::nodeclass::ResolvedNodeClass;
use super::tags::{
    EKS_CLUSTER_NAME_TAG, LAUNCH_TEMPLATE_CLUSTER_TAG, cluster_tag, tag_specification,
};
use super::userdata::{self, ClusterBootstrap, NodeBootstrap};
use super::{AwsProvider, cloud_error, sdk_error_code};
use crate::apis::ec2nodeclass::{BlockDeviceMapping, MetadataOptions};
use crate::apis::{NodeClaim, labels};
use crate::cloud::provider::CloudError;
use aws_sdk_ec2::types::{
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatesMonitoringRequest,
    RequestLaunchTemplateData, ResourceType, TagSpecification, VolumeType,
};
use k8s_openapi::api::core::v1::Taint;
use kube::ResourceExt;
use std::collections::BTreeMap;

/// The name of the launch template for `claim`'s node pool and node class with `ami_id`,
/// creating the template first if EC2 does not have it.
pub(super) async fn ensure_launch_template(
    provider: &AwsProvider,
    resolved: &ResolvedNodeClass,
    claim: &NodeClaim,
    ami_id: &str,
    bootstrap: &ClusterBootstrap,
) -> Result<String, CloudError> {
    let cluster = &provider.config.cluster_name;
    let user_data = user_data(resolved, claim, bootstrap);
    let security_groups: Vec<String> = resolved
        .security_groups
        .iter()
        .map(|g| g.id.clone())
        .collect();
    let pool = claim
        .labels()
        .get(labels::NODE_POOL)
        .cloned()
        .unwrap_or_default();
    let name = template_name(
        cluster,
        &pool,
        resolved,
        ami_id,
        &security_groups,
        &user_data,
    );
    if provider
        .launch_templates
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&name)
    {
        return Ok(name);
    }
    if !launch_template_exists(provider, &name).await? {
        let data = template_data(resolved, ami_id, &security_groups, &user_data);
        let tags = template_tags(resolved, cluster, &pool);
        create_launch_template(provider, &name, data, tags, ami_id, resolved).await?;
    }
    provider
        .launch_templates
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(name.clone());
    Ok(name)
}

/// The claim's labels its kubelet may set through `--node-labels`; registration adds the rest.
fn kubelet_labels(claim: &NodeClaim) -> BTreeMap<String, String> {
    crate::cloud::kubelet_labels::kubelet_labels(claim.labels())
}

/// The node's user data: the claim's taints and startup taints, and the unregistered taint.
fn user_data(
    resolved: &ResolvedNodeClass,
    claim: &NodeClaim,
    bootstrap: &ClusterBootstrap,
) -> String {
    let spec = &resolved.spec;
    let mut taints: Vec<Taint> = claim.spec.taints.clone();
    taints.extend(claim.spec.startup_taints.iter().cloned());
    taints.push(Taint {
        key: labels::UNREGISTERED_TAINT_KEY.to_owned(),
        effect: "NoExecute".to_owned(),
        ..Taint::default()
    });
    userdata::render(
        resolved.family,
        &NodeBootstrap {
            cluster: bootstrap,
            labels: kubelet_labels(claim),
            taints,
            kubelet: spec.kubelet.as_ref(),
            raid0: spec.instance_store_policy.as_deref() == Some("RAID0"),
            custom: spec.user_data.as_deref(),
        },
    )
}

/// `karpenter.k8s.aws/<hash>` of everything the template holds.
fn template_name(
    cluster: &str,
    pool: &str,
    resolved: &ResolvedNodeClass,
    ami_id: &str,
    security_groups: &[String],
    user_data: &str,
) -> String {
    let spec = &resolved.spec;
    let identity = serde_json::json!({
        "cluster": cluster, "nodePool": pool, "nodeClass": resolved.name, "ami": ami_id, "securityGroups": security_groups,
        "instanceProfile": resolved.instance_profile, "metadata": spec.metadata_options, "blockDevices": spec.block_device_mappings,
        "userData": user_data, "tags": spec.tags, "publicIP": spec.associate_public_ip_address, "monitoring": spec.detailed_monitoring,
    });
    format!(
        "karpenter.k8s.aws/{:016x}",
        super::nodeclass::fnv1a(identity.to_string().as_bytes())
    )
}

async fn launch_template_exists(provider: &AwsProvider, name: &str) -> Result<bool, CloudError> {
    match provider
        .clients
        .ec2
        .describe_launch_templates()
        .launch_template_names(name)
        .send()
        .await
    {
        Ok(out) => Ok(!out.launch_templates().is_empty()),
        Err(e)
            if sdk_error_code(&e).is_some_and(|c| c.starts_with("InvalidLaunchTemplateName")) =>
        {
            Ok(false)
        }
        Err(e) => Err(cloud_error("describing launch templates", e)),
    }
}

/// What every instance launched from the template gets: image, instance profile, metadata
/// options, monitoring, user data, network interface or security groups, and block devices.
fn template_data(
    resolved: &ResolvedNodeClass,
    ami_id: &str,
    security_groups: &[String],
    user_data: &str,
) -> RequestLaunchTemplateData {
    let spec = &resolved.spec;
    let mut data = RequestLaunchTemplateData::builder()
        .image_id(ami_id)
        .iam_instance_profile(
            LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                .name(&resolved.instance_profile)
                .build(),
        )
        .metadata_options(metadata_options(&spec.metadata_options))
        .monitoring(
            LaunchTemplatesMonitoringRequest::builder()
                .enabled(spec.detailed_monitoring.unwrap_or(false))
                .build(),
        )
        .user_data(userdata::base64(user_data.as_bytes()));
    match spec.associate_public_ip_address {
        Some(public) => {
            data = data.network_interfaces(
                LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                    .device_index(0)
                    .associate_public_ip_address(public)
                    .set_groups(Some(security_groups.to_vec()))
                    .build(),
            );
        }
        None => data = data.set_security_group_ids(Some(security_groups.to_vec())),
    }
    for mapping in &spec.block_device_mappings {
        data = data.block_device_mappings(block_device_mapping(mapping));
    }
    data.build()
}

fn metadata_options(metadata: &MetadataOptions) -> LaunchTemplateInstanceMetadataOptionsRequest {
    LaunchTemplateInstanceMetadataOptionsRequest::builder()
        .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
            metadata.http_endpoint.as_str(),
        ))
        .http_tokens(LaunchTemplateHttpTokensState::from(
            metadata.http_tokens.as_str(),
        ))
        .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
            metadata.http_protocol_ipv6.as_str(),
        ))
        .http_put_response_hop_limit(
            i32::try_from(metadata.http_put_response_hop_limit).unwrap_or(1),
        )
        .build()
}

fn block_device_mapping(mapping: &BlockDeviceMapping) -> LaunchTemplateBlockDeviceMappingRequest {
    let mut ebs = LaunchTemplateEbsBlockDeviceRequest::builder();
    if let Some(e) = &mapping.ebs {
        let gib = e
            .volume_size
            .as_deref()
            .and_then(|s| crate::resources::parse(crate::resources::EPHEMERAL_STORAGE, s).ok())
            .map(|bytes| i32::try_from(bytes.div_ceil(1 << 30)).unwrap_or(i32::MAX));
        ebs = ebs
            .set_volume_size(gib)
            .set_volume_type(e.volume_type.as_deref().map(VolumeType::from))
            .set_iops(e.iops.and_then(|v| i32::try_from(v).ok()))
            .set_throughput(e.throughput.and_then(|v| i32::try_from(v).ok()))
            .set_encrypted(e.encrypted)
            .set_kms_key_id(e.kms_key_id.clone())
            .set_snapshot_id(e.snapshot_id.clone())
            .set_delete_on_termination(e.delete_on_termination.or(Some(true)));
    }
    LaunchTemplateBlockDeviceMappingRequest::builder()
        .set_device_name(mapping.device_name.clone())
        .ebs(ebs.build())
        .build()
}

fn template_tags(resolved: &ResolvedNodeClass, cluster: &str, pool: &str) -> TagSpecification {
    // Upstream's launch-template tags (the node class's own, then `GetTags`' static ones):
    // the controller policy lets CreateLaunchTemplate only with the cluster, EKS cluster
    // name and nodepool tags, and CreateFleet use only templates that carry them.
    let mut template_tags: BTreeMap<String, String> = resolved.spec.tags.clone();
    template_tags.insert(cluster_tag(cluster), "owned".to_owned());
    template_tags.insert(EKS_CLUSTER_NAME_TAG.to_owned(), cluster.to_owned());
    template_tags.insert(labels::NODE_POOL.to_owned(), pool.to_owned());
    template_tags.insert(labels::AWS_EC2_NODE_CLASS.to_owned(), resolved.name.clone());
    template_tags.insert(LAUNCH_TEMPLATE_CLUSTER_TAG.to_owned(), cluster.to_owned());
    tag_specification(ResourceType::LaunchTemplate, &template_tags)
}

/// Creates the template `name`; one another launch created meanwhile will do.
async fn create_launch_template(
    provider: &AwsProvider,
    name: &str,
    data: RequestLaunchTemplateData,
    tags: TagSpecification,
    ami_id: &str,
    resolved: &ResolvedNodeClass,
) -> Result<(), CloudError> {
    match provider
        .clients
        .ec2
        .create_launch_template()
        .launch_template_name(name)
        .launch_template_data(data)
        .tag_specifications(tags)
        .send()
        .await
    {
        Ok(_) => {
            tracing::info!(launch_template = %name, ami = ami_id, node_class = %resolved.name, "created launch template");
            Ok(())
        }
        Err(e) if sdk_error_code(&e).is_some_and(|c| c.contains("AlreadyExists")) => Ok(()),
        Err(e) => Err(cloud_error("creating the launch template", e)),
    }
}
