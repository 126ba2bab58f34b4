//! The window families: this replica's rolling-window means, their sample counts and their
//! confidence bounds.

use prometheus::{GaugeVec, IntGaugeVec, Registry};

use super::family::{families, gauge, int_gauge};

families! {
    /// What the evaluator reads off this replica's windows.
    pub(crate) struct WindowMetrics(r: &Registry) {
        /// Window mean, by metric, stratum, judge and window.
        pub(crate) mean: GaugeVec = gauge(
            r,
            "ragwatch_window_mean_ratio",
            "This replica's rolling-window mean score.",
            &["metric", "stratum", "judge", "window"],
        ),
        /// Scores in the window.
        pub(crate) samples: IntGaugeVec = int_gauge(
            r,
            "ragwatch_window_samples",
            "Scores in this replica's rolling window.",
            &["metric", "stratum", "judge", "window"],
        ),
        /// Lower confidence bound of the window mean.
        pub(crate) ci_lower: GaugeVec = gauge(
            r,
            "ragwatch_window_ci_lower_ratio",
            "Lower confidence bound of this replica's window mean.",
            &["metric", "stratum", "judge", "window"],
        ),
        /// Upper confidence bound of the window mean.
        pub(crate) ci_upper: GaugeVec = gauge(
            r,
            "ragwatch_window_ci_upper_ratio",
            "Upper confidence bound of this replica's window mean.",
            &["metric", "stratum", "judge", "window"],
        ),
    }
}
