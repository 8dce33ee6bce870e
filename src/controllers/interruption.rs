//! The interruption controller: acts on what the interruption queue
//! ([`crate::cloud::aws::interruption`]) reports about this account's instances. It finds the
//! NodeClaim of each instance by its providerID, records an Event on it, and (for everything but
//! a rebalance recommendation) deletes it, so the lifecycle drains the node and provisioning
//! replaces it before (or as) the instance goes away; an interrupted spot offering is cached as
//! unavailable first. Upstream's `controllers/interruption` (in karpenter-provider-aws).
//!
//! Every message is deleted from the queue once handled (or found unparseable), so none loops;
//! one whose claim could not be deleted stays, and SQS delivers it again.

use super::Error;
use crate::apis::{NodeClaim, labels};
use crate::cloud::ProviderId;
use crate::cloud::aws::interruption::{Interruption, InterruptionQueue};
use kube::api::{Api, DeleteParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// The queue consumer.
pub(crate) struct InterruptionHandler {
    queue: InterruptionQueue,
    client: kube::Client,
    recorder: Recorder,
}

/// What one message led to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Handled {
    pub interruption: Interruption,
    pub instance_id: String,
    /// The NodeClaim deleted (or, for a rebalance, told), if one matched.
    pub node_claim: Option<String>,
}

impl InterruptionHandler {
    /// A handler for `queue`, deleting claims through `client` and recording Events with
    /// `recorder`.
    pub(crate) fn new(queue: InterruptionQueue, client: kube::Client, recorder: Recorder) -> Self {
        Self {
            queue,
            client,
            recorder,
        }
    }

    /// Receives one batch (long-polling up to the queue's `wait`), acts on it against the claims
    /// `claims` holds once the batch arrived (a claim launched during the long poll is among
    /// them), deletes the messages, and says what it did.
    pub(crate) async fn poll_once(&self, claims: &Store<NodeClaim>) -> Result<Vec<Handled>, Error> {
        let messages = self
            .queue
            .receive()
            .await
            .map_err(Error::cloud("receiving interruption messages"))?;
        let mut handled = Vec::new();
        let claims = if messages.is_empty() {
            Vec::new()
        } else {
            claims.state()
        };
        for message in &messages {
            if let Some((interruption, ids)) = &message.interruption {
                for instance_id in ids {
                    let node_claim = self.act(interruption, instance_id, &claims).await?;
                    handled.push(Handled {
                        interruption: interruption.clone(),
                        instance_id: instance_id.clone(),
                        node_claim,
                    });
                }
            }
            self.queue
                .delete(message)
                .await
                .map_err(Error::cloud("deleting an interruption message"))?;
        }
        Ok(handled)
    }

    async fn act(
        &self,
        interruption: &Interruption,
        instance_id: &str,
        claims: &[Arc<NodeClaim>],
    ) -> Result<Option<String>, Error> {
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
                self.queue.mark_spot_unavailable(instance_type, zone);
            }
        }
        if claim.metadata.deletion_timestamp.is_none() {
            let api: Api<NodeClaim> = Api::all(self.client.clone());
            match api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {
                    info!(nodeclaim = %name, instance_id, %note, "deleted the nodeclaim of an interrupted instance")
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(Error::kube("deleting the interrupted nodeclaim")(e)),
            }
        }
        Ok(Some(name))
    }

    /// Polls until the future is dropped, acting on the claims `claims` holds; errors are logged
    /// and retried after a pause.
    pub(crate) async fn run(self, claims: Store<NodeClaim>) {
        // A queue that cannot be read (deleted, access denied, throttled) is asked again after
        // 1 s, doubling to 1 minute, not every 5 s for as long as it fails.
        let failures =
            super::backoff::FailureBackoff::new(Duration::from_secs(1), Duration::from_secs(60));
        loop {
            match self.poll_once(&claims).await {
                Ok(handled) => {
                    failures.succeeded("queue");
                    for h in handled {
                        tracing::debug!(?h, "interruption handled");
                    }
                }
                Err(e) => {
                    let wait = failures.failed("queue");
                    warn!(error = %e, cause = ?std::error::Error::source(&e), retry_in_ms = wait.as_millis(),
                        "reading the interruption queue failed; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}
