//! `init gcp`: what the agent needs in a Google Cloud project, as steps, plus the Kubernetes
//! objects of the agent. Same shape as [`super::aws`]: every step checks before it changes.
//!
//! | step | Google Cloud resource |
//! |---|---|
//! | `project` | reads the project (Resource Manager `projects.get`) |
//! | `apis` | `compute.googleapis.com` and `container.googleapis.com` enabled (Service Usage) |
//! | `gke-cluster` | reads the cluster (GKE `clusters.get`): Workload Identity pool, network, subnetwork; fails, saying how to turn it on, when Workload Identity auth meets a cluster without a pool |
//! | `service-account` | `karpenter-<cluster>@<project>.iam.gserviceaccount.com`, the agent's identity |
//! | `custom-role` | project role `kubectlKarpenterAgent` with [`AGENT_PERMISSIONS`] and nothing else |
//! | `project-binding` | the service account holds that role on the project |
//! | `node-service-account` | `karpenter-nodes-<cluster>@…`, what the nodes run as |
//! | `node-roles` | the nodes' account holds [`NODE_ROLES`] on the project (GKE's least-privilege node roles) |
//! | `node-act-as` | the agent holds `roles/iam.serviceAccountUser` on the nodes' account only (actAs on that one account) |
//! | `workload-identity` (default) | `roles/iam.workloadIdentityUser` on the service account for `serviceAccount:<project>.svc.id.goog[<ns>/<ksa>]` |
//! | `kubernetes-agent` (with a kube client) | CRDs, namespace, service account, RBAC, Deployment |
//! | `service-account-key` (`--auth key`) | a key, kept only in a Kubernetes Secret |
//!
//! Why a custom role: the predefined roles that cover launching instances
//! (`roles/compute.instanceAdmin.v1` + `roles/iam.serviceAccountUser`) also allow changing every
//! instance, disk, snapshot and instance group in the project. The custom role has only what the
//! agent calls. IAM policy writes are read-modify-write with the policy's etag, retried when
//! another writer got there first (ABORTED).

use super::manifests::{self, AgentSettings, ApplyManifests, Manifest};
use super::{Plan, SetupError, Status, Step, step};
use futures::future::BoxFuture;
use google_cloud_api_serviceusage_v1::client::ServiceUsage;
use google_cloud_gax::error::rpc::Code;
use google_cloud_iam_admin_v1::client::Iam;
use google_cloud_iam_v1::model::{Binding, GetPolicyOptions, Policy};
use google_cloud_lro::Poller as _;
use google_cloud_resourcemanager_v3::client::Projects;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;

/// How the agent's pods get Google credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcpAuth {
    /// GKE Workload Identity: the Kubernetes service account acts as the Google one.
    WorkloadIdentity,
    /// A service account key, kept only in a Kubernetes Secret.
    Key,
}

/// What `init gcp` is asked to do.
#[derive(Clone)]
pub struct GcpOptions {
    pub project: String,
    pub cluster_name: String,
    /// The cluster's region or zone.
    pub location: String,
    pub auth: GcpAuth,
    /// Where the agent runs.
    pub namespace: String,
    /// The agent's Kubernetes service account.
    pub service_account: String,
    /// The agent's container image.
    pub image: String,
    /// Send Google calls here, without credentials, instead of Google (tests: the project's fake).
    pub endpoint: Option<String>,
    /// With a client, the plan also applies the Kubernetes objects (and the key's Secret).
    pub kube: Option<kube::Client>,
}

impl GcpOptions {
    /// Workload Identity, namespace and service account `karpenter`, the released agent image.
    pub fn new(
        project: impl Into<String>,
        cluster_name: impl Into<String>,
        location: impl Into<String>,
    ) -> Self {
        Self {
            project: project.into(),
            cluster_name: cluster_name.into(),
            location: location.into(),
            auth: GcpAuth::WorkloadIdentity,
            namespace: "karpenter".to_owned(),
            service_account: "karpenter".to_owned(),
            image: format!(
                "ghcr.io/kubectl-karpenter/karpenter-agent:v{}",
                env!("CARGO_PKG_VERSION")
            ),
            endpoint: None,
            kube: None,
        }
    }

    /// The Google service account's id: `karpenter-<cluster>`, shortened with a hash to IAM's
    /// 30 characters.
    pub fn gcp_service_account_id(&self) -> String {
        let id = format!("karpenter-{}", self.cluster_name);
        if id.len() <= 30 {
            return id;
        }
        // FNV-1a, 32 bits: stable across runs and releases, so a re-run finds the same account.
        let hash = self.cluster_name.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        let head: String = self.cluster_name.chars().take(11).collect();
        format!("karpenter-{}-{hash:08x}", head.trim_end_matches('-'))
    }

    /// `karpenter-<cluster>@<project>.iam.gserviceaccount.com`.
    pub fn gcp_service_account_email(&self) -> String {
        format!(
            "{}@{}.iam.gserviceaccount.com",
            self.gcp_service_account_id(),
            self.project
        )
    }

    /// The nodes' service account id: `karpenter-nodes-<cluster>`, shortened with a hash to 30.
    pub fn node_service_account_id(&self) -> String {
        let id = format!("karpenter-nodes-{}", self.cluster_name);
        if id.len() <= 30 {
            return id;
        }
        let hash = self.cluster_name.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        let head: String = self.cluster_name.chars().take(5).collect();
        format!("karpenter-nodes-{}-{hash:08x}", head.trim_end_matches('-'))
    }

    /// `karpenter-nodes-<cluster>@<project>.iam.gserviceaccount.com`: what the nodes run as.
    pub fn node_service_account_email(&self) -> String {
        format!(
            "{}@{}.iam.gserviceaccount.com",
            self.node_service_account_id(),
            self.project
        )
    }

