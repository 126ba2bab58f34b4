//! The identity families: which build runs, which judge scores, which strata are declared. Each
//! series is 1; its labels are the point.

use prometheus::{IntGaugeVec, Registry};

use super::family::{families, int_gauge};

families! {
    /// What this process is and what it measures by.
    pub struct IdentityMetrics(r: &Registry) {
        /// Build identity (the version); value 1.
        pub(crate) build_info: IntGaugeVec = int_gauge(
            r,
            "ragwatch_build_info",
            "Build identity: the version of ragwatch; value 1.",
            &["version"],
        ),
        /// Judge identity (the model string that names everything that changes a verdict); value
        /// 1.
        pub judge_info: IntGaugeVec = int_gauge(
            r,
            "ragwatch_judge_info",
            "Judge identity in force (offline model version; LLM chat and embedding models, prompt version, faithfulness form, context verdicts, structured-output mode); value 1. A judge change is a metric reset.",
            &["model"],
        ),
        /// 1 per declared stratum, with its scope (in_scope, out_of_scope).
        pub(crate) stratum_info: IntGaugeVec = int_gauge(
            r,
            "ragwatch_stratum_info",
            "1 per stratum, with its scope: out_of_scope strata should be declined.",
            &["stratum", "scope"],
        ),
    }
}

impl IdentityMetrics {
    /// Publishes this build's version and the judge identity `judge_model`.
    pub(super) fn start(&self, judge_model: &str) {
        self.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        self.judge_info.with_label_values(&[judge_model]).set(1);
    }
}
