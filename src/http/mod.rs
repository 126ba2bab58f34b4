//! The admin HTTP server, read-only: `/metrics` (Prometheus text format; OpenMetrics with exemplars
//! when the scraper's `Accept` header prefers it, as Prometheus's does), `/livez`, `/readyz`, and
//! `GET /v1/suspects` ([`mod@suspects`]: the documents and sources behind a degrading stratum).
//! Writes (`POST /v1/traces`, `POST /v1/labels`) are served on the write listener ([`mod@write`]), with
//! credentials ([`auth`]), on a port of their own.
//!
//! Liveness and readiness describe this process only. A sidecar whose readiness followed Kafka or the
//! judge API would take the application's pod out of its Service when either blinks; their health is
//! in the metrics instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, openmetrics};

pub(crate) mod auth;
pub mod config;
mod suspects;

pub(crate) use suspects::SuspectsState;
pub(crate) mod tls;
pub mod write;

/// What the handlers read.
#[derive(Debug, Clone)]
pub(crate) struct AdminState {
    /// Metric families to render.
    pub metrics: Arc<Metrics>,
    /// Set once the pipeline is running; cleared when draining.
    pub ready: Arc<AtomicBool>,
    /// What `GET /v1/suspects` reads: the change attribution, strata and judges.
    pub suspects: suspects::SuspectsState,
}

/// Writes are not taken here; the answer says where they go.
async fn not_here() -> impl IntoResponse {
    (
        StatusCode::NOT_FOUND,
        "the admin port is read-only: POST /v1/labels to the write listener (write.listen), \
         with labels.enabled = true\n",
    )
}

async fn metrics(State(s): State<AdminState>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if openmetrics::wants_openmetrics(accept) {
        (
            [(header::CONTENT_TYPE, openmetrics::CONTENT_TYPE)],
            s.metrics.render_openmetrics(),
        )
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            s.metrics.render(),
        )
    }
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

/// Binds `listen` and serves on a thread of its own with its own small runtime, until `stop`.
///
/// The admin server never shares threads with the pipeline: librdkafka's callbacks (a synchronous
/// commit on revoke, a metadata request) can block the thread that polls the consumer for seconds
/// while a broker is down, and `/livez` and `/metrics` must answer through exactly that.
pub fn spawn(
    listen: &str,
    state: AdminState,
    stop: CancellationToken,
) -> std::io::Result<(SocketAddr, std::thread::JoinHandle<()>)> {
    let std_listener = std::net::TcpListener::bind(listen)?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let handle = std::thread::Builder::new()
        .name("ragwatch-admin".into())
        .spawn(move || {
            runtime.block_on(async move {
                let served = async {
                    let listener = TcpListener::from_std(std_listener)?;
                    serve(listener, state, stop).await
                };
                if let Err(e) = served.await {
                    tracing::error!(error = %e, "admin server failed");
                }
            })
        })?;
    Ok((addr, handle))
}

async fn serve(
    listener: TcpListener,
    state: AdminState,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/v1/labels", post(not_here))
        .route("/v1/suspects", get(suspects::suspects))
        .with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
}
