//! The recorder: where verdicts become numbers. It writes every verdict to the metric families
//! (histograms, counters) and to the window rings, and adds each trace's offline score and each
//! LLM verdict (with its inclusion probability) to the combined estimate. The evaluator (`run_evaluator`) reads
//! the rings back every second and exports window gauges and drift flags.
//!
//! Above `metrics` and `window`, below the pipeline, the judge pool and the sources, which all
//! record through a [`Shared`].

mod changes;
mod comparison;
pub mod config;
mod evaluator;
mod feedback;
mod setup;
mod user_feedback;

pub(crate) use evaluator::run_evaluator;
pub use evaluator::{evaluate_once, export_thresholds};
pub(crate) use feedback::{Feedback, LabelOutcome, parse_label};
pub use setup::{RecorderSetup, judge_model};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::dimensions::{JudgeKind, Quality, StratumId};
use crate::judge::Verdict;
use crate::metrics::Metrics;
use crate::sample::Stratifier;
use crate::trace::Trace;
use crate::window::{EstimateSums, Windows};

/// Shared state the pipeline writes and the evaluator and sampled judge read.
#[derive(Debug, Clone)]
pub struct Shared {
    /// Metric families.
    pub metrics: Arc<Metrics>,
    /// Rolling windows.
    pub windows: Arc<Mutex<Windows>>,
    /// Stratum names.
    pub stratifier: Arc<Stratifier>,
    /// The sections it was built from (the evaluator reads the windows, rules and labels).
    pub(crate) setup: Arc<RecorderSetup>,
    /// The human-label join, when `labels.enabled`.
    pub(crate) feedback: Option<Arc<Feedback>>,
    /// The LLM judge's model family (when it has one), for the self-preference count.
    judge_family: Option<Arc<str>>,
    /// The length-correlation sums' series, resolved once.
    length_moments: Arc<crate::metrics::LengthMoments>,
    /// The variant comparison, when `[variants]` is on.
    comparisons: Option<Arc<comparison::Comparisons>>,
    /// What changed, when `changes.enabled`.
    attribution: Option<Arc<changes::Attribution>>,
    /// The review queue, once attached (`review.enabled`).
    review: Arc<OnceLock<crate::review::Review>>,
    /// Verdict export, once attached (`[export]` with a target).
    export: Arc<OnceLock<crate::export::Exporter>>,
}

impl Shared {
    /// Builds metrics and windows for `setup`.
    pub fn new(setup: RecorderSetup) -> Self {
        Self::with_clock(setup, false)
    }

    /// [`Shared::new`] for a replay: the change attribution reads the whole run as one window.
    pub fn for_replay(setup: RecorderSetup) -> Self {
        Self::with_clock(setup, true)
    }

    /// Builds the review queue of `setup` (`review.enabled`; its redaction's hash key from `env`)
    /// and attaches it to every clone of this state.
    pub fn attach_review(
        &self,
        setup: crate::review::ReviewSetup<'_>,
        env: &HashMap<String, String>,
    ) -> Result<(), String> {
        if let Some(review) =
            crate::review::Review::new(setup, env, self.stratifier.names(), &self.metrics.registry)?
        {
            let _ = self.review.set(review);
        }
        Ok(())
    }

    /// Attaches verdict export to every clone of this state: from then on each verdict recorded
    /// (the offline judge's on every trace, the LLM judge's and its failures on the sample) is
    /// offered to the export queues.
    pub fn attach_export(&self, exporter: crate::export::Exporter) {
        let _ = self.export.set(exporter);
    }

    /// Offers an LLM judge failure on `trace` (`kind`: the error's kind) to verdict export.
    pub(crate) fn export_failed(&self, stratum: StratumId, trace: &Trace, kind: &'static str) {
        if let Some(e) = self.export.get() {
            e.failed(self.stratifier.name(stratum), trace, kind);
        }
    }

    /// The review queue, once attached.
    pub(crate) fn review(&self) -> Option<&crate::review::Review> {
        self.review.get()
    }

