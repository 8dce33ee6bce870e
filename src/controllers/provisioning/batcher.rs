//! The batcher: gathers pending pods into one batch per scheduling round (upstream's
//! `pkg/controllers/provisioning/batcher.go`, with its idle and maximum durations), tracks
//! when each pod was first seen pending, and tells when a batch is complete so it can close
//! before its idle window (upstream waits the window out).

use crate::cloud::CloudProvider;
use crate::controllers::Context;
use crate::scheduling::PodView;
use crate::state::{CachedPod, is_provisionable};
use kube::api::Api;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::debug;

/// What woke the batcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A pod turned unschedulable.
    NewPod,
    /// Something else may need a round: start-up, a claim that is gone, a failed round.
    Nudge,
}

/// Tracks pods seen pending and wakes the batcher when a new one shows up.
pub struct PendingPods {
    first_seen: Mutex<HashMap<String, Seen>>,
    wake: mpsc::Sender<Wake>,
}

/// When a pending pod was first seen, whether a round has decided on it since (upstream's
/// pod "ack" and "scheduling attempted" times in `state.Cluster`), and whether a new claim
/// was made for it.
#[derive(Clone, Copy)]
struct Seen {
    at: Instant,
    decided: bool,
    claimed: bool,
}

impl PendingPods {
    /// A tracker and the receiver the batcher waits on.
    pub fn new() -> (Arc<Self>, mpsc::Receiver<Wake>) {
        let (wake, rx) = mpsc::channel(1);
        (
            Arc::new(Self {
                first_seen: Mutex::new(HashMap::new()),
                wake,
            }),
            rx,
        )
    }

    /// Called for every pod the watch delivers.
    pub(crate) fn observe(&self, pod: &CachedPod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let mut first_seen = self
            .first_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if is_provisionable(pod) {
            if let std::collections::hash_map::Entry::Vacant(entry) = first_seen.entry(uid) {
                entry.insert(Seen {
                    at: Instant::now(),
                    decided: false,
                    claimed: false,
                });
                debug!(pod = %pod.name_any(), "pod is unschedulable");
                // A full channel already holds a wake-up; nothing is lost by dropping this one.
                let _ = self.wake.try_send(Wake::NewPod);
            }
        } else {
            first_seen.remove(&uid);
        }
    }

    /// Called when a pod is deleted.
    pub(crate) fn forget(&self, pod: &CachedPod) {
        if let Some(uid) = &pod.metadata.uid {
            self.first_seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(uid);
        }
    }

    /// How long the pod was pending before the first new claim made for it, the first time
    /// only: all alike, pods swap places on claims in flight from round to round, and one
    /// planned onto a new claim again must not count again.
    pub(super) fn first_claim(&self, uid: &str) -> Option<std::time::Duration> {
        let mut first_seen = self
            .first_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = first_seen.get_mut(uid)?;
        (!std::mem::replace(&mut seen.claimed, true)).then(|| seen.at.elapsed())
    }

    /// How long the pods were pending before a round first decided on them (placed them on a
    /// node, an in-flight claim or a new one, or found them unschedulable): one figure per pod
    /// the first time only, as upstream's `MarkPodSchedulingDecisions` observes
    /// `karpenter_pods_scheduling_decision_duration_seconds`.
    pub(super) fn first_decisions<'a>(
        &self,
        uids: impl IntoIterator<Item = &'a str>,
    ) -> Vec<std::time::Duration> {
        let mut first_seen = self
            .first_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        uids.into_iter()
            .filter_map(|uid| {
                let seen = first_seen.get_mut(uid)?;
                (!std::mem::replace(&mut seen.decided, true)).then(|| seen.at.elapsed())
            })
            .collect()
    }

    /// Wakes the batcher without a new pod (e.g. once after start-up).
    pub(crate) fn nudge(&self) {
        let _ = self.wake.try_send(Wake::Nudge);
    }
}

/// What closed a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BatchClose {
    /// No new pod for the idle window (or the watch ended).
    Idle,
    /// The batch reached its longest duration.
    Max,
    /// Every pod the batch's controllers want exists and has the kube-scheduler's verdict.
    Complete,
}

impl BatchClose {
    /// The metric label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Max => "max",
            Self::Complete => "complete",
        }
    }
}

/// Tells whether the open batch already holds every pod worth waiting for.
pub(crate) trait BatchCompletion {
    /// Asked once a new pod has come into the batch, and after each wake-up from then on.
    fn is_complete(&mut self) -> impl std::future::Future<Output = bool> + Send;
}

