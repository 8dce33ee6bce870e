//! What the live price feeds share (AWS's Pricing API, [`super::aws::price_feed`]; GCP's Cloud
//! Billing Catalog, [`super::gcp::billing`]): the last good answer and when it came, so a failed
//! or empty refresh keeps it, and how each refresh is counted in
//! `karpenter_cloudprovider_pricing_refreshes_total` (outcome `updated`, `empty` or `failed`)
//! and `karpenter_cloudprovider_pricing_last_update_timestamp_seconds`.

use crate::metrics::Metrics;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// A refresh's outcome as the metric labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A new answer replaced the last good one.
    Updated,
    /// The source answered, with nothing usable in it.
    Empty,
    /// The call failed.
    Failed,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Self::Updated => "updated",
            Self::Empty => "empty",
            Self::Failed => "failed",
        }
    }
}

/// The last good answer of a feed refreshed every `every`.
pub(crate) struct LastGood<T> {
    state: Mutex<(Arc<T>, Option<Instant>)>,
    every: Duration,
    metrics: OnceLock<Arc<Metrics>>,
}

impl<T: Default> LastGood<T> {
    /// Empty (`T::default()`) and due until an update.
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            state: Mutex::new((Arc::default(), None)),
            every,
            metrics: OnceLock::new(),
        }
    }
}

impl<T> LastGood<T> {
    fn lock(&self) -> MutexGuard<'_, (Arc<T>, Option<Instant>)> {
        // A panicked holder left a whole value behind: carry on with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The last good answer (the default until one came).
    pub(crate) fn current(&self) -> Arc<T> {
        self.lock().0.clone()
    }

    /// Whether no answer came yet, or the last is `every` old.
    pub(crate) fn due(&self) -> bool {
        self.lock().1.is_none_or(|at| at.elapsed() >= self.every)
    }

    /// Counts refreshes in `metrics` from now on, so a feed that keeps failing shows on a
    /// dashboard, not only in the log. Set once; later calls are ignored.
    pub(crate) fn report_to(&self, metrics: Arc<Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// Counts a refresh that kept the last good answer.
    pub(crate) fn kept(&self, outcome: Outcome) {
        if let Some(metrics) = self.metrics.get() {
            metrics.count_pricing_refresh(outcome.label());
        }
    }

    /// Replaces the answer and counts the update.
    pub(crate) fn update(&self, value: T) {
        *self.lock() = (Arc::new(value), Some(Instant::now()));
        self.kept(Outcome::Updated);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_is_due_until_updated_and_a_failure_keeps_the_last_good_answer() {
        let metrics = Arc::new(Metrics::new());
        let feed: LastGood<Vec<u32>> = LastGood::new(Duration::from_secs(3600));
        feed.report_to(metrics.clone());
        assert!(feed.due());
        feed.update(vec![1, 2]);
        assert!(!feed.due());
        feed.kept(Outcome::Failed);
        assert_eq!(*feed.current(), vec![1, 2]);
        let text = metrics.encode().unwrap_or_default();
        for outcome in ["updated", "failed"] {
            assert!(
                text.contains(&format!(
                    "karpenter_cloudprovider_pricing_refreshes_total{{outcome=\"{outcome}\"}} 1"
                )),
                "{text}"
            );
        }
    }
}