    /// Whether a drift rule is active on any metric and judge of `stratum`.
    fn drifting(&self, stratum: StratumId) -> bool {
        let s = self.stratifier.name(stratum);
        Quality::ALL.iter().any(|m| {
            // The review queue that asks is the LLM judge's: the classifier's flags do not matter
            // here, and reading them would start their series.
            [JudgeKind::Offline, JudgeKind::Llm, JudgeKind::Combined]
                .iter()
                .any(|j| {
                    crate::window::RuleKind::ALL.iter().any(|r| {
                        self.metrics
                            .drift
                            .active
                            .with_label_values(&[m.name(), s, j.name(), r.name()])
                            .get()
                            > 0
                    })
                })
        })
    }

    /// Whether a context of `trace` is a listed suspect of `stratum` now.
    fn suspect(&self, stratum: StratumId, trace: &Trace, now: u64) -> bool {
        let Some(changes) = self.changes() else {
            return false;
        };
        let window = crate::changes::Window::Short;
        changes
            .report(stratum, JudgeKind::Offline, window, now, false, None)
            .is_some_and(|r| {
                r.documents.iter().any(|d| {
                    trace
                        .contexts
                        .iter()
                        .any(|c| c.id.as_deref() == Some(d.id.as_str()))
                })
            })
    }

    /// What changed (suspects, novelty, coverage), when `changes.enabled`.
    pub fn changes(&self) -> Option<&crate::changes::Changes> {
        self.attribution.as_deref().map(|a| &a.changes)
    }

    /// A replayed trace's verdicts into the change attribution (replay records nothing else here):
    /// its arrival with the offline verdict, and the LLM judge's verdict when it has one.
    pub(crate) fn attribute_replayed(
        &self,
        stratum: StratumId,
        trace: &Trace,
        offline: Option<&Verdict>,
        llm: Option<&Verdict>,
    ) {
        let Some(a) = &self.attribution else {
            return;
        };
        if let Some(v) = offline {
            a.arrive(stratum, trace, v, 0);
        }
        if let Some(v) = llm {
            a.judged(stratum, trace, v, 0);
        }
    }

    /// The suspects of every stratum that had traces, for each of `judges`, over the whole run
    /// (replay) or the short window at `now_ms`.
    pub fn suspect_reports(
        &self,
        judges: &[JudgeKind],
        now_ms: u64,
    ) -> Vec<crate::changes::StratumReport> {
        let Some(changes) = self.changes() else {
            return Vec::new();
        };
        let window = crate::changes::Window::Short;
        let mut reports = Vec::new();
        for (stratum, name) in self.stratifier.names().iter().enumerate() {
            for &judge in judges {
                let Some(report) = changes.report(stratum, judge, window, now_ms, false, None)
                else {
                    continue;
                };
                if report.verdicts > 0 {
                    reports.push(crate::changes::StratumReport {
                        stratum: name.clone(),
                        judge: judge.name(),
                        window,
                        report,
                    });
                }
            }
        }
        reports
    }