/// Waits for the next batch: the first wake-up (or `requeue_at`, if it comes first) opens it; it
/// closes once no wake-up came for `idle`, or `max` after it opened, or, once a new pod has
/// come, when `completion` says so (asked after each wake-up). A batch with no new pod keeps
/// the idle window: it reacts to a change (a claim gone, a requeue) whose consequences may
/// still be arriving, such as the deletion of the pods of a namespace being deleted.
/// `None` once the channel closes.
pub(crate) async fn next_batch(
    rx: &mut mpsc::Receiver<Wake>,
    idle: Duration,
    max: Duration,
    requeue_at: Option<tokio::time::Instant>,
    completion: &mut impl BatchCompletion,
) -> Option<BatchClose> {
    let opened_by = match requeue_at {
        Some(at) => tokio::select! {
            woken = rx.recv() => woken,
            () = tokio::time::sleep_until(at) => Some(Wake::Nudge),
        },
        None => rx.recv().await,
    };
    let mut new_pods = opened_by? == Wake::NewPod;
    let deadline = tokio::time::Instant::now() + max;
    loop {
        if new_pods && completion.is_complete().await {
            return Some(BatchClose::Complete);
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Some(BatchClose::Max);
        }
        match tokio::time::timeout(idle.min(left), rx.recv()).await {
            Ok(Some(woken_by)) => new_pods |= woken_by == Wake::NewPod,
            Ok(None) => return Some(BatchClose::Idle),
            Err(_) if left <= idle => return Some(BatchClose::Max),
            Err(_) => return Some(BatchClose::Idle),
        }
    }
}

/// Whether the kube-scheduler has yet to judge a pod: unbound, no PodScheduled condition, and
/// meant for the default scheduler (another scheduler's pods are none of ours to wait for).
fn awaits_verdict(pod: &CachedPod) -> bool {
    let default_scheduler = pod
        .spec
        .scheduler_name
        .as_deref()
        .is_none_or(|name| name == "default-scheduler");
    pod.node_name.is_none()
        && default_scheduler
        && pod.scheduled_condition().is_none()
        && pod.metadata.deletion_timestamp.is_none()
}

/// A controller that creates pods, as its pods' owner reference names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PodController {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// The controllers behind the provisionable pods, each with how many of its pods are alive
/// (not terminating, not finished). `None` while the batch cannot be complete yet: a pod still
/// awaits the kube-scheduler's verdict, or a provisionable pod has no controller.
pub(crate) fn batch_controllers(pods: &[Arc<CachedPod>]) -> Option<BTreeMap<PodController, usize>> {
    let controller_of = |pod: &CachedPod| {
        let owner = pod
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))?;
        Some(PodController {
            kind: owner.kind.clone(),
            namespace: pod.namespace().unwrap_or_default(),
            name: owner.name.clone(),
            uid: owner.uid.clone(),
        })
    };
    let mut controllers = BTreeMap::new();
    for pod in pods.iter().map(AsRef::as_ref) {
        if awaits_verdict(pod) {
            return None;
        }
        if is_provisionable(pod) {
            controllers.insert(controller_of(pod)?, 0);
        }
    }
    for pod in pods.iter().map(AsRef::as_ref) {
        if pod.metadata.deletion_timestamp.is_some() || pod.is_terminal() {
            continue;
        }
        if let Some(alive) =
            controller_of(pod).and_then(|controller| controllers.get_mut(&controller))
        {
            *alive += 1;
        }
    }
    Some(controllers)
}

/// How many live pods each controller wants, read once per batch. `None`: not known (a kind
/// this agent does not read, an object that is gone or was replaced, an API error).
#[derive(Default)]
pub(crate) struct WantedPods(HashMap<String, Option<usize>>);

impl WantedPods {
    async fn of<P: CloudProvider>(
        &mut self,
        ctx: &Context<P>,
        controller: &PodController,
    ) -> Option<usize> {
        if let Some(known) = self.0.get(&controller.uid) {
            return *known;
        }
        let wanted = match read_wanted_pods(ctx, controller).await {
            Ok(wanted) => wanted,
            Err(e) => {
                debug!(kind = %controller.kind, name = %controller.name, error = %e, "could not read a pod controller");
                None
            }
        };
        self.0.insert(controller.uid.clone(), wanted);
        wanted
    }
}

