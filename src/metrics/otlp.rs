//! The OTLP families: the receivers' requests, the spans they take or drop, and span assembly (the
//! traces waiting for more spans and those that left it).

use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};

use super::family::{counter, families, single};

/// The OTLP receivers' protocols; label values of `ragwatch_otlp_requests_total{protocol}`.
pub(crate) const OTLP_PROTOCOLS: [&str; 2] = ["http", "grpc"];

/// How an OTLP export request ended; the label values of
/// `ragwatch_otlp_requests_total{outcome}`. Every request that reaches the traces route (OTLP/HTTP
/// `POST /v1/traces` or the gRPC `TraceService/Export`) ends in exactly one: the outcomes are a
/// partition of the requests, so their sum is the requests the listener took in, whatever the
/// client did.
///
/// Over gRPC, `throttled` and `unavailable` are both answered UNAVAILABLE (retried by exporters),
/// `memory` (the memory budget, `otlp.max_queued_bytes`, spent; HTTP 429) RESOURCE_EXHAUSTED with
/// a RetryInfo, `too_large` RESOURCE_EXHAUSTED or OUT_OF_RANGE, `unsupported` UNIMPLEMENTED. The
/// write listener's guard answers `unauthenticated` (HTTP 401 or 403; gRPC clients read
/// UNAUTHENTICATED or PERMISSION_DENIED) and `rate_limited` (the per-client rate limit, HTTP 429,
/// read as UNAVAILABLE), each also counted by reason on `ragwatch_write_refused_total`.
/// `client_gone`: the client hung up or reset the stream before its request was taken or refused
/// (mid-body, most often), so no answer reached it; a request whose spans were taken counts `ok`
/// or `partial` even when its client left before the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    /// Taken whole.
    Ok,
    /// Taken, some spans not kept (the answer's `partialSuccess` says which).
    Partial,
    /// An undecodable body or a corrupt gzip stream (400, INVALID_ARGUMENT).
    BadRequest,
    /// Over `otlp.max_body_bytes`, before or after gzip (413).
    TooLarge,
    /// A content type or encoding not served (415, UNIMPLEMENTED).
    Unsupported,
    /// The queue to span assembly is full (429, UNAVAILABLE).
    Throttled,
    /// The memory budget cannot cover the request now (429, RESOURCE_EXHAUSTED).
    Memory,
    /// The receiver is shutting down (503, UNAVAILABLE).
    Unavailable,
    /// Refused by the write listener's guard: no, a malformed or an unknown credential, or one
    /// without the traces scope (401, 403).
    Unauthenticated,
    /// Refused by the write listener's per-client rate limit (429).
    RateLimited,
    /// The client went away before its request was taken or refused.
    ClientGone,
}

impl Outcome {
    /// Every outcome, in the order of the exposition.
    pub(crate) const ALL: [Outcome; 11] = [
        Outcome::Ok,
        Outcome::Partial,
        Outcome::BadRequest,
        Outcome::TooLarge,
        Outcome::Unsupported,
        Outcome::Throttled,
        Outcome::Memory,
        Outcome::Unavailable,
        Outcome::Unauthenticated,
        Outcome::RateLimited,
        Outcome::ClientGone,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Partial => "partial",
            Outcome::BadRequest => "bad_request",
            Outcome::TooLarge => "too_large",
            Outcome::Unsupported => "unsupported",
            Outcome::Throttled => "throttled",
            Outcome::Memory => "memory",
            Outcome::Unavailable => "unavailable",
            Outcome::Unauthenticated => "unauthenticated",
            Outcome::RateLimited => "rate_limited",
            Outcome::ClientGone => "client_gone",
        }
    }
}

/// One OTLP export request on its way to its one outcome: [`RequestCount::end`] counts the first
/// outcome given and ignores later ones; a request dropped before any (its connection closed, so
/// the server dropped the handler) is counted `client_gone` when the last clone goes. Clones share
/// the one count, so each stage a request passes through may hold one.
#[derive(Debug, Clone)]
pub(crate) struct RequestCount(std::sync::Arc<Pending>);

#[derive(Debug)]
struct Pending {
    requests: IntCounterVec,
    protocol: &'static str,
    ended: std::sync::atomic::AtomicBool,
}

impl RequestCount {
    /// Counts `outcome`, unless the request has one already; whether it was counted.
    pub(crate) fn end(&self, outcome: Outcome) -> bool {
        let first = !self.0.ended.swap(true, std::sync::atomic::Ordering::SeqCst);
        if first {
            self.0.count(outcome);
        }
        first
    }
}

impl Pending {
    fn count(&self, outcome: Outcome) {
        self.requests
            .with_label_values(&[self.protocol, outcome.as_str()])
            .inc();
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !*self.ended.get_mut() {
            self.count(Outcome::ClientGone);
        }
    }
}

families! {
    /// What the OTLP receivers and span assembly report.
    pub(crate) struct OtlpMetrics(r: &Registry) {
        /// OTLP spans received.
        pub(crate) spans_received: IntCounter = single(
            r,
            IntCounter::new("ragwatch_spans_received_total", "OTLP spans received."),
        ),
        /// OTLP spans not kept, by reason.
        pub(crate) spans_dropped: IntCounterVec = counter(
            r,
            "ragwatch_spans_dropped_total",
            "OTLP spans not kept, by reason (invalid_id, late: its trace was already complete, too_many_spans).",
            &["reason"],
        ),
        /// Traces waiting for more spans.
        pub(crate) assembly_pending: IntGauge = single(
            r,
            IntGauge::new(
                "ragwatch_assembly_pending_traces",
                "Traces waiting for more spans before they are judged.",
            ),
        ),
        /// Traces that left span assembly, by trigger (root, idle, end, evicted).
        pub(crate) traces_assembled: IntCounterVec = counter(
            r,
            "ragwatch_traces_assembled_total",
            "Traces that left span assembly, by trigger (root: root span arrived; idle: timed out; end: input ended; evicted: dropped to stay within bounds).",
            &["trigger"],
        ),
        /// OTLP/HTTP and OTLP/gRPC export requests, by protocol and outcome.
        pub(crate) requests: IntCounterVec = counter(
            r,
            "ragwatch_otlp_requests_total",
            "OTLP export requests, by protocol (http, grpc) and outcome; each request ends in exactly one outcome.",
            &["protocol", "outcome"],
        ),
    }
}

impl OtlpMetrics {
    /// A request arriving over `protocol` (one of [`OTLP_PROTOCOLS`]), to be ended in one outcome.
    pub(crate) fn request(&self, protocol: &'static str) -> RequestCount {
        RequestCount(std::sync::Arc::new(Pending {
            requests: self.requests.clone(),
            protocol,
            ended: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// Starts every drop reason, assembly trigger and request outcome at zero.
    pub(super) fn start(&self) {
        for reason in crate::trace::otlp::SpanDrop::ALL {
            self.spans_dropped.with_label_values(&[reason.as_str()]);
        }
        for trigger in crate::trace::otlp::Trigger::ALL {
            self.traces_assembled.with_label_values(&[trigger.as_str()]);
        }
        for protocol in OTLP_PROTOCOLS {
            for outcome in Outcome::ALL {
                self.requests
                    .with_label_values(&[protocol, outcome.as_str()]);
            }
        }
    }
}
