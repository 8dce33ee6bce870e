//! EC2NodeClass resolution: turns the selector terms into the subnets, security groups, AMIs and
//! instance profile a launch uses, and the status that reports them (or why they could not be
//! found), as upstream's `nodeclass` controller does. SDK calls and pure data only: the node class
//! status controller (`controllers::nodeclass_status`) writes the status.

pub use super::userdata::AmiFamily;
use super::{Clients, sdk_error_code};
use crate::apis::ec2nodeclass::{
    AmiSelectorTerm, ResolvedAmi, ResolvedSecurityGroup, ResolvedSubnet,
};
use crate::apis::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus, labels};
use crate::cloud::CloudError;
use aws_sdk_ec2::types::Filter;
use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::BTreeMap;

/// What a node class resolved to.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedNodeClass {
    pub name: String,
    pub spec: EC2NodeClassSpec,
    pub subnets: Vec<Subnet>,
    pub security_groups: Vec<ResolvedSecurityGroup>,
    pub amis: Vec<Ami>,
    pub instance_profile: String,
    pub family: AmiFamily,
}

/// A subnet and its zone.
#[derive(Clone, Debug, PartialEq)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    pub zone_id: Option<String>,
    pub available_ips: i32,
}

/// An image and the nodes it is for.
#[derive(Clone, Debug, PartialEq)]
pub struct Ami {
    pub id: String,
    pub name: Option<String>,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// `Some(true)`: GPU/accelerated types only; `Some(false)`: never them; `None`: any.
    pub accelerated: Option<bool>,
    pub created: Option<String>,
}

impl Ami {
    /// Whether nodes of this architecture, with or without accelerators, can boot it.
    pub fn fits(&self, arch: &str, accelerated: bool) -> bool {
        self.arch == arch && self.accelerated.is_none_or(|a| a == accelerated)
    }
}

/// Why a node class could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The selectors match nothing usable; `condition` is the status condition that says so.
    #[error("{reason}")]
    NotReady {
        condition: &'static str,
        reason: String,
    },
    /// An AWS call failed.
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

impl ResolveError {
    fn not_ready(condition: &'static str, reason: impl Into<String>) -> Self {
        Self::NotReady {
            condition,
            reason: reason.into(),
        }
    }
}

/// Status condition types of an EC2NodeClass.
pub mod conditions {
    pub const READY: &str = "Ready";
    pub(crate) const SUBNETS_READY: &str = "SubnetsReady";
    pub(crate) const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
    pub(crate) const AMIS_READY: &str = "AMIsReady";
    pub(crate) const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
    /// Upstream's condition for a class whose settings cannot be carried out as written.
    pub(crate) const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    pub const ALL: [&str; 5] = [
        SUBNETS_READY,
        SECURITY_GROUPS_READY,
        AMIS_READY,
        INSTANCE_PROFILE_READY,
        VALIDATION_SUCCEEDED,
    ];
}

fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

/// The instance profile Karpenter manages for a node class's `role`: `<cluster>_<hash>`, the
/// hash over the region and the node class's name (stable across restarts, unique per class).
pub fn instance_profile_name(cluster: &str, region: &str, node_class: &str) -> String {
    let hash = fnv1a(format!("{region}/{node_class}").as_bytes());
    format!("{cluster}_{hash}")
}

/// FNV-1a, 64 bits: a stable hash for names (not for security). Names already made with it live
/// in accounts, so its values must never change.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(bytes);
    hasher.finish()
}

