//! Node class status: keeps every EC2NodeClass's and GCENodeClass's status current. The provider
//! resolves the class (selectors → subnets, security groups, AMIs, instance profile; or images)
//! and says which status that amounts to; this loop writes it, by server-side apply with the
//! agent's field manager, when it differs from the one the class has.
//!
//! Follows upstream's node class status controllers (`pkg/controllers/nodeclass` in
//! karpenter-provider-aws): resolved when the class changes and every few minutes after, so the
//! status follows the account (a new AMI release, a subnet tagged or untagged) without any change
//! to the object, with a Ready condition that says what is missing.

use super::{Error, FIELD_MANAGER};
use crate::cloud::CloudError;
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, warn};

/// How often a Ready node class is resolved again, so its status follows the account (a new
/// AMI release, a subnet tagged or untagged) without any change to the object.
const REFRESH_READY: Duration = Duration::from_secs(5 * 60);
/// How soon a node class that is not ready (or failed to resolve) is tried again.
const RETRY_NOT_READY: Duration = Duration::from_secs(15);

/// Writes a node class's status (server-side apply, the agent's field manager).
async fn write_status<K>(
    client: &kube::Client,
    name: &str,
    status: &impl Serialize,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(Error::kube(format!("writing the {} status", K::kind(&()))))?;
    Ok(())
}

/// What a pass over a node class comes to: requeue soon when it is not ready, later when it is.
fn next_pass<R>(kind: &str, name: &str, synced: Result<R, Error>) -> Result<Action, Error> {
    match synced {
        Ok(_) => Ok(Action::requeue(REFRESH_READY)),
        Err(Error::Cloud {
            source: CloudError::NodeClassNotReady { reason, .. },
            ..
        }) => {
            debug!(kind, nodeclass = name, %reason, "node class not ready");
            Ok(Action::requeue(RETRY_NOT_READY))
        }
        Err(e) => Err(e),
    }
}

fn error_policy<K: Resource<DynamicType = ()>>(class: &K, error: &Error) -> Action {
    warn!(kind = %K::kind(&()), nodeclass = %class.name_any(), error = %error, cause = ?std::error::Error::source(error), "resolving the node class failed; retrying");
    Action::requeue(RETRY_NOT_READY)
}

/// Resolves one EC2NodeClass and writes its status when the answer changed; a class that is not
/// ready comes back as [`CloudError::NodeClassNotReady`] inside [`Error::Cloud`], its status
/// written first.
#[cfg(feature = "aws")]
pub async fn sync_ec2_node_class(
    client: &kube::Client,
    provider: &crate::cloud::aws::AwsProvider,
    name: &str,
) -> Result<Arc<crate::cloud::aws::nodeclass::ResolvedNodeClass>, Error> {
    let resolution = provider
        .resolve_node_class_status(name)
        .await
        .map_err(Error::cloud("resolving the EC2NodeClass"))?;
    if let Some(status) = &resolution.status {
        write_status::<crate::apis::EC2NodeClass>(client, name, status).await?;
    }
    resolution
        .resolved
        .map_err(Error::cloud("resolving the EC2NodeClass"))
}

/// Keeps every EC2NodeClass's status current until cancelled: resolves it when it changes and
/// every few minutes after, and writes the status when the answer differs.
#[cfg(feature = "aws")]
pub async fn ec2_node_classes(client: kube::Client, provider: Arc<crate::cloud::aws::AwsProvider>) {
    use crate::apis::EC2NodeClass;
    use crate::cloud::aws::AwsProvider;

    async fn reconcile(
        class: Arc<EC2NodeClass>,
        ctx: Arc<(kube::Client, Arc<AwsProvider>)>,
    ) -> Result<Action, Error> {
        if class.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let name = class.name_any();
        let synced = sync_ec2_node_class(&ctx.0, &ctx.1, &name).await;
        next_pass("EC2NodeClass", &name, synced)
    }
    let api: Api<EC2NodeClass> = Api::all(client.clone());
    Controller::new(api, watcher::Config::default())
        .run(
            reconcile,
            |class, error, _| error_policy(&*class, error),
            Arc::new((client, provider)),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Resolves one GCENodeClass and writes its status when the answer changed; a class that is not
/// ready comes back as [`CloudError::NodeClassNotReady`] inside [`Error::Cloud`], its status
/// written first.
#[cfg(feature = "gcp")]
pub async fn sync_gce_node_class(
    client: &kube::Client,
    provider: &crate::cloud::gcp::GcpProvider,
    name: &str,
) -> Result<Arc<crate::cloud::gcp::nodeclass::ResolvedNodeClass>, Error> {
    let resolution = provider
        .resolve_node_class_status(name)
        .await
        .map_err(Error::cloud("resolving the GCENodeClass"))?;
    if let Some(status) = &resolution.status {
        write_status::<crate::apis::GCENodeClass>(client, name, status).await?;
    }
    resolution
        .resolved
        .map_err(Error::cloud("resolving the GCENodeClass"))
}

/// Keeps every GCENodeClass's status current until cancelled, as [`ec2_node_classes`] does for
/// EC2NodeClasses.
#[cfg(feature = "gcp")]
pub async fn gce_node_classes(client: kube::Client, provider: Arc<crate::cloud::gcp::GcpProvider>) {
    use crate::apis::GCENodeClass;
    use crate::cloud::gcp::GcpProvider;

    async fn reconcile(
        class: Arc<GCENodeClass>,
        ctx: Arc<(kube::Client, Arc<GcpProvider>)>,
    ) -> Result<Action, Error> {
        if class.metadata.deletion_timestamp.is_some() {
            return Ok(Action::await_change());
        }
        let name = class.name_any();
        let synced = sync_gce_node_class(&ctx.0, &ctx.1, &name).await;
        next_pass("GCENodeClass", &name, synced)
    }
    let api: Api<GCENodeClass> = Api::all(client.clone());
    Controller::new(api, watcher::Config::default())
        .run(
            reconcile,
            |class, error, _| error_policy(&*class, error),
            Arc::new((client, provider)),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}
