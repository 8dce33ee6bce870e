//! Watches of the agent's own kinds (NodePool, NodeClaim) that survive an object the agent
//! cannot decode.
//!
//! kube's watcher decodes a whole list at once: one NodePool the agent's types cannot read (a
//! value a newer CRD allows, such as a new enum member, written by a newer upstream Karpenter or
//! a user who upgraded the CRDs first) failed every list, so the store never filled and the agent
//! never started. Here the objects arrive untyped and are decoded one by one; one that does not
//! decode is reported (a warning log line and a Warning Event on it, through the caller's
//! `on_undecodable`) and left out:
//!
//! * at start-up or a re-list, it is not in the store: the agent does nothing with it;
//! * on an update, the store keeps the version last read, so a pool the agent already ran
//!   keeps its nodes, with the Event saying the edit was not taken;
//! * on a delete, the version last read is removed (from `last_read`), so nothing stays behind.
//!
//! Upstream (Go) has no such step because its decoder ignores what it does not know; an enum
//! value it does not know is still a string there, which its controllers then treat as unknown.

use futures::{Stream, StreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The objects of one kind that do not decode, as the watch last saw them: what the API server
/// lists but the store will not hold. The provisioner's "is the store synced" check counts them
/// as seen (or it would wait for them forever), and garbage collection keeps the instances they
/// name: for each, its `status.providerID` read from the raw object, if it has one.
#[derive(Clone, Debug, Default)]
pub struct Unreadable(Arc<Mutex<BTreeMap<String, Option<String>>>>);

impl Unreadable {
    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Option<String>>> {
        // Only names are behind the lock; a panic elsewhere leaves them usable.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the object `name` does not decode.
    pub fn contains(&self, name: &str) -> bool {
        self.entries().contains_key(name)
    }

    /// The names of the objects that do not decode.
    pub fn names(&self) -> Vec<String> {
        self.entries().keys().cloned().collect()
    }

    /// The object that does not decode and records `provider_id`, if one does.
    pub fn owner_of(&self, provider_id: &str) -> Option<String> {
        self.entries()
            .iter()
            .find(|(_, id)| id.as_deref() == Some(provider_id))
            .map(|(name, _)| name.clone())
    }

    /// The provider IDs the objects that do not decode record.
    pub fn provider_ids(&self) -> Vec<String> {
        self.entries().values().flatten().cloned().collect()
    }

    /// Records `name` as unreadable, as the watch would on an object it cannot decode.
    #[cfg(test)]
    pub(crate) fn insert_for_test(&self, name: &str, provider_id: Option<&str>) {
        self.entries()
            .insert(name.to_owned(), provider_id.map(str::to_owned));
    }

    fn set(&self, object: &DynamicObject, unreadable: bool) {
        let Some(name) = object.metadata.name.as_deref() else {
            return;
        };
        let mut entries = self.entries();
        if unreadable {
            let provider_id = object.data["status"]["providerID"]
                .as_str()
                .map(str::to_owned);
            entries.insert(name.to_owned(), provider_id);
        } else {
            entries.remove(name);
        }
    }
}

/// The Event reason on an object the agent cannot read.
pub(crate) const FAILED_TO_DECODE: &str = "FailedToDecode";

/// `object` as `K`, or why not.
pub(crate) fn decode<K: DeserializeOwned>(object: &DynamicObject) -> Result<K, serde_json::Error> {
    serde_json::to_value(object).and_then(serde_json::from_value)
}

/// The events of `raw` with each object decoded as `K`; objects that do not decode are passed
/// to `on_undecodable` and left out, except that the delete of one removes the version
/// `last_read` holds.
pub(crate) fn decoded<K, S>(
    raw: S,
    last_read: Store<K>,
    unreadable: Unreadable,
    on_undecodable: impl Fn(&DynamicObject, &serde_json::Error) + Send + Sync + 'static,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Send + Sync + 'static,
    S: Stream<Item = Result<Event<DynamicObject>, watcher::Error>> + Send,
{
    let on_undecodable = Arc::new(on_undecodable);
    raw.filter_map(move |event| {
        let on_undecodable = on_undecodable.clone();
        let last_read = last_read.clone();
        let unreadable = unreadable.clone();
        let typed = |object: DynamicObject| {
            let decoded = decode::<K>(&object);
            unreadable.set(&object, decoded.is_err());
            match decoded {
                Ok(typed) => Some(typed),
                Err(error) => {
                    on_undecodable(&object, &error);
                    None
                }
            }
        };
        let out = match event {
            Err(e) => Some(Err(e)),
            Ok(Event::Init) => {
                // A re-list names every object again.
                unreadable.entries().clear();
                Some(Ok(Event::Init))
            }
            Ok(Event::InitDone) => Some(Ok(Event::InitDone)),
            Ok(Event::InitApply(object)) => typed(object).map(|k| Ok(Event::InitApply(k))),
            Ok(Event::Apply(object)) => typed(object).map(|k| Ok(Event::Apply(k))),
            Ok(Event::Delete(object)) => {
                unreadable.set(&object, false);
                let name = object.metadata.name.clone().unwrap_or_default();
                let mut reference = ObjectRef::<K>::new(&name);
                if let Some(namespace) = &object.metadata.namespace {
                    reference = reference.within(namespace);
                }
                match decode::<K>(&object) {
                    Ok(typed) => Some(Ok(Event::Delete(typed))),
                    Err(_) => last_read
                        .get(&reference)
                        .map(|k| Ok(Event::Delete((*k).clone()))),
                }
            }
        };
        futures::future::ready(out)
    })
}

/// A watch of every `K` in the cluster, decoded one object at a time (see the module doc).
pub(crate) fn watch<K>(
    client: Client,
    last_read: Store<K>,
    unreadable: Unreadable,
    on_undecodable: impl Fn(&DynamicObject, &serde_json::Error) + Send + Sync + 'static,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Send + Sync + 'static,
{
    let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<K>(&()));
    decoded(
        watcher(api, watcher::Config::default()),
        last_read,
        unreadable,
        on_undecodable,
    )
}

/// Reports an object of kind `K` that does not decode: a warning log line, and a Warning Event
/// on the object, which `kubectl describe` shows.
pub(crate) fn report_undecodable<K: Resource<DynamicType = ()>>(
    recorder: Recorder,
) -> impl Fn(&DynamicObject, &serde_json::Error) + Send + Sync + 'static {
    let resource = ApiResource::erase::<K>(&());
    move |object, error| {
        let name = object.metadata.name.clone().unwrap_or_default();
        tracing::warn!(kind = %resource.kind, name, %error,
            "cannot read this object; leaving it out (is the agent older than the CRDs?)");
        let mut note = format!(
            "karpenter-agent cannot read this {}: {error}. It keeps acting on the version it last read, if any; an agent older than the CRDs is the usual cause",
            resource.kind
        );
        // events.k8s.io/v1 refuses a note over 1 kB.
        if let Some((cut, _)) = note.char_indices().nth(1000) {
            note.truncate(cut);
        }
        let reference = object.object_ref(&resource);
        let recorder = recorder.clone();
        tokio::spawn(async move {
            let event = KubeEvent {
                type_: EventType::Warning,
                reason: FAILED_TO_DECODE.to_owned(),
                note: Some(note),
                action: "Decode".to_owned(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::warn!(error = %e, "could not publish event");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::NodePool;
    use kube::runtime::reflector;
    use std::sync::Mutex;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).expect("a dynamic object")
    }

    fn pool(name: &str, policy: &str) -> DynamicObject {
        object(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "1"},
            "spec": {
                "disruption": {"consolidationPolicy": policy, "consolidateAfter": "0s"},
                "template": {"spec": {
                    "requirements": [],
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                }},
            },
        }))
    }

    #[tokio::test]
    async fn a_pool_the_agent_cannot_read_is_reported_and_left_out_and_the_others_arrive() {
        let (store, mut writer) = reflector::store::<NodePool>();
        let reported = Arc::new(Mutex::new(Vec::new()));
        let seen = reported.clone();
        let raw = futures::stream::iter(vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pool("good", "WhenEmpty"))),
            Ok(Event::InitApply(pool(
                "from-the-future",
                "WhenTheMoonIsFull",
            ))),
            Ok(Event::InitDone),
        ]);
        let unreadable = Unreadable::default();
        let events: Vec<_> = decoded(
            raw,
            store.clone(),
            unreadable.clone(),
            move |object, error| {
                seen.lock()
                    .expect("not poisoned")
                    .push((object.metadata.name.clone(), error.to_string()));
            },
        )
        .collect()
        .await;
        for event in &events {
            writer.apply_watcher_event(event.as_ref().expect("no watch error"));
        }
        let names: Vec<String> = store
            .state()
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(names, ["good"]);
        assert!(unreadable.contains("from-the-future") && !unreadable.contains("good"));
        let reported = reported.lock().expect("not poisoned");
        assert_eq!(reported.len(), 1);
        assert_eq!(reported[0].0.as_deref(), Some("from-the-future"));
        assert!(reported[0].1.contains("WhenTheMoonIsFull"), "{reported:?}");
    }

    #[tokio::test]
    async fn an_unreadable_update_keeps_the_version_last_read_and_its_delete_removes_it() {
        let (store, mut writer) = reflector::store::<NodePool>();
        writer.apply_watcher_event(&Event::Apply(
            decode(&pool("p", "WhenEmpty")).expect("good"),
        ));
        let raw = futures::stream::iter(vec![Ok(Event::Apply(pool("p", "Sometimes")))]);
        let events: Vec<_> = decoded(raw, store.clone(), Unreadable::default(), |_, _| {})
            .collect()
            .await;
        assert!(events.is_empty(), "the unreadable update is left out");
        assert_eq!(store.state().len(), 1, "the version last read stays");

        let raw = futures::stream::iter(vec![Ok(Event::Delete(pool("p", "Sometimes")))]);
        let events: Vec<_> = decoded(raw, store.clone(), Unreadable::default(), |_, _| {})
            .collect()
            .await;
        for event in &events {
            writer.apply_watcher_event(event.as_ref().expect("no watch error"));
        }
        assert!(store.state().is_empty(), "the delete removes what was read");
    }

    #[tokio::test]
    async fn an_unreadable_claim_is_remembered_with_the_provider_id_its_raw_object_records() {
        let (store, _writer) = reflector::store::<crate::apis::NodeClaim>();
        let claim = object(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "resourceVersion": "1"},
            "spec": {"requirements": [], "nodeClassRef": {"group": "g", "kind": "K", "name": "n"}},
            "status": {"providerID": "aws:///us-west-2a/i-0abc", "lastPodEventTime": "last tuesday"},
        }));
        let raw = futures::stream::iter(vec![Ok(Event::Apply(claim.clone()))]);
        let unreadable = Unreadable::default();
        let events: Vec<_> = decoded(raw, store, unreadable.clone(), |_, _| {})
            .collect()
            .await;
        assert!(events.is_empty());
        assert_eq!(unreadable.names(), ["c"]);
        assert_eq!(unreadable.provider_ids(), ["aws:///us-west-2a/i-0abc"]);
        assert_eq!(
            unreadable.owner_of("aws:///us-west-2a/i-0abc").as_deref(),
            Some("c")
        );
        // Its delete forgets it.
        let raw = futures::stream::iter(vec![Ok(Event::Delete(claim))]);
        let (store, _writer) = reflector::store::<crate::apis::NodeClaim>();
        let _: Vec<_> = decoded(raw, store, unreadable.clone(), |_, _| {})
            .collect()
            .await;
        assert!(unreadable.provider_ids().is_empty());
    }
}
