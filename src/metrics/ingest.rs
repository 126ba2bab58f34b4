//! The ingest families: traces decoded (or assembled) and rejected, those deliberately not judged,
//! and what each trace brought from its retriever (how many contexts, their scores by rank).

use prometheus::{CounterVec, HistogramVec, IntCounterVec, Registry};

use super::config::MetricsConfig;
use super::family::{counter, families, float_counter, histogram};
use super::series::RANKS;
use crate::trace::RejectReason;

/// Why an assembled trace is not judged; label values of `ragwatch_traces_unjudged_total`.
/// `not_rag`: neither a retrieval nor a model call (an index being built); `no_retrieval`: no
/// retrieval or reranker span; `no_context_text`: documents without text; `unreadable_question` /
/// `unreadable_answer`: only a serialized object where the text should be. An unjudged trace counts
/// in `ragwatch_traces_received_total` too, so received = judged + unjudged.
pub(crate) const UNJUDGED_REASONS: [&str; 5] = [
    "not_rag",
    "no_retrieval",
    "no_context_text",
    "unreadable_question",
    "unreadable_answer",
];

families! {
    /// What the decoder and the retriever's side of each trace report. `config` declares the
    /// retriever's score scale.
    pub(crate) struct IngestMetrics(r: &Registry, config: &MetricsConfig) {
        /// Traces decoded, by stratum.
        pub(crate) traces_received: IntCounterVec = counter(
            r,
            "ragwatch_traces_received_total",
            "Traces received, by stratum: decoded messages and assembled OTLP traces, judged or not.",
            &["stratum"],
        ),
        /// Messages rejected by the decoder, by reason.
        pub(crate) traces_rejected: IntCounterVec = counter(
            r,
            "ragwatch_traces_rejected_total",
            "Messages rejected before judging, by reason.",
            &["reason"],
        ),
        /// Assembled traces deliberately not judged, by stratum and reason.
        pub(crate) traces_unjudged: IntCounterVec = counter(
            r,
            "ragwatch_traces_unjudged_total",
            "Assembled traces not judged, by stratum and reason (not_rag: neither a retriever nor a model call; no_retrieval: no retrieval span; no_context_text: documents without text; unreadable_question, unreadable_answer: only a serialized object where the text should be).",
            &["stratum", "reason"],
        ),
        /// Retriever scores of the retrieved contexts (when traces carry them), by stratum and
        /// rank.
        pub(crate) retrieval_score: HistogramVec = histogram(
            r,
            "ragwatch_retrieval_score",
            "Retriever scores of retrieved contexts, by stratum and rank (1 = top, 2-3, 4+): a shift often comes before a drop in faithfulness.",
            &["stratum", "rank"],
            config.retrieval_buckets(),
        ),
        /// Squares of the first context's retriever score, beside the histogram's sum and count.
        pub(crate) retrieval_top_squares: CounterVec = float_counter(
            r,
            "ragwatch_retrieval_top_score_squares_total",
            "Sum of the squares of the first context's retriever score, by stratum: with ragwatch_retrieval_score{rank=\"1\"}'s sum and count, the top score's variance for the retrieval shift rule.",
            &["stratum"],
        ),
        /// Contexts retrieved per trace, by stratum.
        pub(crate) contexts_retrieved: HistogramVec = histogram(
            r,
            "ragwatch_contexts_retrieved",
            "Contexts retrieved per trace, by stratum.",
            &["stratum"],
            vec![0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 10.0, 20.0, 50.0],
        ),
    }
}

impl IngestMetrics {
    /// Starts every reject reason, and each stratum's counts, at zero.
    pub(super) fn start(&self, strata: &[String]) {
        for reason in RejectReason::ALL {
            self.traces_rejected.with_label_values(&[reason.as_str()]);
        }
        for s in strata {
            let s = s.as_str();
            self.traces_received.with_label_values(&[s]);
            self.contexts_retrieved.with_label_values(&[s]);
            // The retrieval shift rule reads the top score's sum, count and squares.
            self.retrieval_score.with_label_values(&[s, RANKS[0]]);
            self.retrieval_top_squares.with_label_values(&[s]);
            for reason in UNJUDGED_REASONS {
                self.traces_unjudged.with_label_values(&[s, reason]);
            }
        }
    }
}
