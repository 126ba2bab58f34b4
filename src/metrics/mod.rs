//! Metrics: the one place metric names appear. A struct of families registered on its own
//! `prometheus::Registry` (no global registry), passed down as `Arc<Metrics>`.
//!
//! Counters and histograms are what PromQL pools across replicas; the `window_*` gauges are this
//! replica's own view. Every label value comes from a bounded set: declared strata plus `default` and
//! `other`, reject reasons, judge names, rule names.
//!
//! Each room of the data flow declares the families it records, in the order a trace meets them:
//!
//! - `source`: messages delivered; `kafka`: the Kafka consumer; `otlp`: the OTLP receivers and
//!   span assembly;
//! - `ingest`: traces decoded, rejected or not judged, and their retrieved contexts;
//! - `sample`: traces chosen for the sampled judge and its queue;
//! - `judge`: the judges' calls; `budget`: the tokens they may spend, the fleet's share;
//! - `verdict`: verdicts and scores; `audit`: the judges' biases, measured;
//! - `window`: the rolling windows; `drift`: the drift rules' thresholds and flags, the diagnosis;
//! - `labels`: human labels and the label AUROC; `feedback`: user feedback;
//! - `changes`, `comparison`, `review`: what changed, the variant comparison, the review
//!   queue (registered by the recorder where configured);
//! - `export`: the verdict export; `write`: the write listener; `identity`: build, judge and
//!   strata.
//!
//! `family` declares and registers a family; `record` is what the ingest path calls per trace,
//! through the per-stratum handles of `series`; `observer` turns the LLM judge's reports into
//! families. The score and judge-latency histograms also keep the trace id of each bucket's latest
//! observation (`exemplars`); `/metrics` (`exposition`) writes them in the OpenMetrics format
//! (`openmetrics`) when the scraper asks for it.

pub(crate) mod audit;
pub(crate) mod budget;
pub(crate) mod changes;
pub(crate) mod comparison;
pub mod config;
pub(crate) mod drift;
mod exemplars;
pub(crate) mod export;
mod exposition;
mod family;
pub(crate) mod feedback;
pub(crate) mod identity;
pub(crate) mod ingest;
pub(crate) mod judge;
pub(crate) mod kafka;
pub(crate) mod labels;
mod observer;
pub(crate) mod openmetrics;
pub(crate) mod otlp;
mod record;
pub(crate) mod review;
pub(crate) mod sample;
pub(crate) mod series;
pub(crate) mod source;
pub(crate) mod verdict;
pub(crate) mod window;
pub(crate) mod write;

use std::sync::Arc;

use prometheus::Registry;

use crate::dimensions::{JudgeKind, Quality};
use audit::AuditMetrics;
pub(crate) use audit::LengthMoments;
use budget::BudgetMetrics;
pub(crate) use budget::FLEET_LOOKUP_OUTCOMES;
use config::MetricsConfig;
use drift::DriftMetrics;
use exemplars::Exemplars;
use export::ExportMetrics;
use identity::IdentityMetrics;
use ingest::IngestMetrics;
pub(crate) use ingest::UNJUDGED_REASONS;
use judge::{JUDGE_DURATION, JUDGE_DURATION_BUCKETS, JudgeMetrics};
use kafka::KafkaMetrics;
pub use labels::LabelledMetrics;
use otlp::OtlpMetrics;
use sample::SampleMetrics;
use series::StratumSeries;
use source::SourceMetrics;
use verdict::{RATIO_BUCKETS, VerdictMetrics};
use window::WindowMetrics;
use write::WriteMetrics;

