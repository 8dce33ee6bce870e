//! The custom role `kubectlKarpenterAgent`: every permission the agent calls and nothing else
//! (the `custom-role` step). Why not the predefined roles: see [`super`].

use super::{Ctx, code, gcp_error};
use crate::setup::{SetupError, Status};
use futures::future::BoxFuture;
use google_cloud_gax::error::rpc::Code;
use std::collections::BTreeSet;

/// The custom role's id (project-level, shared by every cluster in the project).
pub(crate) const CUSTOM_ROLE_ID: &str = "kubectlKarpenterAgent";

/// Every permission of the custom role, with why the agent needs it.
///
/// `iam.serviceAccounts.actAs` is not here: project-wide it would let the agent launch nodes as
/// any account in the project; it is granted on the nodes' account alone (`node-act-as`).
pub(crate) const AGENT_PERMISSIONS: [(&str, &str); 30] = [
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

impl Ctx {
    pub(super) async fn role(
        &self,
    ) -> Result<Option<google_cloud_iam_admin_v1::model::Role>, SetupError> {
        let name = self.options.custom_role();
        match self.iam.get_role().set_name(&name).send().await {
            Ok(role) => Ok(Some(role)),
            Err(e) if code(&e) == Some(Code::NotFound) => Ok(None),
            Err(e) => Err(gcp_error("iam.roles.get", &name, e)),
        }
    }
}

fn wanted_permissions() -> BTreeSet<String> {
    AGENT_PERMISSIONS
        .iter()
        .map(|(p, _)| (*p).to_owned())
        .collect()
}

pub(super) fn check_role(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
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

pub(super) fn apply_role(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_permission_is_listed_once() {
        assert_eq!(wanted_permissions().len(), AGENT_PERMISSIONS.len());
    }
}
