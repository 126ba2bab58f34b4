//! The admin HTTP server: `/metrics` (Prometheus text format), `/livez` and `/readyz`.
//!
//! Liveness and readiness describe this process only. A sidecar whose readiness followed Kafka or the
//! judge API would take the application's pod out of its Service when either blinks; their health is
//! in the metrics instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// What the handlers read.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// Metric families to render.
    pub metrics: Arc<Metrics>,
    /// Set once the pipeline is running; cleared when draining.
    pub ready: Arc<AtomicBool>,
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics.render(),
    )
}

async fn livez() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// Binds `listen` and returns the bound address and the server future, which runs until `stop`.
pub async fn bind(
    listen: &str,
    state: AdminState,
    stop: CancellationToken,
) -> std::io::Result<(
    SocketAddr,
    impl std::future::Future<Output = std::io::Result<()>> + use<>,
)> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(state);
    let server = async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    };
    Ok((addr, server))
}
