//! One node class resolution for the providers that resolve their node class against the cloud
//! (aws, gcp), as a launch, the catalogue and the node class status controller need it: the
//! class read from the watch ([`NodeClasses`]) or, for a status, fresh from the API server; a
//! class that does not exist is [`CloudError::NodeClassNotReady`]; a recent resolution is reused
//! while the spec (and whatever else the provider resolves it with) is unchanged; otherwise the
//! provider resolves it, and the status that comes to is returned when it differs from the
//! class's, for the status controller to write (the provider makes no Kubernetes writes).
//!
//! What differs between providers lives in their folders, behind [`Resolver`]: the AWS provider
//! resolves with the cluster's Kubernetes version and reuses an answer only while the class is
//! Ready; the GCP provider resolves with the node template's boot image, which keys its cache.
//!
//! This mirrors how upstream's providers resolve a node class in their status controller and
//! reuse the result (upstream AWS: `pkg/controllers/nodeclass`, and the caches of the
//! `amifamily`, `subnet` and `securitygroup` providers).

use super::node_classes::NodeClasses;
use super::provider::CloudError;
use kube::Resource;
use kube::core::object::{HasSpec, HasStatus};
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What resolving a node class came to: the resolution (or why the class is not ready), and the
/// status to write when it differs from the one the class has.
#[derive(Debug)]
pub(crate) struct NodeClassResolution<Resolved, Status> {
    pub resolved: Result<Arc<Resolved>, CloudError>,
    pub status: Option<Status>,
}

/// Why a provider could not resolve a class.
pub(crate) enum Unresolved<Failed> {
    /// The class cannot be used as written; `failed` is what the provider's status names for it
    /// (the AWS provider: the condition that failed).
    NotReady { failed: Failed, reason: String },
    /// A cloud call failed.
    Cloud(CloudError),
}

/// The spec of a provider's node class kind.
type Spec<P> = <<P as Resolver>::Class as HasSpec>::Spec;
/// The status of a provider's node class kind.
type Status<P> = <<P as Resolver>::Class as HasStatus>::Status;

/// What a provider supplies to resolve its kind of node class; the flow around it (reading the
/// class, the cache, the status) is this module's.
pub(crate) trait Resolver: Sync {
    /// The node class kind (`EC2NodeClass`, `GCENodeClass`).
    type Class: Resource<DynamicType = ()>
        + HasSpec<Spec: Clone + PartialEq>
        + HasStatus<Status: Clone + Default>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
    /// What a resolution depends on besides the spec, read before the cache is asked: a
    /// resolution made with other inputs is not reused.
    type Inputs: PartialEq;
    /// What a class resolves to.
    type Resolved: Clone;
    /// What a failed resolution names besides its reason (see [`Unresolved::NotReady`]).
    type Failed;

    /// The resolutions this provider keeps.
    fn cache(&self) -> &NodeClassCache<Spec<Self>, Self::Inputs, Self::Resolved>;

    /// Reads the inputs a resolution depends on (see [`Self::Inputs`]).
    async fn inputs(&self) -> Result<Self::Inputs, CloudError>;

    /// Whether a cached resolution may answer for `class` at all.
    fn may_reuse(class: &Self::Class) -> bool;

    /// Resolves `class` against the cloud.
    async fn resolve(
        &self,
        class: &Self::Class,
        inputs: &Self::Inputs,
    ) -> Result<Self::Resolved, Unresolved<Self::Failed>>;

    /// The status a resolution (or its failure, with what it names) amounts to; `previous`
    /// keeps transition times.
    fn status(
        result: &Result<Self::Resolved, String>,
        failed: Option<Self::Failed>,
        generation: Option<i64>,
        previous: &Status<Self>,
    ) -> Status<Self>;

    /// Whether `status` says something `previous` does not.
    fn status_changed(status: &Status<Self>, previous: &Status<Self>) -> bool;
}

/// A provider's resolutions of its node classes by name, each with what it was made from, and
/// reused for `ttl`.
pub(crate) struct NodeClassCache<Spec, Inputs, Resolved> {
    ttl: Duration,
    entries: Mutex<HashMap<String, CachedNodeClass<Spec, Inputs, Resolved>>>,
}

/// A resolution, and what it was made from.
struct CachedNodeClass<Spec, Inputs, Resolved> {
    resolved_at: Instant,
    spec: Spec,
    inputs: Inputs,
    resolved: Arc<Resolved>,
}

