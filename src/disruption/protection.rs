//! What protects a node or its pods from voluntary disruption now, and until when: the one
//! judgement candidate selection ([`super::disruptability`]), the drain (termination's drain
//! plan) and `explain` share, so a node the drain would wait on is never chosen, tainted and
//! left half-drained.
//!
//! Follows upstream v1: `pod.IsDoNotDisruptActive` (`pkg/utils/pod/scheduling.go`: `"true"`,
//! or a Go duration counted from the pod's `startTime`, protecting a pod not started yet; any
//! other value protects nothing), the node check of `StateNode.ValidateNodeDisruptable` (only
//! `"true"` on a node), and `StateNode.ValidatePodsDisruptable` with `pdb.Limits.CanEvictPods`
//! (`pkg/utils/pdb/pdb.go`): an active pod with an active `do-not-disrupt` blocks, and so does
//! an evictable pod covered by a PodDisruptionBudget allowing no disruption, or by more than
//! one budget (the Eviction API refuses those), unless the budget's
//! `unhealthyPodEvictionPolicy: AlwaysAllow` lets an unready pod go.

use crate::apis::{human_duration, labels, parse_duration};
use crate::scheduling::PodView;
use crate::scheduling::selector::Selector;
use crate::scheduling::taints::{NO_SCHEDULE, tolerates};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How long a `do-not-disrupt` annotation protects a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// `"true"`: until the annotation is removed.
    Removed,
    /// A duration counted from the pod's start, which is this moment.
    At(Timestamp),
    /// A duration, and the pod has not started: it counts from the start.
    RunFor(SignedDuration),
}

impl Until {
    /// The wording `explain` and the Events use. Absolute, so a `DisruptionBlocked` Event
    /// says the same thing every pass and is not published again.
    pub fn describe(self) -> String {
        match self {
            Until::Removed => "until the annotation is removed".to_owned(),
            Until::At(at) => format!("until {}", at.strftime("%Y-%m-%dT%H:%M:%SZ")),
            Until::RunFor(d) => format!("until it has run for {}", human_duration(d)),
        }
    }
}

/// Whether `karpenter.sh/do-not-disrupt` on the pod protects it now, and until when.
pub fn pod_do_not_disrupt(pod: &impl PodView, now: Timestamp) -> Option<Until> {
    let value = pod.pod_annotation(labels::DO_NOT_DISRUPT)?;
    if value == "true" {
        return Some(Until::Removed);
    }
    let protected_for = parse_duration(value)
        .ok()
        .filter(|d| !d.is_zero())
        .and_then(|d| SignedDuration::try_from(d).ok())?;
    let Some(started) = pod.pod_started_at() else {
        return Some(Until::RunFor(protected_for));
    };
    let until = started.checked_add(protected_for).ok()?;
    (now < until).then_some(Until::At(until))
}

/// Whether `karpenter.sh/do-not-disrupt` on a node (or its claim before it registers) blocks
/// it: only `"true"`, as upstream; durations are a pod's.
pub fn node_do_not_disrupt(value: Option<&str>) -> bool {
    value == Some("true")
}

/// Whether the pod tolerates `karpenter.sh/disrupted:NoSchedule`, so stays on a draining node
/// (upstream's `ToleratesDisruptedNoScheduleTaint`): it is neither evicted nor waited for.
pub fn tolerates_disrupted_taint(pod: &impl PodView) -> bool {
    let taint = Taint {
        key: labels::DISRUPTED_TAINT_KEY.to_owned(),
        effect: NO_SCHEDULE.to_owned(),
        ..Taint::default()
    };
    pod.pod_spec()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| tolerates(t, &taint)))
}

/// A pod terminating for longer than this past its deletion timestamp is no longer waited for
/// (upstream's `IsStuckTerminating`): its kubelet is gone or wedged, and the node goes anyway.
pub const STUCK_TERMINATING: SignedDuration = SignedDuration::from_mins(1);

/// Whether the pod has been terminating past [`STUCK_TERMINATING`].
pub fn is_stuck_terminating(pod: &impl PodView, now: Timestamp) -> bool {
    pod.pod_deleted_at()
        .is_some_and(|at| now.duration_since(at) > STUCK_TERMINATING)
}

/// Whether the drain would ask the Eviction API for the pod (upstream's `IsEvictable`).
pub fn is_evictable(pod: &impl PodView, now: Timestamp) -> bool {
    pod.is_active()
        && !tolerates_disrupted_taint(pod)
        && !pod.is_mirror()
        && pod_do_not_disrupt(pod, now).is_none()
}

/// A pod that keeps its node from being disrupted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodBlocker {
    /// `namespace/name`.
    pub pod: String,
    pub why: PodBlock,
}

