//! Node class status: keeps every EC2NodeClass's and GCENodeClass's status current. The provider
//! resolves the class (selectors → subnets, security groups, AMIs, instance profile; or images)
//! and says which status that amounts to; this loop writes it, by server-side apply with the
//! agent's field manager, when it differs from the one the class has.
//!
//! Follows upstream's node class status controllers (`pkg/controllers/nodeclass` in
//! karpenter-provider-aws): resolved when the class changes and every few minutes after, so the
//! status follows the account (a new AMI release, a subnet tagged or untagged) without any change
//! to the object, with a Ready condition that says what is missing. A class carries upstream's
//! termination finalizer: deleted, it stays until no NodeClaim uses it and the provider has
//! deleted what it made for it (see [`reconcile_node_class`]).

use super::{Error, FIELD_MANAGER};
use crate::cloud::CloudError;
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::future::Future;
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

/// A provider whose node class has a status: it resolves a class by name into what launches
/// use, and the status that resolution amounts to (`None` when the class already says it).
pub trait NodeClassResolver: Send + Sync + 'static {
    /// The node class kind (EC2NodeClass, GCENodeClass).
    type Class: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static;
    /// What launches use from a resolved class.
    type Resolved: Send + Sync;
    /// The status written to the class.
    type Status: Serialize + Send + Sync;

    /// The finalizer that keeps a deleted class until [`Self::clean_up`] is done (upstream's
    /// `karpenter.k8s.aws/termination`).
    const FINALIZER: &'static str;

    /// Resolves the class `name`: the outcome for launches, and the status to write if it
    /// changed. The outer error is a failure to read the class at all.
    fn resolve_status(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Resolution<Self>, CloudError>> + Send;

    /// Deletes what the provider made in the cloud for the deleted class `name` (launch
    /// templates, an instance profile), once no NodeClaim uses it.
    fn clean_up(&self, name: &str) -> impl Future<Output = Result<(), CloudError>> + Send;
}

/// What resolving a node class came to (see [`NodeClassResolver::resolve_status`]).
pub(crate) type Resolution<P> = (
    Result<Arc<<P as NodeClassResolver>::Resolved>, CloudError>,
    Option<<P as NodeClassResolver>::Status>,
);

#[cfg(feature = "aws")]
impl NodeClassResolver for crate::cloud::aws::AwsProvider {
    type Class = crate::apis::EC2NodeClass;
    type Resolved = crate::cloud::aws::nodeclass::ResolvedNodeClass;
    type Status = crate::apis::EC2NodeClassStatus;

    const FINALIZER: &'static str = "karpenter.k8s.aws/termination";

    async fn resolve_status(&self, name: &str) -> Result<Resolution<Self>, CloudError> {
        let resolution = self.resolve_node_class_status(name).await?;
        Ok((resolution.resolved, resolution.status))
    }

    async fn clean_up(&self, name: &str) -> Result<(), CloudError> {
        self.clean_up_node_class(name).await
    }
}

#[cfg(feature = "gcp")]
impl NodeClassResolver for crate::cloud::gcp::GcpProvider {
    type Class = crate::apis::GCENodeClass;
    type Resolved = crate::cloud::gcp::nodeclass::ResolvedNodeClass;
    type Status = crate::apis::GCENodeClassStatus;

    const FINALIZER: &'static str = "karpenter.k8s.gcp/termination";

    async fn resolve_status(&self, name: &str) -> Result<Resolution<Self>, CloudError> {
        let resolution = self.resolve_node_class_status(name).await?;
        Ok((resolution.resolved, resolution.status))
    }

    /// Instances are made from the class directly, with nothing else in the project to
    /// delete.
    async fn clean_up(&self, _name: &str) -> Result<(), CloudError> {
        Ok(())
    }
}

