//! The judge calls' families: requests and their latency, tokens spent, retries, parts of verdicts
//! that failed, the structured-output mode, redactions before the LLM judge, the canary's
//! agreement.

use prometheus::{Gauge, HistogramVec, IntCounterVec, IntGaugeVec, Registry};

use super::family::{counter, families, histogram, int_gauge};
use crate::dimensions::{JudgeKind, JudgeOutcome};

/// Why a judge call was sent again; label values of `ragwatch_judge_retries_total`. The first three
/// are transport retries (the same request again, after a backoff); `malformed` re-asks with the
/// invalid reply and its error shown, `truncated` asks again with room for the answer, and
/// `format_fallback` moves `llm.structured_output = "auto"` to the next mode the server may accept.
pub(crate) const JUDGE_RETRY_REASONS: [&str; 6] = [
    "rate_limited",
    "timeout",
    "http_error",
    "malformed",
    "truncated",
    "format_fallback",
];

/// Buckets of `ragwatch_judge_duration_seconds`.
pub(super) const JUDGE_DURATION_BUCKETS: [f64; 12] = [
    0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The histograms whose observations carry their trace id as an exemplar: the score histograms
/// (named by [`crate::dimensions::Quality::spec`]) and this one.
pub(super) const JUDGE_DURATION: &str = "ragwatch_judge_duration_seconds";

families! {
    /// What the judges report about their calls.
    pub(crate) struct JudgeMetrics(r: &Registry) {
        /// Judge calls by judge and outcome.
        pub(crate) requests: IntCounterVec = counter(
            r,
            "ragwatch_judge_requests_total",
            "Judge calls, by judge and outcome.",
            &["judge", "outcome"],
        ),
        /// Judge call latency.
        pub(crate) duration: HistogramVec = histogram(
            r,
            JUDGE_DURATION,
            "Judge call latency.",
            &["judge"],
            JUDGE_DURATION_BUCKETS.to_vec(),
        ),
        /// Tokens spent by the judge, by direction (prompt, completion).
        pub(crate) tokens: IntCounterVec = counter(
            r,
            "ragwatch_judge_tokens_total",
            "Tokens spent by the judge, by direction.",
            &["judge", "direction"],
        ),
        /// Judge calls sent again, by judge and reason (transport retries apart from re-asks).
        pub(crate) retries: IntCounterVec = counter(
            r,
            "ragwatch_judge_retries_total",
            "Judge calls sent again, by judge and reason: rate_limited, timeout, http_error (transport); malformed, truncated (re-asks); format_fallback.",
            &["judge", "reason"],
        ),
        /// Parts of a verdict that failed while the rest was kept, by judge, part
        /// (`context_relevance`, `answer_relevancy`) and reason.
        pub(crate) part_failures: IntCounterVec = counter(
            r,
            "ragwatch_judge_part_failures_total",
            "Verdict parts that failed while the rest of the verdict was kept, by judge, part and reason.",
            &["judge", "part", "reason"],
        ),
        /// 1 on the structured-output mode the LLM judge uses (`auto` resolved), 0 on the others.
        pub(crate) structured_output: IntGaugeVec = int_gauge(
            r,
            "ragwatch_judge_structured_output_info",
            "1 on the structured-output mode the LLM judge uses (auto resolved by probing the server), 0 on the others.",
            &["mode"],
        ),
        /// Matches replaced by redaction before the LLM judge, by pattern.
        pub(crate) redactions: IntCounterVec = counter(
            r,
            "ragwatch_redactions_total",
            "Matches replaced (masked or hashed) in the question, contexts and answer of traces sent to the LLM judge, by pattern (built-in: email, phone, card, secret, ip; or redact.patterns names).",
            &["pattern"],
        ),
        /// Share of canary traces on which the judge agrees with the label, at the last canary
        /// run. Registered at the first run (`LlmObserver::canary_agreement`): before it there is
        /// no agreement to report, and a series that reads 0 or NaN would be a false claim.
        pub(crate) canary_agreement: Gauge = Gauge::new(
            "ragwatch_judge_canary_agreement_ratio",
            "Share of canary traces on which the LLM judge agrees with their label, at the last run.",
        )
        .expect("valid metric definition"),
    }
}

impl JudgeMetrics {
    /// Starts the LLM judge's outcomes, token directions, retry reasons and latency at zero.
    pub(super) fn start(&self) {
        self.start_calls(JudgeKind::Llm);
        for direction in ["prompt", "completion"] {
            self.tokens.with_label_values(&["llm", direction]);
        }
        for reason in JUDGE_RETRY_REASONS {
            self.retries.with_label_values(&["llm", reason]);
        }
    }

    /// Starts the call outcomes and latency of `judge` at zero.
    pub(super) fn start_calls(&self, judge: JudgeKind) {
        let j = judge.name();
        for outcome in JudgeOutcome::ALL {
            self.requests.with_label_values(&[j, outcome.name()]);
        }
        self.duration.with_label_values(&[j]);
    }
}
