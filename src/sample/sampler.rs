//! Sample: decide at ingest whether the costly judge sees a trace.
//!
//! The decision is a pure function of `trace_id` and the stratum's rate (a hash compared with the
//! rate), so a redelivered trace gets the same decision and replicas agree without talking. On top, a
//! per-stratum minimum per window keeps small strata (out-of-scope, known failures) from being starved
//! by head traffic; that part depends on what this replica has seen, by design.

use xxhash_rust::xxh3::xxh3_64;

use crate::dimensions::StratumId;
use crate::sample::config::SampleConfig;

/// Why a trace was or was not sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerDecision {
    /// Not sampled: only the offline judge sees it.
    Skip,
    /// Sampled because its hash fell under the stratum's rate.
    Rate,
    /// Sampled because the stratum had fewer than its minimum samples this window.
    Minimum,
}

impl SamplerDecision {
    /// Whether the costly judge should see the trace.
    pub fn sampled(self) -> bool {
        self != SamplerDecision::Skip
    }
}

/// Per-stratum sampling state.
#[derive(Debug, Clone)]
pub struct Sampler {
    /// By stratum, then tier ([`tier`]): the hash threshold and the rate it stands for.
    thresholds: Vec<[u64; 4]>,
    rates: Vec<[f64; 4]>,
    min_per_window: u32,
    window_secs: u64,
    windows: Vec<(u64, u32)>,
}

/// The tier of a trace: uncertain (the offline judge is unsure), candidate (a release under
/// comparison with the baseline), both, or neither.
fn tier(uncertain: bool, candidate: bool) -> usize {
    usize::from(uncertain) + 2 * usize::from(candidate)
}

impl Sampler {
    /// A sampler for the strata named in `strata` (in [`super::Stratifier::names`] order), with the
    /// per-stratum minimum counted over windows of `min_window_secs`.
    pub fn new(config: &SampleConfig, min_window_secs: u64, strata: &[String]) -> Self {
        Self::with_candidate_boost(config, min_window_secs, strata, 1.0)
    }

    /// [`Sampler::new`], with traces of a candidate release sampled at `candidate_boost` times
    /// their rate: a canary serving a tenth of the traffic gets enough verdicts to be compared.
    pub fn with_candidate_boost(
        config: &SampleConfig,
        min_window_secs: u64,
        strata: &[String],
        candidate_boost: f64,
    ) -> Self {
        let rates: Vec<[f64; 4]> = strata
            .iter()
            .map(|s| {
                let rate = *config.rates.get(s).unwrap_or(&config.default_rate);
                let mut by_tier = [0.0; 4];
                for uncertain in [false, true] {
                    for candidate in [false, true] {
                        let mut r = rate;
                        if uncertain {
                            r *= config.uncertain_boost;
                        }
                        if candidate {
                            r *= candidate_boost;
                        }
                        by_tier[tier(uncertain, candidate)] = r.min(1.0);
                    }
                }
                by_tier
            })
            .collect();
        Self {
            thresholds: rates.iter().map(|r| r.map(rate_threshold)).collect(),
            rates,
            min_per_window: config.min_per_window,
            window_secs: min_window_secs.max(1),
            windows: vec![(u64::MAX, 0); strata.len()],
        }
    }

    /// Decides for one trace at time `now_secs`. Traces the offline judge is `uncertain` about are
    /// sampled at `uncertain_boost` times the rate (tiering); that flag is itself deterministic.
    pub fn decide(
        &mut self,
        stratum: StratumId,
        trace_id: &str,
        now_secs: u64,
        uncertain: bool,
    ) -> SamplerDecision {
        self.decide_with_probability(stratum, trace_id, now_secs, uncertain)
            .0
    }

    /// Decides for one trace and says with which probability it was going to be sampled, given
    /// what this replica had seen before it: 1 while the stratum is short of its minimum, else its
    /// (boosted, when `uncertain`) rate. The combined estimate weighs each verdict by the inverse,
    /// which keeps it unbiased however tiering and the minimum skew the sample.
    pub fn decide_with_probability(
        &mut self,
        stratum: StratumId,
        trace_id: &str,
        now_secs: u64,
        uncertain: bool,
    ) -> (SamplerDecision, f64) {
        self.decide_tiered(stratum, trace_id, now_secs, uncertain, false)
    }

