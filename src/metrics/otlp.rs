//! The OTLP families: the receivers' requests, the spans they take or drop, and span assembly (the
//! traces waiting for more spans and those that left it).

use prometheus::{IntCounter, IntCounterVec, IntGauge, Registry};

use super::family::{counter, families, single};

/// The OTLP receivers' protocols; label values of `ragwatch_otlp_requests_total{protocol}`.
pub(crate) const OTLP_PROTOCOLS: [&str; 2] = ["http", "grpc"];

/// Outcomes of an OTLP export request; label values of `ragwatch_otlp_requests_total{outcome}`.
/// Over gRPC, `throttled` and `unavailable` are both answered UNAVAILABLE (retried by exporters),
/// `memory` (the memory budget, `otlp.max_queued_bytes`, spent; HTTP 429) RESOURCE_EXHAUSTED with
/// a RetryInfo, `too_large` RESOURCE_EXHAUSTED or OUT_OF_RANGE, `unsupported` UNIMPLEMENTED.
pub(crate) const OTLP_OUTCOMES: [&str; 8] = [
    "ok",
    "partial",
    "bad_request",
    "too_large",
    "unsupported",
    "throttled",
    "memory",
    "unavailable",
];

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
            "OTLP export requests, by protocol (http, grpc) and outcome.",
            &["protocol", "outcome"],
        ),
    }
}

impl OtlpMetrics {
    /// Starts every drop reason, assembly trigger and request outcome at zero.
    pub(super) fn start(&self) {
        for reason in crate::trace::otlp::SpanDrop::ALL {
            self.spans_dropped.with_label_values(&[reason.as_str()]);
        }
        for trigger in crate::trace::otlp::Trigger::ALL {
            self.traces_assembled.with_label_values(&[trigger.as_str()]);
        }
        for protocol in OTLP_PROTOCOLS {
            for outcome in OTLP_OUTCOMES {
                self.requests.with_label_values(&[protocol, outcome]);
            }
        }
    }
}
