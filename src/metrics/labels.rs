//! The human-label families: labels received, their agreement with the judges, and the judges'
//! scores of labelled traces from which the label AUROC is computed.

use prometheus::{Gauge, GaugeVec, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Registry};

use super::family::{counter, families, gauge, histogram, int_gauge, single};
use crate::dimensions::JudgeKind;

families! {
    /// Human labels, and the judge scores of labelled traces, by judge, stratum and the human
    /// verdict, in the fixed buckets of [`crate::eval::LABEL_SCORE_BOUNDS`]; and the AUROC computed
    /// from them. The histogram's cumulative counts and the per-bucket counters together let a
    /// recording rule compute the AUROC pooled over replicas (the rule needs each bucket's count
    /// and the cumulative count at the same `le`, and PromQL cannot take differences between
    /// neighbouring buckets).
    pub struct LabelledMetrics(r: &Registry) {
        /// Human labels received, by outcome (joined, unknown_trace, expired, invalid).
        pub(crate) received: IntCounterVec = counter(
            r,
            "ragwatch_labels_total",
            "Human labels received (POST /v1/labels or the label topic), by outcome.",
            &["outcome"],
        ),
        /// Joined labels compared with a judge's verdict, by judge, stratum and agreement.
        pub(crate) agreement: IntCounterVec = counter(
            r,
            "ragwatch_label_agreement_total",
            "Human labels compared with a judge's faithfulness verdict, by judge, stratum and whether they agree.",
            &["judge", "stratum", "agree"],
        ),
        /// `ragwatch_labelled_score_ratio{judge, stratum, human}`: cumulative, a histogram.
        pub score: HistogramVec = histogram(
            r,
            "ragwatch_labelled_score_ratio",
            "Faithfulness scores of human-labelled traces, by judge, stratum and human verdict (faithful, unfaithful).",
            &["judge", "stratum", "human"],
            crate::eval::LABEL_SCORE_BOUNDS.to_vec(),
        ),
        /// `ragwatch_labelled_scores_total{judge, stratum, human, bucket}`: the same counts per
        /// bucket, `bucket` the upper bound (`le` is for histograms only).
        pub bucket: IntCounterVec = counter(
            r,
            "ragwatch_labelled_scores_total",
            "Faithfulness scores of human-labelled traces per score bucket (not cumulative; bucket = its upper bound, the histogram's le), by judge, stratum and human verdict.",
            &["judge", "stratum", "human", "bucket"],
        ),
        /// This replica's AUROC over `labels.auroc_window_secs`, by judge and stratum, while each
        /// class has `labels.auroc_min_per_class` labels.
        pub auroc: GaugeVec = gauge(
            r,
            "ragwatch_label_auroc_ratio",
            "This replica's AUROC of the judge's faithfulness score against human labels over labels.auroc_window_secs, from bucketed scores; present with enough labels of each class.",
            &["judge", "stratum"],
        ),
        /// 1 while a judge's AUROC is below `labels.auroc_floor` (with enough labels), by judge
        /// and stratum.
        pub(crate) below_floor: IntGaugeVec = int_gauge(
            r,
            "ragwatch_label_auroc_below_floor",
            "1 while the label AUROC is below labels.auroc_floor with enough labels (this replica's view).",
            &["judge", "stratum"],
        ),
        /// `labels.auroc_floor`, when set: the alert's threshold.
        pub floor: Gauge = single(
            r,
            Gauge::new(
                "ragwatch_label_auroc_floor_ratio",
                "labels.auroc_floor: the label AUROC below which a judge disagrees with people (0: off).",
            ),
        ),
        /// `labels.auroc_min_per_class`: labels of each class the alert and the AUROC wait for.
        pub(crate) min_per_class: IntGauge = single(
            r,
            IntGauge::new(
                "ragwatch_label_auroc_min_labels",
                "labels.auroc_min_per_class: labels of each class needed before the label AUROC counts.",
            ),
        ),
    }
}

impl LabelledMetrics {
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
