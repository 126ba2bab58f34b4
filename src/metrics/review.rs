//! The review queue's families: what it picked and dropped, and the weighted sums of the reviewer
//! estimate, as counters the rules pool across replicas.

use prometheus::{Counter, CounterVec, IntCounter, Registry};

use super::family::{counter, float_counter, gauge};

/// Why a trace was picked; label values of `reason`.
pub(crate) const REASONS: [&str; 5] = [
    "random",
    "disagreement",
    "near_score",
    "drifting",
    "suspect",
];
/// Why a picked trace was not delivered.
pub(crate) const DROPS: [&str; 3] = ["budget", "pending_full", "pull_buffer_full"];
/// The two phases of the reviewer estimate: the LLM judge's verdicts (its sample of the stratum),
/// and the reviewers' labels on the picked ones (the gap between people and the judge).
pub(crate) const PHASES: [&str; 2] = ["judge", "review"];
/// Terms: n, and with w = 1/(inclusion probability) and y the value, w, wy, ww, wwy, wwyy.
pub(crate) const TERMS: [&str; 6] = ["n", "w", "wy", "ww", "wwy", "wwyy"];

/// Every series, resolved at start.
#[derive(Debug, Clone)]
pub(crate) struct ReviewMetrics {
    /// By stratum, then [`REASONS`].
    picked: Vec<[IntCounter; 5]>,
    /// By stratum, then [`DROPS`].
    dropped: Vec<[IntCounter; 3]>,
    /// By stratum, then [`PHASES`], then [`TERMS`].
    terms: Vec<[[Counter; 6]; 2]>,
}

impl ReviewMetrics {
    /// Registers the families on `r`, every series at zero; exports `min_labels` and `z`.
    pub fn register(r: &Registry, strata: &[String], min_labels: u64, z: f64) -> Self {
        let picked = counter(
            r,
            "ragwatch_review_picked_total",
            "Traces picked for human review, by stratum and reason (random: the plain share; disagreement, near_score, drifting, suspect: informative, picked at review.informative_boost times the rate); a trace with several reasons counts under each.",
            &["stratum", "reason"],
        );
        let dropped = counter(
            r,
            "ragwatch_review_dropped_total",
            "Picked traces not delivered for review, by stratum and reason (budget: past twice review.reviews_per_day in a day; pending_full: review.max_pending picked traces await labels; pull_buffer_full: the oldest item of GET /v1/review's buffer, never pulled, gave way to a new one).",
            &["stratum", "reason"],
        );
        let terms = float_counter(
            r,
            "ragwatch_review_terms_total",
            "Weighted sums of the reviewer estimate, by stratum, phase (judge: each LLM verdict's call y = 1 faithful or 0, w = 1/sample probability; review: each label on a picked trace, y = 1 + label - call, w = 1/(sample x review probability)) and term (n, w, wy, ww, wwy, wwyy).",
            &["stratum", "phase", "term"],
        );
        let settings = gauge(
            r,
            "ragwatch_review_setting",
            "The reviewer estimate's settings, from [review]: min_labels, z.",
            &["setting"],
        );
        settings
            .with_label_values(&["min_labels"])
            .set(min_labels as f64);
        settings.with_label_values(&["z"]).set(z);
        Self {
            picked: strata
                .iter()
                .map(|s| REASONS.map(|reason| picked.with_label_values(&[s.as_str(), reason])))
                .collect(),
            dropped: strata
                .iter()
                .map(|s| DROPS.map(|reason| dropped.with_label_values(&[s.as_str(), reason])))
                .collect(),
            terms: strata.iter().map(|s| per_phase(&terms, s)).collect(),
        }
    }

    /// Counts a pick of `stratum` under each reason (indexes into [`REASONS`]).
    pub fn picked(&self, stratum: usize, reasons: impl Iterator<Item = usize>) {
        if let Some(c) = self.picked.get(stratum) {
            for r in reasons {
                c[r].inc();
            }
        }
    }

    /// Counts a pick not delivered, by index into [`DROPS`].
    pub fn dropped(&self, stratum: usize, reason: usize) {
        if let Some(c) = self.dropped.get(stratum) {
            c[reason].inc();
        }
    }

    /// Adds value `y` of weight `w` to `phase` (index into [`PHASES`]) of `stratum`.
    pub fn add(&self, stratum: usize, phase: usize, w: f64, y: f64) {
        if let Some(t) = self.terms.get(stratum) {
            let values = [1.0, w, w * y, w * w, w * w * y, w * w * y * y];
            for (c, v) in t[phase].iter().zip(values) {
                c.inc_by(v);
            }
        }
    }
}

fn per_phase(terms: &CounterVec, stratum: &str) -> [[Counter; 6]; 2] {
    PHASES.map(|phase| TERMS.map(|term| terms.with_label_values(&[stratum, phase, term])))
}
