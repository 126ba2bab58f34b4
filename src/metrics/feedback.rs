//! User feedback: the families that count feedback events per stratum and kind, and the judges'
//! scores of traces with negative and positive feedback in the label AUROC's fixed score buckets,
//! from which a recording rule pools each judge's AUROC at predicting negative feedback.

use prometheus::{Gauge, GaugeVec, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::family::{counter, gauge, histogram, int_gauge, single};
use crate::eval::{LABEL_SCORE_BOUNDS, label_score_bucket};

/// Label values of `feedback`, by `Polarity` (negative first).
pub(crate) const POLARITIES: [&str; 2] = ["negative", "positive"];

/// The feedback families, registered when `labels.feedback.enabled`.
#[derive(Debug, Clone)]
pub(crate) struct FeedbackMetrics {
    /// `ragwatch_feedback_total{stratum, kind}`.
    pub events: IntCounterVec,
    /// `ragwatch_feedback_polarity_total{stratum, polarity}`.
    pub polarity: IntCounterVec,
    /// `ragwatch_feedback_received_total{outcome}`.
    pub received: IntCounterVec,
    /// `ragwatch_feedback_score_ratio{judge, stratum, feedback}`: cumulative, a histogram.
    pub score: HistogramVec,
    /// `ragwatch_feedback_scores_total{judge, stratum, feedback, bucket}`: per bucket.
    pub bucket: IntCounterVec,
    /// This replica's feedback AUROC over `labels.auroc_window_secs`, by judge and stratum.
    pub auroc: GaugeVec,
    /// 1 while a judge's feedback AUROC is below `labels.feedback.auroc_floor`.
    pub below_floor: IntGaugeVec,
    /// `labels.feedback.auroc_floor`.
    pub floor: Gauge,
    /// `labels.feedback.auroc_min_per_class`.
    pub min_per_class: IntGauge,
}

impl FeedbackMetrics {
    /// Registers the families on `r`.
    pub fn register(r: &Registry) -> Self {
        Self {
            events: counter(
                r,
                "ragwatch_feedback_total",
                "User feedback events joined to a trace, by stratum and kind (declared in labels.feedback.kinds, rating, other).",
                &["stratum", "kind"],
            ),
            polarity: counter(
                r,
                "ragwatch_feedback_polarity_total",
                "User feedback events joined to a trace, by stratum and polarity (negative, positive; other kinds have none and are not counted here).",
                &["stratum", "polarity"],
            ),
            received: counter(
                r,
                "ragwatch_feedback_received_total",
                "User feedback events received, by outcome (joined, unknown_trace, expired, invalid).",
                &["outcome"],
            ),
            score: histogram(
                r,
                "ragwatch_feedback_score_ratio",
                "Faithfulness scores of traces with user feedback, by judge, stratum and feedback polarity (negative, positive).",
                &["judge", "stratum", "feedback"],
                LABEL_SCORE_BOUNDS.to_vec(),
            ),
            bucket: counter(
                r,
                "ragwatch_feedback_scores_total",
                "Faithfulness scores of traces with user feedback per score bucket (not cumulative; bucket = its upper bound, the histogram's le), by judge, stratum and feedback polarity.",
                &["judge", "stratum", "feedback", "bucket"],
            ),
            auroc: gauge(
                r,
                "ragwatch_feedback_auroc_ratio",
                "This replica's AUROC of the judge's faithfulness score at telling positive from negative user feedback (a low score predicting negative feedback) over labels.auroc_window_secs; present with enough feedback of each polarity.",
                &["judge", "stratum"],
            ),
            below_floor: int_gauge(
                r,
                "ragwatch_feedback_auroc_below_floor",
                "1 while the feedback AUROC is below labels.feedback.auroc_floor with enough feedback (this replica's view).",
                &["judge", "stratum"],
            ),
            floor: single(
                r,
                Gauge::new(
                    "ragwatch_feedback_auroc_floor_ratio",
                    "labels.feedback.auroc_floor: the feedback AUROC below which a judge misses what users say (0: off).",
                ),
            ),
            min_per_class: single(
                r,
                IntGauge::new(
                    "ragwatch_feedback_auroc_min_events",
                    "labels.feedback.auroc_min_per_class: feedback events of each polarity needed before the feedback AUROC counts.",
                ),
            ),
        }
    }

    /// Creates every series of `outcomes`, `judges`, `strata` and `kinds` at zero.
    pub fn precreate(&self, outcomes: &[&str], judges: &[&str], strata: &[String], kinds: &[&str]) {
        for outcome in outcomes {
            self.received.with_label_values(&[outcome]);
        }
        for stratum in strata {
            for kind in kinds {
                self.events.with_label_values(&[stratum.as_str(), kind]);
            }
            for polarity in POLARITIES {
                self.polarity
                    .with_label_values(&[stratum.as_str(), polarity]);
            }
        }
        for judge in judges {
            for stratum in strata {
                for feedback in POLARITIES {
                    self.score
                        .with_label_values(&[judge, stratum.as_str(), feedback]);
                    for le in LABEL_SCORE_BOUNDS {
                        self.bucket.with_label_values(&[
                            judge,
                            stratum.as_str(),
                            feedback,
                            &le.to_string(),
                        ]);
                    }
                }
            }
        }
    }

    /// Counts one score of a trace with feedback of `polarity` (index into [`POLARITIES`]).
    pub fn observe(&self, judge: &str, stratum: &str, polarity: usize, score: f64) {
        let feedback = POLARITIES[polarity.min(1)];
        self.score
            .with_label_values(&[judge, stratum, feedback])
            .observe(score);
        let le = LABEL_SCORE_BOUNDS[label_score_bucket(score)];
        self.bucket
            .with_label_values(&[judge, stratum, feedback, &le.to_string()])
            .inc();
    }
}