async fn read_wanted_pods<P: CloudProvider>(
    ctx: &Context<P>,
    controller: &PodController,
) -> Result<Option<usize>, kube::Error> {
    use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::ReplicationController;
    let count = |n: Option<i32>| usize::try_from(n.unwrap_or(1)).unwrap_or_default();
    let (namespace, name) = (controller.namespace.as_str(), controller.name.as_str());
    let (uid, wanted) = match controller.kind.as_str() {
        "ReplicaSet" => {
            let rs = Api::<ReplicaSet>::namespaced(ctx.client.clone(), namespace)
                .get(name)
                .await?;
            (rs.metadata.uid, count(rs.spec.and_then(|s| s.replicas)))
        }
        "ReplicationController" => {
            let rc = Api::<ReplicationController>::namespaced(ctx.client.clone(), namespace)
                .get(name)
                .await?;
            (rc.metadata.uid, count(rc.spec.and_then(|s| s.replicas)))
        }
        "StatefulSet" => {
            let set = Api::<StatefulSet>::namespaced(ctx.client.clone(), namespace)
                .get(name)
                .await?;
            let spec = set.spec.unwrap_or_default();
            // OrderedReady (the default) creates the next pod only once this one is Ready:
            // nothing more comes while it is pending.
            let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
            (
                set.metadata.uid,
                if parallel { count(spec.replicas) } else { 0 },
            )
        }
        "Job" => {
            let job = Api::<Job>::namespaced(ctx.client.clone(), namespace)
                .get(name)
                .await?;
            let spec = job.spec.unwrap_or_default();
            let parallelism = count(spec.parallelism);
            let succeeded = count(job.status.and_then(|s| s.succeeded).or(Some(0)));
            let wanted = match spec.completions {
                Some(completions) => {
                    parallelism.min(count(Some(completions)).saturating_sub(succeeded))
                }
                None => parallelism,
            };
            (job.metadata.uid, wanted)
        }
        _ => return Ok(None),
    };
    // A controller recreated under the same name is another controller.
    Ok((uid.as_deref() == Some(controller.uid.as_str())).then_some(wanted))
}

/// The agent's [`BatchCompletion`]: the batch is complete once every pod the kube-scheduler
/// had yet to judge has been judged, every provisionable pod has a controller, and each of those
/// controllers has as many live pods as it wants. Reads each controller once per batch.
pub(crate) struct BurstComplete<'a, P> {
    ctx: &'a Context<P>,
    wanted: WantedPods,
}

impl<'a, P: CloudProvider> BurstComplete<'a, P> {
    /// A check for one batch.
    pub(crate) fn new(ctx: &'a Context<P>) -> Self {
        Self {
            ctx,
            wanted: WantedPods::default(),
        }
    }
}