/// One SSM parameter of an alias: its name, the architecture of its image, and whether the
/// image is for accelerated types (see [`Ami::accelerated`]).
pub(crate) type AliasParameter = (String, &'static str, Option<bool>);

/// The SSM parameters an alias (`al2023@latest`) stands for, with the nodes each image is for.
pub(crate) fn alias_parameters(
    alias: &str,
    k8s_version: &str,
) -> Result<(AmiFamily, Vec<AliasParameter>), String> {
    let (family, version) = alias
        .split_once('@')
        .ok_or_else(|| format!("alias {alias:?} is not family@version"))?;
    let latest = version == "latest";
    match family {
        "al2023" => {
            let path = |arch: &str, variant: &str| {
                if latest {
                    format!(
                        "/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/{variant}/recommended/image_id"
                    )
                } else {
                    format!(
                        "/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}/{variant}/amazon-eks-node-al2023-{arch}-{variant}-{k8s_version}-{version}/image_id"
                    )
                }
            };
            Ok((
                AmiFamily::AL2023,
                vec![
                    (path("x86_64", "standard"), "amd64", Some(false)),
                    (path("arm64", "standard"), "arm64", Some(false)),
                    (path("x86_64", "nvidia"), "amd64", Some(true)),
                ],
            ))
        }
        "al2" => {
            let tail = if latest {
                "recommended/image_id".to_owned()
            } else {
                format!("amazon-eks-node-{k8s_version}-{version}/image_id")
            };
            let path = |variant: &str| {
                format!("/aws/service/eks/optimized-ami/{k8s_version}/{variant}/{tail}")
            };
            Ok((
                AmiFamily::AL2,
                vec![
                    (path("amazon-linux-2"), "amd64", Some(false)),
                    (path("amazon-linux-2-arm64"), "arm64", Some(false)),
                    (path("amazon-linux-2-gpu"), "amd64", Some(true)),
                ],
            ))
        }
        "bottlerocket" => {
            let version = if latest {
                "latest".to_owned()
            } else {
                version.trim_start_matches('v').to_owned()
            };
            let path = |flavour: &str, arch: &str| {
                format!(
                    "/aws/service/bottlerocket/aws-k8s-{k8s_version}{flavour}/{arch}/{version}/image_id"
                )
            };
            Ok((
                AmiFamily::Bottlerocket,
                vec![
                    (path("", "x86_64"), "amd64", Some(false)),
                    (path("", "arm64"), "arm64", Some(false)),
                    (path("-nvidia", "x86_64"), "amd64", Some(true)),
                ],
            ))
        }
        other => Err(format!(
            "AMI family {other:?} is not supported by this agent (use al2023, al2 or bottlerocket)"
        )),
    }
}

fn arch_label(arch: Option<&aws_sdk_ec2::types::ArchitectureValues>) -> Option<&'static str> {
    match arch.map(|a| a.as_str()) {
        Some("x86_64") => Some("amd64"),
        Some("arm64") => Some("arm64"),
        _ => None,
    }
}

/// Resolves a node class against EC2, SSM and IAM, creating the instance profile for `role`.
pub async fn resolve(
    clients: &Clients,
    class: &EC2NodeClass,
    k8s_version: &str,
) -> Result<ResolvedNodeClass, ResolveError> {
    let name = kube::ResourceExt::name_any(class);
    let spec = &class.spec;
    let subnets = resolve_subnets(clients, spec).await?;
    let security_groups = resolve_security_groups(clients, spec).await?;
    let (family, amis) = resolve_amis(clients, spec, k8s_version).await?;
    // RAID0 is nodeadm's and bootstrap.sh's; Bottlerocket's bootstrap has no such setting.
    if spec.instance_store_policy.is_some() && family == AmiFamily::Bottlerocket {
        return Err(ResolveError::not_ready(
            conditions::VALIDATION_SUCCEEDED,
            "instanceStorePolicy cannot be applied on Bottlerocket: remove it, or boot AL2023 (amiSelectorTerms alias al2023@latest)",
        ));
    }
    // A kubelet field the family's bootstrap cannot apply is refused, not silently dropped.
    if let Some(kubelet) = &spec.kubelet {
        let unsupported = super::userdata::unsupported(family, kubelet);
        if !unsupported.is_empty() {
            return Err(ResolveError::not_ready(
                conditions::VALIDATION_SUCCEEDED,
                format!(
                    "kubelet {} cannot be applied on Bottlerocket (it has no setting for them): remove them, or boot AL2023 (amiSelectorTerms alias al2023@latest), which takes every KubeletConfiguration field",
                    unsupported.join(", ")
                ),
            ));
        }
    }
    let instance_profile = resolve_instance_profile(clients, spec, &name).await?;
    Ok(ResolvedNodeClass {
        name,
        spec: spec.clone(),
        subnets,
        security_groups,
        amis,
        instance_profile,
        family,
    })
}

