//! The drift families: the thresholds of the drift rules in force, which rules fire on this
//! replica's windows, and the stage a low score is blamed on.

use prometheus::{Gauge, GaugeVec, IntGaugeVec, Registry};

use super::family::{families, gauge, int_gauge, single};
use crate::dimensions::{JudgeKind, Quality};
use crate::window::RuleKind;

families! {
    /// What the evaluator's drift rules report.
    pub struct DriftMetrics(r: &Registry) {
        /// The floor and drop thresholds in force, by metric, stratum, judge and rule.
        pub threshold: GaugeVec = gauge(
            r,
            "ragwatch_threshold_ratio",
            "Floor or maximum drop in force, on the judge's own scale.",
            &["metric", "stratum", "judge", "rule"],
        ),
        /// Minimum samples before a drift rule may fire, by metric, stratum and judge.
        pub min_samples: IntGaugeVec = int_gauge(
            r,
            "ragwatch_threshold_min_samples",
            "Samples needed in the short window before a drift rule may fire (judged pairs for the combined estimate).",
            &["metric", "stratum", "judge"],
        ),
        /// Shift rule: minimum effect size in baseline standard deviations.
        pub(crate) threshold_shift_sd: GaugeVec = gauge(
            r,
            "ragwatch_threshold_shift_sd",
            "Shift rule: minimum drop of the short window below the rest of the baseline, in baseline standard deviations.",
            &["metric", "stratum", "judge"],
        ),
        /// Shift rule: critical z.
        pub(crate) threshold_shift_z: GaugeVec = gauge(
            r,
            "ragwatch_threshold_shift_z",
            "Shift rule: critical z of the one-sided two-sample test.",
            &["metric", "stratum", "judge"],
        ),
        /// The z of every confidence bound.
        pub(crate) threshold_confidence_z: Gauge = single(
            r,
            Gauge::new(
                "ragwatch_threshold_confidence_z",
                "z of every confidence bound (1.645: one-sided 95 %).",
            ),
        ),
        /// The drop scan's page threshold.
        pub(crate) threshold_page_llr: Gauge = single(
            r,
            Gauge::new(
                "ragwatch_threshold_page_llr",
                "The drop scan's page threshold: the log-likelihood ratio of a drop against no change.",
            ),
        ),
        /// 1 while a drift rule fires, by metric, stratum, judge and rule.
        pub active: IntGaugeVec = int_gauge(
            r,
            "ragwatch_drift_active",
            "1 while a drift rule fires on this replica's windows.",
            &["metric", "stratum", "judge", "rule"],
        ),
        /// Where to look, by stratum and judge: 1 on the stage the short windows blame (retrieval
        /// when context relevance is below its floor; generation when contexts are fine but
        /// faithfulness is low; prompt when both are fine but answer relevancy is low), 0
        /// elsewhere.
        pub diagnosis: IntGaugeVec = int_gauge(
            r,
            "ragwatch_diagnosis",
            "1 on the stage the short windows blame for a low score (retrieval, generation, prompt), by stratum and judge.",
            &["stratum", "judge", "stage"],
        ),
    }
}

impl DriftMetrics {
    /// Starts the combined estimate's drift flags in each stratum at zero.
    pub(super) fn start(&self, strata: &[String]) {
        self.start_drift(strata, JudgeKind::Combined);
    }

    /// Starts the drift flags and diagnosis of `judge` in each stratum at zero.
    pub(super) fn start_judge(&self, strata: &[String], judge: JudgeKind) {
        for s in strata {
            for stage in crate::window::STAGES {
                self.diagnosis
                    .with_label_values(&[s.as_str(), judge.name(), stage]);
            }
        }
        self.start_drift(strata, judge);
    }

    /// Starts every rule's drift flag of `judge` in each stratum at zero.
    fn start_drift(&self, strata: &[String], judge: JudgeKind) {
        for s in strata {
            for metric in Quality::ALL {
                for rule in RuleKind::ALL {
                    self.active.with_label_values(&[
                        metric.name(),
                        s.as_str(),
                        judge.name(),
                        rule.name(),
                    ]);
                }
            }
        }
    }
}
