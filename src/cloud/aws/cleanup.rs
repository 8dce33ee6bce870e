//! What a deleted EC2NodeClass leaves in the account, and the agent removes before letting the
//! class go: the launch templates made for it (upstream's `launchtemplate.DeleteAll`, by the
//! EKS cluster name and node class tags) and the instance profile the agent made for its role
//! (upstream's `cleanupInstanceProfiles`; only one whose tags say this cluster's agent made it
//! for this class, so a profile the user named in `instanceProfile` is never touched).

use super::nodeclass::{instance_profile_name, read_instance_profile};
use super::{AwsProvider, EKS_CLUSTER_NAME_TAG, cloud_error, cluster_tag, sdk_error_code};
use crate::apis::labels;
use crate::cloud::CloudError;
use aws_sdk_ec2::types::Filter;

impl AwsProvider {
    /// Deletes what the agent made for the node class `name` (see the module comment).
    /// Idempotent: what is already gone is skipped.
    pub(crate) async fn clean_up_node_class(&self, name: &str) -> Result<(), CloudError> {
        self.delete_launch_templates(name).await?;
        self.delete_instance_profile(name).await
    }

    async fn delete_launch_templates(&self, node_class: &str) -> Result<(), CloudError> {
        let ec2 = &self.clients.ec2;
        let mut names = Vec::new();
        let mut token = None;
        loop {
            let out = ec2
                .describe_launch_templates()
                .filters(
                    Filter::builder()
                        .name(format!("tag:{EKS_CLUSTER_NAME_TAG}"))
                        .values(&self.config.cluster_name)
                        .build(),
                )
                .filters(
                    Filter::builder()
                        .name(format!("tag:{}", labels::AWS_EC2_NODE_CLASS))
                        .values(node_class)
                        .build(),
                )
                .max_results(200)
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| cloud_error("listing the node class's launch templates", e))?;
            names.extend(
                out.launch_templates()
                    .iter()
                    .filter_map(|t| t.launch_template_name().map(str::to_owned)),
            );
            token = out.next_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        for name in &names {
            match ec2
                .delete_launch_template()
                .launch_template_name(name)
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) if sdk_error_code(&e).is_some_and(|c| c.contains("NotFound")) => {}
                Err(e) => return Err(cloud_error("deleting a launch template", e)),
            }
            self.launch_templates
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(name);
        }
        if !names.is_empty() {
            tracing::info!(node_class, launch_templates = ?names, "deleted launch templates");
        }
        Ok(())
    }

    async fn delete_instance_profile(&self, node_class: &str) -> Result<(), CloudError> {
        let iam = &self.clients.iam;
        let name =
            instance_profile_name(&self.config.cluster_name, &self.config.region, node_class);
        let profile = read_instance_profile(iam, &name).await?;
        let Some(profile) = profile else {
            return Ok(());
        };
        let tagged = |key: &str, value: &str| {
            profile
                .tags()
                .iter()
                .any(|t| t.key() == key && t.value() == value)
        };
        if !(tagged(&cluster_tag(&self.config.cluster_name), "owned")
            && tagged(labels::AWS_EC2_NODE_CLASS, node_class))
        {
            return Ok(());
        }
        for role in profile.roles() {
            match iam
                .remove_role_from_instance_profile()
                .instance_profile_name(&name)
                .role_name(role.role_name())
                .send()
                .await
            {
                Ok(_) => {}
                Err(e) if sdk_error_code(&e) == Some("NoSuchEntity") => {}
                Err(e) => {
                    return Err(cloud_error(
                        "removing the role from the instance profile",
                        e,
                    ));
                }
            }
        }
        match iam
            .delete_instance_profile()
            .instance_profile_name(&name)
            .send()
            .await
        {
            Ok(_) => {
                tracing::info!(node_class, instance_profile = %name, "deleted instance profile");
                Ok(())
            }
            Err(e) if sdk_error_code(&e) == Some("NoSuchEntity") => Ok(()),
            Err(e) => Err(cloud_error("deleting the instance profile", e)),
        }
    }
}