async fn resolve_subnets(
    clients: &Clients,
    spec: &EC2NodeClassSpec,
) -> Result<Vec<Subnet>, ResolveError> {
    let mut subnets: Vec<Subnet> = Vec::new();
    for term in &spec.subnet_selector_terms {
        let mut request = clients.ec2.describe_subnets();
        if let Some(id) = &term.id {
            request = request.subnet_ids(id);
        }
        for filter in tag_filters(&term.tags) {
            request = request.filters(filter);
        }
        let out = match request.send().await {
            Ok(out) => out,
            Err(e) if sdk_error_code(&e).is_some_and(|c| c.contains("NotFound")) => continue,
            Err(e) => return Err(super::cloud_error("describing subnets", e).into()),
        };
        for s in out.subnets() {
            let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) else {
                continue;
            };
            if !subnets.iter().any(|x| x.id == id) {
                subnets.push(Subnet {
                    id: id.to_owned(),
                    zone: zone.to_owned(),
                    zone_id: s.availability_zone_id().map(str::to_owned),
                    available_ips: s.available_ip_address_count().unwrap_or_default(),
                });
            }
        }
    }
    if subnets.is_empty() {
        return Err(ResolveError::not_ready(
            conditions::SUBNETS_READY,
            "no subnets match subnetSelectorTerms",
        ));
    }
    subnets.sort_by(|a, b| {
        a.zone
            .cmp(&b.zone)
            .then(b.available_ips.cmp(&a.available_ips))
            .then(a.id.cmp(&b.id))
    });
    Ok(subnets)
}

async fn resolve_security_groups(
    clients: &Clients,
    spec: &EC2NodeClassSpec,
) -> Result<Vec<ResolvedSecurityGroup>, ResolveError> {
    let mut groups: Vec<ResolvedSecurityGroup> = Vec::new();
    for term in &spec.security_group_selector_terms {
        let mut request = clients.ec2.describe_security_groups();
        if let Some(id) = &term.id {
            request = request.group_ids(id);
        }
        if let Some(name) = &term.name {
            request = request.filters(Filter::builder().name("group-name").values(name).build());
        }
        for filter in tag_filters(&term.tags) {
            request = request.filters(filter);
        }
        let out = match request.send().await {
            Ok(out) => out,
            Err(e) if sdk_error_code(&e).is_some_and(|c| c.contains("NotFound")) => continue,
            Err(e) => return Err(super::cloud_error("describing security groups", e).into()),
        };
        for g in out.security_groups() {
            let Some(id) = g.group_id() else { continue };
            if !groups.iter().any(|x| x.id == id) {
                groups.push(ResolvedSecurityGroup {
                    id: id.to_owned(),
                    name: g.group_name().map(str::to_owned),
                });
            }
        }
    }
    if groups.is_empty() {
        return Err(ResolveError::not_ready(
            conditions::SECURITY_GROUPS_READY,
            "no security groups match securityGroupSelectorTerms",
        ));
    }
    groups.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(groups)
}

async fn ssm_parameter(clients: &Clients, name: &str) -> Result<Option<String>, ResolveError> {
    match clients.ssm.get_parameter().name(name).send().await {
        Ok(out) => Ok(out.parameter().and_then(|p| p.value()).map(str::to_owned)),
        Err(e) if sdk_error_code(&e) == Some("ParameterNotFound") => Ok(None),
        Err(e) => Err(super::cloud_error("reading SSM parameter", e).into()),
    }
}

