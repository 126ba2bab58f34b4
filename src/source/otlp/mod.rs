//! The OTLP receiver (`source.kind = "otlp"`): OTLP/HTTP's `POST /v1/traces` and OTLP/gRPC's
//! `TraceService/Export`, both on the write listener (its credentials, TLS and rate limit are the
//! listener's), with a protobuf or JSON `ExportTraceServiceRequest`, gzip or not, as OTLP
//! specifies. A service's OTLP exporter or a Collector's `otlphttp`, `otlp` or `loadbalancing`
//! exporter can push to it.
//!
//! ```text
//! http   POST /v1/traces ─┐  read, gunzip, decode (bounded in size, and by the memory budget)
//! grpc   Export ──────────┴─► handoff: bounded queue ─► this module's task: span assembly
//! ```
//!
//! Handlers decode and hand the request over a bounded queue to the one task that owns span
//! assembly, which answers with what became of the spans. Answers (HTTP; gRPC's codes are in
//! `grpc`):
//! - 200: the request was decoded and its spans taken into span assembly. `partialSuccess` counts
//!   the spans not kept (invalid ids, a trace already complete, a trace over its span limit). It is
//!   not a verdict, and not durable: the traces are judged once complete, and a process that stops
//!   first loses them (for at-least-once delivery, export to Kafka instead);
//! - 400 undecodable, 413 too large, 415 unsupported content type or encoding;
//! - 429 with Retry-After when the queue is full, or when the memory budget (`otlp.max_queued_bytes`,
//!   `budget`) cannot cover the request, 503 with Retry-After while shutting down: the exporter
//!   retries, as OTLP/HTTP exporters do for these codes.

mod budget;
mod grpc;
mod handoff;
mod http;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Ingest, SourceError, SpanIngest};
use crate::clock::now_ms;
use crate::metrics::Metrics;
use crate::trace::otlp::config::OtlpConfig;
use budget::MemoryBudget;
use grpc::GrpcReceiver;
use handoff::Job;

/// The OTLP receiver: `source.kind = "otlp"`. Its [`routes`](OtlpReceiver::routes) are served
/// on the write listener; it feeds the requests they take to a [`SpanIngest`].
#[derive(Debug)]
pub(crate) struct OtlpReceiver {
    jobs_rx: mpsc::Receiver<Job>,
}

impl OtlpReceiver {
    /// The receiver and the routes that feed it, `POST /v1/traces` (OTLP/HTTP) and OTLP/gRPC's
    /// `TraceService/Export` (body and queue limits from `config`, at most
    /// `max_spans_per_message` spans a request).
    pub fn routes(
        config: &OtlpConfig,
        max_spans_per_message: usize,
        metrics: Arc<Metrics>,
    ) -> (Router, OtlpReceiver) {
        let (jobs_tx, jobs_rx) = mpsc::channel(config.queue_capacity);
        let budget = MemoryBudget::new(config.max_queued_bytes);
        let grpc = GrpcReceiver {
            jobs_tx: jobs_tx.clone(),
            metrics: Arc::clone(&metrics),
            budget: Arc::clone(&budget),
            max_body_bytes: config.max_body_bytes,
            max_spans: max_spans_per_message,
            retry_after_secs: config.retry_after_secs,
        };
        let http = http::Receiver {
            jobs_tx,
            metrics,
            budget,
            max_body_bytes: config.max_body_bytes,
            max_spans: max_spans_per_message,
            retry_after: HeaderValue::from(config.retry_after_secs),
        };
        let router = http.routes().merge(grpc.routes());
        (router, OtlpReceiver { jobs_rx })
    }
}

impl super::Source<SpanIngest> for OtlpReceiver {
    fn run(
        self,
        ingest: &mut SpanIngest,
        stop: &CancellationToken,
    ) -> impl std::future::Future<Output = Result<u64, SourceError>> {
        run_otlp_source(self.jobs_rx, ingest, stop)
    }
}

/// Feeds requests to `ingest` one at a time until `stop`. Returns the number of requests taken.
async fn run_otlp_source(
    mut jobs_rx: mpsc::Receiver<Job>,
    ingest: &mut SpanIngest,
    stop: &CancellationToken,
) -> Result<u64, SourceError> {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut released = Vec::new();
    let mut taken = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            Some(job) = jobs_rx.recv() => {
                let Job { request, reply, reservation, count } = job;
                let (_, stats) = ingest.request(request, None, now_ms(), &mut released);
                // The request's bytes are spent: what assembly keeps of them is its own to bound.
                drop(reservation);
                // The handler may have gone (client disconnected): the spans are taken all the same.
                Job::answer(reply, &count, stats);
                taken += 1;
            }
            _ = tick.tick() => ingest.tick(&mut released),
        }
    }
    // Queued requests are not taken: their handlers answer 503 and the exporters retry elsewhere.
    jobs_rx.close();
    drop(jobs_rx);
    ingest.close_queue();
    tracing::info!(
        requests = taken,
        pending_traces = ingest.pending_traces(),
        "otlp receiver stopped"
    );
    Ok(taken)
}
