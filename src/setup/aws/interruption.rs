//! Interruption handling's AWS side: the SQS queue (`interruption-queue`) and the EventBridge
//! rules that send health, spot interruption, rebalance, state-change and capacity-reservation
//! events to it (`interruption-rules`), as upstream's getting-started stack makes them.

use super::{Ctx, aws_error, code};
use crate::setup::{SetupError, Status};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::hash::Hasher as _;

impl Ctx {
    pub(super) async fn queue_arn(&self) -> Result<String, SetupError> {
        Ok(format!(
            "arn:{}:sqs:{}:{}:{}",
            self.partition(),
            self.options.region,
            self.account().await?,
            self.options.queue_name()
        ))
    }
}

async fn queue_url(ctx: &Ctx) -> Result<Option<String>, SetupError> {
    let name = ctx.options.queue_name();
    match ctx.sqs.get_queue_url().queue_name(&name).send().await {
        Ok(out) => Ok(out.queue_url().map(str::to_owned)),
        Err(e)
            if code(&e).is_some_and(|c| {
                c.contains("NonExistentQueue") || c.contains("QueueDoesNotExist")
            }) =>
        {
            Ok(None)
        }
        Err(e) => Err(aws_error("sqs:GetQueueUrl", &format!("queue {name}"), e)),
    }
}

async fn queue_policy(ctx: &Ctx) -> Result<Value, SetupError> {
    let arn = ctx.queue_arn().await?;
    Ok(
        json!({"Version": "2012-10-17", "Id": "EC2InterruptionPolicy", "Statement": [
            {"Effect": "Allow", "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]}, "Action": "sqs:SendMessage", "Resource": arn},
            {"Sid": "DenyHTTP", "Effect": "Deny", "Action": "sqs:*", "Resource": arn, "Condition": {"Bool": {"aws:SecureTransport": false}}, "Principal": "*"},
        ]}),
    )
}

pub(super) fn check_queue(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let name = ctx.options.queue_name();
        let Some(url) = queue_url(ctx).await? else {
            return Ok(Status::Needed(format!("create SQS queue {name}")));
        };
        let out = ctx
            .sqs
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
            .send()
            .await
            .map_err(|e| aws_error("sqs:GetQueueAttributes", &format!("queue {name}"), e))?;
        let attributes = out.attributes().cloned().unwrap_or_default();
        let retention = attributes
            .get(&aws_sdk_sqs::types::QueueAttributeName::MessageRetentionPeriod)
            .map(String::as_str);
        let policy = attributes
            .get(&aws_sdk_sqs::types::QueueAttributeName::Policy)
            .and_then(|p| serde_json::from_str::<Value>(p).ok());
        Ok(
            if retention == Some("300") && policy == Some(queue_policy(ctx).await?) {
                Status::InPlace(format!("queue {name}"))
            } else {
                Status::Needed(format!("set retention and policy of queue {name}"))
            },
        )
    })
}

pub(super) fn apply_queue(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let name = ctx.options.queue_name();
        let resource = format!("queue {name}");
        let url = match queue_url(ctx).await? {
            Some(url) => url,
            None => ctx
                .sqs
                .create_queue()
                .queue_name(&name)
                .attributes(A::SqsManagedSseEnabled, "true")
                .send()
                .await
                .map_err(|e| aws_error("sqs:CreateQueue", &resource, e))?
                .queue_url()
                .unwrap_or_default()
                .to_owned(),
        };
        ctx.sqs
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(A::MessageRetentionPeriod, "300")
            .attributes(A::Policy, queue_policy(ctx).await?.to_string())
            .send()
            .await
            .map_err(|e| aws_error("sqs:SetQueueAttributes", &resource, e))?;
        Ok(())
    })
}

