//! The agent's Kubernetes client.
//!
//! kube's default client re-sends a request answered 429 (Too Many Requests) up to 15 times
//! with exponential backoff, which takes minutes. The Eviction API answers 429 when a
//! PodDisruptionBudget refuses an eviction: through such a client every refused eviction stalls
//! its drain (and the reconcile worker) for minutes instead of being reported and asked again on
//! the next pass, as upstream's eviction queue does (client-go retries a 429 only when the server
//! sends `Retry-After`, which a refused eviction does not). The agent's loops requeue every
//! failed call themselves, with backoff, so the client does not retry at all.
//!
//! Every request but a watch must be answered within [`REQUEST_TIMEOUT`]. kube's client only
//! bounds the gaps between reads (295 s, as long as a watch may be idle), so an API server that
//! accepts a connection and then hangs (overloaded, or paused behind a load balancer) held a
//! reconcile, and the provisioning round waiting on it, for five minutes. A watch is left
//! unbounded: it is meant to stay open, and the server ends it itself (`timeoutSeconds`).

use super::fence::Fence;
use http::{Request, Response};
use kube::client::ClientBuilder;
use kube::{Client, Config};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{BoxError, Layer, Service};

/// How long a request other than a watch may wait for the API server's answer (its status
/// and headers). Generous for a LIST of tens of thousands of objects, which the server starts
/// streaming at once; short next to kube's 295 s read timeout.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A client for the agent's control loops: `config` without kube's automatic retries, every
/// request but a watch bounded by [`REQUEST_TIMEOUT`], and named `karpenter-agent/VERSION`.
pub fn agent_client(mut config: Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    identify(&mut config, "karpenter-agent");
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&Bounded(REQUEST_TIMEOUT))
        .build())
}

/// [`agent_client`] whose writes stop once `fence` shuts: the client of a replica that leads
/// through leader election (see [`super::fence`]).
pub fn fenced_agent_client(mut config: Config, fence: &Fence) -> Result<Client, kube::Error> {
    config.default_retry = false;
    identify(&mut config, "karpenter-agent");
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&Bounded(REQUEST_TIMEOUT))
        .with_layer(&fence.layer())
        .build())
}

/// A client, kube's defaults otherwise, whose every request but a watch gives up after `limit`
/// without an answer: the plugin's `--request-timeout`, as kubectl's.
pub fn bounded_client(config: Config, limit: Duration) -> Result<Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&Bounded(limit))
        .build())
}

/// Names the client in every request's `User-Agent` as `product/VERSION`, as client-go names
/// its binaries. kube sends none, and the API server takes the field manager of a create,
/// update or merge patch that names none from the User-Agent: without it, the agent's NodeClaims
/// showed their metadata and spec owned by `unknown` in `managedFields`, and audit logs and
/// `apiserver_request_total` could not tell the agent from any other client.
pub fn identify(config: &mut Config, product: &str) {
    let agent = format!("{product}/{}", env!("CARGO_PKG_VERSION"));
    // A product name is a plain token and the version is Cargo's: the value is always valid.
    if let Ok(value) = http::HeaderValue::from_str(&agent) {
        config
            .headers
            .retain(|(name, _)| name != http::header::USER_AGENT);
        config.headers.push((http::header::USER_AGENT, value));
    }
}

/// A request that got no answer in time.
#[derive(Debug, thiserror::Error)]
#[error("the API server did not answer {method} {path} within {limit:?}")]
pub(crate) struct RequestTimedOut {
    method: http::Method,
    path: String,
    limit: Duration,
}

/// Layer bounding every non-watch request by a timeout.
#[derive(Clone, Copy, Debug)]
struct Bounded(Duration);

impl<S> Layer<S> for Bounded {
    type Service = BoundedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BoundedService {
            inner,
            limit: self.0,
        }
    }
}

#[derive(Clone, Debug)]
struct BoundedService<S> {
    inner: S,
    limit: Duration,
}

/// Whether the request is a watch (`?watch=true` or `?watch=1`), which stays open by design.
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1" | "watch=True"))
    })
}

impl<S, B, R> Service<Request<B>> for BoundedService<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<R>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<R>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let bound = (!is_watch(request.uri())).then(|| RequestTimedOut {
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            limit: self.limit,
        });
        let answer = self.inner.call(request);
        Box::pin(async move {
            match bound {
                None => answer.await.map_err(Into::into),
                Some(timed_out) => match tokio::time::timeout(timed_out.limit, answer).await {
                    Ok(result) => result.map_err(Into::into),
                    Err(_) => Err(Box::new(timed_out) as BoxError),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service that answers after `delay`.
    #[derive(Clone)]
    struct Slow(Duration);

    impl Service<Request<()>> for Slow {
        type Response = Response<()>;
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<Response<()>, BoxError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            let delay = self.0;
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                Ok(Response::new(()))
            })
        }
    }

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).expect("a valid request")
    }

    #[tokio::test]
    async fn a_hung_request_fails_after_the_timeout_and_a_watch_is_left_open() {
        let limit = Duration::from_millis(50);
        let mut service = Bounded(limit).layer(Slow(Duration::from_secs(600)));
        let error = service
            .call(get("/api/v1/nodes?limit=500"))
            .await
            .expect_err("a hung list should time out");
        assert_eq!(
            error.to_string(),
            "the API server did not answer GET /api/v1/nodes within 50ms"
        );
        let mut service = Bounded(limit).layer(Slow(limit * 3));
        let watch = service
            .call(get("/api/v1/nodes?watch=true&resourceVersion=1"))
            .await;
        assert!(watch.is_ok(), "a watch must not be cut short");
    }

    #[tokio::test]
    async fn a_request_answered_in_time_passes_through() {
        let mut service = Bounded(Duration::from_secs(60)).layer(Slow(Duration::from_millis(10)));
        assert!(service.call(get("/api/v1/pods")).await.is_ok());
    }

    #[test]
    fn only_a_watch_query_counts_as_a_watch() {
        let uri = |s: &str| s.parse::<http::Uri>().expect("a valid uri");
        assert!(is_watch(&uri("/api/v1/pods?watch=1")));
        assert!(is_watch(&uri("/api/v1/pods?labelSelector=a&watch=true")));
        assert!(!is_watch(&uri("/api/v1/pods?watch=false")));
        assert!(!is_watch(&uri("/api/v1/pods?labelSelector=watch%3Dtrue")));
        assert!(!is_watch(&uri("/api/v1/namespaces/watch/pods")));
    }
}