async fn describe_images(
    clients: &Clients,
    ids: Vec<String>,
    term: Option<&AmiSelectorTerm>,
) -> Result<Vec<aws_sdk_ec2::types::Image>, ResolveError> {
    let mut request = clients
        .ec2
        .describe_images()
        .set_image_ids((!ids.is_empty()).then_some(ids));
    if let Some(term) = term {
        if let Some(name) = &term.name {
            request = request.filters(Filter::builder().name("name").values(name).build());
        }
        if let Some(owner) = &term.owner {
            request = request.owners(owner);
        }
        for filter in tag_filters(&term.tags) {
            request = request.filters(filter);
        }
    }
    match request.send().await {
        Ok(out) => Ok(out.images().to_vec()),
        Err(e) if sdk_error_code(&e).is_some_and(|c| c.starts_with("InvalidAMIID")) => {
            Ok(Vec::new())
        }
        Err(e) => Err(super::cloud_error("describing images", e).into()),
    }
}

async fn resolve_amis(
    clients: &Clients,
    spec: &EC2NodeClassSpec,
    k8s_version: &str,
) -> Result<(AmiFamily, Vec<Ami>), ResolveError> {
    let mut family = spec.ami_family.as_deref().and_then(AmiFamily::parse);
    let mut amis: Vec<Ami> = Vec::new();
    for term in &spec.ami_selector_terms {
        if let Some(alias) = &term.alias {
            let (alias_family, alias_amis) = alias_amis(clients, alias, k8s_version).await?;
            family = Some(alias_family);
            amis.extend(alias_amis);
            continue;
        }
        amis.extend(selected_amis(clients, term).await?);
    }
    let kept = newest_per_kind(amis);
    if kept.is_empty() {
        return Err(ResolveError::not_ready(
            conditions::AMIS_READY,
            "no AMIs match amiSelectorTerms",
        ));
    }
    let family = family.ok_or_else(|| {
        ResolveError::not_ready(
            conditions::AMIS_READY,
            "amiFamily is not one this agent supports",
        )
    })?;
    Ok((family, kept))
}

/// The images an alias (`al2023@latest`) names, read from the SSM parameters EKS publishes, and
/// the family it implies.
async fn alias_amis(
    clients: &Clients,
    alias: &str,
    k8s_version: &str,
) -> Result<(AmiFamily, Vec<Ami>), ResolveError> {
    let (family, parameters) = alias_parameters(alias, k8s_version)
        .map_err(|reason| ResolveError::not_ready(conditions::AMIS_READY, reason))?;
    let mut amis = Vec::new();
    for (parameter, arch, accelerated) in parameters {
        let Some(id) = ssm_parameter(clients, &parameter).await? else {
            tracing::debug!(parameter, "no such SSM parameter; that variant is skipped");
            continue;
        };
        let image = describe_images(clients, vec![id.clone()], None)
            .await?
            .into_iter()
            .next();
        amis.push(Ami {
            id,
            name: image.as_ref().and_then(|i| i.name()).map(str::to_owned),
            arch: arch.to_owned(),
            accelerated,
            created: image
                .as_ref()
                .and_then(|i| i.creation_date())
                .map(str::to_owned),
        });
    }
    Ok((family, amis))
}

/// The images a term other than an alias selects: by SSM parameter, by id, or by name, owner
/// and tags.
async fn selected_amis(
    clients: &Clients,
    term: &AmiSelectorTerm,
) -> Result<Vec<Ami>, ResolveError> {
    let images = if let Some(parameter) = &term.ssm_parameter {
        match ssm_parameter(clients, parameter).await? {
            Some(id) => describe_images(clients, vec![id], None).await?,
            None => Vec::new(),
        }
    } else {
        let ids = term.id.iter().cloned().collect();
        describe_images(clients, ids, (term.id.is_none()).then_some(term)).await?
    };
    let mut amis = Vec::new();
    for image in images {
        let (Some(id), Some(arch)) = (image.image_id(), arch_label(image.architecture())) else {
            continue;
        };
        amis.push(Ami {
            id: id.to_owned(),
            name: image.name().map(str::to_owned),
            arch: arch.to_owned(),
            accelerated: None,
            created: image.creation_date().map(str::to_owned),
        });
    }
    Ok(amis)
}