    /// `projects/<project>/roles/kubectlKarpenterAgent`.
    pub fn custom_role(&self) -> String {
        format!("projects/{}/roles/{CUSTOM_ROLE_ID}", self.project)
    }

    /// `serviceAccount:<project>.svc.id.goog[<namespace>/<ksa>]`.
    pub fn workload_identity_member(&self) -> String {
        format!(
            "serviceAccount:{}.svc.id.goog[{}/{}]",
            self.project, self.namespace, self.service_account
        )
    }

    /// The Secret holding the key (`--auth key`).
    pub fn key_secret(&self) -> String {
        "karpenter-gcp-credentials".to_owned()
    }

    fn account_resource(&self) -> String {
        format!(
            "projects/{}/serviceAccounts/{}",
            self.project,
            self.gcp_service_account_email()
        )
    }
}

/// The custom role's id (project-level, shared by every cluster in the project).
pub const CUSTOM_ROLE_ID: &str = "kubectlKarpenterAgent";
/// The APIs the agent calls.
pub const APIS: [&str; 2] = ["compute.googleapis.com", "container.googleapis.com"];
/// The roles GKE recommends for a node's service account (least privilege: logs, metrics,
/// metadata, and pulling images), instead of the Compute Engine default account's Editor.
pub const NODE_ROLES: [&str; 5] = [
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
    "roles/artifactregistry.reader",
];
/// Granted to the agent on the nodes' service account only: `iam.serviceAccounts.actAs` on that
/// one account, so the agent can launch nodes that run as it and as no other account.
pub const SERVICE_ACCOUNT_USER: &str = "roles/iam.serviceAccountUser";
/// The role that lets a Kubernetes service account act as a Google one.
pub const WORKLOAD_IDENTITY_USER: &str = "roles/iam.workloadIdentityUser";
/// The Secret annotation naming the key stored in it, so a re-run can check the key still exists.
pub const KEY_NAME_ANNOTATION: &str = "kubectl-karpenter.io/gcp-key-name";

/// Every permission of the custom role, with why the agent needs it.
///
/// `iam.serviceAccounts.actAs` is not here: project-wide it would let the agent launch nodes as
/// any account in the project; it is granted on the nodes' account alone (`node-act-as`).
pub const AGENT_PERMISSIONS: [(&str, &str); 30] = [
    ("compute.instances.create", "launch nodes"),
    ("compute.instances.delete", "remove nodes"),
    (
        "compute.instances.get",
        "follow a node's state (and notice preemption)",
    ),
    (
        "compute.instances.list",
        "find this cluster's instances no NodeClaim owns",
    ),
    (
        "compute.instances.setLabels",
        "label instances with their pool, claim and cluster",
    ),
    (
        "compute.instances.setMetadata",
        "launch with the node class's metadata (kubelet bootstrap)",
    ),
    (
        "compute.instances.setTags",
        "launch with the node class's network tags",
    ),
    (
        "compute.instances.setServiceAccount",
        "launch nodes that run as the node class's service account",
    ),
    (
        "compute.instanceTemplates.create",
        "templates for bulkInsert across zones",
    ),
    (
        "compute.instanceTemplates.delete",
        "remove the templates again",
    ),
    ("compute.instanceTemplates.get", "reuse a template"),
    ("compute.instanceTemplates.list", "find stale templates"),
    (
        "compute.instanceTemplates.useReadOnly",
        "launch from a template",
    ),
    ("compute.disks.create", "boot disks of new nodes"),
    (
        "compute.disks.setLabels",
        "label the boot disks like their instance",
    ),
    ("compute.images.get", "resolve an image by id"),
    (
        "compute.images.getFromFamily",
        "resolve an image alias or family",
    ),
    ("compute.images.useReadOnly", "boot from public images"),
    ("compute.machineTypes.get", "read one machine type"),
    ("compute.machineTypes.list", "the instance type catalogue"),
    ("compute.zones.get", "read one zone"),
    ("compute.zones.list", "which zones offer what"),
    ("compute.regions.get", "regional quotas"),
    (
        "compute.subnetworks.use",
        "attach nodes to the cluster's subnetwork",
    ),
    (
        "compute.subnetworks.useExternalIp",
        "give nodes an external IP on a subnetwork, when their template has one",
    ),
    (
        "compute.networks.use",
        "attach nodes to a network when no subnetwork is named (the default network)",
    ),
    (
        "compute.networks.useExternalIp",
        "give nodes an external IP on such a network",
    ),
    (
        "compute.zoneOperations.get",
        "wait for launches and deletions, and read why one failed",
    ),
    (
        "compute.regionOperations.get",
        "wait for regional bulkInsert and templates",
    ),
    (
        "container.clusters.get",
        "read the cluster's settings for the node bootstrap",
    ),
];

/// What GKE `clusters.get` said, as far as `init gcp` needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GkeCluster {
    /// `workloadIdentityConfig.workloadPool` (`<project>.svc.id.goog`); `None` when Workload
    /// Identity is off.
    pub workload_pool: Option<String>,
    /// `networkConfig.network` (`projects/<p>/global/networks/<n>`), else the short name.
    pub network: String,
    /// `networkConfig.subnetwork` (`projects/<p>/regions/<r>/subnetworks/<s>`), the form a
    /// GCENodeClass's `networkConfig.subnetwork` takes.
    pub subnetwork: String,
    /// The cluster's region or zone.
    pub location: String,
    /// `ipAllocationPolicy.clusterSecondaryRangeName`: the pods' range (VPC-native clusters).
    pub pod_range: Option<String>,
}

