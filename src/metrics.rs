//! Metrics: the one place metric names appear. A struct of families registered on its own
//! `prometheus::Registry` (no global registry), passed down as `Arc<Metrics>`.
//!
//! Counters and histograms are what PromQL pools across replicas; the `window_*` gauges are this
//! replica's own view. Every label value comes from a bounded set: declared strata plus `default` and
//! `other`, reject reasons, judge names, rule names.
//!
//! The score and judge-latency histograms also keep the trace id of each bucket's latest
//! observation (`exemplars`); `/metrics` writes them in the OpenMetrics format
//! (`openmetrics`) when the scraper asks for it.

pub(crate) mod changes;
pub(crate) mod comparison;
pub mod config;
mod exemplars;
pub(crate) mod feedback;
pub(crate) mod openmetrics;
pub(crate) mod review;
pub(crate) mod series;

use std::sync::Arc;

use prometheus::{
    CounterVec, Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::dimensions::{JudgeKind, JudgeOutcome, PerQuality, Quality, SkipReason, StratumId};
use crate::judge::llm::config::StructuredOutput;
use crate::judge::llm::{CHAIN, IdentitySeries, LlmObserver, Usage, mode_name};
use crate::metrics::config::MetricsConfig;
use crate::trace::RejectReason;
use crate::window::{EstimateSums, RuleKind};
use exemplars::Exemplars;
use series::{RANKS, StratumSeries, rank_bucket, with};

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

/// Buckets for scores in [0, 1]: one per tenth, so `le="0.5"` counts the clearly unfaithful.
const RATIO_BUCKETS: [f64; 10] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

/// Buckets of `ragwatch_judge_duration_seconds`.
const JUDGE_DURATION_BUCKETS: [f64; 12] = [
    0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The histograms whose observations carry their trace id as an exemplar: the score histograms
/// (named by [`Quality::spec`]) and this one.
const JUDGE_DURATION: &str = "ragwatch_judge_duration_seconds";

/// All metric families of one process.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// The registry `/metrics` renders.
    pub registry: Registry,
    /// Traces decoded, by stratum.
    pub(crate) traces_received: IntCounterVec,
    /// Messages rejected by the decoder, by reason.
    pub(crate) traces_rejected: IntCounterVec,
    /// Traces chosen for the sampled judge, by stratum.
    pub(crate) traces_sampled: IntCounterVec,
    /// Sampled traces the sampled judge did not score, by stratum and reason.
    pub(crate) traces_skipped: IntCounterVec,
    /// Verdicts produced, by stratum and judge.
    pub(crate) traces_judged: IntCounterVec,
    /// Each metric's scores, by stratum and judge (`ragwatch_<metric>_ratio`).
    pub scores: PerQuality<HistogramVec>,
    /// Answers with no claims to check (no faithfulness score), by stratum and judge.
    pub no_claims: IntCounterVec,
    /// Answers that decline to answer, by stratum and judge.
    pub refusals: IntCounterVec,
    /// Citations in answers, by stratum and validity.
    pub citations: IntCounterVec,
    /// Retriever scores of the retrieved contexts (when traces carry them), by stratum and rank.
    pub(crate) retrieval_score: HistogramVec,
    /// Squares of the first context's retriever score, beside the histogram's sum and count.
    retrieval_top_squares: CounterVec,
    /// Contexts retrieved per trace, by stratum.
    pub(crate) contexts_retrieved: HistogramVec,
    /// Window mean, by metric, stratum, judge and window.
    pub(crate) window_mean: GaugeVec,
    /// Scores in the window.
    pub(crate) window_samples: IntGaugeVec,
    /// Lower confidence bound of the window mean.
    pub(crate) window_ci_lower: GaugeVec,
    /// Upper confidence bound of the window mean.
    pub(crate) window_ci_upper: GaugeVec,
    /// Sum of squared scores, by metric, stratum and judge: with a histogram's sum and count, the
    /// pooled variance the shift rule needs.
    pub(crate) score_squares: CounterVec,
    /// The sums behind the combined estimate, by metric, stratum and term.
    pub(crate) estimate_terms: CounterVec,
    /// Traces whose combined-estimate prediction came from each judge, by stratum and judge.
    pub(crate) estimate_predictions: IntCounterVec,
    /// The floor and drop thresholds in force, by metric, stratum, judge and rule.
    pub threshold: GaugeVec,
    /// Minimum samples before a drift rule may fire, by metric, stratum and judge.
    pub min_samples: IntGaugeVec,
    /// Shift rule: minimum effect size in baseline standard deviations.
    pub(crate) threshold_shift_sd: GaugeVec,
    /// Shift rule: critical z.
    pub(crate) threshold_shift_z: GaugeVec,
    /// The z of every confidence bound.
    pub(crate) threshold_confidence_z: Gauge,
    pub(crate) threshold_page_llr: Gauge,
    /// 1 per declared stratum, with its scope (in_scope, out_of_scope).
    pub(crate) stratum_info: IntGaugeVec,
    /// Human labels received, by outcome (joined, unknown_trace, expired, invalid).
    pub(crate) labels_received: IntCounterVec,
    /// Joined labels compared with a judge's verdict, by judge, stratum and agreement.
    pub(crate) label_agreement: IntCounterVec,
    /// Judge scores of labelled traces, for the label AUROC.
    pub labelled: LabelledMetrics,
    /// 1 while a drift rule fires, by metric, stratum, judge and rule.
    pub drift_active: IntGaugeVec,
    /// Where to look, by stratum and judge: 1 on the stage the short windows blame (retrieval when
    /// context relevance is below its floor; generation when contexts are fine but faithfulness is
    /// low; prompt when both are fine but answer relevancy is low), 0 elsewhere.
    pub diagnosis: IntGaugeVec,
    /// Judge calls by judge and outcome.
    pub(crate) judge_requests: IntCounterVec,
    /// Judge call latency.
    pub(crate) judge_duration: HistogramVec,
    /// Tokens spent by the judge, by direction (prompt, completion).
    pub(crate) judge_tokens: IntCounterVec,
    /// Judge calls sent again, by judge and reason (transport retries apart from re-asks).
    pub(crate) judge_retries: IntCounterVec,
    /// Parts of a verdict that failed while the rest was kept, by judge, part
    /// (`context_relevance`, `answer_relevancy`) and reason.
    pub(crate) judge_part_failures: IntCounterVec,
    /// 1 on the structured-output mode the LLM judge uses (`auto` resolved), 0 on the others.
    pub(crate) judge_structured_output: IntGaugeVec,
    /// Tokens this replica may still spend now (the tighter of the minute and day budgets).
    pub(crate) budget_remaining: Gauge,
    /// This replica's share of the fleet's judge budget.
    pub(crate) budget_share: Gauge,
    /// Resolutions of `fleet.peers`, by outcome (`ok`, `failed`, `empty`).
    pub(crate) fleet_peer_lookups: IntCounterVec,
    /// Replicas the share is computed from (`fleet.membership` peers or replicas).
    pub(crate) fleet_peers: IntGauge,
    /// Share of canary traces on which the judge agrees with the label, at the last canary run;
    /// NaN before the first.
    pub(crate) canary_agreement: Gauge,
    /// Sampled traces waiting for a judge.
    pub(crate) judge_queue_depth: IntGauge,
    /// Consumer lag by topic and partition, from librdkafka statistics.
    pub(crate) kafka_lag: IntGaugeVec,
    /// Kafka client errors by kind.
    pub(crate) kafka_errors: IntCounterVec,
    /// Offset commits by outcome.
    pub(crate) kafka_commits: IntCounterVec,
    /// Partitions this replica holds.
    pub(crate) kafka_partitions: IntGauge,
    /// Brokers librdkafka sees as up.
    pub(crate) kafka_brokers_up: IntGauge,
    /// Seconds since this replica's partition assignment last changed (since start before the first).
    pub(crate) kafka_assignment_age: Gauge,
    /// 1 while this replica holds no partition though its topics have some (a spare replica, or
    /// one the group leaves out: the fleet's metrics together tell which).
    pub(crate) kafka_without_partitions: IntGauge,
    /// Partitions of the subscribed topics: what the group shares.
    pub(crate) kafka_topic_partitions: IntGauge,
    /// The consumer's session timeout: how long the group waits for a silent member.
    pub(crate) kafka_session_timeout: Gauge,
    /// Seconds since the source last delivered a message.
    pub(crate) source_idle_seconds: Gauge,
    /// Build identity (the version); value 1.
    pub(crate) build_info: IntGaugeVec,
    /// Judge identity (the model string that names everything that changes a verdict); value 1.
    pub judge_info: IntGaugeVec,
    /// Messages the source delivered, accounted or not yet.
    pub(crate) source_messages: IntCounter,
    /// OTLP spans received.
    pub(crate) spans_received: IntCounter,
    /// OTLP spans not kept, by reason.
    pub(crate) spans_dropped: IntCounterVec,
    /// Traces waiting for more spans.
    pub(crate) assembly_pending: IntGauge,
    /// Traces that left span assembly, by trigger (root, idle, end, evicted).
    pub(crate) traces_assembled: IntCounterVec,
    /// Assembled traces deliberately not judged, by stratum and reason.
    pub(crate) traces_unjudged: IntCounterVec,
    /// OTLP/HTTP export requests, by outcome.
    pub(crate) otlp_requests: IntCounterVec,
    /// Verdict events sent to an export target, by target and outcome.
    pub(crate) export_sent: IntCounterVec,
    /// Verdict events not sent to an export target, by target and reason.
    pub(crate) export_dropped: IntCounterVec,
    /// Writes refused on the write listener, by endpoint and reason.
    pub(crate) write_refused: IntCounterVec,
    /// Re-reads of the write listener's token and TLS files after a change, by file and outcome.
    pub(crate) write_reloads: IntCounterVec,
    /// Bearer tokens the write listener accepts now.
    pub(crate) write_tokens: IntGauge,
    /// Matches replaced by redaction before the LLM judge, by pattern.
    pub(crate) redactions: IntCounterVec,
    /// TLS handshakes on the write listener that failed or timed out.
    pub(crate) write_tls_handshake_failures: IntCounter,
    /// The latest trace id per bucket of the score and judge-latency histograms.
    pub exemplars: Arc<Exemplars>,
    /// The per-trace series of each stratum (by [`StratumId`]), kept once looked up.
    series: Arc<[StratumSeries]>,
    /// Sums behind the correlation of score with answer length (words), by metric, stratum, judge
    /// and term (`n`, `x`, `y`, `xx`, `yy`, `xy`; x is the length, y the score).
    pub(crate) length_moments: CounterVec,
    /// LLM judge verdicts on answers whose generator is of the judge's model family, by stratum.
    pub(crate) same_family: IntCounterVec,
}

/// Terms of `ragwatch_judge_length_moments_total`: the additive sums Pearson's r is computed from.
pub(crate) const LENGTH_TERMS: [&str; 6] = ["n", "x", "y", "xx", "yy", "xy"];

/// The series of `ragwatch_judge_length_moments_total`, by (stratum, judge, metric) index.
#[derive(Debug, Clone)]
pub(crate) struct LengthMoments {
    /// `None` for a judge that does not run here.
    counters: Vec<Option<[prometheus::Counter; 6]>>,
}

impl LengthMoments {
    /// Adds one score and its answer's length (words) to the sums of (stratum, judge, metric).
    pub fn add(&self, stratum: usize, judge: JudgeKind, metric: Quality, words: f64, score: f64) {
        let j = JudgeKind::ALL.iter().position(|k| *k == judge);
        let m = Quality::ALL.iter().position(|k| *k == metric);
        let (Some(j), Some(m)) = (j, m) else { return };
        let i = (stratum * JudgeKind::ALL.len() + j) * Quality::ALL.len() + m;
        let Some(Some(c)) = self.counters.get(i) else {
            return;
        };
        let terms = [
            1.0,
            words,
            score,
            words * words,
            score * score,
            words * score,
        ];
        for (counter, v) in c.iter().zip(terms) {
            counter.inc_by(v);
        }
    }
}

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
/// `shutdown` (still queued when the flush deadline passed).
pub(crate) const EXPORT_DROP_REASONS: [&str; 3] = ["queue_full", "no_span", "shutdown"];

/// Outcomes of a resolution of `fleet.peers`; label values of
/// `ragwatch_fleet_peer_lookups_total{outcome}`. `empty`: the name exists with no address.
pub(crate) const FLEET_LOOKUP_OUTCOMES: [&str; 3] = ["ok", "failed", "empty"];

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

/// Registers one unlabelled metric.
fn single<M: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    m: prometheus::Result<M>,
) -> M {
    let m = m.expect("valid metric definition");
    r.register(Box::new(m.clone()))
        .expect("metric names are unique");
    m
}

