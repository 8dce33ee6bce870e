//! EC2: the `discovery-tags` step, `karpenter.sh/discovery=<cluster>` on the cluster's subnets
//! and security groups, which the starter EC2NodeClass selects them by.

use super::{Ctx, aws_error};
use crate::apis::labels;
use crate::setup::{SetupError, Status};
use futures::future::BoxFuture;

/// Subnets and security groups of the cluster that lack the discovery tag.
async fn untagged(ctx: &Ctx) -> Result<Vec<String>, SetupError> {
    let cluster = ctx.cluster().await?;
    let mut missing = Vec::new();
    let has_tag = |tags: &[aws_sdk_ec2::types::Tag]| {
        tags.iter().any(|t| {
            t.key() == Some(labels::DISCOVERY_TAG)
                && t.value() == Some(ctx.options.cluster_name.as_str())
        })
    };
    if !cluster.subnet_ids.is_empty() {
        let out = ctx
            .ec2
            .describe_subnets()
            .set_subnet_ids(Some(cluster.subnet_ids.clone()))
            .send()
            .await
            .map_err(|e| aws_error("ec2:DescribeSubnets", "the cluster's subnets", e))?;
        for s in out.subnets() {
            if !has_tag(s.tags()) {
                missing.extend(s.subnet_id().map(str::to_owned));
            }
        }
    }
    if !cluster.security_group_ids.is_empty() {
        let out = ctx
            .ec2
            .describe_security_groups()
            .set_group_ids(Some(cluster.security_group_ids.clone()))
            .send()
            .await
            .map_err(|e| {
                aws_error(
                    "ec2:DescribeSecurityGroups",
                    "the cluster's security groups",
                    e,
                )
            })?;
        for g in out.security_groups() {
            if !has_tag(g.tags()) {
                missing.extend(g.group_id().map(str::to_owned));
            }
        }
    }
    Ok(missing)
}

pub(super) fn check_discovery_tags(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let missing = untagged(ctx).await?;
        let tag = format!("{}={}", labels::DISCOVERY_TAG, ctx.options.cluster_name);
        Ok(if missing.is_empty() {
            Status::InPlace(format!(
                "the cluster's subnets and security groups carry {tag}"
            ))
        } else {
            Status::Needed(format!("tag {} with {tag}", missing.join(", ")))
        })
    })
}

pub(super) fn apply_discovery_tags(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let missing = untagged(ctx).await?;
        if missing.is_empty() {
            return Ok(());
        }
        ctx.ec2
            .create_tags()
            .set_resources(Some(missing.clone()))
            .tags(
                aws_sdk_ec2::types::Tag::builder()
                    .key(labels::DISCOVERY_TAG)
                    .value(&ctx.options.cluster_name)
                    .build(),
            )
            .send()
            .await
            .map_err(|e| aws_error("ec2:CreateTags", &missing.join(", "), e))?;
        Ok(())
    })
}