/// The interruption rules: (suffix, event pattern).
fn rules(cluster: &str) -> Vec<(String, Value)> {
    [
        ("HealthEvent", json!({"source": ["aws.health"], "detail-type": ["AWS Health Event"]})),
        ("SpotInterruption", json!({"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]})),
        ("Rebalance", json!({"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]})),
        ("InstanceStateChange", json!({"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]})),
        ("CapacityReservationInterruption", json!({"source": ["aws.ec2"], "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"]})),
    ]
    .into_iter()
    .map(|(suffix, pattern)| {
        let mut name = format!("karpenter-{cluster}-{suffix}");
        if name.len() > 64 {
            // Rule names are at most 64 characters; keep them unique per cluster.
            let mut hasher = fnv::FnvHasher::default();
            hasher.write(cluster.as_bytes());
            name = format!("karpenter-{:016x}-{suffix}", hasher.finish());
        }
        (name, pattern)
    })
    .collect()
}

/// Rules missing, or not pointing at the queue.
async fn rules_missing(ctx: &Ctx) -> Result<Vec<String>, SetupError> {
    let queue_arn = ctx.queue_arn().await?;
    let mut missing = Vec::new();
    for (name, pattern) in rules(&ctx.options.cluster_name) {
        let rule = match ctx.events.describe_rule().name(&name).send().await {
            Ok(out) => Some(out),
            Err(e) if code(&e) == Some("ResourceNotFoundException") => None,
            Err(e) => return Err(aws_error("events:DescribeRule", &format!("rule {name}"), e)),
        };
        let pattern_ok = rule
            .as_ref()
            .and_then(|r| r.event_pattern())
            .and_then(|p| serde_json::from_str::<Value>(p).ok())
            == Some(pattern);
        let target_ok = if pattern_ok {
            let targets = ctx
                .events
                .list_targets_by_rule()
                .rule(&name)
                .send()
                .await
                .map_err(|e| aws_error("events:ListTargetsByRule", &format!("rule {name}"), e))?;
            targets.targets().iter().any(|t| t.arn() == queue_arn)
        } else {
            false
        };
        if !target_ok {
            missing.push(name);
        }
    }
    Ok(missing)
}

pub(super) fn check_rules(ctx: &Ctx) -> BoxFuture<'_, Result<Status, SetupError>> {
    Box::pin(async move {
        let missing = rules_missing(ctx).await?;
        Ok(if missing.is_empty() {
            Status::InPlace("5 EventBridge rules send to the queue".to_owned())
        } else {
            Status::Needed(format!("create {}", missing.join(", ")))
        })
    })
}

pub(super) fn apply_rules(ctx: &Ctx) -> BoxFuture<'_, Result<(), SetupError>> {
    Box::pin(async move {
        let queue_arn = ctx.queue_arn().await?;
        let missing = rules_missing(ctx).await?;
        for (name, pattern) in rules(&ctx.options.cluster_name)
            .into_iter()
            .filter(|(n, _)| missing.contains(n))
        {
            ctx.events
                .put_rule()
                .name(&name)
                .event_pattern(pattern.to_string())
                .description(format!(
                    "kubectl-karpenter interruption events for cluster {}",
                    ctx.options.cluster_name
                ))
                .send()
                .await
                .map_err(|e| aws_error("events:PutRule", &format!("rule {name}"), e))?;
            let target = aws_sdk_eventbridge::types::Target::builder()
                .id("KarpenterInterruptionQueueTarget")
                .arn(&queue_arn)
                .build()
                .map_err(|e| SetupError::Cloud {
                    action: format!("building the target of rule {name}"),
                    detail: e.to_string(),
                    source: Box::new(e),
                })?;
            ctx.events
                .put_targets()
                .rule(&name)
                .targets(target)
                .send()
                .await
                .map_err(|e| aws_error("events:PutTargets", &format!("rule {name}"), e))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_names_stay_within_64_characters() {
        for (name, _) in rules(&"x".repeat(100)) {
            assert!(name.len() <= 64, "{name}");
        }
        assert_eq!(rules("demo")[1].0, "karpenter-demo-SpotInterruption");
    }

    #[test]
    fn a_long_cluster_names_its_rules_by_a_hash_that_never_changes() {
        // The rules exist in accounts already: a re-run must find them under the same names.
        assert_eq!(
            rules(&"x".repeat(100))[1].0,
            "karpenter-052c9e7cec411035-SpotInterruption"
        );
        assert_eq!(
            rules("a-cluster-name-long-enough-that-karpenter-rules-overflow")[0].0,
            "karpenter-4f3fa6773dd8ca9b-HealthEvent"
        );
    }
}
