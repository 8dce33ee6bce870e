//! What the agent's probes answer. `/readyz` (readiness): the agent has decided its part, as a
//! standby replica once it knows who leads, as the leader once its caches have listed the
//! cluster (upstream's readyz check is its manager's cache sync). `/healthz` (liveness): every
//! control loop is alive and none is stuck; a loop task that ended or a pass that has not
//! returned for longer than its bound fails it, so the kubelet restarts the agent instead of
//! leaving a leader that holds the Lease and does nothing (upstream's healthz is a ping; a
//! Rust task that dies does not take the process with it as a Go panic would, hence more).
//!
//! The binary serves these; the loops report to it through [`Health::pass`] and the task
//! guards [`super::Running`] holds.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Readiness and liveness of one agent process.
#[derive(Debug)]
pub struct Health {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Why the agent is not ready yet, or `None` once it is.
    unready: Option<String>,
    /// Loops in a pass: since when, and how long a pass may take.
    busy: BTreeMap<&'static str, (Instant, Duration)>,
    /// Loop tasks that ended.
    stopped: Vec<&'static str>,
    /// Set once the agent shuts down on purpose: tasks ending then are not a failure.
    shutting_down: bool,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                unready: Some("starting".to_owned()),
                busy: BTreeMap::new(),
                stopped: Vec::new(),
                shutting_down: false,
            }),
        }
    }
}

impl Health {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave it inconsistent: every update is one
        // assignment or one insertion.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The agent is not ready, and why (shown in the probe's answer).
    pub fn set_unready(&self, why: impl Into<String>) {
        self.lock().unready = Some(why.into());
    }

    /// The agent is ready.
    pub fn set_ready(&self) {
        self.lock().unready = None;
    }

    /// `/readyz`: `Err` with the reason while the agent is not ready.
    pub fn readiness(&self) -> Result<(), String> {
        match &self.lock().unready {
            None => Ok(()),
            Some(why) => Err(why.clone()),
        }
    }

    /// `/healthz`: `Err` naming every loop that stopped or is stuck.
    pub fn liveness(&self) -> Result<(), String> {
        let inner = self.lock();
        if inner.shutting_down {
            return Ok(());
        }
        let now = Instant::now();
        let problems: Vec<String> = inner
            .stopped
            .iter()
            .map(|name| format!("the {name} loop stopped"))
            .chain(inner.busy.iter().filter_map(|(name, (since, bound))| {
                let busy = now.saturating_duration_since(*since);
                (busy > *bound).then(|| {
                    format!(
                        "the {name} loop has been in one pass for {}s (bound {}s)",
                        busy.as_secs(),
                        bound.as_secs()
                    )
                })
            }))
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// Marks `name` as in a pass until the guard drops; a pass longer than `bound` fails
    /// liveness.
    pub fn pass(&self, name: &'static str, bound: Duration) -> PassGuard<'_> {
        self.lock().busy.insert(name, (Instant::now(), bound));
        PassGuard { health: self, name }
    }

    /// A guard that reports the task `name` stopped when it drops: when the task's future
    /// returns, panics or is aborted.
    pub fn task(self: &std::sync::Arc<Self>, name: &'static str) -> TaskGuard {
        TaskGuard {
            health: self.clone(),
            name,
        }
    }

    /// The agent stops on purpose from now on: loops ending is not a failure.
    pub(crate) fn shutting_down(&self) {
        self.lock().shutting_down = true;
    }
}

/// Held for the length of one pass of a loop (see [`Health::pass`]).
#[must_use = "the pass ends when the guard drops"]
pub struct PassGuard<'a> {
    health: &'a Health,
    name: &'static str,
}

impl Drop for PassGuard<'_> {
    fn drop(&mut self) {
        self.health.lock().busy.remove(self.name);
    }
}

/// Held by a loop task for as long as it runs (see [`Health::task`]).
#[must_use = "the task counts as stopped when the guard drops"]
pub struct TaskGuard {
    health: std::sync::Arc<Health>,
    name: &'static str,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        let mut inner = self.health.lock();
        inner.busy.remove(self.name);
        if !inner.shutting_down {
            tracing::error!(
                task = self.name,
                "a control loop stopped; /healthz now fails"
            );
            inner.stopped.push(self.name);
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn an_agent_is_unready_until_told_and_says_why() {
        let health = Health::default();
        assert_eq!(health.readiness(), Err("starting".to_owned()));
        health.set_unready("waiting for the caches");
        assert_eq!(health.readiness(), Err("waiting for the caches".to_owned()));
        health.set_ready();
        assert_eq!(health.readiness(), Ok(()));
    }

    #[tokio::test]
    async fn a_pass_that_outlasts_its_bound_fails_liveness_until_it_returns() {
        let health = Health::default();
        let pass = health.pass("disruption", Duration::from_millis(100));
        assert_eq!(health.liveness(), Ok(()));
        tokio::time::sleep(Duration::from_millis(250)).await;
        let problem = health.liveness().expect_err("stuck");
        assert!(
            problem.starts_with("the disruption loop has been in one pass for"),
            "{problem}"
        );
        drop(pass);
        assert_eq!(health.liveness(), Ok(()));
    }

    #[tokio::test]
    async fn a_loop_task_that_dies_fails_liveness_but_not_once_the_agent_shuts_down() {
        let health = Arc::new(Health::default());
        let task = tokio::spawn({
            let guard = health.task("garbage collection");
            async move {
                let _guard = guard;
                panic!("a bug");
            }
        });
        assert!(task.await.is_err());
        assert_eq!(
            health.liveness(),
            Err("the garbage collection loop stopped".to_owned())
        );

        let health = Arc::new(Health::default());
        let guard = health.task("provisioning");
        health.shutting_down();
        drop(guard);
        assert_eq!(health.liveness(), Ok(()));
    }
}
