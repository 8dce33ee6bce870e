//! Reconcile-level tests without a cluster, as kube-rs's controller-rs tests its reconciler: a
//! loop's pass runs against the in-memory [`FakeProvider`], stores the test fills, and an API
//! server the test plays itself ([`ApiServer`]): each request the pass makes waits until the
//! test has looked at it and answered, so a test asserts which writes a pass makes, in which
//! order, and what the cloud saw meanwhile.
//!
//! The client end is a small `tower::Service` over a channel rather than `tower-test`: that
//! crate brings `tokio-test`, whose `test-util` feature of tokio would rebuild tokio and every
//! crate above it (the cloud SDKs among them) for the whole workspace's test build.

use super::{Context, Health, OwnWrites, Settings};
use crate::apis::{NodeClaim, NodePool};
use crate::cloud::fake::FakeProvider;
use crate::state::{CachedNode, CachedPod, Stores};
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// One request the code under test made, waiting for the test's answer.
pub(crate) struct Exchange {
    pub(crate) method: Method,
    /// The path and query, e.g. `/apis/karpenter.sh/v1/nodeclaims/a`.
    pub(crate) uri: String,
    /// The body as JSON (`Null` when empty).
    pub(crate) body: Value,
    reply: oneshot::Sender<Response<Body>>,
}

impl Exchange {
    /// Answers `status` with `body`.
    pub(crate) fn answer(self, status: u16, body: &Value) {
        let response = Response::builder()
            .status(StatusCode::from_u16(status).expect("a valid status"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string().into_bytes()))
            .expect("a valid response");
        let _ = self.reply.send(response);
    }

    /// Whether the request is `method` on a path that starts with `path`.
    pub(crate) fn is(&self, method: &Method, path: &str) -> bool {
        self.method == method && self.uri.starts_with(path)
    }
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.method, self.uri, self.body)
    }
}

/// The API server as the test plays it.
pub(crate) struct ApiServer {
    requests: mpsc::UnboundedReceiver<Exchange>,
    events: Events,
}

/// The Events created so far, as their bodies.
type Events = Arc<std::sync::Mutex<Vec<Value>>>;

impl ApiServer {
    /// The next request that is not an Event.
    pub(crate) async fn next(&mut self) -> Exchange {
        tokio::time::timeout(Duration::from_secs(10), self.requests.recv())
            .await
            .expect("a request within 10 s")
            .expect("the client is still there")
    }

    /// Asserts that no request other than an Event comes within `wait`.
    pub(crate) async fn expect_quiet(&mut self, wait: Duration) {
        if let Ok(Some(exchange)) = tokio::time::timeout(wait, self.requests.recv()).await {
            panic!("unexpected request: {exchange:?}");
        }
    }

    /// The Events created so far (reason and note of each).
    pub(crate) fn events(&self) -> Vec<(String, String)> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|e| {
                let text = |key: &str| e[key].as_str().unwrap_or_default().to_owned();
                (text("reason"), text("note"))
            })
            .collect()
    }
}

/// The client end: hands every request to the [`ApiServer`] and waits for its answer.
#[derive(Clone)]
struct Scripted {
    requests: mpsc::UnboundedSender<Exchange>,
    events: Events,
}

impl tower::Service<Request<Body>> for Scripted {
    type Response = Response<Body>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (sender, events) = (self.requests.clone(), self.events.clone());
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await?;
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes)?
            };
            // Events, which loops publish as they go, are answered as the API server answers a
            // create, without the test's attention.
            if parts.uri.path().starts_with("/apis/events.k8s.io/") {
                events
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(body.clone());
                return Ok(Response::builder()
                    .status(StatusCode::CREATED)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(body.to_string().into_bytes()))?);
            }
            let (reply, answer) = oneshot::channel();
            let uri = parts
                .uri
                .path_and_query()
                .map(ToString::to_string)
                .unwrap_or_default();
            sender.send(Exchange {
                method: parts.method,
                uri,
                body,
                reply,
            })?;
            Ok(answer.await?)
        })
    }
}

/// What a test fills the stores with.
#[derive(Default)]
pub(crate) struct Objects {
    pub(crate) claims: Vec<NodeClaim>,
    pub(crate) nodes: Vec<CachedNode>,
    pub(crate) pools: Vec<NodePool>,
    pub(crate) pods: Vec<CachedPod>,
}

/// A context over `provider`, stores holding `objects` (and nothing else, every store listed),
/// and a client whose requests the returned [`ApiServer`] answers.
pub(crate) fn context(
    provider: Arc<FakeProvider>,
    objects: Objects,
    settings: Settings,
) -> (Arc<Context<FakeProvider>>, ApiServer) {
    let (sender, receiver) = mpsc::unbounded_channel();
    let events = Events::default();
    let scripted = Scripted {
        requests: sender,
        events: events.clone(),
    };
    let client = kube::Client::new(scripted, "default");
    let (stores, mut writers) = Stores::new();
    writers.fill(objects.claims, objects.nodes, objects.pools, objects.pods);
    let ctx = Context::new(
        client,
        provider,
        stores,
        settings,
        Arc::new(crate::metrics::Metrics::new()),
        Arc::new(Health::default()),
        Arc::new(OwnWrites::default()),
    );
    let server = ApiServer {
        requests: receiver,
        events,
    };
    (Arc::new(ctx), server)
}