impl GkeCluster {
    fn from_json(value: &serde_json::Value, project: &str) -> Self {
        let text = |pointer: &str| {
            value
                .pointer(pointer)
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let location = text("/location").unwrap_or_default();
        let region = zone_region(&location).unwrap_or(&location).to_owned();
        Self {
            workload_pool: text("/workloadIdentityConfig/workloadPool"),
            network: text("/networkConfig/network")
                .or_else(|| text("/network"))
                .unwrap_or_default(),
            subnetwork: text("/networkConfig/subnetwork")
                .or_else(|| {
                    text("/subnetwork")
                        .map(|s| format!("projects/{project}/regions/{region}/subnetworks/{s}"))
                })
                .unwrap_or_default(),
            location,
            pod_range: text("/ipAllocationPolicy/clusterSecondaryRangeName"),
        }
    }
}

/// The GKE API's root.
const CONTAINER_ENDPOINT: &str = "https://container.googleapis.com";

/// Reads the cluster with GKE `clusters.get` (at `options.endpoint` without credentials, else
/// Google with Application Default Credentials).
///
/// Plain REST over reqwest: the official google-cloud-container-v1 crate is not in this build's
/// registry, and reqwest is already compiled for google-cloud-auth.
pub async fn read_cluster(options: &GcpOptions) -> Result<GkeCluster, SetupError> {
    let o = options;
    let resource = format!(
        "projects/{}/locations/{}/clusters/{}",
        o.project, o.location, o.cluster_name
    );
    let cloud =
        |detail: String, source: Box<dyn std::error::Error + Send + Sync>| SetupError::Cloud {
            action: format!("container.clusters.get on {resource}"),
            detail,
            source,
        };
    let base = o
        .endpoint
        .as_deref()
        .unwrap_or(CONTAINER_ENDPOINT)
        .trim_end_matches('/');
    let mut request = reqwest::Client::new().get(format!("{base}/v1/{resource}"));
    if o.endpoint.is_none() {
        let credentials = google_cloud_auth::credentials::Builder::default()
            .build_access_token_credentials()
            .map_err(|e| cloud(e.to_string(), Box::new(e)))?;
        let token = credentials
            .access_token()
            .await
            .map_err(|e| cloud(e.to_string(), Box::new(e)))?;
        request = request.bearer_auth(token.token);
    }
    let response = request
        .send()
        .await
        .map_err(|e| cloud(e.to_string(), Box::new(e)))?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    match status.as_u16() {
        200 => Ok(GkeCluster::from_json(&body, &o.project)),
        404 => Err(SetupError::Missing {
            resource: format!(
                "GKE cluster {} in {} (project {})",
                o.cluster_name, o.location, o.project
            ),
            hint: "check --cluster, --location and --project".to_owned(),
        }),
        code => {
            let message = body
                .pointer("/error/message")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_owned();
            let error: Box<dyn std::error::Error + Send + Sync> =
                format!("HTTP {code}: {message}").into();
            if code == 403 {
                Err(SetupError::PermissionDenied {
                    action: "container.clusters.get".to_owned(),
                    resource,
                    source: error,
                })
            } else {
                Err(cloud(format!("HTTP {code}: {message}"), error))
            }
        }
    }
}

/// Shared by the steps.
struct Ctx {
    options: GcpOptions,
    iam: Iam,
    projects: Projects,
    services: ServiceUsage,
    cluster: tokio::sync::OnceCell<GkeCluster>,
}

/// Maps a Google error: permission denied names the permission and the resource.
fn gcp_error(
    permission: &str,
    resource: &str,
    error: google_cloud_gax::error::Error,
) -> SetupError {
    let status = error.status().map(|s| (s.code, s.message.clone()));
    match status {
        Some((Code::PermissionDenied, _)) => SetupError::PermissionDenied {
            action: permission.to_owned(),
            resource: resource.to_owned(),
            source: Box::new(error),
        },
        Some((code, message)) => SetupError::Cloud {
            action: format!("{permission} on {resource}"),
            detail: format!("{}: {message}", code.name()),
            source: Box::new(error),
        },
        None => SetupError::Cloud {
            action: format!("{permission} on {resource}"),
            detail: error.to_string(),
            source: Box::new(error),
        },
    }
}

fn code(error: &google_cloud_gax::error::Error) -> Option<Code> {
    error.status().map(|s| s.code)
}

/// Whether `member` holds `role` unconditionally.
fn has_binding(policy: &Policy, role: &str, member: &str) -> bool {
    policy
        .bindings
        .iter()
        .any(|b| b.role == role && b.condition.is_none() && b.members.iter().any(|m| m == member))
}

/// Adds `member` to the unconditional binding of `role` (or a new binding).
fn add_binding(policy: &mut Policy, role: &str, member: &str) {
    match policy
        .bindings
        .iter_mut()
        .find(|b| b.role == role && b.condition.is_none())
    {
        Some(binding) => binding.members.push(member.to_owned()),
        None => policy
            .bindings
            .push(Binding::new().set_role(role).set_members([member])),
    }
}

/// Attempts at a policy write before giving up on a busy policy.
const POLICY_ATTEMPTS: usize = 5;

impl Ctx {
    async fn project_policy(&self) -> Result<Policy, SetupError> {
        let resource = format!("projects/{}", self.options.project);
        self.projects
            .get_iam_policy()
            .set_resource(&resource)
            .set_options(GetPolicyOptions::new().set_requested_policy_version(3))
            .send()
            .await
            .map_err(|e| gcp_error("resourcemanager.projects.getIamPolicy", &resource, e))
    }

    /// The service account's policy; `None` when the account does not exist yet.
    async fn account_policy(&self, email: &str) -> Result<Option<Policy>, SetupError> {
        let resource = format!("projects/{}/serviceAccounts/{email}", self.options.project);
        match self
            .iam
            .get_iam_policy()
            .set_resource(&resource)
            .set_options(GetPolicyOptions::new().set_requested_policy_version(3))
            .send()
            .await
        {
            Ok(policy) => Ok(Some(policy)),
            Err(e) if code(&e) == Some(Code::NotFound) => Ok(None),
            Err(e) => Err(gcp_error("iam.serviceAccounts.getIamPolicy", &resource, e)),
        }
    }

