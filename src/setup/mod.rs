//! What `kubectl karpenter init aws|gcp` does, as a [`Plan`] of named, idempotent [`Step`]s.
//!
//! Each step has a read-only `check` (is it in place?) and an `apply` (make it so). The CLI is a
//! thin layer over this: print [`Plan::describe`], then [`Plan::run`] with [`Mode::DryRun`]
//! (checks only: changes nothing) or [`Mode::Apply`]. Because every step checks before it acts,
//! a second run finds every step in place and changes nothing, and a run that failed half-way
//! completes when re-run. Errors name the step and the missing permission or resource.
//! [`Plan::run_with`] also tells an [`Observer`] when each step starts, so a caller can show
//! what is running (the plugin's spinner) without this library drawing anything.
//!
//! ```no_run
//! # async fn example() -> Result<(), karpenter_core::setup::SetupError> {
//! use karpenter_core::setup::{Mode, Plan, aws::AwsOptions};
//! let options = AwsOptions::new("demo", "us-west-2");
//! let plan = Plan::for_aws(options).await;
//! for line in plan.describe() { eprintln!("  {line}"); }
//! let report = plan.run(Mode::Apply, |progress| eprintln!("{progress}")).await?;
//! eprintln!("{}", report.summary());
//! # Ok(()) }
//! ```

#[cfg(feature = "aws")]
pub mod aws;
pub mod chart;
#[cfg(feature = "gcp")]
pub mod gcp;
mod manifest;
pub mod manifests;

use futures::future::BoxFuture;
use std::fmt;

/// What a step's check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Nothing to do; the text says what is there.
    InPlace(String),
    /// Apply would change something; the text says what.
    Needed(String),
}

/// One named, idempotent piece of setup.
pub trait Step: Send + Sync {
    /// A short stable name (`node-role`, `interruption-queue`).
    fn name(&self) -> &str;
    /// What the step makes sure of, for the plan printed before anything runs.
    fn describe(&self) -> String;
    /// Looks without touching anything.
    fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>>;
    /// Makes it so (only called when `check` said [`Status::Needed`]).
    fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>>;
}

/// A step made of two functions over a cloud's shared context (its clients, options and what
/// earlier steps found), so each cloud writes a step as a `check` and an `apply` function.
#[cfg_attr(not(any(feature = "aws", feature = "gcp")), allow(dead_code))]
struct FnStep<C> {
    name: &'static str,
    description: String,
    ctx: std::sync::Arc<C>,
    check: for<'a> fn(&'a C) -> BoxFuture<'a, Result<Status, SetupError>>,
    apply: for<'a> fn(&'a C) -> BoxFuture<'a, Result<(), SetupError>>,
}

impl<C: Send + Sync> Step for FnStep<C> {
    fn name(&self) -> &str {
        self.name
    }
    fn describe(&self) -> String {
        self.description.clone()
    }
    fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>> {
        (self.check)(&self.ctx)
    }
    fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>> {
        (self.apply)(&self.ctx)
    }
}

/// A [`Step`] named `name` that checks and applies with the given functions over `ctx`.
#[cfg_attr(not(any(feature = "aws", feature = "gcp")), allow(dead_code))]
fn step<C: Send + Sync + 'static>(
    ctx: &std::sync::Arc<C>,
    name: &'static str,
    description: String,
    check: for<'a> fn(&'a C) -> BoxFuture<'a, Result<Status, SetupError>>,
    apply: for<'a> fn(&'a C) -> BoxFuture<'a, Result<(), SetupError>>,
) -> Box<dyn Step> {
    Box::new(FnStep {
        name,
        description,
        ctx: ctx.clone(),
        check,
        apply,
    })
}

/// Why setup could not go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// The caller may not do `action` (an IAM action such as `iam:CreateRole`).
    #[error(
        "permission denied: {action} on {resource} (grant it to the identity running init, or ask an administrator)"
    )]
    PermissionDenied {
        action: String,
        resource: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Something setup builds on does not exist.
    #[error("{resource} does not exist: {hint}")]
    Missing { resource: String, hint: String },
    /// A cloud call failed for another reason.
    #[error("{action} failed: {detail}")]
    Cloud {
        action: String,
        detail: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A Kubernetes call failed.
    #[error("{action} failed")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// The agent's chart did not render with these values.
    #[error("the agent's chart: {0}")]
    Chart(#[from] chart::ChartError),
    /// A step failed; the plan stopped there.
    #[error("step {step} failed")]
    Step {
        step: String,
        #[source]
        source: Box<SetupError>,
    },
}

impl SetupError {
    /// The step-level cause, without the [`SetupError::Step`] wrapper.
    pub fn root(&self) -> &SetupError {
        match self {
            Self::Step { source, .. } => source.root(),
            other => other,
        }
    }
}

/// Dry run or the real thing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Check every step; change nothing.
    DryRun,
    /// Check every step and apply those not in place.
    Apply,
}

/// What happened to one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It was already in place.
    InPlace(String),
    /// It was not; a dry run would have changed this.
    WouldApply(String),
    /// It was not, and now is.
    Applied(String),
}