/// The newest image per kind of node (architecture, accelerated or not), as upstream picks.
fn newest_per_kind(mut amis: Vec<Ami>) -> Vec<Ami> {
    amis.sort_by(|a, b| b.created.cmp(&a.created).then(a.id.cmp(&b.id)));
    let mut kept: Vec<Ami> = Vec::new();
    for ami in amis {
        if !kept
            .iter()
            .any(|k| k.arch == ami.arch && k.accelerated == ami.accelerated)
        {
            kept.push(ami);
        }
    }
    kept
}

/// The instance profile `name`, or `None` when IAM has none.
pub(super) async fn read_instance_profile(
    iam: &aws_sdk_iam::Client,
    name: &str,
) -> Result<Option<aws_sdk_iam::types::InstanceProfile>, CloudError> {
    match iam
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(out.instance_profile().cloned()),
        Err(e) if sdk_error_code(&e) == Some("NoSuchEntity") => Ok(None),
        Err(e) => Err(super::cloud_error("reading the instance profile", e)),
    }
}

async fn resolve_instance_profile(
    clients: &Clients,
    spec: &EC2NodeClassSpec,
    class_name: &str,
) -> Result<String, ResolveError> {
    if let Some(profile) = &spec.instance_profile {
        return named_instance_profile(clients, profile).await;
    }
    let Some(role) = spec.role.as_deref() else {
        return Err(instance_profile_not_ready(
            "neither role nor instanceProfile is set".to_owned(),
        ));
    };
    // A role may be given as an ARN; IAM wants the name.
    let role = role.rsplit('/').next().unwrap_or(role);
    let name = instance_profile_name(&clients.cluster_name, &clients.region, class_name);
    let existing = read_instance_profile(&clients.iam, &name).await?;
    let roles: Vec<String> = existing
        .as_ref()
        .map(|p| p.roles().iter().map(|r| r.role_name().to_owned()).collect())
        .unwrap_or_default();
    if existing.is_none() {
        create_instance_profile(clients, &name, class_name).await?;
    }
    if !roles.iter().any(|r| r == role) {
        replace_role(clients, &name, &roles, role).await?;
    }
    Ok(name)
}

fn instance_profile_not_ready(reason: String) -> ResolveError {
    ResolveError::not_ready(conditions::INSTANCE_PROFILE_READY, reason)
}

/// The instance profile the node class names (`instanceProfile`), which must exist.
async fn named_instance_profile(clients: &Clients, profile: &str) -> Result<String, ResolveError> {
    match clients
        .iam
        .get_instance_profile()
        .instance_profile_name(profile)
        .send()
        .await
    {
        Ok(_) => Ok(profile.to_owned()),
        Err(e) if sdk_error_code(&e) == Some("NoSuchEntity") => Err(instance_profile_not_ready(
            format!("instance profile {profile} does not exist"),
        )),
        Err(e) => Err(super::cloud_error("reading the instance profile", e).into()),
    }
}

/// Creates the instance profile `name` for the class, tagged as this cluster's.
async fn create_instance_profile(
    clients: &Clients,
    name: &str,
    class_name: &str,
) -> Result<(), ResolveError> {
    let tag = |k: &str, v: &str| {
        aws_sdk_iam::types::Tag::builder()
            .key(k)
            .value(v)
            .build()
            .ok()
    };
    let tags = [
        tag(
            &format!("kubernetes.io/cluster/{}", clients.cluster_name),
            "owned",
        ),
        tag(labels::AWS_EC2_NODE_CLASS, class_name),
        tag("eks:eks-cluster-name", &clients.cluster_name),
        tag("topology.kubernetes.io/region", &clients.region),
    ];
    match clients
        .iam
        .create_instance_profile()
        .instance_profile_name(name)
        .set_tags(Some(tags.into_iter().flatten().collect()))
        .send()
        .await
    {
        Ok(_) => {
            tracing::info!(instance_profile = %name, node_class = class_name, "created instance profile")
        }
        Err(e) if sdk_error_code(&e) == Some("EntityAlreadyExists") => {}
        Err(e) => return Err(super::cloud_error("creating the instance profile", e).into()),
    }
    Ok(())
}