    /// Read-modify-write of the project policy with its etag; retried on ABORTED.
    async fn bind_on_project(&self, role: &str, member: &str) -> Result<(), SetupError> {
        let resource = format!("projects/{}", self.options.project);
        for attempt in 1..=POLICY_ATTEMPTS {
            let mut policy = self.project_policy().await?;
            if has_binding(&policy, role, member) {
                return Ok(());
            }
            add_binding(&mut policy, role, member);
            match self
                .projects
                .set_iam_policy()
                .set_resource(&resource)
                .set_policy(policy)
                .send()
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if code(&e) == Some(Code::Aborted) && attempt < POLICY_ATTEMPTS => {
                    tracing::warn!(%resource, attempt, "the policy changed while it was edited; reading it again");
                }
                Err(e) => {
                    return Err(gcp_error(
                        "resourcemanager.projects.setIamPolicy",
                        &resource,
                        e,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Read-modify-write of the service account's policy with its etag; retried on ABORTED.
    async fn bind_on_account(
        &self,
        email: &str,
        role: &str,
        member: &str,
    ) -> Result<(), SetupError> {
        let resource = format!("projects/{}/serviceAccounts/{email}", self.options.project);
        for attempt in 1..=POLICY_ATTEMPTS {
            let Some(mut policy) = self.account_policy(email).await? else {
                return Err(SetupError::Missing {
                    resource: format!("service account {email}"),
                    hint: "the service-account steps make it".to_owned(),
                });
            };
            if has_binding(&policy, role, member) {
                return Ok(());
            }
            add_binding(&mut policy, role, member);
            match self
                .iam
                .set_iam_policy()
                .set_resource(&resource)
                .set_policy(policy)
                .send()
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if code(&e) == Some(Code::Aborted) && attempt < POLICY_ATTEMPTS => {
                    tracing::warn!(%resource, attempt, "the policy changed while it was edited; reading it again");
                }
                Err(e) => return Err(gcp_error("iam.serviceAccounts.setIamPolicy", &resource, e)),
            }
        }
        Ok(())
    }

    async fn disabled_apis(&self) -> Result<Vec<&'static str>, SetupError> {
        let mut disabled = Vec::new();
        for api in APIS {
            let name = format!("projects/{}/services/{api}", self.options.project);
            let service = self
                .services
                .get_service()
                .set_name(&name)
                .send()
                .await
                .map_err(|e| gcp_error("serviceusage.services.get", &name, e))?;
            if service.state != google_cloud_api_serviceusage_v1::model::State::Enabled {
                disabled.push(api);
            }
        }
        Ok(disabled)
    }

    async fn role(&self) -> Result<Option<google_cloud_iam_admin_v1::model::Role>, SetupError> {
        let name = self.options.custom_role();
        match self.iam.get_role().set_name(&name).send().await {
            Ok(role) => Ok(Some(role)),
            Err(e) if code(&e) == Some(Code::NotFound) => Ok(None),
            Err(e) => Err(gcp_error("iam.roles.get", &name, e)),
        }
    }

    async fn account_exists(&self, email: &str) -> Result<bool, SetupError> {
        let resource = format!("projects/{}/serviceAccounts/{email}", self.options.project);
        match self
            .iam
            .get_service_account()
            .set_name(&resource)
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if code(&e) == Some(Code::NotFound) => Ok(false),
            Err(e) => Err(gcp_error("iam.serviceAccounts.get", &resource, e)),
        }
    }
}

// ---------------------------------------------------------------- steps

fn check_project(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let name = format!("projects/{}", ctx.options.project);
        match ctx.projects.get_project().set_name(&name).send().await {
            Ok(project) => Ok(Status::InPlace(format!(
                "project {} ({})",
                ctx.options.project, project.name
            ))),
            // Google answers 403 for a project that does not exist as for one you may not read.
            Err(e) if matches!(code(&e), Some(Code::NotFound | Code::PermissionDenied)) => {
                Err(SetupError::Missing {
                    resource: format!("GCP project {}", ctx.options.project),
                    hint:
                        "check --project, and that you may read it (resourcemanager.projects.get)"
                            .to_owned(),
                })
            }
            Err(e) => Err(gcp_error("resourcemanager.projects.get", &name, e)),
        }
    })
}

fn check_cluster(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let o = &ctx.options;
        let cluster = ctx.cluster.get_or_try_init(|| read_cluster(o)).await?;
        if o.auth == GcpAuth::WorkloadIdentity && cluster.workload_pool.is_none() {
            return Err(SetupError::Missing {
                resource: format!("Workload Identity on GKE cluster {}", o.cluster_name),
                hint: format!(
                    "enable it with: gcloud container clusters update {} --location {} --workload-pool={}.svc.id.goog (or use --auth key)",
                    o.cluster_name, o.location, o.project
                ),
            });
        }
        Ok(Status::InPlace(format!(
            "{}, subnetwork {}, Workload Identity {}",
            cluster.location,
            cluster.subnetwork,
            cluster.workload_pool.as_deref().unwrap_or("off")
        )))
    })
}

fn apply_nothing(_: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async { Ok(()) })
}

fn check_apis(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let disabled = ctx.disabled_apis().await?;
        Ok(if disabled.is_empty() {
            Status::InPlace(format!("{} enabled", APIS.join(" and ")))
        } else {
            Status::Needed(format!("enable {}", disabled.join(", ")))
        })
    })
}