/// Registers a labelled family built by `new` (each `*Vec::new` of the prometheus crate).
fn labelled<V: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    new: fn(Opts, &[&str]) -> prometheus::Result<V>,
    name: &str,
    help: &str,
    labels: &[&str],
) -> V {
    single(r, new(Opts::new(name, help), labels))
}

fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    labelled(r, IntCounterVec::new, name, help, labels)
}

fn float_counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> CounterVec {
    labelled(r, CounterVec::new, name, help, labels)
}

fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    labelled(r, GaugeVec::new, name, help, labels)
}

fn int_gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    labelled(r, IntGaugeVec::new, name, help, labels)
}

fn histogram(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    single(
        r,
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels),
    )
}

impl Metrics {
    /// `Metrics::with_config` with the default `[metrics]` section.
    pub fn new(strata: &[String], judge_model: &str) -> Self {
        Self::with_config(strata, judge_model, &MetricsConfig::default())
    }

    /// Registers every family and pre-creates the series of every stratum, so dashboards and alert
    /// rules see zeros rather than absent series. `config` declares the retriever's score scale.
    pub(crate) fn with_config(
        strata: &[String],
        judge_model: &str,
        config: &MetricsConfig,
    ) -> Self {
        let r = Registry::new();
        let mut exemplars = Exemplars::new(counter(
            &r,
            "ragwatch_exemplars_dropped_total",
            "Trace ids not kept as exemplars, by reason (too_long: over OpenMetrics's 128-character label set; empty).",
            &["reason"],
        ));
        for m in Quality::ALL {
            exemplars.family(m.spec().histogram, &["stratum", "judge"], &RATIO_BUCKETS);
        }
        exemplars.family(JUDGE_DURATION, &["judge"], &JUDGE_DURATION_BUCKETS);
        let m = Metrics {
            traces_received: counter(
                &r,
                "ragwatch_traces_received_total",
                "Traces received, by stratum: decoded messages and assembled OTLP traces, judged or not.",
                &["stratum"],
            ),
            traces_rejected: counter(
                &r,
                "ragwatch_traces_rejected_total",
                "Messages rejected before judging, by reason.",
                &["reason"],
            ),
            traces_sampled: counter(
                &r,
                "ragwatch_traces_sampled_total",
                "Traces chosen for the sampled judge, by stratum.",
                &["stratum"],
            ),
            traces_skipped: counter(
                &r,
                "ragwatch_traces_skipped_total",
                "Sampled traces the sampled judge did not score, by stratum and reason.",
                &["stratum", "reason"],
            ),
            traces_judged: counter(
                &r,
                "ragwatch_traces_judged_total",
                "Verdicts produced, by stratum and judge.",
                &["stratum", "judge"],
            ),
            scores: PerQuality::from_fn(|m| {
                histogram(
                    &r,
                    m.spec().histogram,
                    m.spec().help,
                    &["stratum", "judge"],
                    RATIO_BUCKETS.to_vec(),
                )
            }),
            no_claims: counter(
                &r,
                "ragwatch_no_claims_total",
                "Answers with no claims to check, by stratum and judge.",
                &["stratum", "judge"],
            ),
            refusals: counter(
                &r,
                "ragwatch_refusals_total",
                "Answers that decline to answer, by stratum and judge.",
                &["stratum", "judge"],
            ),
            citations: counter(
                &r,
                "ragwatch_citations_total",
                "Citations found in answers, by stratum and whether they name a retrieved context.",
                &["stratum", "valid"],
            ),
            retrieval_score: histogram(
                &r,
                "ragwatch_retrieval_score",
                "Retriever scores of retrieved contexts, by stratum and rank (1 = top, 2-3, 4+): a shift often comes before a drop in faithfulness.",
                &["stratum", "rank"],
                config.retrieval_buckets(),
            ),
            retrieval_top_squares: float_counter(
                &r,
                "ragwatch_retrieval_top_score_squares_total",
                "Sum of the squares of the first context's retriever score, by stratum: with ragwatch_retrieval_score{rank=\"1\"}'s sum and count, the top score's variance for the retrieval shift rule.",
                &["stratum"],
            ),
            contexts_retrieved: histogram(
                &r,
                "ragwatch_contexts_retrieved",
                "Contexts retrieved per trace, by stratum.",
                &["stratum"],
                vec![0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 10.0, 20.0, 50.0],
            ),
            window_mean: gauge(
                &r,
                "ragwatch_window_mean_ratio",
                "This replica's rolling-window mean score.",
                &["metric", "stratum", "judge", "window"],
            ),
            window_samples: int_gauge(
                &r,
                "ragwatch_window_samples",
                "Scores in this replica's rolling window.",
                &["metric", "stratum", "judge", "window"],
            ),
            window_ci_lower: gauge(
                &r,
                "ragwatch_window_ci_lower_ratio",
                "Lower confidence bound of this replica's window mean.",
                &["metric", "stratum", "judge", "window"],
            ),
            window_ci_upper: gauge(
                &r,
                "ragwatch_window_ci_upper_ratio",
                "Upper confidence bound of this replica's window mean.",
                &["metric", "stratum", "judge", "window"],
            ),
            score_squares: float_counter(
                &r,
                "ragwatch_score_squares_total",
                "Sum of squared scores (the histograms' observations), by metric, stratum and judge.",
                &["metric", "stratum", "judge"],
            ),
            estimate_terms: float_counter(
                &r,
                "ragwatch_estimate_terms_total",
                "Sums behind the combined (prediction-powered) estimate, by metric, stratum and term; pool by sum across replicas.",
                &["metric", "stratum", "term"],
            ),
            estimate_predictions: counter(
                &r,
                "ragwatch_estimate_predictions_total",
                "Traces whose prediction in the combined estimate came from this judge (the classifier, or the offline judge where the classifier did not keep pace), by stratum and judge.",
                &["stratum", "judge"],
            ),
            threshold: gauge(
                &r,
                "ragwatch_threshold_ratio",
                "Floor or maximum drop in force, on the judge's own scale.",
                &["metric", "stratum", "judge", "rule"],
            ),
            min_samples: int_gauge(
                &r,
                "ragwatch_threshold_min_samples",
                "Samples needed in the short window before a drift rule may fire (judged pairs for the combined estimate).",
                &["metric", "stratum", "judge"],
            ),
            threshold_shift_sd: gauge(
                &r,
                "ragwatch_threshold_shift_sd",
                "Shift rule: minimum drop of the short window below the rest of the baseline, in baseline standard deviations.",
                &["metric", "stratum", "judge"],
            ),
            threshold_shift_z: gauge(
                &r,
                "ragwatch_threshold_shift_z",
                "Shift rule: critical z of the one-sided two-sample test.",
                &["metric", "stratum", "judge"],
            ),
            threshold_confidence_z: single(
                &r,
                Gauge::new(
                    "ragwatch_threshold_confidence_z",
                    "z of every confidence bound (1.645: one-sided 95 %).",
                ),
            ),
            threshold_page_llr: single(
                &r,
                Gauge::new(
                    "ragwatch_threshold_page_llr",
                    "The drop scan's page threshold: the log-likelihood ratio of a drop against no change.",
                ),
            ),
            labels_received: counter(
                &r,
                "ragwatch_labels_total",
                "Human labels received (POST /v1/labels or the label topic), by outcome.",
                &["outcome"],
            ),
            label_agreement: counter(
                &r,
                "ragwatch_label_agreement_total",
                "Human labels compared with a judge's faithfulness verdict, by judge, stratum and whether they agree.",
                &["judge", "stratum", "agree"],
            ),
            labelled: LabelledMetrics::new(&r),
            stratum_info: int_gauge(
                &r,
                "ragwatch_stratum_info",
                "1 per stratum, with its scope: out_of_scope strata should be declined.",
                &["stratum", "scope"],
            ),
            drift_active: int_gauge(
                &r,
                "ragwatch_drift_active",
                "1 while a drift rule fires on this replica's windows.",
                &["metric", "stratum", "judge", "rule"],
            ),
            diagnosis: int_gauge(
                &r,
                "ragwatch_diagnosis",
                "1 on the stage the short windows blame for a low score (retrieval, generation, prompt), by stratum and judge.",
                &["stratum", "judge", "stage"],
            ),
            judge_requests: counter(
                &r,
                "ragwatch_judge_requests_total",
                "Judge calls, by judge and outcome.",
                &["judge", "outcome"],
            ),
            judge_duration: histogram(
                &r,
                JUDGE_DURATION,
                "Judge call latency.",
                &["judge"],
                JUDGE_DURATION_BUCKETS.to_vec(),
            ),
            judge_tokens: counter(
                &r,
                "ragwatch_judge_tokens_total",
                "Tokens spent by the judge, by direction.",
                &["judge", "direction"],
            ),
            judge_retries: counter(
                &r,
                "ragwatch_judge_retries_total",
                "Judge calls sent again, by judge and reason: rate_limited, timeout, http_error (transport); malformed, truncated (re-asks); format_fallback.",
                &["judge", "reason"],
            ),
            judge_part_failures: counter(
                &r,
                "ragwatch_judge_part_failures_total",
                "Verdict parts that failed while the rest of the verdict was kept, by judge, part and reason.",
                &["judge", "part", "reason"],
            ),
            judge_structured_output: int_gauge(
                &r,
                "ragwatch_judge_structured_output_info",
                "1 on the structured-output mode the LLM judge uses (auto resolved by probing the server), 0 on the others.",
                &["mode"],
            ),
            budget_remaining: single(
                &r,
                Gauge::new(
                    "ragwatch_budget_remaining_tokens",
                    "Judge tokens this replica may still spend now.",
                ),
            ),
            budget_share: single(
                &r,
                Gauge::new(
                    "ragwatch_budget_share_ratio",
                    "This replica's share of the fleet's judge budget (fleet.membership: its share of the partitions, or one over the replicas).",
                ),
            ),
            fleet_peer_lookups: counter(
                &r,
                "ragwatch_fleet_peer_lookups_total",
                "Resolutions of fleet.peers, by outcome (ok, failed, empty); failed and empty keep the last budget share.",
                &["outcome"],
            ),
            fleet_peers: single(
                &r,
                IntGauge::new(
                    "ragwatch_fleet_peers",
                    "Replicas this replica's budget share is computed from (fleet.membership peers or replicas; 0 with partitions).",
                ),
            ),
            // Registered at the first canary run (`canary_agreement`): before it there is no
            // agreement to report, and a series that reads 0 or NaN would be a false claim.
            canary_agreement: Gauge::new(
                "ragwatch_judge_canary_agreement_ratio",
                "Share of canary traces on which the LLM judge agrees with their label, at the last run.",
            )
            .expect("valid metric definition"),
            judge_queue_depth: single(
                &r,
                IntGauge::new(
                    "ragwatch_judge_queue_depth",
                    "Sampled traces waiting for the sampled judge.",
                ),
            ),
            kafka_lag: int_gauge(
                &r,
                "ragwatch_kafka_consumer_lag_messages",
                "Consumer lag per assigned partition.",
                &["topic", "partition"],
            ),
            kafka_errors: counter(
                &r,
                "ragwatch_kafka_errors_total",
                "Kafka client errors, by kind.",
                &["kind"],
            ),
            kafka_commits: counter(
                &r,
                "ragwatch_kafka_commits_total",
                "Offset commits, by outcome.",
                &["outcome"],
            ),
            kafka_partitions: single(
                &r,
                IntGauge::new(
                    "ragwatch_kafka_assigned_partitions",
                    "Partitions this replica holds.",
                ),
            ),
            kafka_brokers_up: single(
                &r,
                IntGauge::new(
                    "ragwatch_kafka_brokers_up",
                    "Brokers librdkafka reports as UP.",
                ),
            ),
            kafka_assignment_age: single(
                &r,
                Gauge::new(
                    "ragwatch_kafka_assignment_age_seconds",
                    "Seconds since this replica's partition assignment last changed (since start before the first).",
                ),
            ),
            kafka_without_partitions: single(
                &r,
                IntGauge::new(
                    "ragwatch_kafka_without_partitions",
                    "1 while this replica holds no partition though its subscribed topics have some.",
                ),
            ),
            kafka_topic_partitions: single(
                &r,
                IntGauge::new(
                    "ragwatch_kafka_topic_partitions",
                    "Partitions of the subscribed topics, shared by the consumer group.",
                ),
            ),
            kafka_session_timeout: single(
                &r,
                Gauge::new(
                    "ragwatch_kafka_session_timeout_seconds",
                    "The consumer group session timeout: how long the group waits for a silent member.",
                ),
            ),
            source_idle_seconds: single(
                &r,
                Gauge::new(
                    "ragwatch_source_idle_seconds",
                    "Seconds since the source last delivered a message.",
                ),
            ),
            build_info: int_gauge(
                &r,
                "ragwatch_build_info",
                "Build identity: the version of ragwatch; value 1.",
                &["version"],
            ),
            judge_info: int_gauge(
                &r,
                "ragwatch_judge_info",
                "Judge identity in force (offline model version; LLM chat and embedding models, prompt version, faithfulness form, context verdicts, structured-output mode); value 1. A judge change is a metric reset.",
                &["model"],
            ),
            source_messages: single(
                &r,
                IntCounter::new(
                    "ragwatch_source_messages_total",
                    "Messages delivered by the source.",
                ),
            ),
            spans_received: single(
                &r,
                IntCounter::new("ragwatch_spans_received_total", "OTLP spans received."),
            ),
            spans_dropped: counter(
                &r,
                "ragwatch_spans_dropped_total",
                "OTLP spans not kept, by reason (invalid_id, late: its trace was already complete, too_many_spans).",
                &["reason"],
            ),
            assembly_pending: single(
                &r,
                IntGauge::new(
                    "ragwatch_assembly_pending_traces",
                    "Traces waiting for more spans before they are judged.",
                ),
            ),
            traces_assembled: counter(
                &r,
                "ragwatch_traces_assembled_total",
                "Traces that left span assembly, by trigger (root: root span arrived; idle: timed out; end: input ended; evicted: dropped to stay within bounds).",
                &["trigger"],
            ),
            traces_unjudged: counter(
                &r,
                "ragwatch_traces_unjudged_total",
                "Assembled traces not judged, by stratum and reason (not_rag: neither a retriever nor a model call; no_retrieval: no retrieval span; no_context_text: documents without text; unreadable_question, unreadable_answer: only a serialized object where the text should be).",
                &["stratum", "reason"],
            ),
            otlp_requests: counter(
                &r,
                "ragwatch_otlp_requests_total",
                "OTLP export requests, by protocol (http, grpc) and outcome.",
                &["protocol", "outcome"],
            ),
            export_sent: counter(
                &r,
                "ragwatch_export_sent_total",
                "Verdict events sent to an export target, by target (otlp, phoenix) and outcome (ok; rejected: an answer not worth retrying; failed: retries or time ran out).",
                &["target", "outcome"],
            ),
            export_dropped: counter(
                &r,
                "ragwatch_export_dropped_total",
                "Verdict events not sent to an export target, by target (otlp, phoenix) and reason (queue_full: the queue was full; no_span: no judged span id; shutdown: still queued at the flush deadline).",
                &["target", "reason"],
            ),
            write_refused: counter(
                &r,
                "ragwatch_write_refused_total",
                "Requests refused on the write listener, by endpoint (traces, labels) and reason (missing_credentials, malformed_credentials, unknown_token: 401; forbidden: 403, a token without the endpoint's scope; rate_limited: 429).",
                &["endpoint", "reason"],
            ),
            write_reloads: counter(
                &r,
                "ragwatch_write_reloads_total",
                "Re-reads of the write listener's files after they changed, by file (tokens, tls) and outcome (ok; error: the previous ones stay in use).",
                &["file", "outcome"],
            ),
            write_tokens: single(
                &r,
                IntGauge::with_opts(Opts::new(
                    "ragwatch_write_tokens",
                    "Bearer tokens the write listener accepts now (from the environment and the tokens file).",
                )),
            ),
            redactions: counter(
                &r,
                "ragwatch_redactions_total",
                "Matches replaced (masked or hashed) in the question, contexts and answer of traces sent to the LLM judge, by pattern (built-in: email, phone, card, secret, ip; or redact.patterns names).",
                &["pattern"],
            ),
            write_tls_handshake_failures: single(
                &r,
                IntCounter::with_opts(Opts::new(
                    "ragwatch_write_tls_handshake_failures_total",
                    "TLS handshakes on the write listener that failed (no or an unverifiable client certificate, a client that does not trust the server's) or timed out.",
                )),
            ),
            length_moments: float_counter(
                &r,
                "ragwatch_judge_length_moments_total",
                "Sums behind the correlation of each score with answer length in words (terms n, x, y, xx, yy, xy; x length, y score), by metric, stratum, judge and term; pool by sum across replicas.",
                &["metric", "stratum", "judge", "term"],
            ),
            same_family: counter(
                &r,
                "ragwatch_judge_same_family_total",
                "LLM judge verdicts on answers generated by a model of the judge's own family (metadata.model; [audit] families), by stratum: a self-preference bias risk, not an error.",
                &["stratum"],
            ),
            registry: r,
            exemplars: Arc::new(exemplars),
            series: strata.iter().map(|_| StratumSeries::default()).collect(),
        };
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        m.judge_info.with_label_values(&[judge_model]).set(1);
        // process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds... from /proc.
        #[cfg(target_os = "linux")]
        if let Err(e) = m.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        )) {
            tracing::warn!(error = %e, "cannot register the process metrics");
        }
        m.budget_share.set(1.0);
        m.start_series(strata);
        m
    }

    /// Starts every series whose labels are known up front at zero (each judge outcome, token
    /// direction, reject and skip reason, each stratum's per-judge and per-metric series), so that
    /// `rate()` and `increase()` see the first event and a dashboard shows 0, not "no data".
    fn start_series(&self, strata: &[String]) {
        for outcome in JudgeOutcome::ALL {
            self.judge_requests
                .with_label_values(&["llm", outcome.name()]);
        }
        for direction in ["prompt", "completion"] {
            self.judge_tokens.with_label_values(&["llm", direction]);
        }
        for reason in JUDGE_RETRY_REASONS {
            self.judge_retries.with_label_values(&["llm", reason]);
        }
        for reason in RejectReason::ALL {
            self.traces_rejected.with_label_values(&[reason.as_str()]);
        }
        for reason in crate::trace::otlp::SpanDrop::ALL {
            self.spans_dropped.with_label_values(&[reason.as_str()]);
        }
        for trigger in crate::trace::otlp::Trigger::ALL {
            self.traces_assembled.with_label_values(&[trigger.as_str()]);
        }
        for outcome in FLEET_LOOKUP_OUTCOMES {
            self.fleet_peer_lookups.with_label_values(&[outcome]);
        }
        for target in EXPORT_TARGETS {
            for outcome in EXPORT_OUTCOMES {
                self.export_sent.with_label_values(&[target, outcome]);
            }
            for reason in EXPORT_DROP_REASONS {
                self.export_dropped.with_label_values(&[target, reason]);
            }
        }
        for protocol in OTLP_PROTOCOLS {
            for outcome in OTLP_OUTCOMES {
                self.otlp_requests.with_label_values(&[protocol, outcome]);
            }
        }
        for s in strata {
            let s = s.as_str();
            self.traces_received.with_label_values(&[s]);
            self.contexts_retrieved.with_label_values(&[s]);
            // The retrieval shift rule reads the top score's sum, count and squares.
            self.retrieval_score.with_label_values(&[s, RANKS[0]]);
            self.retrieval_top_squares.with_label_values(&[s]);
            self.traces_sampled.with_label_values(&[s]);
            for reason in UNJUDGED_REASONS {
                self.traces_unjudged.with_label_values(&[s, reason]);
            }
            for reason in SkipReason::ALL {
                self.traces_skipped.with_label_values(&[s, reason.as_str()]);
            }
            for valid in ["true", "false"] {
                self.citations.with_label_values(&[s, valid]);
            }
            for metric in Quality::ALL {
                for rule in RuleKind::ALL {
                    self.drift_active.with_label_values(&[
                        metric.name(),
                        s,
                        JudgeKind::Combined.name(),
                        rule.name(),
                    ]);
                }
            }
        }
        for j in JudgeKind::STARTED {
            self.start_judge(strata, j);
        }
        self.judge_duration.with_label_values(&["llm"]);
        for s in strata {
            self.same_family.with_label_values(&[s.as_str()]);
        }
    }

    /// Starts the per-stratum series of `judge` at zero (its verdicts, scores, drift flags).
    pub(crate) fn start_judge(&self, strata: &[String], judge: JudgeKind) {
        let j = judge.name();
        if judge == JudgeKind::Classifier {
            for outcome in JudgeOutcome::ALL {
                self.judge_requests.with_label_values(&[j, outcome.name()]);
            }
            self.judge_duration.with_label_values(&[j]);
        }
        for s in strata {
            let s = s.as_str();
            self.traces_judged.with_label_values(&[s, j]);
            for (_, h) in self.scores.iter() {
                h.with_label_values(&[s, j]);
            }
            for stage in crate::window::STAGES {
                self.diagnosis.with_label_values(&[s, j, stage]);
            }
            self.no_claims.with_label_values(&[s, j]);
            self.refusals.with_label_values(&[s, j]);
            for metric in Quality::ALL {
                self.score_squares.with_label_values(&[metric.name(), s, j]);
                for rule in RuleKind::ALL {
                    self.drift_active
                        .with_label_values(&[metric.name(), s, j, rule.name()]);
                }
            }
        }
    }

    /// The length-correlation counters of every (stratum, judge, metric) of `judges`, resolved
    /// once: the ingest path adds to them for every trace without a label lookup.
    pub(crate) fn length_moments_of(
        &self,
        strata: &[String],
        judges: &[JudgeKind],
    ) -> LengthMoments {
        let mut counters = Vec::new();
        for s in strata {
            for j in JudgeKind::ALL {
                for metric in Quality::ALL {
                    counters.push(judges.contains(&j).then(|| {
                        LENGTH_TERMS.map(|term| {
                            self.length_moments.with_label_values(&[
                                metric.name(),
                                s,
                                j.name(),
                                term,
                            ])
                        })
                    }));
                }
            }
        }
        LengthMoments { counters }
    }

    /// Counts one decoded trace of `stratum` (named `name`): the trace, its number of contexts,
    /// and the retriever score of each context that has one, by rank.
    pub(crate) fn count_received(
        &self,
        stratum: StratumId,
        name: &str,
        contexts: usize,
        scores: impl Iterator<Item = Option<f64>>,
    ) {
        let series = self.series.get(stratum);
        let received = series.map(|s| &s.received);
        with(
            received,
            || self.traces_received.with_label_values(&[name]),
            |c| c.inc(),
        );
        with(
            series.map(|s| &s.contexts),
            || self.contexts_retrieved.with_label_values(&[name]),
            |h| h.observe(contexts as f64),
        );
        for (i, score) in scores.enumerate() {
            if let Some(score) = score {
                let rank = rank_bucket(i);
                with(
                    series.map(|s| &s.retrieval[rank]),
                    || self.retrieval_score.with_label_values(&[name, RANKS[rank]]),
                    |h| h.observe(score),
                );
                if i == 0 {
                    with(
                        series.map(|s| &s.retrieval_top_squares),
                        || self.retrieval_top_squares.with_label_values(&[name]),
                        |c| c.inc_by(score * score),
                    );
                }
            }
        }
    }

    /// Counts one trace of `stratum` chosen for the sampled judge.
    pub(crate) fn count_sampled(&self, stratum: StratumId, name: &str) {
        with(
            self.series.get(stratum).map(|s| &s.sampled),
            || self.traces_sampled.with_label_values(&[name]),
            |c| c.inc(),
        );
    }

    /// Counts one verdict of `judge` on a trace of `stratum`: the verdict, a refusal, an answer
    /// without claims, and (when it has any) its citations, valid and not.
    pub(crate) fn count_verdict(
        &self,
        stratum: StratumId,
        name: &str,
        judge: JudgeKind,
        refusal: bool,
        no_claims: bool,
        citations: Option<crate::judge::Citations>,
    ) {
        let series = self.series.get(stratum);
        let js = series.and_then(|s| s.judge(judge));
        let labels = [name, judge.name()];
        with(
            js.map(|j| &j.judged),
            || self.traces_judged.with_label_values(&labels),
            |c| c.inc(),
        );
        if refusal {
            with(
                js.map(|j| &j.refusals),
                || self.refusals.with_label_values(&labels),
                |c| c.inc(),
            );
        }
        if no_claims {
            with(
                js.map(|j| &j.no_claims),
                || self.no_claims.with_label_values(&labels),
                |c| c.inc(),
            );
        }
        if let Some(c) = citations {
            for (i, (valid, n)) in [("true", c.valid), ("false", c.total - c.valid)]
                .into_iter()
                .enumerate()
            {
                with(
                    series.map(|s| &s.citations[i]),
                    || self.citations.with_label_values(&[name, valid]),
                    |counter| counter.inc_by(u64::from(n)),
                );
            }
        }
    }

    /// Creates every term of the combined estimate at zero for `strata`, so a recording rule's
    /// `increase()` sees each series start from zero rather than at its first trace's value.
    pub(crate) fn precreate_estimate_terms(&self, strata: &[String], predictions: &[JudgeKind]) {
        for s in strata {
            for j in predictions {
                self.estimate_predictions.with_label_values(&[s, j.name()]);
            }
            for metric in Quality::ALL {
                for term in EstimateSums::TERMS {
                    self.estimate_terms
                        .with_label_values(&[metric.name(), s, term]);
                }
            }
        }
    }

    /// Adds one trace's or pair's estimate sums to the exported terms.
    pub(crate) fn add_estimate_terms(
        &self,
        metric: Quality,
        stratum: StratumId,
        name: &str,
        sums: &EstimateSums,
    ) {
        let cells = self.series.get(stratum).map(|s| &s.estimate[metric]);
        for (i, (term, v)) in EstimateSums::TERMS.iter().zip(sums.terms()).enumerate() {
            if v != 0.0 {
                with(
                    cells.map(|c| &c[i]),
                    || {
                        self.estimate_terms
                            .with_label_values(&[metric.name(), name, term])
                    },
                    |c| c.inc_by(v),
                );
            }
        }
    }

    /// Observes one score of `metric` by `judge` on a trace of `stratum`, with the trace as the
    /// bucket's exemplar, and adds its square to the sum of squares.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn observe_score(
        &self,
        metric: Quality,
        stratum: StratumId,
        name: &str,
        judge: JudgeKind,
        v: f64,
        trace_id: &str,
        now_ms: u64,
    ) {
        let js = self.series.get(stratum).and_then(|s| s.judge(judge));
        let labels = [name, judge.name()];
        with(
            js.map(|j| &j.scores[metric]),
            || self.scores[metric].with_label_values(&labels),
            |h| h.observe(v),
        );
        with(
            js.map(|j| &j.squares[metric]),
            || {
                self.score_squares
                    .with_label_values(&[metric.name(), name, judge.name()])
            },
            |c| c.inc_by(v * v),
        );
        let histogram = metric.spec().histogram;
        match js {
            Some(j) => {
                let series =
                    j.exemplars[metric].get_or_init(|| self.exemplars.handle(histogram, &labels));
                if let Some(series) = series {
                    self.exemplars.record_in(series, v, trace_id, now_ms);
                }
            }
            None => self
                .exemplars
                .record(histogram, &labels, v, trace_id, now_ms),
        }
    }

    /// Observes one judge call's latency with the judged trace as the bucket's exemplar.
    pub(crate) fn observe_judge_duration(
        &self,
        judge: &str,
        secs: f64,
        trace_id: &str,
        now_ms: u64,
    ) {
        self.judge_duration
            .with_label_values(&[judge])
            .observe(secs);
        self.exemplars
            .record(JUDGE_DURATION, &[judge], secs, trace_id, now_ms);
    }

    /// The OpenMetrics exposition of every family, with exemplars.
    pub fn render_openmetrics(&self) -> String {
        let mut out = String::with_capacity(96 * 1024);
        openmetrics::encode(&self.registry.gather(), &self.exemplars, &mut out);
        out
    }

    /// The Prometheus text exposition of every family.
    pub fn render(&self) -> String {
        let mut buf = Vec::with_capacity(64 * 1024);
        let families = self.registry.gather();
        if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The LLM judge's reports, as counters and gauges.
impl LlmObserver for Metrics {
    fn redacted(&self, pattern: &str, matches: u64) {
        self.redactions
            .with_label_values(&[pattern])
            .inc_by(matches);
    }

    fn spent(&self, usage: &Usage, retries: &[&'static str]) {
        self.judge_tokens
            .with_label_values(&["llm", "prompt"])
            .inc_by(usage.prompt_tokens);
        self.judge_tokens
            .with_label_values(&["llm", "completion"])
            .inc_by(usage.completion_tokens);
        for reason in retries {
            self.judge_retries.with_label_values(&["llm", reason]).inc();
        }
    }

    fn part_failed(&self, part: &'static str, reason: &'static str) {
        self.judge_part_failures
            .with_label_values(&["llm", part, reason])
            .inc();
    }

    fn budget_left(&self, tokens: f64) {
        self.budget_remaining.set(tokens);
    }

    fn record_not_published(&self) {
        self.kafka_errors
            .with_label_values(&["records_produce"])
            .inc();
    }

    fn structured_output(&self, mode: StructuredOutput) {
        for m in CHAIN {
            self.judge_structured_output
                .with_label_values(&[mode_name(m)])
                .set(i64::from(m == mode));
        }
    }

    fn hide_identity(&self, identity: &str) -> Vec<IdentitySeries> {
        use prometheus::core::Collector;
        let mut found = Vec::new();
        for family in self.judge_info.collect() {
            for m in family.get_metric() {
                let label = |name: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == name)
                        .map(|l| l.value().to_owned())
                        .unwrap_or_default()
                };
                let series = IdentitySeries {
                    model: label("model"),
                };
                if series.model.contains(identity) {
                    found.push(series);
                }
            }
        }
        for series in &found {
            let _ = self.judge_info.remove_label_values(&[&series.model]);
        }
        found
    }

    fn show_identity(&self, series: &IdentitySeries) {
        self.judge_info.with_label_values(&[&series.model]).set(1);
    }

    fn canary_agreement(&self, agreement: f64) {
        self.canary_agreement.set(agreement);
        // The first run registers the series; later ones find it there.
        let _ = self
            .registry
            .register(Box::new(self.canary_agreement.clone()));
    }
}

