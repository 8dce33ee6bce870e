//! The agent's HTTP endpoints: `/metrics` (OpenMetrics, upstream's metric names), `/healthz`
//! (500 naming a control loop that stopped or is stuck) and `/readyz` (503 with the reason until
//! the caches have listed the cluster, or a standby knows who leads).

use anyhow::Context as _;
use karpenter_core::controllers::Health;
use karpenter_core::metrics::Metrics;
use std::net::SocketAddr;
use std::sync::Arc;

/// A probe's answer: 200 "ok", or the status and why.
fn probe(
    result: Result<(), String>,
    failing: axum::http::StatusCode,
) -> (axum::http::StatusCode, String) {
    match result {
        Ok(()) => (axum::http::StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (failing, format!("{why}\n")),
    }
}

/// Serves the endpoints on `address` until the task is dropped.
pub(crate) async fn serve_http(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> anyhow::Result<()> {
    use axum::http::{StatusCode, header};
    use axum::routing::get;
    let liveness = health.clone();
    let app = axum::Router::new()
        .route(
            "/healthz",
            get(move || {
                let health = liveness.clone();
                async move { probe(health.liveness(), StatusCode::INTERNAL_SERVER_ERROR) }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let health = health.clone();
                async move { probe(health.readiness(), StatusCode::SERVICE_UNAVAILABLE) }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    match metrics.encode() {
                        Ok(body) => (
                            StatusCode::OK,
                            [(
                                header::CONTENT_TYPE,
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            body,
                        ),
                        Err(_) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            [(header::CONTENT_TYPE, "text/plain")],
                            String::new(),
                        ),
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("listening on {address}"))?;
    axum::serve(listener, app).await.context("serving /metrics")
}