/// Resolves one node class and writes its status when the answer changed; a class that is not
/// ready comes back as [`CloudError::NodeClassNotReady`] inside [`Error::Cloud`], its status
/// written first.
pub async fn sync_node_class<P: NodeClassResolver>(
    client: &kube::Client,
    provider: &P,
    name: &str,
) -> Result<Arc<P::Resolved>, Error> {
    let action = format!("resolving the {}", P::Class::kind(&()));
    let (resolved, status) = provider
        .resolve_status(name)
        .await
        .map_err(Error::cloud(action.clone()))?;
    if let Some(status) = &status {
        write_status::<P::Class>(client, name, status).await?;
    }
    resolved.map_err(Error::cloud(action))
}

/// How often a deleted class whose NodeClaims are still there is looked at again.
const WAIT_FOR_CLAIMS: Duration = Duration::from_secs(30);

/// One pass over a node class, as upstream's node class controller makes it: a live class gets
/// the termination finalizer and its status; a deleted one waits until no NodeClaim uses it,
/// then the provider cleans up after it (launch templates, instance profile) and the finalizer
/// comes off, so the class never goes while an instance could still be launched from it, and
/// nothing it made is left behind.
pub async fn reconcile_node_class<P: NodeClassResolver>(
    client: &kube::Client,
    provider: &P,
    class: &P::Class,
) -> Result<Action, Error> {
    let name = class.name_any();
    let kind = P::Class::kind(&());
    let finalizers = class.meta().finalizers.clone().unwrap_or_default();
    let has_finalizer = finalizers.iter().any(|f| f == P::FINALIZER);
    if class.meta().deletion_timestamp.is_none() {
        if !has_finalizer {
            let mut with = finalizers;
            with.push(P::FINALIZER.to_owned());
            set_finalizers(client, class, with).await?;
        }
        let synced = sync_node_class(client, provider, &name).await;
        return next_pass(&kind, &name, synced);
    }
    if !has_finalizer {
        return Ok(Action::await_change());
    }
    let claims = Api::<crate::apis::NodeClaim>::all(client.clone())
        .list(&kube::api::ListParams::default())
        .await
        .map_err(Error::kube("listing NodeClaims"))?;
    let using: Vec<String> = claims
        .items
        .iter()
        .filter(|c| {
            c.spec.node_class_ref.name == name
                && c.spec.node_class_ref.group == P::Class::group(&())
        })
        .map(ResourceExt::name_any)
        .collect();
    if !using.is_empty() {
        debug!(node_class = %name, nodeclaims = ?using, "deleted node class waits for its NodeClaims");
        return Ok(Action::requeue(WAIT_FOR_CLAIMS));
    }
    provider
        .clean_up(&name)
        .await
        .map_err(Error::cloud(format!("cleaning up after the {kind}")))?;
    let without = finalizers
        .into_iter()
        .filter(|f| f != P::FINALIZER)
        .collect();
    set_finalizers(client, class, without).await?;
    Ok(Action::await_change())
}

/// Sets a class's finalizers, only if it has not changed since it was read (a merge patch with
/// its resourceVersion, as controller-runtime's `MergeFromWithOptimisticLock`: a list in a merge
/// patch replaces the whole list).
async fn set_finalizers<K>(
    client: &kube::Client,
    class: &K,
    finalizers: Vec<String>,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": class.meta().resource_version,
        "finalizers": finalizers,
    }});
    match api
        .patch(
            &class.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Gone already: another agent (the one this replaces) finished the job.
        Err(e) if super::is_not_found(&e) => Ok(()),
        Err(e) => Err(Error::kube(format!(
            "setting the {} finalizers",
            K::kind(&())
        ))(e)),
    }
}

/// Keeps every node class's status current until cancelled: resolves it when it changes and
/// every few minutes after, and writes the status when the answer differs.
pub(crate) async fn node_classes<P: NodeClassResolver>(client: kube::Client, provider: Arc<P>) {
    async fn reconcile<P: NodeClassResolver>(
        class: Arc<P::Class>,
        ctx: Arc<(kube::Client, Arc<P>)>,
    ) -> Result<Action, Error> {
        reconcile_node_class(&ctx.0, &*ctx.1, &class).await
    }
    let api: Api<P::Class> = Api::all(client.clone());
    Controller::new(api, watcher::Config::default())
        .run(
            reconcile::<P>,
            |class, error, _| error_policy(&*class, error),
            Arc::new((client, provider)),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}
