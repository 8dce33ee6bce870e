//! One launch: pick the capacity type, build at most 60 overrides (instance type × subnet) from
//! the cheapest candidates, make sure each AMI's launch template exists, and call CreateFleet
//! `instant` for one instance: spot `price-capacity-optimized`, on-demand `lowest-price`, as
//! upstream's `pkg/providers/instance` does. Offerings CreateFleet reports no capacity for go
//! into the unavailable-offerings cache.

use super::catalogue::TypeInfo;
use super::nodeclass::{Ami, ResolvedNodeClass};
use super::userdata::{self, ClusterBootstrap, NodeBootstrap};
use super::{
    AwsProvider, CatalogueSnapshot, EKS_CLUSTER_NAME_TAG, LAUNCH_TEMPLATE_CLUSTER_TAG,
    NODE_CLAIM_TAG, cloud_error, cluster_tag, sdk_error_code,
};
use crate::apis::{NodeClaim, labels};
use crate::cloud::provider::{CloudError, Instance, ProviderId};
use crate::scheduling::InstanceType;
use crate::scheduling::Requirements;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatesMonitoringRequest,
    OnDemandOptionsRequest, RequestLaunchTemplateData, ResourceType, SpotAllocationStrategy,
    SpotOptionsRequest, Tag, TagSpecification, TargetCapacitySpecificationRequest, VolumeType,
};
use k8s_openapi::api::core::v1::Taint;
use kube::ResourceExt;
use std::collections::BTreeMap;

/// CreateFleet takes at most this many overrides in one request (upstream's limit).
pub const MAX_OVERRIDES: usize = 60;

/// Error codes that mean "no capacity for this offering right now": cache and try others.
pub const CAPACITY_ERROR_CODES: [&str; 6] = [
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
];

/// One (instance type, subnet) a fleet may launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub instance_type: String,
    pub subnet_id: String,
    pub zone: String,
    pub price: f64,
    pub ami_id: String,
}

/// The capacity type to launch and the overrides to launch with, cheapest first, or `None` when
/// no candidate has a usable offering.
pub fn plan_overrides(
    requirements: &Requirements,
    candidates: &[InstanceType],
    types: &BTreeMap<String, TypeInfo>,
    resolved: &ResolvedNodeClass,
    is_unavailable: impl Fn(&str, &str, &str) -> bool,
) -> Option<(&'static str, Vec<Override>)> {
    let zones_with_subnets = |zone: &str| resolved.subnets.iter().any(|s| s.zone == zone);
    let known: Vec<(&InstanceType, &TypeInfo)> = candidates
        .iter()
        .filter_map(|it| types.get(&it.name).map(|info| (it, info)))
        .collect();
    // Exotic types (GPUs, accelerators, metal) only when nothing ordinary is left.
    let ordinary: Vec<_> = known
        .iter()
        .filter(|(_, info)| !info.is_exotic())
        .copied()
        .collect();
    let types_kept = if ordinary.is_empty() { known } else { ordinary };
    let usable = |it: &InstanceType, capacity_type: &str| -> Vec<(String, f64)> {
        it.offerings
            .iter()
            .filter(|o| {
                o.capacity_type == capacity_type
                    && o.available
                    && o.allowed_by(requirements)
                    && zones_with_subnets(&o.zone)
            })
            .filter(|o| !is_unavailable(capacity_type, &it.name, &o.zone))
            .map(|o| (o.zone.clone(), o.price))
            .collect()
    };
    // Spot offerings dearer than the cheapest on-demand one are not worth the interruptions.
    let cheapest_on_demand = types_kept
        .iter()
        .flat_map(|(it, _)| usable(it, labels::CAPACITY_TYPE_ON_DEMAND))
        .map(|(_, p)| p)
        .fold(f64::INFINITY, f64::min);
    let usable_for = |it: &InstanceType, capacity_type: &str| -> Vec<(String, f64)> {
        let mut offers = usable(it, capacity_type);
        if capacity_type == labels::CAPACITY_TYPE_SPOT {
            offers.retain(|(_, price)| *price <= cheapest_on_demand);
        }
        offers
    };
    let allows = |ct: &str| requirements.allows(labels::CAPACITY_TYPE, ct);
    let spot_possible = allows(labels::CAPACITY_TYPE_SPOT)
        && types_kept
            .iter()
            .any(|(it, _)| !usable_for(it, labels::CAPACITY_TYPE_SPOT).is_empty());
    let capacity_type = if spot_possible {
        labels::CAPACITY_TYPE_SPOT
    } else if allows(labels::CAPACITY_TYPE_ON_DEMAND) {
        labels::CAPACITY_TYPE_ON_DEMAND
    } else {
        return None;
    };
    let mut overrides = Vec::new();
    for (it, info) in &types_kept {
        let accelerated = info.gpus.is_some() || info.neuron_devices > 0;
        let Some(ami) = resolved
            .amis
            .iter()
            .find(|a: &&Ami| a.fits(&info.arch, accelerated))
        else {
            continue;
        };
        for (zone, price) in usable_for(it, capacity_type) {
            // Subnets are sorted by zone, then most free addresses first.
            let Some(subnet) = resolved.subnets.iter().find(|s| s.zone == zone) else {
                continue;
            };
            overrides.push(Override {
                instance_type: it.name.clone(),
                subnet_id: subnet.id.clone(),
                zone,
                price,
                ami_id: ami.id.clone(),
            });
        }
    }
    overrides.sort_by(|a, b| a.price.total_cmp(&b.price));
    overrides.truncate(MAX_OVERRIDES);
    (!overrides.is_empty()).then_some((capacity_type, overrides))
}

