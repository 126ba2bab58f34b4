//! The write listener's families: requests it refused, re-reads of its token and TLS files, the
//! tokens it accepts, failed TLS handshakes.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use super::family::{counter, families, single};

families! {
    /// What the write listener reports.
    pub(crate) struct WriteMetrics(r: &Registry) {
        /// Writes refused on the write listener, by endpoint and reason.
        pub(crate) refused: IntCounterVec = counter(
            r,
            "ragwatch_write_refused_total",
            "Requests refused on the write listener, by endpoint (traces, labels) and reason (missing_credentials, malformed_credentials, unknown_token: 401; forbidden: 403, a token without the endpoint's scope; rate_limited: 429).",
            &["endpoint", "reason"],
        ),
        /// Re-reads of the write listener's token and TLS files after a change, by file and
        /// outcome.
        pub(crate) reloads: IntCounterVec = counter(
            r,
            "ragwatch_write_reloads_total",
            "Re-reads of the write listener's files after they changed, by file (tokens, tls) and outcome (ok; error: the previous ones stay in use).",
            &["file", "outcome"],
        ),
        /// Bearer tokens the write listener accepts now.
        pub(crate) tokens: IntGauge = single(
            r,
            IntGauge::with_opts(Opts::new(
                "ragwatch_write_tokens",
                "Bearer tokens the write listener accepts now (from the environment and the tokens file).",
            )),
        ),
        /// TLS handshakes on the write listener that failed or timed out.
        pub(crate) tls_handshake_failures: IntCounter = single(
            r,
            IntCounter::with_opts(Opts::new(
                "ragwatch_write_tls_handshake_failures_total",
                "TLS handshakes on the write listener that failed (no or an unverifiable client certificate, a client that does not trust the server's) or timed out.",
            )),
        ),
    }
}
