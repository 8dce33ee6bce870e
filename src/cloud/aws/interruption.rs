//! The interruption queue's SQS side: EventBridge delivers EC2 and AWS Health events about this
//! account's instances to an SQS queue; this receives them, decodes each into the instances it
//! is about and what happened to them, deletes handled messages, and caches an interrupted spot
//! offering as unavailable. The controller that acts on them (finds the NodeClaim by providerID,
//! deletes it, records the Event) is `controllers::interruption`; together they are upstream's
//! `controllers/interruption` (its `sqs` provider and message parsers live here).
//!
//! | event (`detail-type`) | action |
//! |---|---|
//! | EC2 Spot Instance Interruption Warning | delete the claim; cache the spot offering as unavailable |
//! | AWS Health Event, category `scheduledChange`, service EC2 | delete the claim |
//! | EC2 Instance State-change Notification: stopping, stopped, shutting-down, terminated | delete the claim |
//! | EC2 Instance Rebalance Recommendation | an Event on the claim only |
//!
//! Every message is deleted from the queue once handled (or found unparseable), so none loops.

use super::cloud_error;
use crate::apis::CapacityType;
use crate::cloud::CloudError;
use crate::cloud::unavailable::UnavailableOfferings;
use std::sync::Arc;
use std::time::Duration;

/// What an event means for an instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// Spot will reclaim the instance in two minutes.
    SpotInterruption,
    /// AWS scheduled maintenance that stops or retires the instance.
    ScheduledChange,
    /// The instance is stopping, stopped or terminating.
    StateChange(String),
    /// EC2 suggests moving off the instance; nothing is deleted.
    RebalanceRecommendation,
}

impl Interruption {
    /// Whether the node should be replaced (everything but a rebalance recommendation).
    pub(crate) fn replaces_node(&self) -> bool {
        !matches!(self, Self::RebalanceRecommendation)
    }

    /// The Event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::SpotInterruption => "SpotInterrupted",
            Self::ScheduledChange => "InstanceScheduledChange",
            Self::StateChange(_) => "InstanceStateChange",
            Self::RebalanceRecommendation => "InstanceRebalanceRecommended",
        }
    }
}

/// Parses one EventBridge message into the instances it is about and what happened to them;
/// `None` for events that need no action (or are not ours to understand).
pub fn parse_message(body: &str) -> Option<(Interruption, Vec<String>)> {
    let event: serde_json::Value = serde_json::from_str(body).ok()?;
    let detail_type = event.get("detail-type")?.as_str()?;
    let source = event
        .get("source")
        .and_then(|s| s.as_str())
        .unwrap_or_default();
    let detail = event.get("detail")?;
    let instance_id = || {
        detail
            .get("instance-id")
            .and_then(|i| i.as_str())
            .map(|i| vec![i.to_owned()])
    };
    match (source, detail_type) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => {
            Some((Interruption::SpotInterruption, instance_id()?))
        }
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => {
            Some((Interruption::RebalanceRecommendation, instance_id()?))
        }
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let state = detail.get("state")?.as_str()?;
            matches!(
                state,
                "stopping" | "stopped" | "shutting-down" | "terminated"
            )
            .then(|| instance_id().map(|ids| (Interruption::StateChange(state.to_owned()), ids)))
            .flatten()
        }
        ("aws.health", "AWS Health Event") => {
            let ec2 = detail.get("service").and_then(|s| s.as_str()) == Some("EC2");
            let scheduled =
                detail.get("eventTypeCategory").and_then(|s| s.as_str()) == Some("scheduledChange");
            let ids: Vec<String> = detail
                .get("affectedEntities")?
                .as_array()?
                .iter()
                .filter_map(|e| {
                    e.get("entityValue")
                        .and_then(|v| v.as_str())
                        .map(str::to_owned)
                })
                .collect();
            (ec2 && scheduled && !ids.is_empty()).then_some((Interruption::ScheduledChange, ids))
        }
        _ => None,
    }
}