fn tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build()
}

/// The claim's labels its kubelet may set through `--node-labels`; registration adds the rest.
fn kubelet_labels(claim: &NodeClaim) -> BTreeMap<String, String> {
    crate::cloud::kubelet_labels::kubelet_labels(claim.labels())
}

async fn ensure_launch_template(
    provider: &AwsProvider,
    resolved: &ResolvedNodeClass,
    claim: &NodeClaim,
    ami_id: &str,
    bootstrap: &ClusterBootstrap,
) -> Result<String, CloudError> {
    let spec = &resolved.spec;
    let cluster = &provider.config.cluster_name;
    let mut taints: Vec<Taint> = claim.spec.taints.clone();
    taints.extend(claim.spec.startup_taints.iter().cloned());
    taints.push(Taint {
        key: labels::UNREGISTERED_TAINT_KEY.to_owned(),
        effect: "NoExecute".to_owned(),
        ..Taint::default()
    });
    let user_data = userdata::render(
        resolved.family,
        &NodeBootstrap {
            cluster: bootstrap,
            labels: kubelet_labels(claim),
            taints,
            kubelet: spec.kubelet.as_ref(),
            raid0: spec.instance_store_policy.as_deref() == Some("RAID0"),
            custom: spec.user_data.as_deref(),
        },
    );
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
    let identity = serde_json::json!({
        "cluster": cluster, "nodePool": pool, "nodeClass": resolved.name, "ami": ami_id, "securityGroups": security_groups,
        "instanceProfile": resolved.instance_profile, "metadata": spec.metadata_options, "blockDevices": spec.block_device_mappings,
        "userData": user_data, "tags": spec.tags, "publicIP": spec.associate_public_ip_address, "monitoring": spec.detailed_monitoring,
    });
    let name = format!(
        "karpenter.k8s.aws/{:016x}",
        super::nodeclass::fnv1a(identity.to_string().as_bytes())
    );
    if provider
        .launch_templates
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(&name)
    {
        return Ok(name);
    }
    let exists = match provider
        .clients
        .ec2
        .describe_launch_templates()
        .launch_template_names(&name)
        .send()
        .await
    {
        Ok(out) => !out.launch_templates().is_empty(),
        Err(e)
            if sdk_error_code(&e).is_some_and(|c| c.starts_with("InvalidLaunchTemplateName")) =>
        {
            false
        }
        Err(e) => return Err(cloud_error("describing launch templates", e)),
    };
    if !exists {
        let metadata = &spec.metadata_options;
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(ami_id)
            .iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(&resolved.instance_profile)
                    .build(),
            )
            .metadata_options(
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
                    .build(),
            )
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
                        .set_groups(Some(security_groups.clone()))
                        .build(),
                );
            }
            None => data = data.set_security_group_ids(Some(security_groups.clone())),
        }
        for mapping in &spec.block_device_mappings {
            let mut ebs = LaunchTemplateEbsBlockDeviceRequest::builder();
            if let Some(e) = &mapping.ebs {
                let gib = e
                    .volume_size
                    .as_deref()
                    .and_then(|s| {
                        crate::resources::parse(crate::resources::EPHEMERAL_STORAGE, s).ok()
                    })
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
            data = data.block_device_mappings(
                LaunchTemplateBlockDeviceMappingRequest::builder()
                    .set_device_name(mapping.device_name.clone())
                    .ebs(ebs.build())
                    .build(),
            );
        }
        // Upstream's launch-template tags (the node class's own, then `GetTags`' static ones):
        // the controller policy lets CreateLaunchTemplate only with the cluster, EKS cluster
        // name and nodepool tags, and CreateFleet use only templates that carry them.
        let mut template_tags: BTreeMap<String, String> = spec.tags.clone();
        template_tags.insert(cluster_tag(cluster), "owned".to_owned());
        template_tags.insert(EKS_CLUSTER_NAME_TAG.to_owned(), cluster.clone());
        template_tags.insert(labels::NODE_POOL.to_owned(), pool.clone());
        template_tags.insert(labels::AWS_EC2_NODE_CLASS.to_owned(), resolved.name.clone());
        template_tags.insert(LAUNCH_TEMPLATE_CLUSTER_TAG.to_owned(), cluster.clone());
        let tags = template_tags
            .iter()
            .fold(
                TagSpecification::builder().resource_type(ResourceType::LaunchTemplate),
                |b, (k, v)| b.tags(tag(k, v)),
            )
            .build();
        match provider
            .clients
            .ec2
            .create_launch_template()
            .launch_template_name(&name)
            .launch_template_data(data.build())
            .tag_specifications(tags)
            .send()
            .await
        {
            Ok(_) => {
                tracing::info!(launch_template = %name, ami = ami_id, node_class = %resolved.name, "created launch template")
            }
            Err(e) if sdk_error_code(&e).is_some_and(|c| c.contains("AlreadyExists")) => {}
            Err(e) => return Err(cloud_error("creating the launch template", e)),
        }
    }
    provider
        .launch_templates
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(name.clone());
    Ok(name)
}