/// Puts `role` in the instance profile `name` in place of the `roles` it has.
async fn replace_role(
    clients: &Clients,
    name: &str,
    roles: &[String],
    role: &str,
) -> Result<(), ResolveError> {
    for old in roles {
        let _ = clients
            .iam
            .remove_role_from_instance_profile()
            .instance_profile_name(name)
            .role_name(old)
            .send()
            .await;
    }
    match clients
        .iam
        .add_role_to_instance_profile()
        .instance_profile_name(name)
        .role_name(role)
        .send()
        .await
    {
        Ok(_) => {}
        Err(e) if sdk_error_code(&e) == Some("NoSuchEntity") => {
            return Err(instance_profile_not_ready(format!(
                "role {role} does not exist"
            )));
        }
        Err(e) if sdk_error_code(&e) == Some("LimitExceeded") => {}
        Err(e) => {
            return Err(super::cloud_error("adding the role to the instance profile", e).into());
        }
    }
    Ok(())
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    previous: &[Condition],
) -> Condition {
    let status = if ok { "True" } else { "False" }.to_owned();
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time,
        observed_generation: generation,
    }
}

/// The status a resolution (or its failure) amounts to; `previous` keeps transition times.
pub fn status(
    result: &Result<ResolvedNodeClass, String>,
    failed_condition: Option<&str>,
    generation: Option<i64>,
    previous: &EC2NodeClassStatus,
) -> EC2NodeClassStatus {
    match result {
        Ok(resolved) => ready_status(resolved, generation, previous),
        Err(reason) => failed_status(reason, failed_condition, generation, previous),
    }
}

/// A resolved class's status: what it resolved to, every condition True.
fn ready_status(
    resolved: &ResolvedNodeClass,
    generation: Option<i64>,
    previous: &EC2NodeClassStatus,
) -> EC2NodeClassStatus {
    let prev = &previous.conditions;
    let mut conditions: Vec<Condition> = conditions::ALL
        .iter()
        .map(|t| condition(t, true, t, "", generation, prev))
        .collect();
    conditions.push(condition(
        conditions::READY,
        true,
        "Ready",
        "",
        generation,
        prev,
    ));
    EC2NodeClassStatus {
        subnets: resolved
            .subnets
            .iter()
            .map(|s| ResolvedSubnet {
                id: s.id.clone(),
                zone: s.zone.clone(),
                zone_id: s.zone_id.clone(),
            })
            .collect(),
        security_groups: resolved.security_groups.clone(),
        capacity_reservations: Vec::new(),
        amis: resolved.amis.iter().map(resolved_ami).collect(),
        instance_profile: Some(resolved.instance_profile.clone()),
        conditions,
    }
}

/// An image as the status lists it, with the nodes it is for as requirements.
fn resolved_ami(a: &Ami) -> ResolvedAmi {
    let mut requirements = vec![NodeSelectorRequirement {
        key: labels::ARCH.to_owned(),
        operator: "In".to_owned(),
        values: Some(vec![a.arch.clone()]),
    }];
    if let Some(accelerated) = a.accelerated {
        requirements.push(NodeSelectorRequirement {
            key: labels::AWS_INSTANCE_GPU_COUNT.to_owned(),
            operator: if accelerated {
                "Exists"
            } else {
                "DoesNotExist"
            }
            .to_owned(),
            values: None,
        });
    }
    ResolvedAmi {
        id: a.id.clone(),
        name: a.name.clone(),
        deprecated: None,
        requirements,
    }
}