/// Judge scores of human-labelled traces, by judge, stratum and the human verdict, in the fixed
/// buckets of [`crate::eval::LABEL_SCORE_BOUNDS`]; and the AUROC computed from them. The
/// histogram's cumulative counts and the per-bucket counters together let a recording rule compute
/// the AUROC pooled over replicas (the rule needs each bucket's count and the cumulative count at
/// the same `le`, and PromQL cannot take differences between neighbouring buckets).
#[derive(Debug, Clone)]
pub struct LabelledMetrics {
    /// `ragwatch_labelled_score_ratio{judge, stratum, human}`: cumulative, a histogram.
    pub score: HistogramVec,
    /// `ragwatch_labelled_scores_total{judge, stratum, human, bucket}`: the same counts per bucket,
    /// `bucket` the upper bound (`le` is for histograms only).
    pub bucket: IntCounterVec,
    /// This replica's AUROC over `labels.auroc_window_secs`, by judge and stratum, while each class
    /// has `labels.auroc_min_per_class` labels.
    pub auroc: GaugeVec,
    /// 1 while a judge's AUROC is below `labels.auroc_floor` (with enough labels), by judge and
    /// stratum.
    pub(crate) below_floor: IntGaugeVec,
    /// `labels.auroc_floor`, when set: the alert's threshold.
    pub floor: Gauge,
    /// `labels.auroc_min_per_class`: labels of each class the alert and the AUROC wait for.
    pub(crate) min_per_class: IntGauge,
}

