//! The loops only the EC2 provider has, run beside the common controllers over the same
//! reflector stores: the interruption queue (spot interruptions, scheduled maintenance, state
//! changes → the claim is deleted, so the lifecycle drains the node and provisioning replaces
//! it) and the EC2NodeClass status (resolved subnets, security groups, AMIs and instance
//! profile, and a Ready condition that says what is missing).

use super::{Error, Running};
use crate::apis::EC2NodeClass;
use crate::cloud::CloudError;
use crate::cloud::aws::AwsProvider;
use crate::cloud::aws::interruption::InterruptionHandler;
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

/// How often a Ready node class is resolved again, so its status follows the account (a new
/// AMI release, a subnet tagged or untagged) without any change to the object.
const REFRESH_READY: Duration = Duration::from_secs(5 * 60);
/// How soon a node class that is not ready (or failed to resolve) is tried again.
const RETRY_NOT_READY: Duration = Duration::from_secs(15);

/// Starts the EC2 provider's loops beside `running`: EC2NodeClass status always, and the
/// interruption queue when the provider's config names one. Fails only when the queue cannot be
/// found, which is a configuration error worth stopping for.
pub async fn start(running: &mut Running<AwsProvider>) -> Result<(), Error> {
    let ctx = running.ctx.clone();
    running.spawn(node_classes(ctx.client.clone(), ctx.provider.clone()));
    if let Some(queue) = ctx.provider.config().interruption_queue.clone() {
        let handler = InterruptionHandler::new(
            ctx.provider.clients().sqs.clone(),
            &queue,
            ctx.client.clone(),
            ctx.provider.unavailable_offerings(),
        )
        .await
        .map_err(Error::cloud(format!(
            "opening the interruption queue {queue}"
        )))?;
        tracing::info!(%queue, "reading the interruption queue");
        running.spawn(handler.run(ctx.claims.clone()));
    }
    Ok(())
}

/// Keeps every EC2NodeClass's status current until cancelled: resolves it when it changes and
/// every few minutes after; the provider writes the status when the answer differs.
pub async fn node_classes(client: kube::Client, provider: Arc<AwsProvider>) {
    let api: Api<EC2NodeClass> = Api::all(client);
    Controller::new(api, watcher::Config::default())
        .run(reconcile_node_class, node_class_error, provider)
        .for_each(|_| futures::future::ready(()))
        .await;
}

async fn reconcile_node_class(
    class: Arc<EC2NodeClass>,
    provider: Arc<AwsProvider>,
) -> Result<Action, CloudError> {
    if class.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    match provider.resolve_node_class(&class.name_any()).await {
        Ok(_) => Ok(Action::requeue(REFRESH_READY)),
        Err(CloudError::NodeClassNotReady { reason, .. }) => {
            debug!(ec2nodeclass = %class.name_any(), %reason, "node class not ready");
            Ok(Action::requeue(RETRY_NOT_READY))
        }
        Err(e) => Err(e),
    }
}

fn node_class_error(class: Arc<EC2NodeClass>, error: &CloudError, _: Arc<AwsProvider>) -> Action {
    warn!(ec2nodeclass = %class.name_any(), error = %error, cause = ?std::error::Error::source(error), "resolving the node class failed; retrying");
    Action::requeue(RETRY_NOT_READY)
}
