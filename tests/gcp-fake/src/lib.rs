//! A fake of the Google Cloud REST endpoints kubectl-karpenter uses, faithful enough for the
//! official google-cloud-rust clients: the Compute Engine calls of the agent's GCP provider and
//! the Cloud Billing Catalog it prices from, and (added by `init gcp`) GKE clusters, IAM,
//! Resource Manager and Service Usage.
//!
//! Google ships no Compute Engine emulator and the PyPI candidates break the Rust clients
//! (`cloud-test-servers.md` §2), so the project owns this one. It serves every API on one port
//! (the path prefixes do not collide), keeps all of its world in one [`State`] behind a mutex that
//! tests seed and drive directly (stockouts, quota errors, failing operations, preemptions), and
//! follows the wire rules in [`wire`].
//!
//! Layout: one module per API, each with a `router()` merged in [`router`], and its own part of
//! [`State`].
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let fake = gcp_fake::FakeGcp::start().await?;
//! fake.state().compute.seed_project("demo");
//! fake.state().compute.stockout("us-central1-a", "e2-standard-2", true);
//! println!("point clients at {}", fake.endpoint());
//! # Ok(()) }
//! ```

pub mod billing;
pub mod compute;
pub mod container;
pub mod iam;
pub mod resourcemanager;
pub mod serviceusage;
pub mod wire;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Everything the fake knows. Tests lock it through [`FakeGcp::state`] to seed and inspect.
#[derive(Debug, Default)]
pub struct State {
    /// Cloud Billing Catalog: Compute Engine's SKUs and prices.
    pub billing: billing::Billing,
    /// Compute Engine: projects, zones, machine types, images, instances, operations, faults.
    pub compute: compute::Compute,
    /// GKE: clusters `init gcp` reads.
    pub container: container::Container,
    /// IAM: service accounts, their keys and policies, custom roles.
    pub iam: iam::Iam,
    /// Resource Manager: project policies, and the permission denials every `init` API honours.
    pub resource_manager: resourcemanager::ResourceManager,
    /// Service Usage: enabled services and their operations.
    pub service_usage: serviceusage::ServiceUsage,
    /// Every request served, as `METHOD /path` (no query), oldest first.
    pub requests: Vec<String>,
}

/// The state as handlers share it.
pub type Shared = Arc<Mutex<State>>;

/// Locks the state, carrying on after a panicked holder (a failed test must not cascade).
pub fn lock(state: &Shared) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The fake's HTTP surface: every API's router merged, and Google's 404 for anything else.
///
/// To add an API: write `mod x;` with `pub fn router() -> Router<Shared>` and merge it here.
pub fn router(state: Shared) -> Router {
    Router::new()
        .merge(billing::router())
        .merge(compute::router())
        .merge(container::router())
        .merge(iam::router())
        .merge(resourcemanager::router())
        .merge(serviceusage::router())
        .fallback(unknown_route)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            record_request,
        ))
        .with_state(state)
}

async fn unknown_route(uri: axum::http::Uri, method: axum::http::Method) -> wire::GoogleError {
    wire::GoogleError::not_found(format!(
        "The requested URL {method} {} was not found on this server.",
        uri.path()
    ))
}

async fn record_request(
    axum::extract::State(state): axum::extract::State<Shared>,
    request: Request,
    next: Next,
) -> Response {
    let line = format!("{} {}", request.method(), request.uri().path());
    tracing::debug!(request = %line, "gcp-fake");
    lock(&state).requests.push(line);
    next.run(request).await
}

/// A running fake on 127.0.0.1; it stops when dropped.
#[derive(Debug)]
pub struct FakeGcp {
    addr: SocketAddr,
    state: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl FakeGcp {
    /// Starts an empty fake on a free port.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts an empty fake on `addr`.
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Shared::default();
        let app = router(state.clone());
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::error!(%error, "gcp-fake server stopped");
            }
        });
        Ok(Self { addr, state, task })
    }

    /// `http://127.0.0.1:PORT`, for the clients' `with_endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Locks the state to seed or inspect it. Do not hold it across an await of a client call.
    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A handle on the state that outlives borrows of `self` (for background drivers).
    pub fn shared(&self) -> Shared {
        self.state.clone()
    }
}

impl Drop for FakeGcp {
    fn drop(&mut self) {
        self.task.abort();
    }
}
