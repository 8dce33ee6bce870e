//! What a failed Compute call means to the controllers: a quota or stockout (capacity), a rate
//! limit (throttled), or another API failure; the error text that carries Compute's status and
//! message; and the retry policy and per-attempt timeout every Compute client is built with
//! ([`super::clients`]), which decide which failures are retried before anyone sees them.

use crate::cloud::provider::CloudError;
use std::time::Duration;

/// A Compute API error with its HTTP status, code and message in the text.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub(crate) struct GcpApiError {
    detail: String,
    #[source]
    source: google_cloud_compute_v1::Error,
}

impl From<google_cloud_compute_v1::Error> for GcpApiError {
    fn from(source: google_cloud_compute_v1::Error) -> Self {
        let detail = match (source.http_status_code(), source.status()) {
            (Some(http), Some(status)) => {
                format!("HTTP {http} {:?}: {}", status.code, status.message)
            }
            (None, Some(status)) => format!("{:?}: {}", status.code, status.message),
            _ => source.to_string(),
        };
        Self { detail, source }
    }
}

/// Whether a call failed because a quota or the zone's capacity ran out.
pub(super) fn is_quota_or_stockout(error: &google_cloud_compute_v1::Error) -> bool {
    use google_cloud_gax::error::rpc::Code;
    let reason_says = error.http_payload().is_some_and(|p| {
        let text = String::from_utf8_lossy(p);
        text.contains("quotaExceeded") || text.contains("ZONE_RESOURCE_POOL_EXHAUSTED")
    });
    reason_says
        || (error.http_status_code() == Some(403)
            && error
                .status()
                .is_some_and(|s| s.code == Code::ResourceExhausted))
}

/// Maps a Compute error: rate limits become throttling, the rest an API failure naming `action`.
pub(super) fn cloud_error(action: &str, error: google_cloud_compute_v1::Error) -> CloudError {
    use google_cloud_gax::error::rpc::Code;
    let rate_limited = error.http_status_code() == Some(429)
        || error
            .http_payload()
            .is_some_and(|p| String::from_utf8_lossy(p).contains("rateLimitExceeded"));
    if rate_limited
        || (error
            .status()
            .is_some_and(|s| s.code == Code::ResourceExhausted)
            && !is_quota_or_stockout(&error))
    {
        return CloudError::Throttled {
            source: Box::new(GcpApiError::from(error)),
        };
    }
    CloudError::api(action, GcpApiError::from(error))
}

/// How long one attempt of a Compute call may take. The client's default retry policy bounds
/// a call's retries to 60 s but an attempt only by what is left of that; this bounds a hung
/// attempt on its own, as upstream's AWS provider bounds each SDK request (4 minutes there,
/// where a CreateFleet may take that long; an insert returns its operation at once).
pub(super) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);

/// The client library's default policy (AIP-194: retry what is safe to retry, at most 10
/// attempts in 60 s, exponential backoff with jitter), plus one more case: an HTTP 429, which
/// Compute answers a rate-limited request before doing anything. The library leaves it to the
/// caller; retried here with the library's backoff, a short burst of rate limiting costs the
/// launch seconds instead of a failed reconcile. A quota or stockout error (403 or 503 with
/// `RESOURCE_EXHAUSTED`) is not retried: it goes back to the controllers as capacity.
pub(super) fn retry_policy() -> impl google_cloud_gax::retry_policy::RetryPolicy {
    use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicyExt};
    RetryOnTooManyRequests(Aip194Strict)
        .with_attempt_limit(10)
        .with_time_limit(Duration::from_secs(60))
}

/// Retries an HTTP 429 answer, and defers everything else to the inner policy.
#[derive(Debug)]
struct RetryOnTooManyRequests<P>(P);

impl<P: google_cloud_gax::retry_policy::RetryPolicy> google_cloud_gax::retry_policy::RetryPolicy
    for RetryOnTooManyRequests<P>
{
    fn on_error(
        &self,
        state: &google_cloud_gax::retry_state::RetryState,
        error: google_cloud_gax::error::Error,
    ) -> google_cloud_gax::retry_result::RetryResult {
        if error.http_status_code() == Some(429) {
            return google_cloud_gax::retry_result::RetryResult::Continue(error);
        }
        self.0.on_error(state, error)
    }

    fn on_throttle(
        &self,
        state: &google_cloud_gax::retry_state::RetryState,
        error: google_cloud_gax::error::Error,
    ) -> google_cloud_gax::throttle_result::ThrottleResult {
        self.0.on_throttle(state, error)
    }

    fn remaining_time(
        &self,
        state: &google_cloud_gax::retry_state::RetryState,
    ) -> Option<Duration> {
        self.0.remaining_time(state)
    }
}