impl LabelledMetrics {
    fn new(r: &Registry) -> Self {
        Self {
            score: histogram(
                r,
                "ragwatch_labelled_score_ratio",
                "Faithfulness scores of human-labelled traces, by judge, stratum and human verdict (faithful, unfaithful).",
                &["judge", "stratum", "human"],
                crate::eval::LABEL_SCORE_BOUNDS.to_vec(),
            ),
            bucket: counter(
                r,
                "ragwatch_labelled_scores_total",
                "Faithfulness scores of human-labelled traces per score bucket (not cumulative; bucket = its upper bound, the histogram's le), by judge, stratum and human verdict.",
                &["judge", "stratum", "human", "bucket"],
            ),
            auroc: gauge(
                r,
                "ragwatch_label_auroc_ratio",
                "This replica's AUROC of the judge's faithfulness score against human labels over labels.auroc_window_secs, from bucketed scores; present with enough labels of each class.",
                &["judge", "stratum"],
            ),
            below_floor: int_gauge(
                r,
                "ragwatch_label_auroc_below_floor",
                "1 while the label AUROC is below labels.auroc_floor with enough labels (this replica's view).",
                &["judge", "stratum"],
            ),
            floor: single(
                r,
                Gauge::new(
                    "ragwatch_label_auroc_floor_ratio",
                    "labels.auroc_floor: the label AUROC below which a judge disagrees with people (0: off).",
                ),
            ),
            min_per_class: single(
                r,
                IntGauge::new(
                    "ragwatch_label_auroc_min_labels",
                    "labels.auroc_min_per_class: labels of each class needed before the label AUROC counts.",
                ),
            ),
        }
    }

    /// Creates every series of `judges` and `strata` at zero.
    pub(crate) fn precreate(&self, judges: &[JudgeKind], strata: &[String]) {
        for judge in judges {
            for stratum in strata {
                for human in ["faithful", "unfaithful"] {
                    let labels = [judge.name(), stratum.as_str(), human];
                    self.score.with_label_values(&labels);
                    for le in crate::eval::LABEL_SCORE_BOUNDS {
                        self.bucket.with_label_values(&[
                            labels[0],
                            labels[1],
                            labels[2],
                            &le.to_string(),
                        ]);
                    }
                }
            }
        }
    }

    /// Counts one labelled score.
    pub(crate) fn observe(&self, judge: &str, stratum: &str, faithful: bool, score: f64) {
        let human = if faithful { "faithful" } else { "unfaithful" };
        self.score
            .with_label_values(&[judge, stratum, human])
            .observe(score);
        let le = crate::eval::LABEL_SCORE_BOUNDS[crate::eval::label_score_bucket(score)];
        self.bucket
            .with_label_values(&[judge, stratum, human, &le.to_string()])
            .inc();
    }
}