fn apply_apis(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let disabled = ctx.disabled_apis().await?;
        if disabled.is_empty() {
            return Ok(());
        }
        let parent = format!("projects/{}", ctx.options.project);
        ctx.services
            .batch_enable_services()
            .set_parent(&parent)
            .set_service_ids(disabled.iter().copied())
            .poller()
            .until_done()
            .await
            .map_err(|e| {
                gcp_error(
                    "serviceusage.services.enable",
                    &format!("{} in {parent}", disabled.join(", ")),
                    e,
                )
            })?;
        Ok(())
    })
}

fn check_account(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let email = ctx.options.gcp_service_account_email();
        Ok(if ctx.account_exists(&email).await? {
            Status::InPlace(format!("service account {email}"))
        } else {
            Status::Needed(format!("create service account {email}"))
        })
    })
}

fn apply_account(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let o = &ctx.options;
        let parent = format!("projects/{}", o.project);
        let account = google_cloud_iam_admin_v1::model::ServiceAccount::new()
            .set_display_name(format!("kubectl-karpenter agent ({})", o.cluster_name))
            .set_description(format!(
                "Launches and removes the nodes of GKE cluster {} in {}",
                o.cluster_name, o.location
            ));
        match ctx
            .iam
            .create_service_account()
            .set_name(&parent)
            .set_account_id(o.gcp_service_account_id())
            .set_service_account(account)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some(Code::AlreadyExists) => Ok(()),
            Err(e) => Err(gcp_error("iam.serviceAccounts.create", &parent, e)),
        }
    })
}

fn check_node_account(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let email = ctx.options.node_service_account_email();
        Ok(if ctx.account_exists(&email).await? {
            Status::InPlace(format!("service account {email}"))
        } else {
            Status::Needed(format!("create service account {email}"))
        })
    })
}

fn apply_node_account(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let o = &ctx.options;
        let parent = format!("projects/{}", o.project);
        let account = google_cloud_iam_admin_v1::model::ServiceAccount::new()
            .set_display_name(format!("kubectl-karpenter nodes ({})", o.cluster_name))
            .set_description(format!(
                "What the nodes kubectl-karpenter launches for GKE cluster {} run as",
                o.cluster_name
            ));
        match ctx
            .iam
            .create_service_account()
            .set_name(&parent)
            .set_account_id(o.node_service_account_id())
            .set_service_account(account)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if code(&e) == Some(Code::AlreadyExists) => Ok(()),
            Err(e) => Err(gcp_error("iam.serviceAccounts.create", &parent, e)),
        }
    })
}

async fn missing_node_roles(ctx: &Ctx) -> Result<Vec<&'static str>, SetupError> {
    let member = format!(
        "serviceAccount:{}",
        ctx.options.node_service_account_email()
    );
    let policy = ctx.project_policy().await?;
    Ok(NODE_ROLES
        .iter()
        .copied()
        .filter(|r| !has_binding(&policy, r, &member))
        .collect())
}

fn check_node_roles(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let missing = missing_node_roles(ctx).await?;
        let email = ctx.options.node_service_account_email();
        Ok(if missing.is_empty() {
            Status::InPlace(format!("{email} holds {} node roles", NODE_ROLES.len()))
        } else {
            Status::Needed(format!(
                "grant {} to {email} on project {}",
                missing.join(", "),
                ctx.options.project
            ))
        })
    })
}

fn apply_node_roles(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let member = format!(
            "serviceAccount:{}",
            ctx.options.node_service_account_email()
        );
        for role in missing_node_roles(ctx).await? {
            ctx.bind_on_project(role, &member).await?;
        }
        Ok(())
    })
}

fn check_node_act_as(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let (agent, nodes) = (
            format!("serviceAccount:{}", ctx.options.gcp_service_account_email()),
            ctx.options.node_service_account_email(),
        );
        let bound = ctx
            .account_policy(&nodes)
            .await?
            .is_some_and(|p| has_binding(&p, SERVICE_ACCOUNT_USER, &agent));
        Ok(if bound {
            Status::InPlace(format!("{agent} may launch nodes as {nodes}"))
        } else {
            Status::Needed(format!(
                "grant {SERVICE_ACCOUNT_USER} on {nodes} to {agent}"
            ))
        })
    })
}

fn apply_node_act_as(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let agent = format!("serviceAccount:{}", ctx.options.gcp_service_account_email());
        ctx.bind_on_account(
            &ctx.options.node_service_account_email(),
            SERVICE_ACCOUNT_USER,
            &agent,
        )
        .await
    })
}

fn wanted_permissions() -> BTreeSet<String> {
    AGENT_PERMISSIONS
        .iter()
        .map(|(p, _)| (*p).to_owned())
        .collect()
}

fn check_role(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let name = ctx.options.custom_role();
        Ok(match ctx.role().await? {
            None => Status::Needed(format!(
                "create role {name} with {} permissions",
                AGENT_PERMISSIONS.len()
            )),
            Some(role) => {
                let have: BTreeSet<String> = role.included_permissions.iter().cloned().collect();
                let want = wanted_permissions();
                if have == want && !role.deleted {
                    Status::InPlace(format!("role {name} with {} permissions", want.len()))
                } else {
                    let missing: Vec<&String> = want.difference(&have).collect();
                    let extra: Vec<&String> = have.difference(&want).collect();
                    Status::Needed(format!(
                        "update role {name} ({} to add, {} to remove)",
                        missing.len(),
                        extra.len()
                    ))
                }
            }
        })
    })
}

