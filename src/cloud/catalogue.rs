//! The catalogue helpers every provider shares: kube-reserved CPU as EKS and GKE compute it,
//! and the stale-tolerant refresh of a provider's cached catalogue. The instance-type values
//! themselves ([`crate::scheduling::InstanceType`]) belong to the scheduler's layer.

/// kube-reserved CPU as EKS and GKE both compute it: 6 % of the first core, 1 % of the second,
/// 0.5 % of the next two and 0.25 % of every core after that (milli-cores, rounded up).
pub(crate) fn kube_reserved_cpu_millis(vcpus: u64) -> u64 {
    let mut remaining = vcpus;
    let mut tenths_of_millis = 0;
    for (count, per_core) in [(1, 60), (1, 10), (2, 5)] {
        let used = remaining.min(count);
        tenths_of_millis += used * per_core * 10;
        remaining -= used;
    }
    (tenths_of_millis + remaining * 25).div_ceil(10)
}

/// The provider's cached catalogue in `slot`: reused while `fetched_at` says it is younger than
/// `ttl`, else replaced by `fetch`'s. When a refresh fails and a catalogue was fetched before,
/// the stale one is kept (and the failure logged): prices and types rarely change within
/// minutes, and failing every launch for a throttled describe call would be worse.
#[cfg_attr(not(any(feature = "aws", feature = "gcp")), allow(dead_code))]
pub(crate) async fn cached_or_refreshed<T, Fut>(
    slot: &tokio::sync::Mutex<std::sync::Arc<T>>,
    fetched_at: fn(&T) -> Option<std::time::Instant>,
    ttl: std::time::Duration,
    what: &str,
    fetch: impl FnOnce() -> Fut,
) -> Result<std::sync::Arc<T>, super::CloudError>
where
    Fut: std::future::Future<Output = Result<T, super::CloudError>>,
{
    let mut current = slot.lock().await;
    let fetched = fetched_at(&current);
    if fetched.is_some_and(|t| t.elapsed() < ttl) {
        return Ok(current.clone());
    }
    match fetch().await {
        Ok(fresh) => {
            *current = std::sync::Arc::new(fresh);
            Ok(current.clone())
        }
        Err(e) if fetched.is_some() => {
            tracing::warn!(error = %e, "refreshing the {what} catalogue failed; using the previous one");
            Ok(current.clone())
        }
        Err(e) => Err(e),
    }
}