/// Launches one instance for `claim`.
pub(super) async fn launch(
    provider: &AwsProvider,
    claim: &NodeClaim,
    candidates: &[InstanceType],
    resolved: &ResolvedNodeClass,
    snapshot: &CatalogueSnapshot,
    bootstrap: &ClusterBootstrap,
) -> Result<Instance, CloudError> {
    let claim_name = claim.name_any();
    let requirements = Requirements::from_api(&claim.spec.requirements)
        .map_err(|e| CloudError::api("reading the NodeClaim's requirements", e))?;
    let unavailable = provider.unavailable.clone();
    let planned = plan_overrides(
        &requirements,
        candidates,
        &snapshot.types,
        resolved,
        |ct, it, zone| unavailable.is_unavailable(ct, it, zone),
    );
    let Some((capacity_type, overrides)) = planned else {
        return Err(CloudError::InsufficientCapacity {
            offerings: candidates.iter().map(|it| it.name.clone()).collect(),
        });
    };

    let mut configs = Vec::new();
    let mut amis: Vec<&str> = overrides.iter().map(|o| o.ami_id.as_str()).collect();
    amis.sort_unstable();
    amis.dedup();
    for ami in amis {
        let template = ensure_launch_template(provider, resolved, claim, ami, bootstrap).await?;
        let mut config = FleetLaunchTemplateConfigRequest::builder().launch_template_specification(
            FleetLaunchTemplateSpecificationRequest::builder()
                .launch_template_name(template)
                .version("$Latest")
                .build(),
        );
        for o in overrides.iter().filter(|o| o.ami_id == ami) {
            config = config.overrides(
                FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(aws_sdk_ec2::types::InstanceType::from(
                        o.instance_type.as_str(),
                    ))
                    .subnet_id(&o.subnet_id)
                    .availability_zone(&o.zone)
                    .build(),
            );
        }
        configs.push(config.build());
    }

    let cluster = &provider.config.cluster_name;
    let pool = claim
        .labels()
        .get(labels::NODE_POOL)
        .cloned()
        .unwrap_or_default();
    let mut tags: BTreeMap<String, String> = resolved.spec.tags.clone();
    tags.insert(cluster_tag(cluster), "owned".to_owned());
    tags.insert(EKS_CLUSTER_NAME_TAG.to_owned(), cluster.clone());
    tags.insert(labels::NODE_POOL.to_owned(), pool.clone());
    tags.insert(NODE_CLAIM_TAG.to_owned(), claim_name.clone());
    tags.insert(labels::AWS_EC2_NODE_CLASS.to_owned(), resolved.name.clone());
    tags.entry("Name".to_owned())
        .or_insert_with(|| format!("{pool}/{claim_name}"));
    let tag_spec = |resource: ResourceType| {
        tags.iter()
            .fold(
                TagSpecification::builder().resource_type(resource),
                |b, (k, v)| b.tags(tag(k, v)),
            )
            .build()
    };
    let default_type = if capacity_type == labels::CAPACITY_TYPE_SPOT {
        DefaultTargetCapacityType::Spot
    } else {
        DefaultTargetCapacityType::OnDemand
    };
    let request = provider
        .clients
        .ec2
        .create_fleet()
        .r#type(FleetType::Instant)
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(default_type)
                .build(),
        )
        .spot_options(
            SpotOptionsRequest::builder()
                .allocation_strategy(SpotAllocationStrategy::PriceCapacityOptimized)
                .build(),
        )
        .on_demand_options(
            OnDemandOptionsRequest::builder()
                .allocation_strategy(FleetOnDemandAllocationStrategy::LowestPrice)
                .build(),
        )
        .set_launch_template_configs(Some(configs))
        // Upstream tags the instance, its volumes and the fleet itself; the controller policy
        // lets CreateFleet create only tagged fleets.
        .tag_specifications(tag_spec(ResourceType::Instance))
        .tag_specifications(tag_spec(ResourceType::Volume))
        .tag_specifications(tag_spec(ResourceType::Fleet))
        .set_context(resolved.spec.context.clone())
        // The claim's UID makes a retried launch (after a timeout, or a restart before the
        // launch was recorded) return the instance already launched instead of a second one.
        .set_client_token(claim.uid());
    tracing::debug!(nodeclaim = %claim_name, capacity_type, overrides = overrides.len(), first = %overrides[0].instance_type, "CreateFleet");
    let out = match request.send().await {
        Ok(out) => out,
        // The same token with other overrides (the unavailable-offerings cache changed since
        // the first attempt): that attempt launched; adopt what it launched.
        Err(e)
            if aws_sdk_ec2::error::ProvideErrorMetadata::code(&e)
                == Some("IdempotentParameterMismatch") =>
        {
            return match provider.launched_for(&claim_name).await? {
                Some(mut instance) => {
                    tracing::info!(nodeclaim = %claim_name, provider_id = %instance.provider_id, "adopting the instance an earlier attempt launched");
                    instance.annotations = super::drift::claim_annotations(&resolved.spec);
                    Ok(instance)
                }
                None => Err(cloud_error("launching with CreateFleet", e)),
            };
        }
        Err(e) => return Err(cloud_error("launching with CreateFleet", e)),
    };

    let zone_of_subnet = |subnet: &str| {
        resolved
            .subnets
            .iter()
            .find(|s| s.id == subnet)
            .map(|s| s.zone.clone())
    };
    let mut capacity_failures = Vec::new();
    let mut other_errors = Vec::new();
    for error in out.errors() {
        let code = error.error_code().unwrap_or_default();
        let o = error
            .launch_template_and_overrides()
            .and_then(|l| l.overrides());
        let instance_type = o
            .and_then(|o| o.instance_type())
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default();
        let zone = o
            .and_then(|o| {
                o.availability_zone()
                    .map(str::to_owned)
                    .or_else(|| o.subnet_id().and_then(zone_of_subnet))
            })
            .unwrap_or_default();
        let lifecycle = match error.lifecycle().map(|l| l.as_str()) {
            Some("spot") => labels::CAPACITY_TYPE_SPOT,
            Some("on-demand") => labels::CAPACITY_TYPE_ON_DEMAND,
            _ => capacity_type,
        };
        if CAPACITY_ERROR_CODES.contains(&code) {
            provider.unavailable.mark(lifecycle, &instance_type, &zone);
            capacity_failures.push(crate::cloud::unavailable::key(
                lifecycle,
                &instance_type,
                &zone,
            ));
        } else {
            other_errors.push(format!(
                "{code}: {}",
                error.error_message().unwrap_or_default()
            ));
        }
    }
    if !capacity_failures.is_empty() {
        tracing::warn!(nodeclaim = %claim_name, offerings = %capacity_failures.join(", "), "EC2 had no capacity; cached as unavailable");
    }
    let launched = out
        .instances()
        .iter()
        .find_map(|i| i.instance_ids().first().map(|id| (i, id.clone())));
    let Some((fleet_instance, instance_id)) = launched else {
        if other_errors.is_empty() {
            return Err(CloudError::InsufficientCapacity {
                offerings: capacity_failures,
            });
        }
        return Err(CloudError::api(
            "launching with CreateFleet",
            LaunchError(other_errors.join("; ")),
        ));
    };
    let lto = fleet_instance
        .launch_template_and_overrides()
        .and_then(|l| l.overrides());
    let instance_type = fleet_instance
        .instance_type()
        .map(|t| t.as_str().to_owned())
        .or_else(|| {
            lto.and_then(|o| o.instance_type())
                .map(|t| t.as_str().to_owned())
        })
        .unwrap_or_default();
    let zone = lto
        .and_then(|o| {
            o.availability_zone()
                .map(str::to_owned)
                .or_else(|| o.subnet_id().and_then(zone_of_subnet))
        })
        .or_else(|| {
            overrides
                .iter()
                .find(|o| o.instance_type == instance_type)
                .map(|o| o.zone.clone())
        })
        .unwrap_or_default();
    let launched_as = match fleet_instance.lifecycle().map(|l| l.as_str()) {
        Some("spot") => labels::CAPACITY_TYPE_SPOT,
        Some(_) => labels::CAPACITY_TYPE_ON_DEMAND,
        None => capacity_type,
    };
    let chosen = overrides
        .iter()
        .find(|o| o.instance_type == instance_type && o.zone == zone);
    let it = candidates.iter().find(|c| c.name == instance_type);
    let mut node_labels = it.map(InstanceType::fixed_labels).unwrap_or_default();
    node_labels.insert(labels::INSTANCE_TYPE.to_owned(), instance_type.clone());
    node_labels.insert(labels::ZONE.to_owned(), zone.clone());
    node_labels.insert(labels::CAPACITY_TYPE.to_owned(), launched_as.to_owned());
    tracing::info!(nodeclaim = %claim_name, instance_id = %instance_id, instance_type = %instance_type, zone = %zone, capacity_type = launched_as, "launched instance");
    Ok(Instance {
        provider_id: ProviderId::Aws {
            zone: zone.clone(),
            instance_id,
        },
        node_claim: Some(claim_name),
        node_pool: Some(pool),
        instance_type,
        zone,
        capacity_type: launched_as.to_owned(),
        image_id: chosen.map(|o| o.ami_id.clone()),
        capacity: it.map(|it| it.capacity.clone()).unwrap_or_default(),
        allocatable: it.map(InstanceType::allocatable).unwrap_or_default(),
        labels: node_labels,
        annotations: super::drift::claim_annotations(&resolved.spec),
        price: chosen.and_then(|o| crate::scheduling::known_price(o.price)),
        created: Some(k8s_openapi::jiff::Timestamp::now()),
        terminating: false,
    })
}

