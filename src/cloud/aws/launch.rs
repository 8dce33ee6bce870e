//! One launch: pick the capacity type and at most 60 overrides ([`super::overrides`]), make sure
//! each AMI's launch template exists ([`super::launch_template`]), and call CreateFleet
//! `instant` for one instance: spot `price-capacity-optimized`, on-demand `lowest-price`, as
//! upstream's `pkg/providers/instance` does. Offerings CreateFleet reports no capacity for go
//! into the unavailable-offerings cache.

use super::launch_template::ensure_launch_template;
use super::nodeclass::ResolvedNodeClass;
use super::overrides::{Override, plan_overrides};
use super::tags::{EKS_CLUSTER_NAME_TAG, NODE_CLAIM_TAG, cluster_tag, tag_specification};
use super::userdata::ClusterBootstrap;
use super::{AwsProvider, CatalogueSnapshot, cloud_error};
use crate::apis::CapacityType;
use crate::apis::{NodeClaim, labels};
use crate::cloud::provider::{CloudError, Instance, ProviderId};
use crate::scheduling::InstanceType;
use crate::scheduling::Requirements;
use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder;
use aws_sdk_ec2::types::{
    CreateFleetInstance, DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, OnDemandOptionsRequest, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, TargetCapacitySpecificationRequest,
};
use kube::ResourceExt;
use std::collections::BTreeMap;

/// Error codes that mean "no capacity for this offering right now": cache and try others.
pub(crate) const CAPACITY_ERROR_CODES: [&str; 6] = [
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
];

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
    let configs = launch_template_configs(provider, resolved, claim, &overrides, bootstrap).await?;
    let pool = claim
        .labels()
        .get(labels::NODE_POOL)
        .cloned()
        .unwrap_or_default();
    let tags = instance_tags(&provider.config.cluster_name, resolved, &claim_name, &pool);
    let uid = claim.uid().unwrap_or_default();
    let token = provider.client_tokens.token(&uid);
    let request = fleet_request(provider, resolved, capacity_type, configs, &tags, token);
    tracing::debug!(nodeclaim = %claim_name, %capacity_type, overrides = overrides.len(), first = %overrides[0].instance_type, "CreateFleet");
    let out = match request.send().await {
        Ok(out) => out,
        // The same token with other overrides (the unavailable-offerings cache changed since
        // the first attempt): that attempt launched; adopt what it launched.
        Err(e)
            if aws_sdk_ec2::error::ProvideErrorMetadata::code(&e)
                == Some("IdempotentParameterMismatch") =>
        {
            return adopt_earlier_launch(provider, &claim_name, resolved)
                .await?
                .ok_or_else(|| cloud_error("launching with CreateFleet", e));
        }
        Err(e) => return Err(cloud_error("launching with CreateFleet", e)),
    };
    let errors = record_fleet_errors(provider, &out, capacity_type, resolved, &claim_name);
    let (fleet_instance, instance_id) = match launched_one(&out, errors) {
        Ok(launched) => {
            provider.client_tokens.launched(&uid);
            launched
        }
        Err(e) => {
            provider.client_tokens.launched_nothing(&uid);
            return Err(e);
        }
    };
    let launched = placement(
        fleet_instance,
        instance_id,
        &overrides,
        resolved,
        capacity_type,
    );
    Ok(instance(
        launched, claim_name, pool, &overrides, candidates, resolved,
    ))
}

/// One launch template configuration per AMI the overrides use, with that AMI's overrides.
async fn launch_template_configs(
    provider: &AwsProvider,
    resolved: &ResolvedNodeClass,
    claim: &NodeClaim,
    overrides: &[Override],
    bootstrap: &ClusterBootstrap,
) -> Result<Vec<FleetLaunchTemplateConfigRequest>, CloudError> {
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
    Ok(configs)
}

/// The node class's tags, then the cluster's, the pool's, the claim's and the class's own.
fn instance_tags(
    cluster: &str,
    resolved: &ResolvedNodeClass,
    claim_name: &str,
    pool: &str,
) -> BTreeMap<String, String> {
    let mut tags: BTreeMap<String, String> = resolved.spec.tags.clone();
    tags.insert(cluster_tag(cluster), "owned".to_owned());
    tags.insert(EKS_CLUSTER_NAME_TAG.to_owned(), cluster.to_owned());
    tags.insert(labels::NODE_POOL.to_owned(), pool.to_owned());
    tags.insert(NODE_CLAIM_TAG.to_owned(), claim_name.to_owned());
    tags.insert(labels::AWS_EC2_NODE_CLASS.to_owned(), resolved.name.clone());
    tags.entry("Name".to_owned())
        .or_insert_with(|| format!("{pool}/{claim_name}"));
    tags
}

/// An `instant` CreateFleet for one instance of `capacity_type`.
fn fleet_request(
    provider: &AwsProvider,
    resolved: &ResolvedNodeClass,
    capacity_type: CapacityType,
    configs: Vec<FleetLaunchTemplateConfigRequest>,
    tags: &BTreeMap<String, String>,
    client_token: String,
) -> CreateFleetFluentBuilder {
    let default_type = if capacity_type == CapacityType::Spot {
        DefaultTargetCapacityType::Spot
    } else {
        DefaultTargetCapacityType::OnDemand
    };
    provider
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
        .tag_specifications(tag_specification(ResourceType::Instance, tags))
        .tag_specifications(tag_specification(ResourceType::Volume, tags))
        .tag_specifications(tag_specification(ResourceType::Fleet, tags))
        .set_context(resolved.spec.context.clone())
        // See `client_token`: a retried launch returns the instance already launched.
        .set_client_token(Some(client_token).filter(|t| !t.is_empty()))
}

