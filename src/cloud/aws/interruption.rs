//! The interruption queue: EventBridge delivers EC2 and AWS Health events about this account's
//! instances to an SQS queue; this reads them, finds the NodeClaim of each instance by its
//! providerID and deletes it, so the lifecycle drains the node and provisioning replaces it
//! before (or as) the instance goes away. Upstream's `controllers/interruption`.
//!
//! | event (`detail-type`) | action |
//! |---|---|
//! | EC2 Spot Instance Interruption Warning | delete the claim; cache the spot offering as unavailable |
//! | AWS Health Event, category `scheduledChange`, service EC2 | delete the claim |
//! | EC2 Instance State-change Notification: stopping, stopped, shutting-down, terminated | delete the claim |
//! | EC2 Instance Rebalance Recommendation | an Event on the claim only |
//!
//! Every message is deleted from the queue once handled (or found unparseable), so none loops.

use super::unavailable::UnavailableOfferings;
use super::{FIELD_MANAGER, cloud_error};
use crate::apis::{NodeClaim, labels};
use crate::cloud::{CloudError, ProviderId};
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

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
    pub fn replaces_node(&self) -> bool {
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

/// The queue consumer.
pub struct InterruptionHandler {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    client: kube::Client,
    recorder: Recorder,
    unavailable: Arc<UnavailableOfferings>,
    /// Long-poll wait per ReceiveMessage (SQS allows up to 20 s).
    pub wait: Duration,
}

/// What one message led to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handled {
    pub interruption: Interruption,
    pub instance_id: String,
    /// The NodeClaim deleted (or, for a rebalance, told), if one matched.
    pub node_claim: Option<String>,
}

impl InterruptionHandler {
    /// A handler for the queue named `queue` (or its URL).
    pub async fn new(
        sqs: aws_sdk_sqs::Client,
        queue: &str,
        client: kube::Client,
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
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        Ok(Self {
            sqs,
            queue_url,
            client,
            recorder,
            unavailable,
            wait: Duration::from_secs(20),
        })
    }

    /// Receives one batch (long-polling up to `wait`), acts on it against the claims `claims`
    /// holds once the batch arrived (a claim launched during the long poll is among them),
    /// deletes the messages, and says what it did.
    pub async fn poll_once(&self, claims: &Store<NodeClaim>) -> Result<Vec<Handled>, CloudError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(i32::try_from(self.wait.as_secs()).unwrap_or(20).min(20))
            .send()
            .await
            .map_err(|e| cloud_error("reading the interruption queue (sqs:ReceiveMessage)", e))?;
        let mut handled = Vec::new();
        let claims = if out.messages().is_empty() {
            Vec::new()
        } else {
            claims.state()
        };
        for message in out.messages() {
            if let Some((interruption, ids)) = message.body().and_then(parse_message) {
                for instance_id in ids {
                    let node_claim = self.act(&interruption, &instance_id, &claims).await?;
                    handled.push(Handled {
                        interruption: interruption.clone(),
                        instance_id,
                        node_claim,
                    });
                }
            }
            if let Some(receipt) = message.receipt_handle() {
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
        }
        Ok(handled)
    }

    async fn act(
        &self,
        interruption: &Interruption,
        instance_id: &str,
        claims: &[Arc<NodeClaim>],
    ) -> Result<Option<String>, CloudError> {
        let claim = claims.iter().find(|c| {
            let id = c
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|p| p.parse::<ProviderId>().ok());
            matches!(id, Some(ProviderId::Aws { instance_id: ref i, .. }) if i == instance_id)
        });
        let Some(claim) = claim else {
            tracing::debug!(
                instance_id,
                ?interruption,
                "interruption event for an instance no NodeClaim owns"
            );
            return Ok(None);
        };
        let name = claim.name_any();
        let note = match interruption {
            Interruption::SpotInterruption => {
                format!("spot interruption warning for {instance_id}; replacing the node")
            }
            Interruption::ScheduledChange => {
                format!("AWS scheduled maintenance for {instance_id}; replacing the node")
            }
            Interruption::StateChange(state) => {
                format!("instance {instance_id} is {state}; replacing the node")
            }
            Interruption::RebalanceRecommendation => {
                format!("EC2 recommends rebalancing off {instance_id}")
            }
        };
        let event = Event {
            type_: EventType::Warning,
            reason: interruption.reason().to_owned(),
            note: Some(note.clone()),
            action: "Interrupt".to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &claim.object_ref(&())).await {
            warn!(nodeclaim = %name, error = %e, "could not publish the interruption event");
        }
        if !interruption.replaces_node() {
            info!(nodeclaim = %name, instance_id, "rebalance recommended");
            return Ok(Some(name));
        }
        if *interruption == Interruption::SpotInterruption {
            let labels = claim.labels();
            if let (Some(instance_type), Some(zone)) =
                (labels.get(labels::INSTANCE_TYPE), labels.get(labels::ZONE))
            {
                self.unavailable
                    .mark(labels::CAPACITY_TYPE_SPOT, instance_type, zone);
            }
        }
        if claim.metadata.deletion_timestamp.is_none() {
            let api: Api<NodeClaim> = Api::all(self.client.clone());
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {
                    info!(nodeclaim = %name, instance_id, %note, "deleted the nodeclaim of an interrupted instance")
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(CloudError::api("deleting the interrupted nodeclaim", e)),
            }
        }
        Ok(Some(name))
    }

    /// Polls until the future is dropped, acting on the claims `claims` holds; errors are logged
    /// and retried after a pause.
    pub async fn run(self, claims: Store<NodeClaim>) {
        loop {
            match self.poll_once(&claims).await {
                Ok(handled) => {
                    for h in handled {
                        tracing::debug!(?h, "interruption handled");
                    }
                }
                Err(e) => {
                    warn!(error = %e, cause = ?std::error::Error::source(&e), "reading the interruption queue failed; retrying");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
            }
        }
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