    /// [`Sampler::decide_with_probability`] for a trace that may be a `candidate` release's,
    /// sampled at the candidate boost.
    pub fn decide_tiered(
        &mut self,
        stratum: StratumId,
        trace_id: &str,
        now_secs: u64,
        uncertain: bool,
        candidate: bool,
    ) -> (SamplerDecision, f64) {
        let t = tier(uncertain, candidate);
        let threshold = self.thresholds[stratum][t];
        let rate = self.rates[stratum][t];
        let window = now_secs / self.window_secs;
        let slot = &mut self.windows[stratum];
        if slot.0 != window {
            *slot = (window, 0);
        }
        let decision = if hash_unit(trace_id) < threshold {
            SamplerDecision::Rate
        } else if slot.1 < self.min_per_window {
            SamplerDecision::Minimum
        } else {
            SamplerDecision::Skip
        };
        let probability = if slot.1 < self.min_per_window {
            1.0
        } else {
            rate
        };
        if decision.sampled() {
            slot.1 += 1;
        }
        (decision, probability)
    }
}

/// The hash of a trace id, uniform over u64.
pub(crate) fn hash_unit(trace_id: &str) -> u64 {
    xxh3_64(trace_id.as_bytes())
}

fn rate_threshold(rate: f64) -> u64 {
    if rate >= 1.0 {
        u64::MAX
    } else {
        // Exact for the rates people write (0.05, 0.2); the last ulp does not matter.
        (rate.max(0.0) * u64::MAX as f64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sampler(rate: f64, min: u32) -> Sampler {
        let mut config = SampleConfig {
            default_rate: rate,
            min_per_window: min,
            ..SampleConfig::default()
        };
        config.rates.insert("all".into(), 1.0);
        Sampler::new(&config, 60, &["a".into(), "all".into()])
    }

    #[test]
    fn minimum_per_window_then_rate() {
        let mut s = sampler(0.0, 3);
        let got: Vec<_> = (0..5)
            .map(|i| s.decide(0, &format!("t{i}"), 10, false))
            .collect();
        assert_eq!(got.iter().filter(|d| d.sampled()).count(), 3);
        assert_eq!(got[0], SamplerDecision::Minimum);
        // A new window restores the minimum.
        assert!(s.decide(0, "t9", 70, false).sampled());
        // Rate 1 samples everything.
        assert!(
            (0..100).all(|i| s.decide(1, &format!("x{i}"), 10, false) == SamplerDecision::Rate)
        );
    }

    #[test]
    fn rate_is_close_to_configured() {
        let mut s = sampler(0.2, 0);
        let n = 20_000;
        let hits = (0..n)
            .filter(|i| s.decide(0, &format!("trace-{i}"), 0, false).sampled())
            .count();
        let share = hits as f64 / n as f64;
        assert!((share - 0.2).abs() < 0.015, "{share}");
    }

    proptest! {
        #[test]
        fn decision_depends_only_on_id_and_rate(id in ".{1,40}", rate in 0.0f64..=1.0) {
            let mut a = sampler(rate, 0);
            let mut b = sampler(rate, 0);
            // b has seen other traffic first; with no minimum that must not matter.
            for i in 0..10 { b.decide(0, &format!("noise{i}"), 5, false); }
            prop_assert_eq!(a.decide(0, &id, 0, false), b.decide(0, &id, 1000, false));
        }

        #[test]
        fn higher_rate_samples_a_superset(id in ".{1,40}", lo in 0.0f64..=1.0, extra in 0.0f64..=1.0) {
            let hi = (lo + extra).min(1.0);
            let mut a = sampler(lo, 0);
            let mut b = sampler(hi, 0);
            if a.decide(0, &id, 0, false).sampled() { prop_assert!(b.decide(0, &id, 0, false).sampled()); }
            // An uncertain trace is sampled whenever a certain one with the same id is.
            if a.decide(0, &id, 0, false).sampled() { prop_assert!(a.decide(0, &id, 0, true).sampled()); }
        }

        #[test]
        fn a_candidate_is_sampled_at_its_boost_and_whenever_a_baseline_trace_would_be(
            id in ".{1,40}", rate in 0.0f64..=1.0, boost in 1.0f64..=10.0, uncertain: bool
        ) {
            let config = SampleConfig { default_rate: rate, min_per_window: 0, ..SampleConfig::default() };
            let mut s = Sampler::with_candidate_boost(&config, 60, &["a".into()], boost);
            let (plain, _) = s.decide_tiered(0, &id, 0, uncertain, false);
            let (candidate, p) = s.decide_tiered(0, &id, 0, uncertain, true);
            if plain.sampled() { prop_assert!(candidate.sampled()); }
            let tiered = if uncertain { rate * config.uncertain_boost } else { rate };
            prop_assert!((p - (tiered * boost).min(1.0)).abs() < 1e-12);
            // The reference: sampled exactly when the hash falls under the boosted rate.
            let reference = (hash_unit(&id) as f64) < (tiered * boost).min(1.0) * u64::MAX as f64;
            if (tiered * boost) < 1.0 && (hash_unit(&id) as f64 - (tiered * boost) * u64::MAX as f64).abs() > 4096.0 {
                prop_assert_eq!(candidate.sampled(), reference);
            }
        }
    }
}
