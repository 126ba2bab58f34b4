//! Events that both log and count: one call site, one line. Per-message warnings are rate-limited so
//! a flood of poison messages cannot flood the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::dimensions::SkipReason;
use crate::metrics::Metrics;
use crate::trace::DecodeError;

/// At most one log line per second per kind of per-message event.
#[derive(Debug, Default)]
pub(crate) struct LogLimiter {
    last_second: AtomicU64,
    suppressed: AtomicU64,
}

impl LogLimiter {
    /// A limiter that lets the next line through.
    pub const fn new() -> Self {
        Self {
            last_second: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a line may be logged now, with the number suppressed since the last one.
    pub fn allow(&self) -> Option<u64> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let last = self.last_second.load(Ordering::Relaxed);
        if now != last
            && self
                .last_second
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

static REJECT_LOG: LogLimiter = LogLimiter::new();
static SKIP_LOG: LogLimiter = LogLimiter::new();

/// A message was rejected by the decoder.
pub(crate) fn trace_rejected(metrics: &Metrics, error: &DecodeError, position: &str) {
    metrics
        .ingest
        .traces_rejected
        .with_label_values(&[error.reason.as_str()])
        .inc();
    if let Some(suppressed) = REJECT_LOG.allow() {
        tracing::warn!(reason = error.reason.as_str(), error = %error.detail, position, suppressed, "trace rejected");
    }
}

/// A sampled trace was not scored by the sampled judge.
pub(crate) fn trace_skipped(metrics: &Metrics, stratum: &str, reason: SkipReason, trace_id: &str) {
    metrics
        .sample
        .traces_skipped
        .with_label_values(&[stratum, reason.as_str()])
        .inc();
    if let Some(suppressed) = SKIP_LOG.allow() {
        tracing::warn!(
            stratum,
            reason = reason.as_str(),
            trace_id,
            suppressed,
            "sampled trace skipped"
        );
    }
}
