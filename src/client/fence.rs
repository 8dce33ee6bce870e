//! A client that stops writing the moment this replica may no longer lead.
//!
//! Leader election alone does not keep a deposed leader quiet. Client-go's rule (the leader
//! gives up once a renewal round has not succeeded within the renew deadline, 10 s, before
//! the 15 s lease lets another replica take over) holds only while the process runs: a leader
//! frozen past the lease (SIGSTOP, a VM paused, a long GC pause in other runtimes) wakes up
//! with every timer due at once, and a loop may write before the renewal notices the deadline
//! has passed, while the new leader already acts.
//!
//! So the agent's writes go through a [`Fence`]: the leader opens it until the renew deadline
//! counted from the start of its last successful renewal, and every create, update, patch or
//! delete (except of the Lease itself, which is how a leader renews) is refused without being
//! sent once that moment has passed. The clock is monotonic and keeps counting while the
//! process is stopped, so a frozen leader resumes with its fence already shut.
//!
//! What a fence in the client cannot do: recall a request it let through just before the
//! process froze and that the connection had not sent yet; it reaches the API server when the
//! process runs again. Only a check on the server (a token the API server compares with the
//! Lease) could refuse it, and Kubernetes has none; client-go's leader election has the same
//! window, and every write that waits longer than an instant is made after a fresh check.

use http::{Method, Request, Response};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tower::{BoxError, Layer, Service};

/// Until when this replica may write: shut until first opened.
#[derive(Clone, Debug, Default)]
pub struct Fence(Arc<Mutex<Option<Instant>>>);

impl Fence {
    fn until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // One assignment at a time: a panic elsewhere cannot leave it half-written.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lets writes through until `until` (never shortens an opening already given).
    pub fn open_until(&self, until: Instant) {
        let mut current = self.until();
        if current.is_none_or(|c| c < until) {
            *current = Some(until);
        }
    }

    /// Refuses every write from now on (the Lease is released or lost).
    pub fn shut(&self) {
        *self.until() = None;
    }

    /// Whether a write may go now.
    pub fn is_open(&self) -> bool {
        self.until().is_some_and(|until| Instant::now() < until)
    }

    /// The layer that applies this fence to a client's requests.
    pub(crate) fn layer(&self) -> FenceLayer {
        FenceLayer(self.clone())
    }
}

/// A write refused because the fence is shut.
#[derive(Debug, thiserror::Error)]
#[error(
    "not sending {method} {path}: this replica's leadership may have lapsed (no Lease renewal within the renew deadline)"
)]
pub struct NotLeading {
    method: Method,
    path: String,
}

/// Whether a request changes the cluster, and is not a renewal of a Lease.
fn is_fenced_write(method: &Method, path: &str) -> bool {
    let writes = matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    writes && !path.starts_with("/apis/coordination.k8s.io/")
}

#[derive(Clone, Debug)]
pub(crate) struct FenceLayer(Fence);

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Fenced {
            inner,
            fence: self.0.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Fenced<S> {
    inner: S,
    fence: Fence,
}

impl<S, B, R> Service<Request<B>> for Fenced<S>
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
        let path = request.uri().path();
        if is_fenced_write(request.method(), path) && !self.fence.is_open() {
            let refused = NotLeading {
                method: request.method().clone(),
                path: path.to_owned(),
            };
            return Box::pin(async move { Err(Box::new(refused) as BoxError) });
        }
        let answer = self.inner.call(request);
        Box::pin(async move { answer.await.map_err(Into::into) })
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tower::ServiceExt;

    /// A service that answers every request 200.
    #[derive(Clone)]
    struct Ok200;

    impl Service<Request<()>> for Ok200 {
        type Response = Response<()>;
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<Response<()>, BoxError>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            Box::pin(async { Ok(Response::new(())) })
        }
    }

    async fn send(fence: &Fence, method: Method, path: &str) -> Result<(), String> {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .expect("a request");
        fence
            .layer()
            .layer(Ok200)
            .oneshot(request)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_shut_fence_refuses_writes_but_not_reads_nor_the_lease() {
        let fence = Fence::default();
        let claim = "/apis/karpenter.sh/v1/nodeclaims/a";
        assert!(send(&fence, Method::GET, claim).await.is_ok());
        let refused = send(&fence, Method::DELETE, claim)
            .await
            .expect_err("refused");
        assert!(refused.contains("not sending DELETE"), "{refused}");
        assert!(
            send(&fence, Method::POST, "/api/v1/namespaces/d/pods/p/eviction")
                .await
                .is_err()
        );
        let lease = "/apis/coordination.k8s.io/v1/namespaces/k/leases/karpenter-leader-election";
        assert!(send(&fence, Method::PUT, lease).await.is_ok());
    }

    #[tokio::test]
    async fn writes_go_until_the_opening_runs_out_and_stop_once_shut() {
        let fence = Fence::default();
        let claim = "/apis/karpenter.sh/v1/nodeclaims/a";
        fence.open_until(Instant::now() + Duration::from_secs(60));
        assert!(send(&fence, Method::PATCH, claim).await.is_ok());
        // An older renewal cannot shorten the opening a newer one gave.
        fence.open_until(Instant::now());
        assert!(fence.is_open());
        fence.shut();
        assert!(send(&fence, Method::PATCH, claim).await.is_err());
        fence.open_until(Instant::now() - Duration::from_millis(1));
        assert!(
            !fence.is_open(),
            "an opening already past lets nothing through"
        );
    }
}