/// A failed resolution's status: the failed condition (if not Ready itself) and Ready False,
/// the rest as it was.
fn failed_status(
    reason: &str,
    failed_condition: Option<&str>,
    generation: Option<i64>,
    previous: &EC2NodeClassStatus,
) -> EC2NodeClassStatus {
    let prev = &previous.conditions;
    let failed = failed_condition.unwrap_or(conditions::READY);
    let mut conditions: Vec<Condition> = previous
        .conditions
        .iter()
        .filter(|c| c.type_ != failed && c.type_ != conditions::READY)
        .cloned()
        .collect();
    if failed != conditions::READY {
        conditions.push(condition(
            failed, false, "NotFound", reason, generation, prev,
        ));
    }
    conditions.push(condition(
        conditions::READY,
        false,
        "NotReady",
        reason,
        generation,
        prev,
    ));
    EC2NodeClassStatus {
        conditions,
        ..previous.clone()
    }
}

/// What resolving an EC2NodeClass came to (see the shared
/// [`NodeClassResolution`](crate::cloud::node_class_resolution::NodeClassResolution)).
pub(crate) type NodeClassResolution =
    crate::cloud::node_class_resolution::NodeClassResolution<ResolvedNodeClass, EC2NodeClassStatus>;

/// Whether two statuses say the same (transition times and condition order aside).
pub(super) fn same_status(a: &EC2NodeClassStatus, b: &EC2NodeClassStatus) -> bool {
    let strip = |s: &EC2NodeClassStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_transition_time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        }
        s.conditions.sort_by(|x, y| x.type_.cmp(&y.type_));
        s
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_name_the_eks_ssm_parameters_for_each_kind_of_node() {
        let (family, params) = alias_parameters("al2023@latest", "1.34").unwrap();
        assert_eq!(family, AmiFamily::AL2023);
        assert_eq!(
            params[0].0,
            "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
        assert_eq!(params[1].1, "arm64");
        let (_, pinned) = alias_parameters("al2023@v20240807", "1.30").unwrap();
        assert!(
            pinned[0]
                .0
                .ends_with("amazon-eks-node-al2023-x86_64-standard-1.30-v20240807/image_id"),
            "{}",
            pinned[0].0
        );
        let (family, params) = alias_parameters("bottlerocket@latest", "1.34").unwrap();
        assert_eq!(family, AmiFamily::Bottlerocket);
        assert_eq!(
            params[0].0,
            "/aws/service/bottlerocket/aws-k8s-1.34/x86_64/latest/image_id"
        );
        assert!(
            alias_parameters("windows2022@latest", "1.34")
                .unwrap_err()
                .contains("not supported")
        );
    }

    #[test]
    fn instance_profile_names_are_stable_and_per_node_class() {
        let a = instance_profile_name("demo", "us-west-2", "default");
        assert_eq!(a, instance_profile_name("demo", "us-west-2", "default"));
        assert_ne!(a, instance_profile_name("demo", "us-west-2", "gpu"));
        assert!(a.starts_with("demo_"));
    }

    #[test]
    fn name_hashes_keep_the_values_existing_names_were_made_with() {
        // Computed with the hand-written FNV-1a (before the fnv crate): launch templates,
        // instance profiles and EventBridge rules already in accounts are named with them.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"demo"), 0xa5e4_1b67_4276_d396);
        assert_eq!(fnv1a(b"us-west-2/default"), 0x0420_5b15_41ff_69d6);
        assert_eq!(
            instance_profile_name("demo", "us-west-2", "default"),
            "demo_297337722266151382"
        );
    }

    #[test]
    fn an_ami_fits_by_architecture_and_accelerators() {
        let standard = Ami {
            id: "ami-1".into(),
            name: None,
            arch: "amd64".into(),
            accelerated: Some(false),
            created: None,
        };
        assert!(standard.fits("amd64", false));
        assert!(!standard.fits("amd64", true));
        assert!(!standard.fits("arm64", false));
        let any = Ami {
            accelerated: None,
            ..standard
        };
        assert!(any.fits("amd64", true));
    }
}