impl<P: CloudProvider> BatchCompletion for BurstComplete<'_, P> {
    async fn is_complete(&mut self) -> bool {
        if !self.ctx.settings.batch_close_when_complete {
            return false;
        }
        let Some(controllers) = batch_controllers(&self.ctx.cluster.pods.state()) else {
            return false;
        };
        // No provisionable pod left (a requeue after every pod found room): nothing to gather.
        for (controller, alive) in &controllers {
            match self.wanted.of(self.ctx, controller).await {
                Some(want) if *alive >= want => {}
                _ => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Generous outer bounds only keep a broken batcher from hanging the test run.
    const NEVER: Duration = Duration::from_secs(30);

    /// Complete from the `n`th question on (never, if `n` is 0).
    struct CompleteAt(usize, usize);

    impl BatchCompletion for CompleteAt {
        async fn is_complete(&mut self) -> bool {
            self.1 += 1;
            self.0 > 0 && self.1 >= self.0
        }
    }

    #[tokio::test]
    async fn a_requeue_opens_a_batch_without_any_new_pod() {
        let (_wake, mut rx) = mpsc::channel::<Wake>(1);
        let requeue_at = tokio::time::Instant::now() + Duration::from_millis(20);
        let opened = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(10),
                Duration::from_millis(100),
                Some(requeue_at),
                &mut CompleteAt(0, 0),
            ),
        )
        .await;
        assert_eq!(
            opened.ok(),
            Some(Some(BatchClose::Idle)),
            "the requeue should have started a round"
        );
    }

    #[tokio::test]
    async fn without_a_requeue_the_batcher_waits_for_a_pod_and_stops_when_the_watch_ends() {
        let (wake, mut rx) = mpsc::channel::<Wake>(1);
        wake.try_send(Wake::NewPod).ok();
        let opened = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(10),
                Duration::from_millis(100),
                None,
                &mut CompleteAt(0, 0),
            ),
        )
        .await;
        assert_eq!(opened.ok(), Some(Some(BatchClose::Idle)));
        drop(wake);
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(10),
                Duration::from_millis(100),
                None,
                &mut CompleteAt(0, 0),
            ),
        )
        .await;
        assert_eq!(
            closed.ok(),
            Some(None),
            "a closed channel ends provisioning"
        );
    }

    #[tokio::test]
    async fn a_complete_batch_closes_without_waiting_out_the_idle_window() {
        let (wake, mut rx) = mpsc::channel::<Wake>(1);
        wake.try_send(Wake::NewPod).ok();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            wake.send(Wake::NewPod).await.ok();
            wake
        });
        // Complete on the second question: after the wake-up that brought the last pod.
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(&mut rx, NEVER, NEVER, None, &mut CompleteAt(2, 0)),
        )
        .await;
        assert_eq!(closed.ok(), Some(Some(BatchClose::Complete)));
        drop(sender.await);
    }

    #[tokio::test]
    async fn a_batch_without_a_new_pod_keeps_the_idle_window() {
        let (wake, mut rx) = mpsc::channel::<Wake>(1);
        wake.try_send(Wake::Nudge).ok();
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(20),
                NEVER,
                None,
                &mut CompleteAt(1, 0),
            ),
        )
        .await;
        assert_eq!(closed.ok(), Some(Some(BatchClose::Idle)));
        // A new pod in a batch a nudge opened lets it close as complete.
        wake.try_send(Wake::Nudge).ok();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            wake.send(Wake::NewPod).await.ok();
            wake
        });
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(&mut rx, NEVER, NEVER, None, &mut CompleteAt(1, 0)),
        )
        .await;
        assert_eq!(closed.ok(), Some(Some(BatchClose::Complete)));
        drop(sender.await);
    }

    #[tokio::test]
    async fn pods_that_keep_coming_are_cut_off_at_the_longest_batch() {
        let (wake, mut rx) = mpsc::channel::<Wake>(1);
        wake.try_send(Wake::NewPod).ok();
        let sender = tokio::spawn(async move {
            while wake.send(Wake::NewPod).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let closed = tokio::time::timeout(
            NEVER,
            next_batch(
                &mut rx,
                Duration::from_millis(200),
                Duration::from_millis(50),
                None,
                &mut CompleteAt(0, 0),
            ),
        )
        .await;
        assert_eq!(closed.ok(), Some(Some(BatchClose::Max)));
        drop(rx);
        sender.await.ok();
    }

    fn pod(
        name: &str,
        owner: Option<(&str, &str)>,
        node: Option<&str>,
        scheduled: Option<(&str, &str)>,
    ) -> Arc<CachedPod> {
        let owner_references: Vec<serde_json::Value> = owner
            .map(|(kind, uid)| serde_json::json!({"apiVersion": "apps/v1", "kind": kind, "name": format!("{kind}-{uid}"), "uid": uid, "controller": true}))
            .into_iter()
            .collect();
        let conditions: Vec<serde_json::Value> = scheduled
            .map(|(status, reason)| serde_json::json!({"type": "PodScheduled", "status": status, "reason": reason}))
            .into_iter()
            .collect();
        let pod = serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "ownerReferences": owner_references},
            "spec": {"containers": [{"name": "c"}], "nodeName": node},
            "status": {"conditions": conditions},
        });
        Arc::new(serde_json::from_value(pod).expect("a pod"))
    }

    const UNSCHEDULABLE: Option<(&str, &str)> = Some(("False", "Unschedulable"));

    #[test]
    fn a_batch_counts_every_live_pod_of_its_controllers() {
        let pods = [
            pod("web-1", Some(("ReplicaSet", "rs")), None, UNSCHEDULABLE),
            pod("web-2", Some(("ReplicaSet", "rs")), None, UNSCHEDULABLE),
            pod(
                "web-3",
                Some(("ReplicaSet", "rs")),
                Some("node-a"),
                Some(("True", "")),
            ),
            pod(
                "other",
                Some(("ReplicaSet", "other")),
                Some("node-a"),
                Some(("True", "")),
            ),
        ];
        let controllers = batch_controllers(&pods).expect("every pod judged");
        let counts: Vec<(&str, usize)> = controllers
            .iter()
            .map(|(c, n)| (c.uid.as_str(), *n))
            .collect();
        assert_eq!(
            counts,
            [("rs", 3)],
            "only the pending pods' controllers, with all their live pods"
        );
    }

    #[test]
    fn a_batch_is_not_complete_while_a_pod_awaits_the_schedulers_verdict() {
        let pods = [
            pod("web-1", Some(("ReplicaSet", "rs")), None, UNSCHEDULABLE),
            pod("web-2", Some(("ReplicaSet", "rs")), None, None),
        ];
        assert_eq!(batch_controllers(&pods), None);
    }

    #[test]
    fn a_pending_pod_without_a_controller_keeps_the_idle_window() {
        let pods = [
            pod("web-1", Some(("ReplicaSet", "rs")), None, UNSCHEDULABLE),
            pod("bare", None, None, UNSCHEDULABLE),
        ];
        assert_eq!(batch_controllers(&pods), None);
    }
}