    fn with_clock(setup: RecorderSetup, whole_run: bool) -> Self {
        let stratifier = Arc::new(Stratifier::new(&setup.strata));
        let metrics = Arc::new(Metrics::with_config(
            stratifier.names(),
            &setup.judge_model,
            &setup.metrics,
        ));
        for stratum in stratifier.names() {
            let scope = if setup.strata.is_out_of_scope(stratum) {
                "out_of_scope"
            } else {
                "in_scope"
            };
            metrics
                .identity
                .stratum_info
                .with_label_values(&[stratum.as_str(), scope])
                .set(1);
        }
        let windows = Windows::new(
            &setup.windows.window_secs,
            setup.windows.buckets,
            stratifier.names().len(),
        );
        let label_judges = setup.judge.sampled.verdict_judges();
        if setup.labels.enabled {
            for outcome in LabelOutcome::ALL {
                metrics
                    .labelled
                    .received
                    .with_label_values(&[outcome.as_str()]);
            }
            // Every bucket of every class from the start: the AUROC rule multiplies series
            // matched by `le`, and a missing bucket would drop a term rather than count zero.
            let judges = setup.judge.sampled.verdict_judges();
            metrics.labelled.precreate(&judges, stratifier.names());
            for judge in &judges {
                for stratum in stratifier.names() {
                    for agree in ["true", "false"] {
                        metrics.labelled.agreement.with_label_values(&[
                            judge.name(),
                            stratum.as_str(),
                            agree,
                        ]);
                    }
                }
            }
            metrics.labelled.floor.set(setup.labels.auroc_floor);
            metrics
                .labelled
                .min_per_class
                .set(setup.labels.auroc_min_per_class as i64);
        }
        if setup.llm_samples() {
            let predictions = match setup.judge.prediction.kind() {
                JudgeKind::Offline => vec![JudgeKind::Offline],
                p => vec![p, JudgeKind::Offline],
            };
            metrics.precreate_estimate_terms(stratifier.names(), &predictions);
        }
        let mut judges = JudgeKind::STARTED.to_vec();
        if setup.judge.classifier_runs() {
            metrics.start_judge(stratifier.names(), JudgeKind::Classifier);
            judges.push(JudgeKind::Classifier);
        }
        let length_moments = Arc::new(metrics.audit.length_moments_of(stratifier.names(), &judges));
        let sampled_judge = setup.judge.sampled.kind();
        let comparisons = comparison::Comparisons::new(
            &setup.variants,
            stratifier.names(),
            sampled_judge,
            &setup.judge_model,
            &metrics.registry,
        )
        .map(Arc::new);
        let attribution =
            changes::Attribution::new(&setup, stratifier.names(), &metrics.registry, whole_run)
                .map(Arc::new);
        let feedback = setup.labels.enabled.then(|| {
            Arc::new(Feedback::with_user_feedback(
                &setup.labels,
                setup.judge.faithful_threshold,
                Some((&metrics.registry, stratifier.names(), &label_judges)),
            ))
        });
        Self {
            review: Arc::new(OnceLock::new()),
            export: Arc::new(OnceLock::new()),
            attribution,
            comparisons,
            metrics,
            windows: Arc::new(Mutex::new(windows)),
            stratifier,
            feedback,
            length_moments,
            judge_family: setup
                .llm_chat_model
                .as_deref()
                .and_then(|model| setup.audit.family(model))
                .map(Arc::from),
            setup: Arc::new(setup),
        }
    }

    /// The live part of the judge audit, for a verdict on `trace`: each score with the answer's
    /// length into the length-correlation sums, and an LLM verdict on an answer whose generator
    /// (`metadata.model`) is of the judge's family into the self-preference count.
    fn record_audit(&self, stratum: StratumId, trace: &Trace, verdict: &Verdict) {
        let words = crate::judge::word_count(&trace.answer) as f64;
        for metric in Quality::ALL {
            if let Some(v) = verdict.score(metric) {
                self.length_moments
                    .add(stratum, verdict.judge, metric, words, v);
            }
        }
        if verdict.judge == JudgeKind::Llm
            && let Some(judge_family) = &self.judge_family
            && let Some(generator) = trace.metadata.field::<String>("model")
            && self.setup.audit.family(&generator) == Some(&**judge_family)
        {
            let s = self.stratifier.name(stratum);
            self.metrics.audit.same_family.with_label_values(&[s]).inc();
        }
    }

    /// Remembers a verdict's faithfulness under its trace id, for human labels to join later,
    /// with the user feedback attached to the trace.
    fn remember(&self, trace: &Trace, stratum: StratumId, verdict: &Verdict, now: u64) {
        if let Some(f) = &self.feedback {
            f.remember_with(
                &trace.trace_id,
                stratum,
                verdict.judge,
                verdict.faithfulness(),
                Some(&trace.metadata),
                now,
            );
        }
    }

    /// Joins one human label line (see `Feedback`); `Invalid` when labels are off. A label of a
    /// trace picked for review also enters the reviewer estimate.
    pub fn label(&self, line: &[u8], now: u64) -> LabelOutcome {
        if let Some(review) = self.review.get()
            && let Some((trace_id, faithful)) = parse_label(line)
        {
            review.label(&trace_id, faithful, now);
        }
        match &self.feedback {
            Some(f) => f.label(line, self.stratifier.names(), &self.metrics, now),
            None => LabelOutcome::Invalid,
        }
    }

