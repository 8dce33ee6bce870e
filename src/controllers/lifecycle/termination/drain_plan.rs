//! What one drain pass does with each pod on a terminating node, decided from the pods, the
//! node's termination deadline and the clock alone (no client, so it is tested pod by pod).
//!
//! Follows upstream's `terminator.Drain` and the eviction queue's per-pod choice
//! (`pkg/controllers/node/termination/terminator`): the pods waiting for eviction are those not
//! terminal, not static (mirror) pods, not tolerating the `karpenter.sh/disrupted:NoSchedule`
//! taint, and not stuck terminating; they are evicted in tiers (non-critical before critical,
//! DaemonSet pods after the others, the kubelet's graceful shutdown order), one tier at a time;
//! `do-not-disrupt` pods are waited for, never evicted (judged by
//! [`crate::disruption::protection`], as candidate selection judges them); and a pod whose own grace period would
//! outlast the node's `terminationGracePeriod` deadline is deleted directly, in any tier,
//! bypassing PodDisruptionBudgets and `do-not-disrupt`.

use crate::disruption::protection::{
    is_stuck_terminating, pod_do_not_disrupt, tolerates_disrupted_taint,
};
use crate::scheduling::PodView;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The priority classes of pods the cluster needs to run (upstream's critical pods).
const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// The eviction tiers, in the order they are drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Tier {
    NonCritical,
    NonCriticalDaemonSet,
    Critical,
    CriticalDaemonSet,
}

/// What a pass does about one pod the drain waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Ask the Eviction API; a PodDisruptionBudget may refuse (429) until a later pass.
    Evict,
    /// Delete the pod with this grace period: the node's deadline does not leave time for its
    /// own. PodDisruptionBudgets and `do-not-disrupt` do not apply.
    Delete { grace_period_seconds: u32 },
    /// Nothing this pass.
    Wait(Waiting),
}

/// Why a pod is left alone this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// It is already terminating.
    Terminating,
    /// It carries an active `karpenter.sh/do-not-disrupt` annotation.
    DoNotDisrupt,
    /// An earlier tier still has pods on the node.
    EarlierTier(Tier),
}

/// One pass over a node's pods: every pod the drain still waits for, with its step. The node is
/// drained when there are none.
#[derive(Debug)]
pub(super) struct Plan<'a> {
    pub pods: Vec<(&'a Pod, Step)>,
}

impl Plan<'_> {
    /// Whether no pod is left to wait for.
    pub(crate) fn is_drained(&self) -> bool {
        self.pods.is_empty()
    }

    /// How many pods carry `step`'s kind of wait (or action).
    pub(super) fn count(&self, matches: impl Fn(&Step) -> bool) -> usize {
        self.pods.iter().filter(|(_, step)| matches(step)).count()
    }
}

/// Plans one pass over the pods bound to the node, given the node's termination deadline (the
/// claim's `terminationGracePeriod` after its deletion), if it has one.
pub(super) fn plan(pods: &[Pod], deadline: Option<Timestamp>, now: Timestamp) -> Plan<'_> {
    let waiting: Vec<&Pod> = pods.iter().filter(|p| is_waited_for(p, now)).collect();
    let mut steps: Vec<(&Pod, Option<Step>)> = waiting
        .iter()
        .map(|pod| {
            let forced = deadline.and_then(|deadline| forced_delete(pod, deadline, now));
            (*pod, forced)
        })
        .collect();
    // The tier being drained: the first with a pod left to evict gracefully. Pods past the
    // deadline are deleted whatever their tier, so they do not hold the next tier back.
    let current = steps
        .iter()
        .filter(|(_, forced)| forced.is_none())
        .map(|(pod, _)| tier(pod))
        .min();
    for (pod, step) in &mut steps {
        if step.is_some() {
            continue;
        }
        *step = Some(match current {
            Some(current) if tier(pod) > current => Step::Wait(Waiting::EarlierTier(current)),
            _ if is_terminating(pod) => Step::Wait(Waiting::Terminating),
            _ if pod_do_not_disrupt(*pod, now).is_some() => Step::Wait(Waiting::DoNotDisrupt),
            _ => Step::Evict,
        });
    }
    Plan {
        pods: steps
            .into_iter()
            .filter_map(|(pod, step)| step.map(|step| (pod, step)))
            .collect(),
    }
}

/// Whether the drain waits for this pod to leave (upstream's `IsWaitingEviction`).
fn is_waited_for(pod: &Pod, now: Timestamp) -> bool {
    !pod.is_terminal()
        && !pod.is_mirror()
        && !tolerates_disrupted_taint(pod)
        && !is_stuck_terminating(pod, now)
}

/// The pod's tier (upstream's `groupPodsByPriority`).
pub(crate) fn tier(pod: &Pod) -> Tier {
    match (is_critical(pod), pod.is_daemon_set_pod()) {
        (false, false) => Tier::NonCritical,
        (false, true) => Tier::NonCriticalDaemonSet,
        (true, false) => Tier::Critical,
        (true, true) => Tier::CriticalDaemonSet,
    }
}

