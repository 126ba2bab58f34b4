//! The verdict families: verdicts produced, each metric's scores and their squares, answers
//! without claims and refusals, citations, and the sums behind the combined estimate.

use prometheus::{CounterVec, HistogramVec, IntCounterVec, Registry};

use super::family::{counter, families, float_counter, histogram};
use crate::dimensions::{JudgeKind, PerQuality, Quality};

/// Buckets for scores in [0, 1]: one per tenth, so `le="0.5"` counts the clearly unfaithful.
pub(super) const RATIO_BUCKETS: [f64; 10] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

families! {
    /// What the judges' verdicts say.
    pub struct VerdictMetrics(r: &Registry) {
        /// Verdicts produced, by stratum and judge.
        pub(crate) traces_judged: IntCounterVec = counter(
            r,
            "ragwatch_traces_judged_total",
            "Verdicts produced, by stratum and judge.",
            &["stratum", "judge"],
        ),
        /// Each metric's scores, by stratum and judge (`ragwatch_<metric>_ratio`).
        pub scores: PerQuality<HistogramVec> = PerQuality::from_fn(|m| {
            histogram(
                r,
                m.spec().histogram,
                m.spec().help,
                &["stratum", "judge"],
                RATIO_BUCKETS.to_vec(),
            )
        }),
        /// Answers with no claims to check (no faithfulness score), by stratum and judge.
        pub no_claims: IntCounterVec = counter(
            r,
            "ragwatch_no_claims_total",
            "Answers with no claims to check, by stratum and judge.",
            &["stratum", "judge"],
        ),
        /// Answers that decline to answer, by stratum and judge.
        pub refusals: IntCounterVec = counter(
            r,
            "ragwatch_refusals_total",
            "Answers that decline to answer, by stratum and judge.",
            &["stratum", "judge"],
        ),
        /// Citations in answers, by stratum and validity.
        pub citations: IntCounterVec = counter(
            r,
            "ragwatch_citations_total",
            "Citations found in answers, by stratum and whether they name a retrieved context.",
            &["stratum", "valid"],
        ),
        /// Sum of squared scores, by metric, stratum and judge: with a histogram's sum and count,
        /// the pooled variance the shift rule needs.
        pub(crate) score_squares: CounterVec = float_counter(
            r,
            "ragwatch_score_squares_total",
            "Sum of squared scores (the histograms' observations), by metric, stratum and judge.",
            &["metric", "stratum", "judge"],
        ),
        /// The sums behind the combined estimate, by metric, stratum and term.
        pub(crate) estimate_terms: CounterVec = float_counter(
            r,
            "ragwatch_estimate_terms_total",
            "Sums behind the combined (prediction-powered) estimate, by metric, stratum and term; pool by sum across replicas.",
            &["metric", "stratum", "term"],
        ),
        /// Traces whose combined-estimate prediction came from each judge, by stratum and judge.
        pub(crate) estimate_predictions: IntCounterVec = counter(
            r,
            "ragwatch_estimate_predictions_total",
            "Traces whose prediction in the combined estimate came from this judge (the classifier, or the offline judge where the classifier did not keep pace), by stratum and judge.",
            &["stratum", "judge"],
        ),
    }
}

impl VerdictMetrics {
    /// Starts each stratum's citation counts at zero.
    pub(super) fn start(&self, strata: &[String]) {
        for s in strata {
            for valid in ["true", "false"] {
                self.citations.with_label_values(&[s.as_str(), valid]);
            }
        }
    }

    /// Starts the verdicts, scores and sums of squares of `judge` in each stratum at zero.
    pub(super) fn start_judge(&self, strata: &[String], judge: JudgeKind) {
        let j = judge.name();
        for s in strata {
            let s = s.as_str();
            self.traces_judged.with_label_values(&[s, j]);
            for (_, h) in self.scores.iter() {
                h.with_label_values(&[s, j]);
            }
            self.no_claims.with_label_values(&[s, j]);
            self.refusals.with_label_values(&[s, j]);
            for metric in Quality::ALL {
                self.score_squares.with_label_values(&[metric.name(), s, j]);
            }
        }
    }
}
