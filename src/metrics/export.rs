//! The verdict export's families: events sent to each export target, and those not sent.

use prometheus::{IntCounterVec, Registry};

use super::family::{counter, families};

/// Verdict export targets; label values of `ragwatch_export_sent_total{target}` and
/// `ragwatch_export_dropped_total{target}`.
pub(crate) const EXPORT_TARGETS: [&str; 2] = ["otlp", "phoenix"];

/// How a verdict event sent to an export target ended; label values of
/// `ragwatch_export_sent_total{outcome}`: `ok` (accepted), `rejected` (an answer not worth
/// retrying: a 4xx other than 429, a gRPC error other than UNAVAILABLE and RESOURCE_EXHAUSTED),
/// `failed` (retryable answers, transport errors or timeouts until the tries ran out).
pub(crate) const EXPORT_OUTCOMES: [&str; 3] = ["ok", "rejected", "failed"];

/// Why a verdict event was not sent; label values of `ragwatch_export_dropped_total{reason}`:
/// `queue_full` (the target's queue was full), `no_span` (no judged span id known),
/// `span_not_stored` (the target had not stored the judged span when
/// `export.phoenix.span_wait_ms` passed), `span_wait_full` (no room to wait for the judged span,
/// `export.phoenix.span_wait_capacity`), `shutdown` (still queued or waiting when the flush
/// deadline passed).
pub(crate) const EXPORT_DROP_REASONS: [&str; 5] = [
    "queue_full",
    "no_span",
    "span_not_stored",
    "span_wait_full",
    "shutdown",
];

families! {
    /// What the verdict exporters report.
    pub(crate) struct ExportMetrics(r: &Registry) {
        /// Verdict events sent to an export target, by target and outcome.
        pub(crate) sent: IntCounterVec = counter(
            r,
            "ragwatch_export_sent_total",
            "Verdict events sent to an export target, by target (otlp, phoenix) and outcome (ok; rejected: an answer not worth retrying; failed: retries or time ran out).",
            &["target", "outcome"],
        ),
        /// Verdict events not sent to an export target, by target and reason.
        pub(crate) dropped: IntCounterVec = counter(
            r,
            "ragwatch_export_dropped_total",
            "Verdict events not sent to an export target, by target (otlp, phoenix) and reason (queue_full: the queue was full; no_span: no judged span id; span_not_stored: the target had not stored the judged span by the wait's deadline; span_wait_full: no room to wait for the judged span; shutdown: still queued or waiting at the flush deadline).",
            &["target", "reason"],
        ),
    }
}

impl ExportMetrics {
    /// Starts every outcome and drop reason of every target at zero.
    pub(super) fn start(&self) {
        for target in EXPORT_TARGETS {
            for outcome in EXPORT_OUTCOMES {
                self.sent.with_label_values(&[target, outcome]);
            }
            for reason in EXPORT_DROP_REASONS {
                self.dropped.with_label_values(&[target, reason]);
            }
        }
    }
}