fn apply_role(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        use google_cloud_iam_admin_v1::model::{Role, role::RoleLaunchStage};
        let o = &ctx.options;
        let role = Role::new()
            .set_title("kubectl-karpenter agent")
            .set_description("What the kubectl-karpenter agent calls to launch and remove GKE nodes; made by kubectl karpenter init gcp")
            .set_included_permissions(wanted_permissions())
            .set_stage(RoleLaunchStage::Ga);
        match ctx.role().await? {
            None => {
                let parent = format!("projects/{}", o.project);
                ctx.iam
                    .create_role()
                    .set_parent(&parent)
                    .set_role_id(CUSTOM_ROLE_ID)
                    .set_role(role)
                    .send()
                    .await
                    .map_err(|e| gcp_error("iam.roles.create", &parent, e))?;
            }
            Some(existing) => {
                let name = o.custom_role();
                ctx.iam
                    .update_role()
                    .set_name(&name)
                    .set_role(role.set_etag(existing.etag))
                    .send()
                    .await
                    .map_err(|e| gcp_error("iam.roles.update", &name, e))?;
            }
        }
        Ok(())
    })
}

fn check_project_binding(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let (role, member) = (
            ctx.options.custom_role(),
            format!("serviceAccount:{}", ctx.options.gcp_service_account_email()),
        );
        let policy = ctx.project_policy().await?;
        Ok(if has_binding(&policy, &role, &member) {
            Status::InPlace(format!("{member} holds {role}"))
        } else {
            Status::Needed(format!(
                "grant {role} to {member} on project {}",
                ctx.options.project
            ))
        })
    })
}

fn apply_project_binding(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let (role, member) = (
            ctx.options.custom_role(),
            format!("serviceAccount:{}", ctx.options.gcp_service_account_email()),
        );
        ctx.bind_on_project(&role, &member).await
    })
}

fn check_workload_identity(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let member = ctx.options.workload_identity_member();
        let bound = ctx
            .account_policy(&ctx.options.gcp_service_account_email())
            .await?
            .is_some_and(|p| has_binding(&p, WORKLOAD_IDENTITY_USER, &member));
        Ok(if bound {
            Status::InPlace(format!(
                "{member} may act as {}",
                ctx.options.gcp_service_account_email()
            ))
        } else {
            Status::Needed(format!(
                "grant {WORKLOAD_IDENTITY_USER} on {} to {member}",
                ctx.options.gcp_service_account_email()
            ))
        })
    })
}

fn apply_workload_identity(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        ctx.bind_on_account(
            &ctx.options.gcp_service_account_email(),
            WORKLOAD_IDENTITY_USER,
            &ctx.options.workload_identity_member(),
        )
        .await
    })
}

/// The key step: a key of the service account, kept only in a Secret. Its own type because it
/// needs the kube client.
struct KeyStep {
    ctx: Arc<Ctx>,
    client: kube::Client,
}

impl KeyStep {
    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ctx.options.namespace)
    }

    /// The key the Secret holds, if the Secret exists and that key is still a key of the account.
    async fn stored_key(&self) -> Result<Option<String>, SetupError> {
        let o = &self.ctx.options;
        let name = o.key_secret();
        let secret = self
            .secrets()
            .get_opt(&name)
            .await
            .map_err(|source| SetupError::Kube {
                action: format!("reading Secret {}/{name}", o.namespace),
                source,
            })?;
        let Some(key_name) = secret.and_then(|s| {
            s.metadata
                .annotations
                .and_then(|a| a.get(KEY_NAME_ANNOTATION).cloned())
        }) else {
            return Ok(None);
        };
        let resource = o.account_resource();
        let keys = match self
            .ctx
            .iam
            .list_service_account_keys()
            .set_name(&resource)
            .send()
            .await
        {
            Ok(keys) => keys,
            Err(e) if code(&e) == Some(Code::NotFound) => return Ok(None),
            Err(e) => return Err(gcp_error("iam.serviceAccountKeys.list", &resource, e)),
        };
        Ok(keys
            .keys
            .iter()
            .any(|k| k.name == key_name)
            .then_some(key_name))
    }
}

impl Step for KeyStep {
    fn name(&self) -> &str {
        "service-account-key"
    }

    fn describe(&self) -> String {
        let o = &self.ctx.options;
        format!(
            "a key of {} kept only in Secret {}/{} (never printed or written to disk)",
            o.gcp_service_account_email(),
            o.namespace,
            o.key_secret()
        )
    }

    fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>> {
        Box::pin(async move {
            let o = &self.ctx.options;
            Ok(match self.stored_key().await? {
                Some(_) => Status::InPlace(format!(
                    "Secret {}/{} holds a current key",
                    o.namespace,
                    o.key_secret()
                )),
                None => Status::Needed(format!(
                    "create a key of {} and store it in Secret {}/{}",
                    o.gcp_service_account_email(),
                    o.namespace,
                    o.key_secret()
                )),
            })
        })
    }

    fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>> {
        Box::pin(async move {
            if self.stored_key().await?.is_some() {
                return Ok(());
            }
            let o = &self.ctx.options;
            let resource = o.account_resource();
            let key = self
                .ctx
                .iam
                .create_service_account_key()
                .set_name(&resource)
                .send()
                .await
                .map_err(|e| gcp_error("iam.serviceAccountKeys.create", &resource, e))?;
            // The key goes straight from the response into the Secret: no log, no file.
            let secret = json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": o.key_secret(), "namespace": o.namespace,
                             "labels": {"app.kubernetes.io/part-of": "kubectl-karpenter"},
                             "annotations": {KEY_NAME_ANNOTATION: key.name}},
                "type": "Opaque",
                "data": {"key.json": ByteString(key.private_key_data.to_vec())},
            });
            self.secrets()
                .patch(
                    &o.key_secret(),
                    &PatchParams::apply(manifests::FIELD_MANAGER).force(),
                    &Patch::Apply(&secret),
                )
                .await
                .map_err(|source| SetupError::Kube {
                    action: format!("applying Secret {}/{}", o.namespace, o.key_secret()),
                    source,
                })?;
            Ok(())
        })
    }
}