/// The delete a pod needs now because its grace period would run past the node's deadline
/// (upstream's `needsForceDelete`), with the grace period it gets: what is left until the
/// deadline, at least one second (zero would remove it from the API before its containers
/// stop, breaking at-most-one-pod semantics).
fn forced_delete(pod: &Pod, deadline: Timestamp, now: Timestamp) -> Option<Step> {
    let due = match pod.metadata.deletion_timestamp.as_ref() {
        // Already terminating: only if it was given longer than the node has.
        Some(deleting) => deleting.0 > deadline,
        None => {
            let grace = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)?;
            now > deadline
                .checked_sub(SignedDuration::from_secs(grace))
                .ok()?
        }
    };
    let left = deadline.duration_since(now).as_secs().max(1);
    due.then(|| Step::Delete {
        grace_period_seconds: u32::try_from(left).unwrap_or(u32::MAX),
    })
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn is_critical(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c))
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    /// A running pod named `name`; `extra` is merged into it (metadata, spec, status).
    fn pod(name: &str, extra: Value) -> Pod {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c"}], "terminationGracePeriodSeconds": 30},
            "status": {"phase": "Running", "startTime": "2026-12-01T00:00:00Z"},
        });
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

    fn daemon() -> Value {
        json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "1"}]}})
    }

    fn critical() -> Value {
        json!({"spec": {"priorityClassName": "system-node-critical"}})
    }

    fn steps(plan: &Plan<'_>) -> Vec<(String, Step)> {
        plan.pods
            .iter()
            .map(|(p, s)| (p.metadata.name.clone().unwrap_or_default(), *s))
            .collect()
    }

    const NOW: &str = "2026-12-01T01:00:00Z";

    #[test]
    fn ordinary_pods_are_evicted_before_daemons_and_critical_pods_last() {
        let mut critical_daemon = critical();
        merge(&mut critical_daemon, daemon());
        let pods = vec![
            pod("critical-daemon", critical_daemon),
            pod("critical", critical()),
            pod("daemon", daemon()),
            pod("web", json!({})),
        ];
        let plan = plan(&pods, None, at(NOW));
        assert_eq!(
            steps(&plan),
            vec![
                (
                    "critical-daemon".into(),
                    Step::Wait(Waiting::EarlierTier(Tier::NonCritical))
                ),
                (
                    "critical".into(),
                    Step::Wait(Waiting::EarlierTier(Tier::NonCritical))
                ),
                (
                    "daemon".into(),
                    Step::Wait(Waiting::EarlierTier(Tier::NonCritical))
                ),
                ("web".into(), Step::Evict),
            ]
        );
    }

    #[test]
    fn the_next_tier_starts_only_once_the_previous_one_is_gone() {
        // The web pod was evicted and is terminating: daemons still wait for it.
        let pods = vec![
            pod("daemon", daemon()),
            pod(
                "web",
                json!({"metadata": {"deletionTimestamp": "2026-12-01T00:59:50Z"}}),
            ),
        ];
        let plan = plan(&pods, None, at(NOW));
        assert_eq!(
            steps(&plan),
            vec![
                (
                    "daemon".into(),
                    Step::Wait(Waiting::EarlierTier(Tier::NonCritical))
                ),
                ("web".into(), Step::Wait(Waiting::Terminating)),
            ]
        );
        let pods = vec![pod("daemon", daemon()), pod("critical", critical())];
        assert_eq!(
            steps(&super::plan(&pods, None, at(NOW))),
            vec![
                ("daemon".into(), Step::Evict),
                (
                    "critical".into(),
                    Step::Wait(Waiting::EarlierTier(Tier::NonCriticalDaemonSet))
                ),
            ]
        );
    }

    #[test]
    fn static_finished_tolerating_and_long_stuck_pods_are_not_waited_for() {
        let pods = vec![
            pod(
                "mirror",
                json!({"metadata": {"ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "2"}]}}),
            ),
            pod("done", json!({"status": {"phase": "Succeeded"}})),
            pod(
                "tolerates",
                json!({"spec": {"tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}]}}),
            ),
            pod(
                "tolerates-all",
                json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
            ),
            pod(
                "stuck",
                json!({"metadata": {"deletionTimestamp": "2026-12-01T00:58:59Z"}}),
            ),
        ];
        assert!(plan(&pods, None, at(NOW)).is_drained());
    }

    #[test]
    fn a_pod_tolerating_another_taint_is_still_drained() {
        let pods = vec![pod(
            "web",
            json!({"spec": {"tolerations": [{"key": "example.com/gpu", "operator": "Exists"}]}}),
        )];
        assert_eq!(
            steps(&plan(&pods, None, at(NOW))),
            vec![("web".into(), Step::Evict)]
        );
    }

    #[test]
    fn do_not_disrupt_pods_are_waited_for_and_hold_back_the_next_tier() {
        let pods = vec![
            pod(
                "batch",
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
            ),
            pod("daemon", daemon()),
        ];
        assert_eq!(
            steps(&plan(&pods, None, at(NOW))),
            vec![
                ("batch".into(), Step::Wait(Waiting::DoNotDisrupt)),
                (
                    "daemon".into(),
                    Step::Wait(Waiting::EarlierTier(Tier::NonCritical))
                ),
            ]
        );
    }

    #[test]
    fn a_do_not_disrupt_duration_protects_a_pod_only_while_it_is_younger() {
        let annotated = |value: &str| {
            pod(
                "batch",
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": value}}}),
            )
        };
        // Started at midnight; it is 01:00.
        for (value, protected) in [
            ("2h", true),
            ("30m", false),
            ("false", false),
            ("0s", false),
        ] {
            let pods = vec![annotated(value)];
            let expected = if protected {
                Step::Wait(Waiting::DoNotDisrupt)
            } else {
                Step::Evict
            };
            assert_eq!(
                steps(&plan(&pods, None, at(NOW))),
                vec![("batch".into(), expected)],
                "do-not-disrupt: {value}"
            );
        }
    }

    #[test]
    fn before_the_deadline_minus_the_pods_grace_period_pods_are_evicted_as_usual() {
        // Deadline 01:01:00, grace 30 s: deletion is due after 01:00:30.
        let pods = vec![pod(
            "batch",
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
        )];
        let deadline = Some(at("2026-12-01T01:01:00Z"));
        assert_eq!(
            steps(&plan(&pods, deadline, at("2026-12-01T01:00:30Z"))),
            vec![("batch".into(), Step::Wait(Waiting::DoNotDisrupt))]
        );
        assert_eq!(
            steps(&plan(&pods, deadline, at("2026-12-01T01:00:31Z"))),
            vec![(
                "batch".into(),
                Step::Delete {
                    grace_period_seconds: 29
                }
            )]
        );
    }

    #[test]
    fn past_the_deadline_pods_of_every_tier_are_deleted_with_at_least_a_second() {
        let pods = vec![
            pod("critical", critical()),
            pod("web", json!({"spec": {"terminationGracePeriodSeconds": 0}})),
        ];
        let deadline = Some(at("2026-12-01T00:59:00Z"));
        assert_eq!(
            steps(&plan(&pods, deadline, at(NOW))),
            vec![
                (
                    "critical".into(),
                    Step::Delete {
                        grace_period_seconds: 1
                    }
                ),
                (
                    "web".into(),
                    Step::Delete {
                        grace_period_seconds: 1
                    }
                ),
            ]
        );
    }

    #[test]
    fn a_pod_due_for_deletion_does_not_hold_back_the_next_tier() {
        // The web pod's 600 s grace period outlasts the deadline: it is deleted now, and the
        // daemon (30 s) is evicted beside it instead of waiting for the web pod to go.
        let pods = vec![
            pod(
                "web",
                json!({"spec": {"terminationGracePeriodSeconds": 600}}),
            ),
            pod("daemon", daemon()),
        ];
        let deadline = Some(at("2026-12-01T01:05:00Z"));
        assert_eq!(
            steps(&plan(&pods, deadline, at(NOW))),
            vec![
                (
                    "web".into(),
                    Step::Delete {
                        grace_period_seconds: 300
                    }
                ),
                ("daemon".into(), Step::Evict),
            ]
        );
    }

    #[test]
    fn a_terminating_pod_is_deleted_again_only_if_it_was_given_longer_than_the_node_has() {
        let deadline = Some(at("2026-12-01T01:00:20Z"));
        let leaving_in_time = vec![pod(
            "web",
            json!({"metadata": {"deletionTimestamp": "2026-12-01T01:00:10Z"}}),
        )];
        assert_eq!(
            steps(&plan(&leaving_in_time, deadline, at(NOW))),
            vec![("web".into(), Step::Wait(Waiting::Terminating))]
        );
        let leaving_late = vec![pod(
            "web",
            json!({"metadata": {"deletionTimestamp": "2026-12-01T01:00:50Z"}}),
        )];
        assert_eq!(
            steps(&plan(&leaving_late, deadline, at(NOW))),
            vec![(
                "web".into(),
                Step::Delete {
                    grace_period_seconds: 20
                }
            )]
        );
    }

    #[test]
    fn without_a_deadline_nothing_is_deleted_directly() {
        let pods = vec![pod(
            "batch",
            json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                   "spec": {"terminationGracePeriodSeconds": 0}}),
        )];
        assert_eq!(
            steps(&plan(&pods, None, at("2099-01-01T00:00:00Z"))),
            vec![("batch".into(), Step::Wait(Waiting::DoNotDisrupt))]
        );
    }
}
