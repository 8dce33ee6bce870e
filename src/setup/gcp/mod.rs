//! `init gcp`: what the agent needs in a Google Cloud project, as steps, plus the Kubernetes
//! objects of the agent. Same shape as [`super::aws`]: every step checks before it changes.
//!
//! | step | Google Cloud resource |
//! |---|---|
//! | `project` | reads the project (Resource Manager `projects.get`) |
//! | `apis` | `compute.googleapis.com`, `container.googleapis.com` and `cloudbilling.googleapis.com` enabled (Service Usage) |
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
//!
//! One file per Google service: `project` reads the project and edits its IAM policy
//! (Resource Manager), `serviceusage` enables the APIs, `gke` reads the cluster, `iam`
//! makes the service accounts and their bindings, `role` the custom role, `key` the
//! service-account key kept in a Secret, and `agent` the Kubernetes objects. This file holds
//! the options, the clients the steps share, and the plan: which steps, in which order.

mod agent;
mod gke;
mod iam;
mod key;
mod node_pools;
mod project;
mod role;
mod serviceusage;

pub(crate) use agent::agent_manifests;
pub use agent::node_pool_manifests;
pub(crate) use gke::GkeCluster;
pub use gke::read_cluster;
pub(crate) use iam::{NODE_ROLES, SERVICE_ACCOUNT_USER, WORKLOAD_IDENTITY_USER};

pub use node_pools::node_pools;
pub(crate) use role::{AGENT_PERMISSIONS, CUSTOM_ROLE_ID};
pub(crate) use serviceusage::APIS;

use super::manifests::agent_step;
use super::{Plan, SetupError, step};
use gke::{apply_nothing, check_cluster};
use google_cloud_api_serviceusage_v1::client::ServiceUsage;
use google_cloud_gax::error::rpc::Code;
use google_cloud_iam_admin_v1::client::Iam;
use google_cloud_resourcemanager_v3::client::Projects;
use iam::{
    apply_account, apply_node_account, apply_node_act_as, apply_node_roles, apply_project_binding,
    apply_workload_identity, check_account, check_node_account, check_node_act_as,
    check_node_roles, check_project_binding, check_workload_identity,
};
use key::KeyStep;
use project::check_project;
use role::{apply_role, check_role};
use serviceusage::{apply_apis, check_apis};
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
    /// Whether the plan applies the agent's objects (off for `init --gitops`, which writes
    /// them to files; the plan's manifests still hold them).
    pub apply_manifests: bool,
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
            apply_manifests: true,
        }
    }

    /// The Google service account's id: `karpenter-<cluster>`, shortened with a hash to IAM's
    /// 30 characters.
    pub(crate) fn gcp_service_account_id(&self) -> String {
        let id = format!("karpenter-{}", self.cluster_name);
        if id.len() <= 30 {
            return id;
        }
        let hash = fnv1a_32(&self.cluster_name);
        let head: String = self.cluster_name.chars().take(11).collect();
        format!("karpenter-{}-{hash:08x}", head.trim_end_matches('-'))
    }

    /// `karpenter-<cluster>@<project>.iam.gserviceaccount.com`.
    pub(crate) fn gcp_service_account_email(&self) -> String {
        format!(
            "{}@{}.iam.gserviceaccount.com",
            self.gcp_service_account_id(),
            self.project
        )
    }

    /// The nodes' service account id: `karpenter-nodes-<cluster>`, shortened with a hash to 30.
    pub(crate) fn node_service_account_id(&self) -> String {
        let id = format!("karpenter-nodes-{}", self.cluster_name);
        if id.len() <= 30 {
            return id;
        }
        let hash = fnv1a_32(&self.cluster_name);
        let head: String = self.cluster_name.chars().take(5).collect();
        format!("karpenter-nodes-{}-{hash:08x}", head.trim_end_matches('-'))
    }

    /// `karpenter-nodes-<cluster>@<project>.iam.gserviceaccount.com`: what the nodes run as.
    pub(crate) fn node_service_account_email(&self) -> String {
        format!(
            "{}@{}.iam.gserviceaccount.com",
            self.node_service_account_id(),
            self.project
        )
    }

    /// `projects/<project>/roles/kubectlKarpenterAgent`.
    pub(crate) fn custom_role(&self) -> String {
        format!("projects/{}/roles/{CUSTOM_ROLE_ID}", self.project)
    }

    /// `serviceAccount:<project>.svc.id.goog[<namespace>/<ksa>]`.
    pub(crate) fn workload_identity_member(&self) -> String {
        format!(
            "serviceAccount:{}.svc.id.goog[{}/{}]",
            self.project, self.namespace, self.service_account
        )
    }

    /// The Secret holding the key (`--auth key`).
    pub(crate) fn key_secret(&self) -> String {
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

/// FNV-1a, 32 bits, of a cluster's name: the suffix of a shortened service account id. Stable
/// across runs and releases, so a re-run finds the same account. Hand-written because the `fnv`
/// crate has only the 64-bit variant (and no crate in the build has this one), and eight hex
/// digits are what fit IAM's 30 characters; existing accounts are named with it, so it must not
/// change.
fn fnv1a_32(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
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
                format!("enable {}", APIS.join(", ")),
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
        steps.extend(agent_step(
            &agent,
            &o.namespace,
            o.kube.as_ref(),
            o.apply_manifests,
        ));
        if let (Ok(_), Some(client), true) =
            (&agent, &o.kube, o.apply_manifests && o.auth == GcpAuth::Key)
        {
            steps.push(Box::new(KeyStep {
                ctx: ctx.clone(),
                client: client.clone(),
            }));
        }
        Ok(Plan::new(steps).with_manifests(agent.unwrap_or_default()))
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
    fn shortened_service_account_ids_never_change() {
        // They name accounts that exist already: a re-run must find the same ones.
        let long = GcpOptions::new("p", "a-very-long-cluster-name-indeed-yes", "us-central1");
        assert_eq!(
            long.gcp_service_account_id(),
            "karpenter-a-very-long-bfe0fb93"
        );
        assert_eq!(
            long.node_service_account_id(),
            "karpenter-nodes-a-ver-bfe0fb93"
        );
        let other = GcpOptions::new("p", "production-eu-west-4-cluster", "us-central1");
        assert_eq!(
            other.gcp_service_account_id(),
            "karpenter-production-1a3453f3"
        );
        assert_eq!(
            other.node_service_account_id(),
            "karpenter-nodes-produ-1a3453f3"
        );
    }
}
