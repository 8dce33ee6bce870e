//! The loops only the EC2 provider has, run beside the common controllers over the same
//! reflector stores: the interruption queue ([`super::interruption`]: spot interruptions,
//! scheduled maintenance, state changes → the claim is deleted, so the lifecycle drains the node
//! and provisioning replaces it) and the EC2NodeClass status ([`super::nodeclass_status`]:
//! resolved subnets, security groups, AMIs and instance profile, and a Ready condition that says
//! what is missing).

use super::interruption::InterruptionHandler;
use super::{Error, ProviderLoops, Running, nodeclass_status};
use crate::cloud::Metered;
use crate::cloud::aws::AwsProvider;
use crate::cloud::aws::interruption::InterruptionQueue;

/// Starts the EC2 provider's loops beside `running`: EC2NodeClass status always, and the
/// interruption queue when the provider's config names one. Fails only when the queue cannot be
/// found, which is a configuration error worth stopping for.
pub async fn start(running: &mut Running<Metered<AwsProvider>>) -> Result<(), Error> {
    let ctx = running.ctx.clone();
    ctx.provider.report_prices_to(ctx.metrics.clone());
    // Resolving node classes is the provider's own business, not a CloudProvider call.
    running.spawn(
        super::names::NODE_CLASS_STATUS,
        nodeclass_status::node_classes(ctx.client.clone(), ctx.provider.inner().clone()),
    );
    if let Some(queue) = ctx.provider.config().interruption_queue.clone() {
        let sqs = InterruptionQueue::new(
            ctx.provider.clients().sqs.clone(),
            &queue,
            ctx.provider.unavailable_offerings(),
        )
        .await
        .map_err(Error::cloud(format!(
            "opening the interruption queue {queue}"
        )))?;
        tracing::info!(%queue, "reading the interruption queue");
        let handler = InterruptionHandler::new(sqs, ctx.client.clone(), ctx.recorder.clone());
        running.spawn(
            super::names::INTERRUPTION,
            handler.run(ctx.cluster.claims.clone()),
        );
    }
    Ok(())
}

impl ProviderLoops for AwsProvider {
    fn start_loops(
        running: &mut Running<Metered<Self>>,
    ) -> impl Future<Output = Result<(), Error>> {
        start(running)
    }
}