impl<Spec: PartialEq, Inputs: PartialEq, Resolved> NodeClassCache<Spec, Inputs, Resolved> {
    /// An empty cache whose resolutions are reused for `ttl`.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The class's cached resolution, if it was made from the same spec and inputs within the
    /// TTL.
    fn fresh(&self, name: &str, spec: &Spec, inputs: &Inputs) -> Option<Arc<Resolved>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(name)
            .filter(|cached| {
                cached.spec == *spec
                    && cached.inputs == *inputs
                    && cached.resolved_at.elapsed() < self.ttl
            })
            .map(|cached| cached.resolved.clone())
    }

    /// Keeps a resolution for [`Self::fresh`].
    fn remember(&self, name: &str, spec: Spec, inputs: Inputs, resolved: Arc<Resolved>) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                name.to_owned(),
                CachedNodeClass {
                    resolved_at: Instant::now(),
                    spec,
                    inputs,
                    resolved,
                },
            );
    }
}

/// "reading the EC2NodeClass", for a failed read of the class.
fn reading<P: Resolver>() -> String {
    format!("reading the {}", P::Class::kind(&()))
}

/// Resolves the class `name` (reusing a recent answer), read from the watch: as a launch and
/// the catalogue need it.
pub(crate) async fn from_watch<P: Resolver>(
    provider: &P,
    classes: &NodeClasses<P::Class>,
    name: &str,
) -> Result<Arc<P::Resolved>, CloudError> {
    // From the watch: this is every round's and every launch's read (see `NodeClasses`).
    let class = classes
        .get(name)
        .await
        .map_err(|e| CloudError::api(reading::<P>(), e))?;
    resolve(provider, name, class.as_deref()).await?.resolved
}

/// Resolves the class `name` as [`from_watch`] does, read from the API server rather than the
/// watch so that a status follows the change that prompted it: as the node class status
/// controller needs it.
pub(crate) async fn from_api_server<P: Resolver>(
    provider: &P,
    kube: &kube::Client,
    name: &str,
) -> Result<NodeClassResolution<P::Resolved, Status<P>>, CloudError> {
    let api: kube::Api<P::Class> = kube::Api::all(kube.clone());
    let class = api
        .get_opt(name)
        .await
        .map_err(|e| CloudError::api(reading::<P>(), e))?;
    resolve(provider, name, class.as_ref()).await
}

/// Resolves the class `name` as found (`None`: there is none).
async fn resolve<P: Resolver>(
    provider: &P,
    name: &str,
    class: Option<&P::Class>,
) -> Result<NodeClassResolution<P::Resolved, Status<P>>, CloudError> {
    let Some(class) = class else {
        return Err(CloudError::NodeClassNotReady {
            name: name.to_owned(),
            reason: format!("{} {name} does not exist", P::Class::kind(&())),
        });
    };
    let previous = class.status().cloned().unwrap_or_default();
    let generation = class.meta().generation;
    let inputs = provider.inputs().await?;
    if P::may_reuse(class)
        && let Some(cached) = provider.cache().fresh(name, class.spec(), &inputs)
    {
        let status = P::status(&Ok((*cached).clone()), None, generation, &previous);
        return Ok(NodeClassResolution {
            resolved: Ok(cached),
            status: P::status_changed(&status, &previous).then_some(status),
        });
    }
    let (status, outcome) = match provider.resolve(class, &inputs).await {
        Ok(resolved) => {
            let resolved = Arc::new(resolved);
            (
                P::status(&Ok((*resolved).clone()), None, generation, &previous),
                Ok(resolved),
            )
        }
        Err(Unresolved::NotReady { failed, reason }) => (
            P::status(&Err(reason.clone()), Some(failed), generation, &previous),
            Err(CloudError::NodeClassNotReady {
                name: name.to_owned(),
                reason,
            }),
        ),
        Err(Unresolved::Cloud(e)) => return Err(e),
    };
    if let Ok(resolved) = &outcome {
        provider
            .cache()
            .remember(name, class.spec().clone(), inputs, resolved.clone());
    }
    Ok(NodeClassResolution {
        resolved: outcome,
        status: P::status_changed(&status, &previous).then_some(status),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resolution_is_reused_only_for_the_same_spec_and_inputs_within_the_ttl() {
        let cache: NodeClassCache<&str, Option<&str>, u32> =
            NodeClassCache::new(Duration::from_secs(60));
        assert!(cache.fresh("a", &"spec", &None).is_none());
        cache.remember("a", "spec", Some("image-1"), Arc::new(7));
        assert_eq!(
            cache.fresh("a", &"spec", &Some("image-1")).as_deref(),
            Some(&7)
        );
        assert!(cache.fresh("a", &"other spec", &Some("image-1")).is_none());
        assert!(cache.fresh("a", &"spec", &Some("image-2")).is_none());
        assert!(cache.fresh("b", &"spec", &Some("image-1")).is_none());
    }

    #[test]
    fn a_resolution_older_than_the_ttl_is_not_reused() {
        let cache: NodeClassCache<&str, (), u32> = NodeClassCache::new(Duration::ZERO);
        cache.remember("a", "spec", (), Arc::new(7));
        assert!(cache.fresh("a", &"spec", &()).is_none());
    }
}
