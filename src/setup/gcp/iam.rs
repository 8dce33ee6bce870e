//! IAM: the agent's and the nodes' service accounts, the bindings that let them act
//! (`project-binding`, `node-roles`, `node-act-as`, `workload-identity`), and read-modify-write
//! of a service account's IAM policy. Bindings edit a policy with its etag and retry when
//! another writer got there first (ABORTED).

use super::{Ctx, code, gcp_error};
use crate::setup::{SetupError, Status};
use futures::future::BoxFuture;
use google_cloud_gax::error::rpc::Code;
use google_cloud_iam_v1::model::{Binding, GetPolicyOptions, Policy};

/// The roles GKE recommends for a node's service account (least privilege: logs, metrics,
/// metadata, and pulling images), instead of the Compute Engine default account's Editor.
pub(crate) const NODE_ROLES: [&str; 5] = [
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
    "roles/monitoring.viewer",
    "roles/stackdriver.resourceMetadata.writer",
    "roles/artifactregistry.reader",
];
/// Granted to the agent on the nodes' service account only: `iam.serviceAccounts.actAs` on that
/// one account, so the agent can launch nodes that run as it and as no other account.
pub(crate) const SERVICE_ACCOUNT_USER: &str = "roles/iam.serviceAccountUser";
/// The role that lets a Kubernetes service account act as a Google one.
pub(crate) const WORKLOAD_IDENTITY_USER: &str = "roles/iam.workloadIdentityUser";

/// Whether `member` holds `role` unconditionally.
pub(super) fn has_binding(policy: &Policy, role: &str, member: &str) -> bool {
    policy
        .bindings
        .iter()
        .any(|b| b.role == role && b.condition.is_none() && b.members.iter().any(|m| m == member))
}

/// Adds `member` to the unconditional binding of `role` (or a new binding).
pub(super) fn add_binding(policy: &mut Policy, role: &str, member: &str) {
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
pub(super) const POLICY_ATTEMPTS: usize = 5;

impl Ctx {
    /// The service account's policy; `None` when the account does not exist yet.
    pub(super) async fn account_policy(&self, email: &str) -> Result<Option<Policy>, SetupError> {
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

    /// Read-modify-write of the service account's policy with its etag; retried on ABORTED.
    pub(super) async fn bind_on_account(
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

    pub(super) async fn account_exists(&self, email: &str) -> Result<bool, SetupError> {
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

pub(super) fn check_account(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let email = ctx.options.gcp_service_account_email();
        Ok(if ctx.account_exists(&email).await? {
            Status::InPlace(format!("service account {email}"))
        } else {
            Status::Needed(format!("create service account {email}"))
        })
    })
}

pub(super) fn apply_account(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
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

pub(super) fn check_node_account(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let email = ctx.options.node_service_account_email();
        Ok(if ctx.account_exists(&email).await? {
            Status::InPlace(format!("service account {email}"))
        } else {
            Status::Needed(format!("create service account {email}"))
        })
    })
}

pub(super) fn apply_node_account(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
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

pub(super) fn check_node_roles(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
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

pub(super) fn apply_node_roles(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
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

pub(super) fn check_node_act_as(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
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

pub(super) fn apply_node_act_as(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
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

pub(super) fn check_project_binding(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
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

pub(super) fn apply_project_binding(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let (role, member) = (
            ctx.options.custom_role(),
            format!("serviceAccount:{}", ctx.options.gcp_service_account_email()),
        );
        ctx.bind_on_project(&role, &member).await
    })
}

pub(super) fn check_workload_identity(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
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

pub(super) fn apply_workload_identity(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        ctx.bind_on_account(
            &ctx.options.gcp_service_account_email(),
            WORKLOAD_IDENTITY_USER,
            &ctx.options.workload_identity_member(),
        )
        .await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_are_added_to_the_roles_unconditional_binding() {
        let mut policy = Policy::new();
        add_binding(&mut policy, "roles/x", "user:a");
        add_binding(&mut policy, "roles/x", "user:b");
        assert_eq!(policy.bindings.len(), 1);
        assert!(has_binding(&policy, "roles/x", "user:b"));
        assert!(!has_binding(&policy, "roles/y", "user:a"));
    }
}