/// The agent's objects for GCP: its Deployment runs `karpenter-agent run --provider gcp`.
pub fn agent_manifests(options: &GcpOptions) -> Vec<Manifest> {
    let (annotations, credentials_secret) = match options.auth {
        GcpAuth::WorkloadIdentity => (
            vec![(
                "iam.gke.io/gcp-service-account".to_owned(),
                options.gcp_service_account_email(),
            )],
            None,
        ),
        GcpAuth::Key => (Vec::new(), Some(options.key_secret())),
    };
    let mut objects = manifests::crds();
    objects.extend(manifests::agent(&AgentSettings {
        namespace: options.namespace.clone(),
        service_account: options.service_account.clone(),
        image: options.image.clone(),
        service_account_annotations: annotations,
        args: vec!["run".to_owned(), "--provider".to_owned(), "gcp".to_owned()],
        env: agent_env(options),
        credentials_secret,
    }));
    objects
}

/// The agent's settings (`karpenter-agent run --help`): a zonal cluster's nodes stay in its
/// zone, a regional cluster's go to any zone of the region.
fn agent_env(options: &GcpOptions) -> Vec<(String, String)> {
    let mut env = vec![
        ("CLUSTER_NAME".to_owned(), options.cluster_name.clone()),
        ("GCP_PROJECT".to_owned(), options.project.clone()),
    ];
    match zone_region(&options.location) {
        Some(region) => {
            env.push(("GCP_REGION".to_owned(), region.to_owned()));
            env.push(("GCP_ZONES".to_owned(), options.location.clone()));
        }
        None => env.push(("GCP_REGION".to_owned(), options.location.clone())),
    }
    env
}

/// The region of a zone (`us-central1-a` → `us-central1`); `None` for a region.
fn zone_region(location: &str) -> Option<&str> {
    let (region, suffix) = location.rsplit_once('-')?;
    (region.contains('-') && suffix.len() == 1 && suffix.chars().all(|c| c.is_ascii_lowercase()))
        .then_some(region)
}