/// One line of progress, as the run goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub step: String,
    pub outcome: Outcome,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::InPlace(what) => write!(f, "✓ {}: in place ({what})", self.step),
            Outcome::WouldApply(what) => write!(f, "~ {}: would change: {what}", self.step),
            Outcome::Applied(what) => write!(f, "+ {}: done: {what}", self.step),
        }
    }
}

/// What a step is doing while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Its read-only check.
    Check,
    /// Its change (only in [`Mode::Apply`], when the check said it is needed).
    Apply,
}

/// Hears about a run as it goes: when each step starts its check or its change, and when it
/// finishes. A run that fails stops after `started`, without `finished`, so whatever `started`
/// shows must also be cleared when the run returns.
pub trait Observer {
    /// `step` starts its check or its change.
    fn started(&mut self, step: &str, phase: Phase) {
        let _ = (step, phase);
    }
    /// A step finished.
    fn finished(&mut self, progress: &Progress);
}

/// An [`Observer`] that only hears about finished steps.
struct OnFinish<F>(F);

impl<F: FnMut(&Progress)> Observer for OnFinish<F> {
    fn finished(&mut self, progress: &Progress) {
        (self.0)(progress);
    }
}

/// What a run did, step by step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub steps: Vec<Progress>,
}

impl Report {
    /// Steps changed (or, in a dry run, that would be).
    pub fn changed(&self) -> usize {
        self.steps
            .iter()
            .filter(|p| !matches!(p.outcome, Outcome::InPlace(_)))
            .count()
    }

    /// Whether every step was already in place.
    pub fn all_in_place(&self) -> bool {
        self.changed() == 0
    }

    /// One line for the end of a run.
    pub fn summary(&self) -> String {
        let applied = self
            .steps
            .iter()
            .filter(|p| matches!(p.outcome, Outcome::Applied(_)))
            .count();
        let would = self
            .steps
            .iter()
            .filter(|p| matches!(p.outcome, Outcome::WouldApply(_)))
            .count();
        match (applied, would) {
            (0, 0) => format!(
                "everything is in place ({} steps); nothing changed",
                self.steps.len()
            ),
            (_, 0) => format!("{applied} of {} steps changed", self.steps.len()),
            _ => format!(
                "dry run: {would} of {} steps would change; nothing changed",
                self.steps.len()
            ),
        }
    }
}

/// An ordered list of steps.
pub struct Plan {
    pub steps: Vec<Box<dyn Step>>,
    manifests: Vec<manifests::Manifest>,
}

impl Plan {
    /// A plan of these steps.
    pub fn new(steps: Vec<Box<dyn Step>>) -> Self {
        Self {
            steps,
            manifests: Vec::new(),
        }
    }

    /// Attaches the Kubernetes objects the plan stands for (printed by `--dry-run -o yaml`).
    pub(crate) fn with_manifests(mut self, manifests: Vec<manifests::Manifest>) -> Self {
        self.manifests = manifests;
        self
    }

    /// The Kubernetes objects of the plan (CRDs, namespace, RBAC, the agent, a NodePool...).
    pub fn manifests(&self) -> &[manifests::Manifest] {
        &self.manifests
    }

    /// `name: description` per step, in order.
    pub fn describe(&self) -> Vec<String> {
        self.steps
            .iter()
            .map(|s| format!("{}: {}", s.name(), s.describe()))
            .collect()
    }

    /// Runs every step in order (see [`Mode`]); stops at the first failure, which names the
    /// step. `on_progress` hears about each step as it finishes.
    pub async fn run(
        &self,
        mode: Mode,
        on_progress: impl FnMut(&Progress),
    ) -> Result<Report, SetupError> {
        self.run_observed(mode, usize::MAX, &mut OnFinish(on_progress))
            .await
    }

    /// Runs at most the first `limit` steps (tests use it to stop half-way).
    pub async fn run_until(
        &self,
        mode: Mode,
        limit: usize,
        on_progress: &mut impl FnMut(&Progress),
    ) -> Result<Report, SetupError> {
        self.run_observed(mode, limit, &mut OnFinish(on_progress))
            .await
    }