/// The queue: receives, decodes and deletes its messages.
pub struct InterruptionQueue {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    unavailable: Arc<UnavailableOfferings>,
    /// Long-poll wait per ReceiveMessage (SQS allows up to 20 s).
    pub wait: Duration,
}

/// One message received: what it says happened, to which instances (`None` for events that need
/// no action, or are not ours to understand), and the receipt that deletes it once handled.
#[derive(Clone, Debug)]
pub struct Message {
    pub interruption: Option<(Interruption, Vec<String>)>,
    receipt_handle: Option<String>,
}

impl InterruptionQueue {
    /// The queue named `queue` (or its URL).
    pub async fn new(
        sqs: aws_sdk_sqs::Client,
        queue: &str,
        unavailable: Arc<UnavailableOfferings>,
    ) -> Result<Self, CloudError> {
        let queue_url = if queue.starts_with("http://") || queue.starts_with("https://") {
            queue.to_owned()
        } else {
            let out = sqs
                .get_queue_url()
                .queue_name(queue)
                .send()
                .await
                .map_err(|e| cloud_error("finding the interruption queue (sqs:GetQueueUrl)", e))?;
            out.queue_url().unwrap_or_default().to_owned()
        };
        Ok(Self {
            sqs,
            queue_url,
            unavailable,
            wait: Duration::from_secs(20),
        })
    }

    /// Receives one batch, long-polling up to `wait`, each message decoded.
    pub async fn receive(&self) -> Result<Vec<Message>, CloudError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(i32::try_from(self.wait.as_secs()).unwrap_or(20).min(20))
            .send()
            .await
            .map_err(|e| cloud_error("reading the interruption queue (sqs:ReceiveMessage)", e))?;
        Ok(out
            .messages()
            .iter()
            .map(|message| Message {
                interruption: message.body().and_then(parse_message),
                receipt_handle: message.receipt_handle().map(str::to_owned),
            })
            .collect())
    }

    /// Deletes a handled (or unparseable) message, so none loops.
    pub async fn delete(&self, message: &Message) -> Result<(), CloudError> {
        if let Some(receipt) = &message.receipt_handle {
            self.sqs
                .delete_message()
                .queue_url(&self.queue_url)
                .receipt_handle(receipt)
                .send()
                .await
                .map_err(|e| {
                    cloud_error("deleting an interruption message (sqs:DeleteMessage)", e)
                })?;
        }
        Ok(())
    }

    /// Caches the spot offering of an interrupted instance as unavailable, so the replacement
    /// launches elsewhere.
    pub(crate) fn mark_spot_unavailable(&self, instance_type: &str, zone: &str) {
        self.unavailable
            .mark(CapacityType::Spot, instance_type, zone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_event_kinds_parse_as_upstream_handles_them() {
        let spot = r#"{"version":"0","id":"1","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","region":"us-west-2","detail":{"instance-id":"i-1","instance-action":"terminate"}}"#;
        assert_eq!(
            parse_message(spot),
            Some((Interruption::SpotInterruption, vec!["i-1".to_owned()]))
        );
        let rebalance = r#"{"detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","detail":{"instance-id":"i-2"}}"#;
        let (kind, _) = parse_message(rebalance).unwrap();
        assert!(!kind.replaces_node());
        let stopping = r#"{"detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","detail":{"instance-id":"i-3","state":"stopping"}}"#;
        assert_eq!(
            parse_message(stopping),
            Some((
                Interruption::StateChange("stopping".into()),
                vec!["i-3".to_owned()]
            ))
        );
        let running = r#"{"detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","detail":{"instance-id":"i-3","state":"running"}}"#;
        assert_eq!(parse_message(running), None);
        let health = r#"{"detail-type":"AWS Health Event","source":"aws.health","detail":{"service":"EC2","eventTypeCategory":"scheduledChange","affectedEntities":[{"entityValue":"i-4"},{"entityValue":"i-5"}]}}"#;
        assert_eq!(
            parse_message(health),
            Some((
                Interruption::ScheduledChange,
                vec!["i-4".to_owned(), "i-5".to_owned()]
            ))
        );
        assert_eq!(parse_message("not json"), None);
    }
}