/// Why a pod cannot be evicted now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodBlock {
    /// Its `karpenter.sh/do-not-disrupt` annotation, with its value.
    DoNotDisrupt { value: String, until: Until },
    /// A PodDisruptionBudget (`namespace/name`) that allows no disruption now.
    Budget(String),
    /// Several PodDisruptionBudgets cover it; the Eviction API refuses such a pod.
    SeveralBudgets(Vec<String>),
}

impl PodBlocker {
    /// One sentence naming the pod, what protects it and until when.
    pub fn describe(&self) -> String {
        match &self.why {
            PodBlock::DoNotDisrupt { value, until } => format!(
                "pod {} has {}: \"{value}\", which protects it {}",
                self.pod,
                labels::DO_NOT_DISRUPT,
                until.describe()
            ),
            PodBlock::Budget(pdb) => format!(
                "PodDisruptionBudget {pdb} allows 0 disruptions and covers pod {}",
                self.pod
            ),
            PodBlock::SeveralBudgets(pdbs) => format!(
                "pod {} is covered by {} PodDisruptionBudgets ({}); the Eviction API refuses it",
                self.pod,
                pdbs.len(),
                pdbs.join(", ")
            ),
        }
    }
}

/// Every pod of a node that blocks its disruption now, in the pods' order (do-not-disrupt
/// pods first, then budgets).
pub fn pod_blockers<P: PodView>(
    pods: &[&P],
    pdbs: &[PodDisruptionBudget],
    now: Timestamp,
) -> Vec<PodBlocker> {
    let mut blockers = Vec::new();
    for pod in pods.iter().filter(|p| p.is_active()) {
        if let Some(until) = pod_do_not_disrupt(*pod, now) {
            blockers.push(PodBlocker {
                pod: pod_key(*pod),
                why: PodBlock::DoNotDisrupt {
                    value: pod
                        .pod_annotation(labels::DO_NOT_DISRUPT)
                        .unwrap_or_default()
                        .to_owned(),
                    until,
                },
            });
        }
    }
    for pod in pods.iter().filter(|p| is_evictable(**p, now)) {
        if let Some(why) = budget_block(*pod, pdbs) {
            blockers.push(PodBlocker {
                pod: pod_key(*pod),
                why,
            });
        }
    }
    blockers
}

fn budget_block(pod: &impl PodView, pdbs: &[PodDisruptionBudget]) -> Option<PodBlock> {
    let empty = Default::default();
    let pod_labels = pod.pod_labels().unwrap_or(&empty);
    let matching: Vec<&PodDisruptionBudget> = pdbs
        .iter()
        .filter(|pdb| pdb.metadata.namespace.as_deref() == pod.pod_namespace())
        .filter(|pdb| {
            Selector::from_api(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()))
                .matches(pod_labels)
        })
        .collect();
    match matching.as_slice() {
        [] => None,
        [pdb] => {
            let allowed = pdb.status.as_ref().map(|s| s.disruptions_allowed)?;
            let always_allow_unhealthy = pdb
                .spec
                .as_ref()
                .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
                == Some("AlwaysAllow");
            // An unready pod under `AlwaysAllow` can be evicted whatever the budget allows.
            let unready_may_go = always_allow_unhealthy && !pod.is_ready();
            (allowed <= 0 && !unready_may_go).then(|| PodBlock::Budget(pdb_key(pdb)))
        }
        several => Some(PodBlock::SeveralBudgets(
            several.iter().map(|p| pdb_key(p)).collect(),
        )),
    }
}

fn pod_key(pod: &impl PodView) -> String {
    format!(
        "{}/{}",
        pod.pod_namespace().unwrap_or_default(),
        pod.pod_name().unwrap_or_default()
    )
}