    /// Joins every non-blank line of `body` as a label (a POST body or a Kafka message may hold
    /// several); returns the count per outcome, in [`LabelOutcome::ALL`] order.
    pub(crate) fn label_lines(&self, body: &[u8], now: u64) -> [u64; LabelOutcome::ALL.len()] {
        let mut counts = [0u64; LabelOutcome::ALL.len()];
        let mut count = |outcome: LabelOutcome| {
            if let Some(i) = LabelOutcome::ALL.iter().position(|o| *o == outcome) {
                counts[i] += 1;
            }
        };
        for line in body.split(|b| *b == b'\n') {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            count(self.label(line, now));
        }
        counts
    }

    /// Everything a verdict on `trace` at time `now` feeds: the variant comparison's arrivals, the
    /// counts, the windows, the live judge audit, and the memory that human labels join (the
    /// combined estimate's population is `Shared::record_prediction`'s). Each score keeps the trace id as its bucket's exemplar.
    /// Returns whether the trace comes from a candidate release under comparison (the sampler
    /// takes those at `variants.candidate_boost`).
    pub fn record(&self, stratum: StratumId, verdict: &Verdict, trace: &Trace, now: u64) -> bool {
        let candidate = self
            .comparisons
            .as_ref()
            .is_some_and(|c| c.arrive(stratum, trace, now));
        if let Some(a) = &self.attribution
            && verdict.judge == JudgeKind::Offline
        {
            a.arrive(stratum, trace, verdict, now);
        }
        self.record_verdict(stratum, verdict, trace, now);
        if let Some(e) = self.export.get()
            && verdict.judge == JudgeKind::Offline
        {
            e.verdict(self.stratifier.name(stratum), trace, verdict);
        }
        candidate
    }

    /// [`Shared::record`] without the arrival: a verdict on a trace already counted.
    fn record_verdict(&self, stratum: StratumId, verdict: &Verdict, trace: &Trace, now: u64) {
        self.record_scores(stratum, verdict, &trace.trace_id, now);
        self.record_audit(stratum, trace, verdict);
        self.remember(trace, stratum, verdict, now);
    }

    fn record_scores(&self, stratum: StratumId, verdict: &Verdict, trace_id: &str, now: u64) {
        let m = &self.metrics;
        let s = self.stratifier.name(stratum);
        let citations = (verdict.judge == JudgeKind::Offline && verdict.citations.total > 0)
            .then_some(verdict.citations);
        m.count_verdict(
            stratum,
            s,
            verdict.judge,
            verdict.refusal,
            verdict.faithfulness().is_none(),
            citations,
        );
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        for metric in Quality::ALL {
            let Some(v) = verdict.score(metric) else {
                continue;
            };
            m.observe_score(metric, stratum, s, verdict.judge, v, trace_id, now);
            windows.record(metric, verdict.judge, stratum, v, now);
        }
    }

    /// The scores and live audit of a verdict that stands beside the trace's offline and sampled
    /// ones (the classifier's, as the combined estimate's prediction): no label join, export or
    /// comparison reads it.
    #[cfg(feature = "classifier")]
    pub(crate) fn record_beside(
        &self,
        stratum: StratumId,
        verdict: &Verdict,
        trace: &Trace,
        now: u64,
    ) {
        self.record_scores(stratum, verdict, &trace.trace_id, now);
        self.record_audit(stratum, trace, verdict);
    }

    /// One trace's term of the combined estimate's population: its `prediction` of the sampled
    /// judge's scores. Every trace gets one, and a sampled trace's pair (`Shared::record_pair`)
    /// must use the same prediction. Nothing without an LLM judge.
    pub(crate) fn record_prediction(&self, stratum: StratumId, prediction: &Verdict, now: u64) {
        if !self.setup.llm_samples() {
            return;
        }
        let s = self.stratifier.name(stratum);
        self.metrics
            .verdicts
            .estimate_predictions
            .with_label_values(&[s, prediction.judge.name()])
            .inc();
        self.add_estimate(stratum, now, |metric| {
            prediction.score(metric).map(EstimateSums::population)
        });
    }

