//! The sampling families: the traces chosen for the sampled judge, those it did not score, and
//! the queue between the two.

use prometheus::{IntCounterVec, IntGauge, Registry};

use super::family::{counter, families, single};
use crate::dimensions::SkipReason;

families! {
    /// What the sampler and the sampled judge's queue report.
    pub(crate) struct SampleMetrics(r: &Registry) {
        /// Traces chosen for the sampled judge, by stratum.
        pub(crate) traces_sampled: IntCounterVec = counter(
            r,
            "ragwatch_traces_sampled_total",
            "Traces chosen for the sampled judge, by stratum.",
            &["stratum"],
        ),
        /// Sampled traces the sampled judge did not score, by stratum and reason.
        pub(crate) traces_skipped: IntCounterVec = counter(
            r,
            "ragwatch_traces_skipped_total",
            "Sampled traces the sampled judge did not score, by stratum and reason.",
            &["stratum", "reason"],
        ),
        /// Sampled traces waiting for a judge.
        pub(crate) judge_queue_depth: IntGauge = single(
            r,
            IntGauge::new(
                "ragwatch_judge_queue_depth",
                "Sampled traces waiting for the sampled judge.",
            ),
        ),
    }
}

impl SampleMetrics {
    /// Starts each stratum's sample and skip counts at zero.
    pub(super) fn start(&self, strata: &[String]) {
        for s in strata {
            let s = s.as_str();
            self.traces_sampled.with_label_values(&[s]);
            for reason in SkipReason::ALL {
                self.traces_skipped.with_label_values(&[s, reason.as_str()]);
            }
        }
    }
}