    /// Like [`Plan::run`], telling `observer` when each step starts as well as when it finishes.
    pub async fn run_with(
        &self,
        mode: Mode,
        observer: &mut impl Observer,
    ) -> Result<Report, SetupError> {
        self.run_observed(mode, usize::MAX, observer).await
    }

    async fn run_observed(
        &self,
        mode: Mode,
        limit: usize,
        observer: &mut impl Observer,
    ) -> Result<Report, SetupError> {
        let mut report = Report::default();
        for step in self.steps.iter().take(limit) {
            let wrap = |source: SetupError| SetupError::Step {
                step: step.name().to_owned(),
                source: Box::new(source),
            };
            observer.started(step.name(), Phase::Check);
            let status = step.check().await.map_err(wrap)?;
            let outcome = match (status, mode) {
                (Status::InPlace(what), _) => Outcome::InPlace(what),
                (Status::Needed(what), Mode::DryRun) => Outcome::WouldApply(what),
                (Status::Needed(what), Mode::Apply) => {
                    observer.started(step.name(), Phase::Apply);
                    step.apply().await.map_err(wrap)?;
                    tracing::info!(step = step.name(), change = %what, "setup step applied");
                    Outcome::Applied(what)
                }
            };
            let progress = Progress {
                step: step.name().to_owned(),
                outcome,
            };
            observer.finished(&progress);
            report.steps.push(progress);
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeStep {
        name: &'static str,
        check: Result<Status, &'static str>,
    }

    impl Step for FakeStep {
        fn name(&self) -> &str {
            self.name
        }
        fn describe(&self) -> String {
            format!("fake {}", self.name)
        }
        fn check(&self) -> BoxFuture<'_, Result<Status, SetupError>> {
            Box::pin(async move {
                self.check.clone().map_err(|hint| SetupError::Missing {
                    resource: self.name.to_owned(),
                    hint: hint.to_owned(),
                })
            })
        }
        fn apply(&self) -> BoxFuture<'_, Result<(), SetupError>> {
            Box::pin(async { Ok(()) })
        }
    }

    fn plan(steps: Vec<(&'static str, Result<Status, &'static str>)>) -> Plan {
        Plan::new(
            steps
                .into_iter()
                .map(|(name, check)| Box::new(FakeStep { name, check }) as Box<dyn Step>)
                .collect(),
        )
    }

    #[derive(Default)]
    struct Recorder(Vec<String>);

    impl Observer for Recorder {
        fn started(&mut self, step: &str, phase: Phase) {
            self.0.push(format!("{phase:?} {step}"));
        }
        fn finished(&mut self, progress: &Progress) {
            self.0.push(progress.to_string());
        }
    }

    #[tokio::test]
    async fn an_observer_hears_each_step_start_its_check_and_its_change_and_finish() {
        let plan = plan(vec![
            ("there", Ok(Status::InPlace("it is".to_owned()))),
            ("missing", Ok(Status::Needed("make it".to_owned()))),
        ]);
        let mut seen = Recorder::default();
        let report = plan.run_with(Mode::Apply, &mut seen).await.unwrap();
        assert_eq!(
            seen.0,
            [
                "Check there",
                "✓ there: in place (it is)",
                "Check missing",
                "Apply missing",
                "+ missing: done: make it",
            ]
        );
        assert_eq!(report.changed(), 1);

        let mut dry = Recorder::default();
        plan.run_with(Mode::DryRun, &mut dry).await.unwrap();
        assert!(!dry.0.iter().any(|e| e.starts_with("Apply")), "{:?}", dry.0);
    }

    #[tokio::test]
    async fn a_failed_step_is_started_but_never_finished_and_the_plain_callback_hears_the_same_steps()
     {
        let plan = plan(vec![
            ("there", Ok(Status::InPlace("it is".to_owned()))),
            ("broken", Err("no way")),
        ]);
        let mut seen = Recorder::default();
        let error = plan.run_with(Mode::Apply, &mut seen).await.unwrap_err();
        assert!(matches!(error, SetupError::Step { ref step, .. } if step == "broken"));
        assert_eq!(
            seen.0,
            ["Check there", "✓ there: in place (it is)", "Check broken"]
        );

        let mut finished = Vec::new();
        let _ = plan
            .run(Mode::Apply, |p| finished.push(p.step.clone()))
            .await;
        assert_eq!(finished, ["there"]);
    }
}
