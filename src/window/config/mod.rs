//! Rolling windows (`[windows]`) and drift rules (`[drift]`: `DriftConfig`).

use crate::section::problems::Problems;
use serde::{Deserialize, Serialize};

mod drift;

pub(crate) use drift::{DriftConfig, DriftRule, ShiftRule};

/// Rolling windows.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowsConfig {
    /// Window lengths in seconds, shortest first. Each is a ring of `buckets` buckets.
    #[serde(default = "default_window_secs")]
    pub window_secs: Vec<u64>,
    /// Buckets per window (resolution: window / buckets).
    #[serde(default = "default_buckets")]
    pub buckets: u32,
    /// The window drift rules watch (must be one of `window_secs`).
    #[serde(default = "default_short_window")]
    pub short_secs: u64,
    /// The baseline window the short one is compared with.
    #[serde(default = "default_baseline_window")]
    pub baseline_secs: u64,
    /// How often window gauges and drift state are recomputed.
    #[serde(default = "default_evaluate_interval_ms")]
    pub evaluate_interval_ms: u64,
    /// z-score of the confidence bound (1.645 is one-sided 95 %).
    #[serde(default = "default_z")]
    pub z: f64,
    /// The drop scan pages when its log-likelihood ratio reaches this (see `window::scan`): 15 is
    /// at most one false page per stratum per healthy year at the shipped budget.
    #[serde(default = "default_page_llr")]
    pub page_llr: f64,
}

crate::section::fields::default_from_serde!(WindowsConfig);

fn default_window_secs() -> Vec<u64> {
    vec![300, 3600, 86400]
}

fn default_buckets() -> u32 {
    60
}

fn default_short_window() -> u64 {
    300
}

fn default_baseline_window() -> u64 {
    86400
}

fn default_evaluate_interval_ms() -> u64 {
    1000
}

fn default_z() -> f64 {
    1.645
}

/// The shipped page threshold of the drop scan (`windows.page_llr`): at most one false page per
/// stratum per healthy year at the shipped budget, by `benches/page_power.rs`.
pub const DEFAULT_PAGE_LLR: f64 = 15.0;

fn default_page_llr() -> f64 {
    DEFAULT_PAGE_LLR
}

impl WindowsConfig {
    /// Checks `[windows]`: the short and baseline windows are among the kept ones.
    pub(crate) fn validate(&self, p: &mut Problems) {
        let w = self;
        if w.window_secs.is_empty() || w.window_secs.contains(&0) {
            p.add(
                "windows.window_secs",
                "needs at least one window, each > 0 s",
            );
        }
        if w.buckets < 2 || w.buckets > 10_000 {
            p.add("windows.buckets", "must be in 2..=10000");
        }
        for (name, secs) in [
            ("windows.short_secs", w.short_secs),
            ("windows.baseline_secs", w.baseline_secs),
        ] {
            if !w.window_secs.contains(&secs) {
                p.add(name, format!("{secs} is not in windows.window_secs"));
            }
        }
        if w.short_secs > w.baseline_secs {
            p.add(
                "windows.short_secs",
                "must not be longer than baseline_secs",
            );
        }
        if w.evaluate_interval_ms == 0 {
            p.add("windows.evaluate_interval_ms", "must be > 0");
        }
        if !(w.z.is_finite() && w.z >= 0.0) {
            p.add("windows.z", "must be finite and >= 0");
        }
        if !(w.page_llr.is_finite() && w.page_llr > 0.0) {
            p.add("windows.page_llr", "must be finite and > 0");
        }
    }
}