fn pdb_key(pdb: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        pdb.metadata.namespace.as_deref().unwrap_or_default(),
        pdb.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    const NOW: &str = "2026-12-01T01:00:00Z";

    /// A running pod started at midnight, with `annotation` as its `do-not-disrupt`.
    fn pod(name: &str, annotation: Option<&str>, extra: Value) -> Pod {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running", "startTime": "2026-12-01T00:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True"}]},
        });
        if let Some(a) = annotation {
            value["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": a});
        }
        merge(&mut value, extra);
        serde_json::from_value(value).expect("a pod")
    }

    fn merge(into: &mut Value, from: Value) {
        match (into, from) {
            (Value::Object(into), Value::Object(from)) => {
                for (k, v) in from {
                    merge(into.entry(k).or_insert(Value::Null), v);
                }
            }
            (into, from) => *into = from,
        }
    }

    fn pdb(name: &str, allowed: i32, extra: Value) -> PodDisruptionBudget {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1,
                       "desiredHealthy": 1, "expectedPods": 1},
        });
        merge(&mut value, extra);
        serde_json::from_value(value).expect("a pdb")
    }

    #[test]
    fn true_protects_until_removed_and_a_duration_until_the_pod_has_run_that_long() {
        let now = at(NOW);
        assert_eq!(
            pod_do_not_disrupt(&pod("p", Some("true"), json!({})), now),
            Some(Until::Removed)
        );
        assert_eq!(
            pod_do_not_disrupt(&pod("p", Some("2h"), json!({})), now),
            Some(Until::At(at("2026-12-01T02:00:00Z")))
        );
        for gone in ["30m", "1h", "0s", "false", "soon"] {
            assert_eq!(
                pod_do_not_disrupt(&pod("p", Some(gone), json!({})), now),
                None,
                "do-not-disrupt: {gone}"
            );
        }
        assert_eq!(pod_do_not_disrupt(&pod("p", None, json!({})), now), None);
    }

    #[test]
    fn a_pod_not_started_yet_is_protected_for_its_whole_duration() {
        let waiting = pod("p", Some("1h"), json!({"status": {"startTime": null}}));
        let until = pod_do_not_disrupt(&waiting, at(NOW));
        assert_eq!(until, Some(Until::RunFor(SignedDuration::from_hours(1))));
        assert_eq!(
            until.map(Until::describe).as_deref(),
            Some("until it has run for 60m")
        );
    }

    #[test]
    fn only_true_protects_a_node() {
        assert!(node_do_not_disrupt(Some("true")));
        assert!(!node_do_not_disrupt(Some("1h")));
        assert!(!node_do_not_disrupt(None));
    }

    #[test]
    fn a_blocker_names_the_pod_and_when_its_protection_ends() {
        let pods = [pod("batch", Some("90m"), json!({}))];
        let refs: Vec<&Pod> = pods.iter().collect();
        let blockers = pod_blockers(&refs, &[], at(NOW));
        assert_eq!(blockers.len(), 1);
        assert_eq!(
            blockers[0].describe(),
            "pod default/batch has karpenter.sh/do-not-disrupt: \"90m\", which protects it \
             until 2026-12-01T01:30:00Z"
        );
    }

    #[test]
    fn finished_and_terminating_pods_protect_nothing() {
        let pods = [
            pod(
                "done",
                Some("true"),
                json!({"status": {"phase": "Succeeded"}}),
            ),
            pod(
                "leaving",
                Some("true"),
                json!({"metadata": {"deletionTimestamp": "2026-12-01T00:59:00Z"}}),
            ),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        assert_eq!(
            pod_blockers(&refs, &[pdb("web", 0, json!({}))], at(NOW)),
            []
        );
    }

    #[test]
    fn a_budget_blocks_only_when_it_allows_nothing_and_covers_an_evictable_pod() {
        let pods = [pod("web-1", None, json!({}))];
        let refs: Vec<&Pod> = pods.iter().collect();
        let now = at(NOW);
        assert_eq!(pod_blockers(&refs, &[pdb("web", 1, json!({}))], now), []);
        assert_eq!(
            pod_blockers(&refs, &[pdb("web", 0, json!({}))], now),
            [PodBlocker {
                pod: "default/web-1".into(),
                why: PodBlock::Budget("default/web".into())
            }]
        );
        let elsewhere = pdb("web", 0, json!({"metadata": {"namespace": "other"}}));
        assert_eq!(pod_blockers(&refs, &[elsewhere], now), []);
        // A pod that tolerates the disruption taint stays on the node; it is not evicted.
        let tolerating = [pod(
            "web-2",
            None,
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        )];
        let refs: Vec<&Pod> = tolerating.iter().collect();
        assert_eq!(pod_blockers(&refs, &[pdb("web", 0, json!({}))], now), []);
    }

    #[test]
    fn two_budgets_on_one_pod_block_it_whatever_they_allow() {
        let pods = [pod("web-1", None, json!({}))];
        let refs: Vec<&Pod> = pods.iter().collect();
        let blockers = pod_blockers(
            &refs,
            &[pdb("a", 1, json!({})), pdb("b", 3, json!({}))],
            at(NOW),
        );
        assert_eq!(
            blockers[0].why,
            PodBlock::SeveralBudgets(vec!["default/a".into(), "default/b".into()])
        );
    }

    #[test]
    fn an_unready_pod_under_an_always_allow_budget_can_go() {
        let unready = [pod(
            "web-1",
            None,
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        )];
        let refs: Vec<&Pod> = unready.iter().collect();
        let always = pdb(
            "web",
            0,
            json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}),
        );
        assert_eq!(
            pod_blockers(&refs, std::slice::from_ref(&always), at(NOW)),
            []
        );
        let ready = [pod("web-1", None, json!({}))];
        let refs: Vec<&Pod> = ready.iter().collect();
        assert_eq!(pod_blockers(&refs, &[always], at(NOW)).len(), 1);
    }
}
