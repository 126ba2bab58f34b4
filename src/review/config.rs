//! `[review]`: the review queue (which LLM-judged traces a person should label, under a budget) and
//! the estimate of faithfulness as reviewers judge it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::section::problems::Problems;

/// The review queue. Off by default.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewConfig {
    /// Picks traces for review.
    #[serde(default)]
    pub enabled: bool,
    /// Reviews a stratum gets a day, in expectation; at most twice this are picked in a day.
    #[serde(default = "default_reviews_per_day")]
    pub reviews_per_day: f64,
    /// An informative trace (the judges disagree, a score near `near_score`, a drifting stratum, a
    /// suspect document) is picked at this multiple of a plain one's probability.
    #[serde(default = "default_informative_boost")]
    pub informative_boost: f64,
    /// The judges disagree when their faithfulness scores differ by at least this.
    #[serde(default = "default_disagree_gap")]
    pub disagree_gap: f64,
    /// The LLM judge's faithfulness near which a verdict is borderline.
    #[serde(default = "default_near_score")]
    pub near_score: f64,
    /// How near: within this of `near_score`.
    #[serde(default = "default_near_band")]
    pub near_band: f64,
    /// Where picked traces are written as JSON lines (rotated); none: no file.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The file rotates at this size.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Rotated files kept.
    #[serde(default = "default_keep_files")]
    pub keep_files: u32,
    /// Picked traces kept for `GET /v1/review` on the write listener (0: no pull endpoint); the
    /// oldest unpulled one gives way to a new one.
    #[serde(default)]
    pub pull_buffer: usize,
    /// Picked traces remembered for their labels to join, at most.
    #[serde(default = "default_max_pending")]
    pub max_pending: usize,
    /// A label joins a picked trace up to this long after it was picked.
    #[serde(default = "default_ttl_secs")]
    pub ttl_secs: u64,
    /// Labels on picked traces before the judge-bias rule judges a stratum.
    #[serde(default = "default_min_labels")]
    pub min_labels: u64,
    /// z of the reviewer estimate's interval and of the judge-bias rule (1.645: two-sided 90 %).
    #[serde(default = "default_z")]
    pub z: f64,
}

crate::section::fields::default_from_serde!(ReviewConfig);

fn default_reviews_per_day() -> f64 {
    200.0
}
fn default_informative_boost() -> f64 {
    4.0
}
fn default_disagree_gap() -> f64 {
    0.4
}
fn default_near_score() -> f64 {
    0.5
}
fn default_near_band() -> f64 {
    0.15
}
fn default_max_bytes() -> u64 {
    64 * 1024 * 1024
}
fn default_keep_files() -> u32 {
    3
}
fn default_max_pending() -> usize {
    50_000
}
fn default_ttl_secs() -> u64 {
    14 * 86_400
}
fn default_min_labels() -> u64 {
    30
}
fn default_z() -> f64 {
    1.645
}

impl ReviewConfig {
    /// Checks `[review]`.
    pub(crate) fn validate(&self, p: &mut Problems) {
        if !(self.reviews_per_day > 0.0 && self.reviews_per_day.is_finite()) {
            p.add("review.reviews_per_day", "must be > 0");
        }
        if !(self.informative_boost >= 1.0 && self.informative_boost.is_finite()) {
            p.add("review.informative_boost", "must be >= 1");
        }
        p.ratio("review.disagree_gap", self.disagree_gap);
        p.ratio("review.near_score", self.near_score);
        p.ratio("review.near_band", self.near_band);
        if self.max_pending == 0 {
            p.add("review.max_pending", "must be > 0");
        }
        if !(self.z > 0.0 && self.z.is_finite()) {
            p.add("review.z", "must be > 0");
        }
    }
}