/// A starter NodePool and GCENodeClass, both `default`; with the cluster read, the node class
/// puts nodes on the cluster's subnetwork and pods' secondary range.
pub fn node_pool_manifests(options: &GcpOptions, cluster: Option<&GkeCluster>) -> Vec<Manifest> {
    let mut node_class = json!({
        "apiVersion": "karpenter.k8s.gcp/v1alpha1", "kind": "GCENodeClass", "metadata": {"name": "default"},
        "spec": {
            "imageSelectorTerms": [{"alias": "ContainerOptimizedOS@latest"}],
            "disks": [{"category": "pd-balanced", "sizeGiB": 60, "boot": true}],
            "serviceAccount": options.node_service_account_email(),
            "networkTags": [format!("gke-{}-node", options.cluster_name)],
            "labels": {"karpenter-cluster": options.cluster_name},
        },
    });
    if let Some(cluster) = cluster {
        if !cluster.subnetwork.is_empty() {
            node_class["spec"]["networkConfig"] = json!({"subnetwork": cluster.subnetwork});
        }
        if let Some(range) = &cluster.pod_range {
            node_class["spec"]["subnetRangeName"] = json!(range);
        }
    }
    vec![
        Manifest::new(node_class, "gcenodeclasses"),
        Manifest::new(
            json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                "spec": {
                    "template": {"spec": {
                        "requirements": [
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                            {"key": "karpenter.k8s.gcp/instance-family", "operator": "In", "values": ["n2", "n2d", "e2", "c3"]},
                        ],
                        "nodeClassRef": {"group": "karpenter.k8s.gcp", "kind": "GCENodeClass", "name": "default"},
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

/// Builds a Google client: at `endpoint` without credentials (a fake), else Google with ADC.
macro_rules! client {
    ($client:ty, $endpoint:expr) => {{
        let builder = <$client>::builder();
        let built = match $endpoint {
            Some(url) => {
                builder
                    .with_endpoint(url)
                    .with_credentials(
                        google_cloud_auth::credentials::anonymous::Builder::new().build(),
                    )
                    .build()
                    .await
            }
            None => builder.build().await,
        };
        built.map_err(|e| SetupError::Cloud {
            action: format!("building the {} client", stringify!($client)),
            detail: e.to_string(),
            source: Box::new(e),
        })?
    }};
}

impl Plan {
    /// The `init gcp` plan, with clients from Application Default Credentials (or, with
    /// `options.endpoint`, anonymous clients of that endpoint).
    pub async fn for_gcp(options: GcpOptions) -> Result<Plan, SetupError> {
        let endpoint = options.endpoint.clone();
        let ctx = Arc::new(Ctx {
            iam: client!(Iam, endpoint.as_deref()),
            projects: client!(Projects, endpoint.as_deref()),
            services: client!(ServiceUsage, endpoint.as_deref()),
            cluster: tokio::sync::OnceCell::new(),
            options: options.clone(),
        });
        let o = &options;
        let email = o.gcp_service_account_email();
        let mut steps = vec![
            step(
                &ctx,
                "project",
                format!("read GCP project {}", o.project),
                check_project,
                apply_nothing,
            ),
            step(
                &ctx,
                "apis",
                format!("enable {}", APIS.join(" and ")),
                check_apis,
                apply_apis,
            ),
            step(
                &ctx,
                "gke-cluster",
                format!("read GKE cluster {} in {}", o.cluster_name, o.location),
                check_cluster,
                apply_nothing,
            ),
            step(
                &ctx,
                "service-account",
                format!("service account {email}, the agent's identity"),
                check_account,
                apply_account,
            ),
            step(
                &ctx,
                "custom-role",
                format!(
                    "custom role {} with the {} permissions the agent calls (compute instances, instance templates, disks, images, machine types, zones, operations, network and subnetwork use; container.clusters.get; actAs only on the nodes' account), not roles/compute.instanceAdmin.v1 + roles/iam.serviceAccountUser, which could change every instance and disk in the project",
                    o.custom_role(),
                    AGENT_PERMISSIONS.len()
                ),
                check_role,
                apply_role,
            ),
            step(
                &ctx,
                "project-binding",
                format!(
                    "grant {} to {email} on project {}",
                    o.custom_role(),
                    o.project
                ),
                check_project_binding,
                apply_project_binding,
            ),
            step(
                &ctx,
                "node-service-account",
                format!(
                    "service account {}, what the nodes run as",
                    o.node_service_account_email()
                ),
                check_node_account,
                apply_node_account,
            ),
            step(
                &ctx,
                "node-roles",
                format!(
                    "grant {} to the nodes' account on project {} (GKE's least-privilege node roles)",
                    NODE_ROLES.join(", "),
                    o.project
                ),
                check_node_roles,
                apply_node_roles,
            ),
            step(
                &ctx,
                "node-act-as",
                format!(
                    "grant {SERVICE_ACCOUNT_USER} on the nodes' account only to {email}, so it launches nodes as that account and no other"
                ),
                check_node_act_as,
                apply_node_act_as,
            ),
        ];
        if o.auth == GcpAuth::WorkloadIdentity {
            steps.push(step(
                &ctx,
                "workload-identity",
                format!(
                    "Workload Identity: {WORKLOAD_IDENTITY_USER} on {email} for {}",
                    o.workload_identity_member()
                ),
                check_workload_identity,
                apply_workload_identity,
            ));
        }
        let agent = agent_manifests(o);
        if let Some(client) = &o.kube {
            steps.push(Box::new(ApplyManifests {
                name: "kubernetes-agent".to_owned(),
                description: format!(
                    "CRDs, namespace {}, service account, RBAC and the agent's Deployment",
                    o.namespace
                ),
                client: client.clone(),
                manifests: agent.clone(),
            }));
            if o.auth == GcpAuth::Key {
                steps.push(Box::new(KeyStep {
                    ctx: ctx.clone(),
                    client: client.clone(),
                }));
            }
        }
        Ok(Plan::new(steps).with_manifests(agent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_ids_fit_iam_limits() {
        let short = GcpOptions::new("p", "demo", "us-central1");
        assert_eq!(short.gcp_service_account_id(), "karpenter-demo");
        assert_eq!(
            short.gcp_service_account_email(),
            "karpenter-demo@p.iam.gserviceaccount.com"
        );
        let long = GcpOptions::new("p", "a-very-long-cluster-name-indeed-yes", "us-central1");
        let id = long.gcp_service_account_id();
        assert!(
            id.len() <= 30 && id.starts_with("karpenter-a-very-long") && !id.contains("--"),
            "{id}"
        );
        assert_eq!(short.node_service_account_id(), "karpenter-nodes-demo");
        let node = long.node_service_account_id();
        assert!(
            node.len() <= 30 && node.starts_with("karpenter-nodes-a-ver") && node != id,
            "{node}"
        );
    }

    #[test]
    fn bindings_are_added_to_the_roles_unconditional_binding() {
        let mut policy = Policy::new();
        add_binding(&mut policy, "roles/x", "user:a");
        add_binding(&mut policy, "roles/x", "user:b");
        assert_eq!(policy.bindings.len(), 1);
        assert!(has_binding(&policy, "roles/x", "user:b"));
        assert!(!has_binding(&policy, "roles/y", "user:a"));
    }

    #[test]
    fn a_zonal_cluster_keeps_its_nodes_in_its_zone_and_a_regional_one_uses_the_region() {
        assert_eq!(zone_region("us-central1-a"), Some("us-central1"));
        assert_eq!(zone_region("us-central1"), None);
        assert_eq!(zone_region("europe-west4"), None);
        let env = agent_env(&GcpOptions::new("p", "c", "europe-west4-b"));
        assert!(env.contains(&("GCP_REGION".to_owned(), "europe-west4".to_owned())));
        assert!(env.contains(&("GCP_ZONES".to_owned(), "europe-west4-b".to_owned())));
    }

    #[test]
    fn the_cluster_read_gives_full_subnetwork_paths_even_when_gke_answers_short_names() {
        let full = json!({"location": "us-central1", "workloadIdentityConfig": {"workloadPool": "p.svc.id.goog"}, "network": "default", "subnetwork": "nodes",
                          "networkConfig": {"network": "projects/p/global/networks/default", "subnetwork": "projects/p/regions/us-central1/subnetworks/nodes"},
                          "ipAllocationPolicy": {"clusterSecondaryRangeName": "pods"}});
        let c = GkeCluster::from_json(&full, "p");
        assert_eq!(
            c.subnetwork,
            "projects/p/regions/us-central1/subnetworks/nodes"
        );
        assert_eq!(c.workload_pool.as_deref(), Some("p.svc.id.goog"));
        let short = GkeCluster::from_json(
            &json!({"location": "europe-west4-b", "network": "vpc", "subnetwork": "sub"}),
            "p",
        );
        assert_eq!(
            short.subnetwork,
            "projects/p/regions/europe-west4/subnetworks/sub"
        );
        assert_eq!(short.workload_pool, None);
        let class =
            &node_pool_manifests(&GcpOptions::new("p", "c", "us-central1"), Some(&c))[0].object;
        assert_eq!(
            class["spec"]["networkConfig"]["subnetwork"],
            "projects/p/regions/us-central1/subnetworks/nodes"
        );
        assert_eq!(class["spec"]["subnetRangeName"], "pods");
    }

    #[test]
    fn every_permission_is_listed_once() {
        assert_eq!(wanted_permissions().len(), AGENT_PERMISSIONS.len());
    }
}