/// CreateFleet launched nothing, for reasons other than capacity.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LaunchError(String);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::aws::nodeclass::{AmiFamily, Subnet};
    use crate::resources::ResourceList;
    use crate::scheduling::Offering;
    use crate::scheduling::Requirement;

    fn info(name: &str, gpus: bool) -> TypeInfo {
        TypeInfo {
            name: name.into(),
            vcpus: 2,
            memory_mib: 8192,
            arch: "amd64".into(),
            max_enis: 3,
            ipv4_per_eni: 10,
            gpus: gpus.then(|| super::super::catalogue::Gpu {
                name: "t4".into(),
                manufacturer: "nvidia".into(),
                count: 1,
                memory_mib: 16384,
            }),
            neuron_devices: 0,
            hypervisor: Some("nitro".into()),
            cpu_manufacturer: None,
            local_nvme_gb: None,
            spot: true,
            bare_metal: false,
        }
    }

    fn candidate(name: &str, od: f64, spot: f64, zones: &[&str]) -> InstanceType {
        let mut it = InstanceType::new(name, ResourceList::new());
        for z in zones {
            it.offerings
                .push(Offering::new(z, labels::CAPACITY_TYPE_ON_DEMAND, od));
            it.offerings
                .push(Offering::new(z, labels::CAPACITY_TYPE_SPOT, spot));
        }
        it
    }

    fn resolved() -> ResolvedNodeClass {
        let subnet = |id: &str, zone: &str| Subnet {
            id: id.into(),
            zone: zone.into(),
            zone_id: None,
            available_ips: 100,
        };
        ResolvedNodeClass {
            name: "default".into(),
            spec: serde_json::from_value(serde_json::json!({
                "subnetSelectorTerms": [{"id": "subnet-a"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r"
            }))
            .unwrap(),
            subnets: vec![subnet("subnet-a", "us-west-2a"), subnet("subnet-b", "us-west-2b")],
            security_groups: Vec::new(),
            amis: vec![Ami { id: "ami-x".into(), name: None, arch: "amd64".into(), accelerated: None, created: None }],
            instance_profile: "p".into(),
            family: AmiFamily::AL2023,
        }
    }

    #[test]
    fn spot_is_chosen_when_allowed_and_overrides_go_cheapest_first_per_subnet() {
        let types: BTreeMap<_, _> = [("m5.large", false), ("m5.xlarge", false)]
            .iter()
            .map(|(n, g)| (n.to_string(), info(n, *g)))
            .collect();
        let candidates = [
            candidate(
                "m5.large",
                0.096,
                0.04,
                &["us-west-2a", "us-west-2b", "us-west-2c"],
            ),
            candidate("m5.xlarge", 0.192, 0.03, &["us-west-2a"]),
        ];
        let (ct, overrides) = plan_overrides(
            &Requirements::new(),
            &candidates,
            &types,
            &resolved(),
            |_, _, _| false,
        )
        .unwrap();
        assert_eq!(ct, "spot");
        let names: Vec<_> = overrides
            .iter()
            .map(|o| (o.instance_type.as_str(), o.subnet_id.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("m5.xlarge", "subnet-a"),
                ("m5.large", "subnet-a"),
                ("m5.large", "subnet-b")
            ]
        );
    }

    #[test]
    fn on_demand_when_spot_is_not_allowed_and_unavailable_offerings_are_skipped() {
        let types: BTreeMap<_, _> = [("m5.large", false), ("m5.xlarge", false)]
            .iter()
            .map(|(n, g)| (n.to_string(), info(n, *g)))
            .collect();
        let candidates = [
            candidate("m5.large", 0.096, 0.04, &["us-west-2a"]),
            candidate("m5.xlarge", 0.192, 0.03, &["us-west-2a"]),
        ];
        let on_demand: Requirements = [Requirement::in_values(
            labels::CAPACITY_TYPE,
            [labels::CAPACITY_TYPE_ON_DEMAND],
        )]
        .into_iter()
        .collect();
        let (ct, overrides) =
            plan_overrides(&on_demand, &candidates, &types, &resolved(), |_, it, _| {
                it == "m5.large"
            })
            .unwrap();
        assert_eq!(ct, "on-demand");
        assert_eq!(
            overrides
                .iter()
                .map(|o| o.instance_type.as_str())
                .collect::<Vec<_>>(),
            ["m5.xlarge"]
        );
    }

    #[test]
    fn exotic_types_are_dropped_while_ordinary_ones_remain_and_spot_dearer_than_on_demand_is_skipped()
     {
        let types: BTreeMap<_, _> = [("m5.large", false), ("g4dn.xlarge", true)]
            .iter()
            .map(|(n, g)| (n.to_string(), info(n, *g)))
            .collect();
        let candidates = [
            candidate("g4dn.xlarge", 0.5, 0.01, &["us-west-2a"]),
            candidate("m5.large", 0.096, 0.2, &["us-west-2a"]),
        ];
        let (ct, overrides) = plan_overrides(
            &Requirements::new(),
            &candidates,
            &types,
            &resolved(),
            |_, _, _| false,
        )
        .unwrap();
        // m5.large's spot (0.2) costs more than its on-demand (0.096), and g4dn is exotic.
        assert_eq!(ct, "on-demand");
        assert_eq!(
            overrides
                .iter()
                .map(|o| o.instance_type.as_str())
                .collect::<Vec<_>>(),
            ["m5.large"]
        );
    }

    #[test]
    fn at_most_sixty_overrides_are_sent() {
        let names: Vec<String> = (1..=40).map(|i| format!("m5.{i}xlarge")).collect();
        let types: BTreeMap<_, _> = names.iter().map(|n| (n.clone(), info(n, false))).collect();
        let candidates: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                candidate(
                    n,
                    0.1 * (i + 1) as f64,
                    0.001 * (i + 1) as f64,
                    &["us-west-2a", "us-west-2b"],
                )
            })
            .collect();
        let (_, overrides) = plan_overrides(
            &Requirements::new(),
            &candidates,
            &types,
            &resolved(),
            |_, _, _| false,
        )
        .unwrap();
        assert_eq!(overrides.len(), MAX_OVERRIDES);
    }
}