    /// One judged pair's term of the combined estimate: the LLM judge's `verdict` beside the
    /// `prediction` its trace's population term used, sampled with `probability`.
    pub(crate) fn record_pair(
        &self,
        stratum: StratumId,
        verdict: &Verdict,
        prediction: &Verdict,
        probability: f64,
        now: u64,
    ) {
        if !self.setup.llm_samples() || verdict.judge != JudgeKind::Llm {
            return;
        }
        self.add_estimate(stratum, now, |metric| {
            let (y, f) = (verdict.score(metric)?, prediction.score(metric)?);
            Some(EstimateSums::pair(y, f, probability))
        });
    }

    /// Adds `sums(metric)` of each metric that has them to the windows and the exported terms.
    fn add_estimate(
        &self,
        stratum: StratumId,
        now: u64,
        sums: impl Fn(Quality) -> Option<EstimateSums>,
    ) {
        let s = self.stratifier.name(stratum);
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        for metric in Quality::ALL {
            if let Some(sums) = sums(metric) {
                windows.record_estimate(metric, stratum, &sums, now);
                self.metrics.add_estimate_terms(metric, stratum, s, &sums);
            }
        }
    }

    /// [`Shared::record`] for a sampled judge's verdict on a trace sampled with `probability`
    /// (the combined estimate's pair is `Shared::record_pair`'s).
    pub fn record_sampled(
        &self,
        stratum: StratumId,
        verdict: &Verdict,
        offline: &Verdict,
        probability: f64,
        trace: &Trace,
        now: u64,
    ) {
        self.record_verdict(stratum, verdict, trace, now);
        // The offline judge's verdict on this trace went out when it was recorded; a sampled
        // offline judge's is the same verdict again.
        if let Some(e) = self.export.get()
            && verdict.judge == JudgeKind::Llm
        {
            e.verdict(self.stratifier.name(stratum), trace, verdict);
        }
        if let Some(c) = &self.comparisons {
            c.judged(stratum, trace, verdict, probability);
        }
        if let Some(a) = &self.attribution {
            a.judged(stratum, trace, verdict, now);
        }
        if let Some(review) = self.review.get()
            && verdict.judge == JudgeKind::Llm
        {
            let cx = crate::review::Context {
                drifting: self.drifting(stratum),
                suspect: self.suspect(stratum, trace, now),
            };
            review.judged(stratum, trace, offline, verdict, probability, cx, now);
        }
    }
}

#[cfg(test)]
mod audit_tests {
    use super::*;

    fn verdict(judge: JudgeKind, faithfulness: f64) -> Verdict {
        Verdict::with_faithfulness(judge, faithfulness)
    }

    #[test]
    fn length_sums_and_same_family_verdicts() {
        let shared = Shared::new(RecorderSetup::from_toml(
            "[judge]\nsampled = \"llm\"\n[llm]\nchat_model = \"gpt-4o-mini-2024-07-18\"\n",
        ));
        let decoder = crate::trace::Decoder::new(&Default::default());
        let trace = |model: &str, answer: &str| {
            let line = serde_json::json!({"trace_id": "t", "query": "q", "contexts": ["c"],
                "answer": answer, "metadata": {"model": model}});
            decoder.decode(line.to_string().as_bytes()).unwrap()
        };
        let own = trace("openai/gpt-4o", "one two three four");
        let other = trace("llama-2-13b-chat", "one two");
        shared.record_audit(0, &own, &verdict(JudgeKind::Llm, 0.5));
        shared.record_audit(0, &other, &verdict(JudgeKind::Llm, 1.0));
        shared.record_audit(0, &own, &verdict(JudgeKind::Offline, 0.5));
        let m = &shared.metrics;
        let s = shared.stratifier.name(0);
        assert_eq!(m.audit.same_family.with_label_values(&[s]).get(), 1);
        let term = |t: &str| {
            m.audit
                .length_moments
                .with_label_values(&["faithfulness", s, "llm", t])
                .get()
        };
        // (4 words, 0.5) and (2 words, 1.0).
        assert_eq!(
            ["n", "x", "y", "xx", "yy", "xy"].map(term),
            [2.0, 6.0, 1.5, 20.0, 1.25, 4.0]
        );
    }
}