/// The instance an earlier attempt with the same client token launched, if it is running.
async fn adopt_earlier_launch(
    provider: &AwsProvider,
    claim_name: &str,
    resolved: &ResolvedNodeClass,
) -> Result<Option<Instance>, CloudError> {
    let Some(mut instance) = provider.launched_for(claim_name).await? else {
        return Ok(None);
    };
    tracing::info!(nodeclaim = %claim_name, provider_id = %instance.provider_id, "adopting the instance an earlier attempt launched");
    instance.annotations = super::drift::claim_annotations(&resolved.spec);
    Ok(Some(instance))
}

/// What CreateFleet reported failing: offerings without capacity (as unavailable-offerings
/// keys) and every other error.
struct FleetErrors {
    capacity_failures: Vec<String>,
    other_errors: Vec<String>,
}

/// Reads CreateFleet's errors and marks the offerings it had no capacity for unavailable.
fn record_fleet_errors(
    provider: &AwsProvider,
    out: &CreateFleetOutput,
    capacity_type: CapacityType,
    resolved: &ResolvedNodeClass,
    claim_name: &str,
) -> FleetErrors {
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
                    .or_else(|| o.subnet_id().and_then(|s| zone_of_subnet(resolved, s)))
            })
            .unwrap_or_default();
        let lifecycle = match error.lifecycle().map(|l| l.as_str()) {
            Some("spot") => CapacityType::Spot,
            Some("on-demand") => CapacityType::OnDemand,
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
    FleetErrors {
        capacity_failures,
        other_errors,
    }
}

/// The instance CreateFleet launched and its id; when it launched none, insufficient capacity
/// if capacity was all that failed, else the other errors.
fn launched_one(
    out: &CreateFleetOutput,
    errors: FleetErrors,
) -> Result<(&CreateFleetInstance, String), CloudError> {
    let launched = out
        .instances()
        .iter()
        .find_map(|i| i.instance_ids().first().map(|id| (i, id.clone())));
    let Some(launched) = launched else {
        if errors.other_errors.is_empty() {
            return Err(CloudError::InsufficientCapacity {
                offerings: errors.capacity_failures,
            });
        }
        return Err(CloudError::api(
            "launching with CreateFleet",
            LaunchError(errors.other_errors.join("; ")),
        ));
    };
    Ok(launched)
}

fn zone_of_subnet(resolved: &ResolvedNodeClass, subnet: &str) -> Option<String> {
    resolved
        .subnets
        .iter()
        .find(|s| s.id == subnet)
        .map(|s| s.zone.clone())
}

/// Where and as what the fleet launched its instance.
struct Launched {
    instance_id: String,
    instance_type: String,
    zone: String,
    capacity_type: CapacityType,
}

/// The launched instance's type, zone and capacity type, from the fleet's answer, else from
/// the overrides asked for.
fn placement(
    fleet_instance: &CreateFleetInstance,
    instance_id: String,
    overrides: &[Override],
    resolved: &ResolvedNodeClass,
    capacity_type: CapacityType,
) -> Launched {
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
                .or_else(|| o.subnet_id().and_then(|s| zone_of_subnet(resolved, s)))
        })
        .or_else(|| {
            overrides
                .iter()
                .find(|o| o.instance_type == instance_type)
                .map(|o| o.zone.clone())
        })
        .unwrap_or_default();
    let launched_as = match fleet_instance.lifecycle().map(|l| l.as_str()) {
        Some("spot") => CapacityType::Spot,
        Some(_) => CapacityType::OnDemand,
        None => capacity_type,
    };
    Launched {
        instance_id,
        instance_type,
        zone,
        capacity_type: launched_as,
    }
}

/// The launched instance as the controllers see it, with the candidate's capacity and the
/// override's AMI and price.
fn instance(
    launched: Launched,
    claim_name: String,
    pool: String,
    overrides: &[Override],
    candidates: &[InstanceType],
    resolved: &ResolvedNodeClass,
) -> Instance {
    let Launched {
        instance_id,
        instance_type,
        zone,
        capacity_type: launched_as,
    } = launched;
    let chosen = overrides
        .iter()
        .find(|o| o.instance_type == instance_type && o.zone == zone);
    let it = candidates.iter().find(|c| c.name == instance_type);
    let mut node_labels = it.map(InstanceType::fixed_labels).unwrap_or_default();
    node_labels.insert(labels::INSTANCE_TYPE.to_owned(), instance_type.clone());
    node_labels.insert(labels::ZONE.to_owned(), zone.clone());
    node_labels.insert(labels::CAPACITY_TYPE.to_owned(), launched_as.to_string());
    tracing::info!(nodeclaim = %claim_name, instance_id = %instance_id, instance_type = %instance_type, zone = %zone, capacity_type = %launched_as, "launched instance");
    Instance {
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
    }
}

/// CreateFleet launched nothing, for reasons other than capacity.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct LaunchError(String);