/// All metric families of one process, room by room.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// The registry `/metrics` renders.
    pub registry: Registry,
    /// Messages delivered, the source's silence.
    pub(crate) source: SourceMetrics,
    /// The Kafka consumer.
    pub(crate) kafka: KafkaMetrics,
    /// The OTLP receivers and span assembly.
    pub(crate) otlp: OtlpMetrics,
    /// Traces decoded, rejected, not judged; their retrieved contexts.
    pub(crate) ingest: IngestMetrics,
    /// Traces chosen for the sampled judge, and its queue.
    pub(crate) sample: SampleMetrics,
    /// The judges' calls.
    pub(crate) judge: JudgeMetrics,
    /// The judge's token budget and this replica's share of the fleet's.
    pub(crate) budget: BudgetMetrics,
    /// Verdicts and scores.
    pub verdicts: VerdictMetrics,
    /// Length correlation and same-family verdicts.
    pub(crate) audit: AuditMetrics,
    /// The rolling windows' means and bounds.
    pub(crate) window: WindowMetrics,
    /// The drift rules' thresholds and flags, the diagnosis.
    pub drift: DriftMetrics,
    /// Human labels and the judge scores of labelled traces, for the label AUROC.
    pub labelled: LabelledMetrics,
    /// The verdict export.
    pub(crate) export: ExportMetrics,
    /// The write listener.
    pub(crate) write: WriteMetrics,
    /// Build, judge and strata identity.
    pub identity: IdentityMetrics,
    /// The latest trace id per bucket of the score and judge-latency histograms.
    pub exemplars: Arc<Exemplars>,
    /// The per-trace series of each stratum (by [`crate::dimensions::StratumId`]), kept once
    /// looked up.
    series: Arc<[StratumSeries]>,
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
        let m = Metrics {
            source: SourceMetrics::register(&r),
            kafka: KafkaMetrics::register(&r),
            otlp: OtlpMetrics::register(&r),
            ingest: IngestMetrics::register(&r, config),
            sample: SampleMetrics::register(&r),
            judge: JudgeMetrics::register(&r),
            budget: BudgetMetrics::register(&r),
            verdicts: VerdictMetrics::register(&r),
            audit: AuditMetrics::register(&r),
            window: WindowMetrics::register(&r),
            drift: DriftMetrics::register(&r),
            labelled: LabelledMetrics::register(&r),
            export: ExportMetrics::register(&r),
            write: WriteMetrics::register(&r),
            identity: IdentityMetrics::register(&r),
            exemplars: Arc::new(exemplar_store(&r)),
            registry: r,
            series: strata.iter().map(|_| StratumSeries::default()).collect(),
        };
        // process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds... from /proc.
        #[cfg(target_os = "linux")]
        if let Err(e) = m.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        )) {
            tracing::warn!(error = %e, "cannot register the process metrics");
        }
        m.identity.start(judge_model);
        m.start_series(strata);
        m
    }

    /// Starts every series whose labels are known up front at zero (each judge outcome, token
    /// direction, reject and skip reason, each stratum's per-judge and per-metric series), so that
    /// `rate()` and `increase()` see the first event and a dashboard shows 0, not "no data".
    fn start_series(&self, strata: &[String]) {
        self.otlp.start();
        self.ingest.start(strata);
        self.sample.start(strata);
        self.judge.start();
        self.budget.start();
        self.verdicts.start(strata);
        self.audit.start(strata);
        self.drift.start(strata);
        self.export.start();
        for j in JudgeKind::STARTED {
            self.start_judge(strata, j);
        }
    }

    /// Starts the per-stratum series of `judge` at zero (its verdicts, scores, drift flags).
    pub(crate) fn start_judge(&self, strata: &[String], judge: JudgeKind) {
        if judge == JudgeKind::Classifier {
            self.judge.start_calls(judge);
        }
        self.verdicts.start_judge(strata, judge);
        self.drift.start_judge(strata, judge);
    }
}

/// The exemplar store, with a family for each score histogram and for the judge latency.
fn exemplar_store(r: &Registry) -> Exemplars {
    let mut exemplars = Exemplars::new(family::counter(
        r,
        "ragwatch_exemplars_dropped_total",
        "Trace ids not kept as exemplars, by reason (too_long: over OpenMetrics's 128-character label set; empty).",
        &["reason"],
    ));
    for m in Quality::ALL {
        exemplars.family(m.spec().histogram, &["stratum", "judge"], &RATIO_BUCKETS);
    }
    exemplars.family(JUDGE_DURATION, &["judge"], &JUDGE_DURATION_BUCKETS);
    exemplars
}
