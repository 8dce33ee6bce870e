//! A provider's node classes (`KWOKNodeClass`, `EC2NodeClass`, `GCENodeClass`) as its launches,
//! catalogue and drift checks read them: from a watch of that kind, not a GET per call.
//!
//! Upstream's providers read their node class through controller-runtime's informer cache
//! (`kubeClient.Get` in `GetInstanceTypes`, `Create` and `IsDrifted` is a cached read). A GET
//! per call made every provisioning round wait on the API server: at 20,000 pods that GET was
//! 0.4 s of a round at the median and 2 s at p99, queued behind the scale-out's writes.
//!
//! A cache may lag, so a miss is not taken as an answer: a name the watch does not hold (a class
//! created a moment ago, or one that is gone) is read with a GET, as is every name until the
//! watch has listed once (and for as long as it cannot, e.g. without RBAC to list the kind).
//! The node class status controller does not read from here: it resolves the class the moment
//! it changes, so it reads the object fresh.

use futures::{FutureExt, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::{Arc, OnceLock};

/// The node classes of kind `K`, from a watch started on the first read.
pub(crate) struct NodeClasses<K: Resource<DynamicType = ()> + 'static> {
    api: Api<K>,
    watch: OnceLock<Watch<K>>,
}

/// The running watch; dropped with the provider, it stops.
struct Watch<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    task: tokio::task::AbortHandle,
}

impl<K: Resource<DynamicType = ()> + 'static> Drop for Watch<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> NodeClasses<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Node classes read through `client`. No request is made until the first read.
    pub(crate) fn new(client: Client) -> Self {
        Self {
            api: Api::all(client),
            watch: OnceLock::new(),
        }
    }

    /// The class `name` (`None`: there is none), from the watch when it holds the name, else
    /// from the API server.
    pub(crate) async fn get(&self, name: &str) -> Result<Option<Arc<K>>, kube::Error> {
        let store = &self.watch.get_or_init(|| self.start()).store;
        // `now_or_never`: a store that has not listed yet is not waited for; the GET answers.
        if let Some(Ok(())) = store.wait_until_ready().now_or_never()
            && let Some(class) = store.get(&ObjectRef::new(name))
        {
            return Ok(Some(class));
        }
        Ok(self.api.get_opt(name).await?.map(Arc::new))
    }

    /// Starts the watch. Called from `get`, so inside the runtime.
    fn start(&self) -> Watch<K> {
        let (store, writer) = reflector::store::<K>();
        let kind = K::kind(&()).into_owned();
        let events = watcher(self.api.clone(), watcher::Config::default())
            .default_backoff()
            .modify(|class: &mut K| class.managed_fields_mut().clear());
        let task = tokio::spawn(async move {
            reflector::reflector(writer, events)
                .for_each(|event| {
                    if let Err(error) = event {
                        // Reads fall back to a GET until the watch has listed; after that, the
                        // store keeps its last view while the watch reconnects.
                        tracing::warn!(%kind, %error, "watching node classes failed; retrying");
                    }
                    futures::future::ready(())
                })
                .await;
        });
        Watch {
            store,
            task: task.abort_handle(),
        }
    }
}
