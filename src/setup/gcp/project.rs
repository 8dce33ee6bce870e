//! Resource Manager: the `project` step that reads the project, and read-modify-write of the
//! project's IAM policy, which the binding steps in [`super::iam`] use.

use super::iam::{POLICY_ATTEMPTS, add_binding, has_binding};
use super::{Ctx, code, gcp_error};
use crate::setup::{SetupError, Status};
use futures::future::BoxFuture;
use google_cloud_gax::error::rpc::Code;
use google_cloud_iam_v1::model::{GetPolicyOptions, Policy};

impl Ctx {
    pub(super) async fn project_policy(&self) -> Result<Policy, SetupError> {
        let resource = format!("projects/{}", self.options.project);
        self.projects
            .get_iam_policy()
            .set_resource(&resource)
            .set_options(GetPolicyOptions::new().set_requested_policy_version(3))
            .send()
            .await
            .map_err(|e| gcp_error("resourcemanager.projects.getIamPolicy", &resource, e))
    }

    /// Read-modify-write of the project policy with its etag; retried on ABORTED.
    pub(super) async fn bind_on_project(&self, role: &str, member: &str) -> Result<(), SetupError> {
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
}

pub(super) fn check_project(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
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
