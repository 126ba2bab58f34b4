//! Drift: the rules that turn window statistics into "this stratum's answers stopped being grounded".
//!
//! Three rules, each on the scale of the judge it watches (see `window::config` for the defaults):
//! - `floor`: the short window's upper confidence bound is below an absolute floor;
//! - `max_drop` (two-sample): the short window's mean is more than `max_drop` below the mean of the
//!   rest of the baseline window, by more than the confidence half-width of the *difference* (the
//!   noise of both windows: a young or thin baseline is as uncertain as the window it judges, and a
//!   rule that read the baseline as exact flipped healthy strata under short windows);
//! - `shift` (scale-free): the short window's mean is below the mean of the rest of the baseline
//!   window by a one-sided two-sample z test (`z >= shift.z`) and by at least `shift.min_sd`
//!   baseline standard deviations. Comparing with the *rest* of the baseline keeps the two samples
//!   disjoint, so a drop does not dilute its own reference.
//!
//! Every rule stays quiet below `min_samples`. The Prometheus rules compute the same statistics from
//! the pooled counters, so with one replica the page and `ragwatch_drift_active` agree.

use super::WindowStats;
use super::estimate::Estimate;
use super::ring::Moments;
use crate::window::config::{DriftRule, ShiftRule};

/// A drift rule; a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RuleKind {
    /// The short window is confidently below the floor.
    Floor,
    /// The short window is confidently more than `max_drop` below the baseline window.
    Drop,
    /// The short window's mean shifted down from the rest of the baseline (scale-free).
    Shift,
}

impl RuleKind {
    /// Every rule.
    pub const ALL: [RuleKind; 3] = [RuleKind::Floor, RuleKind::Drop, RuleKind::Shift];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            RuleKind::Floor => "floor",
            RuleKind::Drop => "max_drop",
            RuleKind::Shift => "shift",
        }
    }
}

/// The evaluated drift state of one series.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct DriftState {
    /// The floor rule fires.
    pub(crate) below_floor: bool,
    /// The drop rule fires.
    pub dropped: bool,
    /// The shift rule fires.
    pub(crate) shifted: bool,
    /// The drop threshold as an absolute score: the short window's mean fires the drop rule below
    /// it (the rest of the baseline's mean, minus `max_drop`, minus the half-width of the
    /// difference); absent without enough baseline.
    pub(crate) drop_threshold: Option<f64>,
    /// The shift test's z (positive: the short window is lower), when both windows have spread.
    pub(crate) shift_z: Option<f64>,
    /// The shift in baseline standard deviations, when the baseline has spread.
    pub(crate) shift_sd: Option<f64>,
}

/// The two-sample statistics of a short window against the rest of its baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shift {
    /// Scores in the short window.
    pub(crate) short_count: u64,
    /// Scores in the baseline outside the short window.
    pub(crate) rest_count: u64,
    /// (rest mean - short mean) / standard error of the difference.
    pub z: f64,
    /// (rest mean - short mean) / rest standard deviation.
    pub(crate) effect_sd: f64,
}

impl Shift {
    /// Compares `short` with `rest`, the baseline without `short`; `None` without spread on
    /// either side.
    pub fn between(short: &Moments, rest: &Moments) -> Option<Shift> {
        let (ms, vs) = (short.mean()?, short.variance()?);
        let (mr, vr) = (rest.mean()?, rest.variance()?);
        let se = (vs / short.count as f64 + vr / rest.count as f64).sqrt();
        if se <= 0.0 || vr <= 0.0 {
            return None;
        }
        Some(Shift {
            short_count: short.count,
            rest_count: rest.count,
            z: (mr - ms) / se,
            effect_sd: (mr - ms) / vr.sqrt(),
        })
    }

    /// Whether `rule` fires on this shift with at least `min_samples` on both sides, and at least
    /// as much history in the reference as in the short window (a reference shorter than the
    /// window it judges is mostly noise: a young baseline stays quiet).
    pub fn fires(&self, rule: &ShiftRule, min_samples: u64) -> bool {
        self.short_count >= min_samples
            && self.rest_count >= min_samples.max(self.short_count)
            && self.z >= rule.z
            && self.effect_sd >= rule.min_sd
    }
}

impl DriftState {
    /// Evaluates `rule` on a judge's own short and baseline windows (the baseline contains the short
    /// window, as the rings do); `z` is the confidence bounds' z.
    pub fn evaluate(
        rule: &DriftRule,
        short: &WindowStats,
        baseline: &WindowStats,
        z: f64,
    ) -> DriftState {
        let enough = short.count >= rule.min_samples;
        let below_floor =
            enough && matches!((rule.floor, short.ci_upper), (Some(f), Some(u)) if u < f);
        let rest = baseline.moments.minus(&short.moments);
        let side = |m: &Moments| Some((m.mean()?, z * (m.variance()? / m.count as f64).sqrt()));
        let drop_threshold = match (rule.max_drop, side(&short.moments), side(&rest)) {
            (Some(d), Some((_, hs)), Some((mr, hr)))
                if rest.count >= rule.min_samples.max(short.count) =>
            {
                Some(drop_level(mr, hr, hs, d))
            }
            _ => None,
        };
        let dropped = enough && matches!((short.mean, drop_threshold), (Some(m), Some(t)) if m < t);
        let shift = Shift::between(&short.moments, &rest);
        let shifted =
            matches!((rule.shift, shift), (Some(r), Some(s)) if s.fires(&r, rule.min_samples));
        DriftState {
            below_floor,
            dropped,
            shifted,
            drop_threshold,
            shift_z: shift.map(|s| s.z),
            shift_sd: shift.map(|s| s.effect_sd),
        }
    }

    /// Evaluates `rule` on combined estimates: `min_samples` counts judged pairs; `rest` is the
    /// baseline window without the short one.
    pub(crate) fn evaluate_estimate(
        rule: &DriftRule,
        short: Option<&Estimate>,
        rest: Option<&Estimate>,
    ) -> DriftState {
        let Some(short) = short.filter(|s| s.pairs >= rule.min_samples) else {
            return DriftState::default();
        };
        let below_floor = rule.floor.is_some_and(|f| short.upper < f);
        // A baseline with fewer verdicts than the window it judges is mostly noise.
        let drop_threshold = rule.max_drop.and_then(|d| {
            rest.filter(|b| b.pairs >= rule.min_samples.max(short.pairs))
                .map(|b| drop_level(b.mean, b.half_width, short.half_width, d))
        });
        DriftState {
            below_floor,
            dropped: drop_threshold.is_some_and(|t| short.mean < t),
            drop_threshold,
            ..DriftState::default()
        }
    }

    /// Whether `kind` fires.
    pub fn active(&self, kind: RuleKind) -> bool {
        match kind {
            RuleKind::Floor => self.below_floor,
            RuleKind::Drop => self.dropped,
            RuleKind::Shift => self.shifted,
        }
    }

    /// Whether any rule fires.
    pub fn any(&self) -> bool {
        self.below_floor || self.dropped || self.shifted
    }
}

/// The level the short window's mean must fall below for the drop rule: the reference mean, minus
/// `max_drop`, minus the half-width of the difference of two independent means (each half-width is
/// z standard errors, so theirs combine as `hypot`). The Prometheus rule computes the same.
fn drop_level(reference_mean: f64, reference_half: f64, short_half: f64, max_drop: f64) -> f64 {
    reference_mean - max_drop - reference_half.hypot(short_half)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::Ring;

    const RULE: DriftRule = DriftRule {
        floor: Some(0.7),
        max_drop: Some(0.1),
        shift: None,
        min_samples: 30,
    };

    fn stats(values: &[f64]) -> WindowStats {
        let mut r = Ring::new(60_000, 6);
        for v in values {
            r.record(*v, 0);
        }
        r.stats(0, 1.645)
    }

    fn spread(mean: f64, n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| mean + if i % 2 == 0 { 0.1 } else { -0.1 })
            .collect()
    }

    /// Evaluates `rule` with `new` as the short window and `old` followed by `new` as the baseline,
    /// as the rings hold them.
    fn window(rule: &DriftRule, old: &[f64], new: &[f64]) -> DriftState {
        let all: Vec<f64> = old.iter().chain(new).copied().collect();
        DriftState::evaluate(rule, &stats(new), &stats(&all), 1.645)
    }

    #[test]
    fn floor_needs_samples_and_confidence() {
        let old = [0.9; 100];
        assert!(!window(&RULE, &old, &[0.2; 10]).below_floor, "too few");
        assert!(window(&RULE, &old, &[0.2; 40]).below_floor);
        // A mean just under the floor with a wide spread is not confidently below.
        let noisy: Vec<f64> = (0..30)
            .map(|i| if i % 2 == 0 { 0.3 } else { 1.0 })
            .collect();
        assert!(!window(&RULE, &old, &noisy).below_floor);
    }

    #[test]
    fn drop_compares_against_the_rest_of_the_baseline_with_both_noises() {
        let old = spread(0.95, 200);
        let s = window(&RULE, &old, &spread(0.75, 50));
        assert!(s.dropped && !s.below_floor);
        // 0.95 - 0.1 - 1.645 * sqrt(s2 / 200 + s2 / 50), s2 the sample variance of +-0.1.
        let expected = 0.85 - 1.645 * (0.01f64 / 199.0 + 0.01 / 49.0).sqrt();
        assert!((s.drop_threshold.unwrap() - expected).abs() < 1e-9, "{s:?}");
        assert!(!window(&RULE, &old, &spread(0.9, 50)).dropped);
        // No baseline beyond the short window: no drop rule.
        assert!(!window(&RULE, &[], &spread(0.1, 50)).dropped);
        // A thin, noisy baseline (mean 0.75, sd 0.25, 60 scores) and a tight short window at 0.6:
        // the short window's upper bound (0.611) is below 0.75 - 0.1, which a rule reading the
        // baseline as exact calls a drop; the difference is within the baseline's own noise.
        let thin: Vec<f64> = (0..60)
            .map(|i| if i % 2 == 0 { 0.5 } else { 1.0 })
            .collect();
        let short = spread(0.6, 60)
            .iter()
            .map(|x| 0.6 + (x - 0.6) / 2.0)
            .collect::<Vec<_>>();
        let s = window(&RULE, &thin, &short);
        assert!(stats(&short).ci_upper.unwrap() < 0.65, "{s:?}");
        assert!(!s.dropped, "{s:?}");
        // The same short window against a long baseline of the same spread does fire.
        let long: Vec<f64> = (0..6000)
            .map(|i| if i % 2 == 0 { 0.5 } else { 1.0 })
            .collect();
        assert!(window(&RULE, &long, &short).dropped);
    }

    #[test]
    fn shift_is_scale_free_and_needs_both_size_and_significance() {
        let rule = DriftRule {
            floor: None,
            max_drop: None,
            shift: Some(ShiftRule {
                min_sd: 0.5,
                z: 3.0,
            }),
            min_samples: 30,
        };
        // The baseline window contains the short one, as the rings do.
        let window = |old: &[f64], new: &[f64]| window(&rule, old, new);
        // Down by one sd (0.1) on a compressed scale around 0.6: fires.
        let s = window(&spread(0.6, 400), &spread(0.5, 100));
        assert!(s.shifted, "{s:?}");
        assert!((s.shift_sd.unwrap() - 1.0).abs() < 0.02, "{s:?}");
        // The same shift on another scale (x3 spread around 0.5) is the same number of sds.
        let wide = |v: Vec<f64>| v.iter().map(|x| 0.5 + 3.0 * (x - 0.5)).collect::<Vec<_>>();
        let t = window(&wide(spread(0.6, 400)), &wide(spread(0.5, 100)));
        assert!(t.shifted && (t.shift_sd.unwrap() - s.shift_sd.unwrap()).abs() < 1e-6);
        // Up is not a drift; too few short samples is not either; a tiny shift is not either.
        assert!(!window(&spread(0.5, 400), &spread(0.6, 100)).shifted);
        assert!(!window(&spread(0.6, 400), &spread(0.5, 20)).shifted);
        assert!(!window(&spread(0.6, 400), &spread(0.58, 100)).shifted);
    }

    #[test]
    fn estimates_use_pairs_for_the_minimum() {
        let est = |mean: f64, half: f64, pairs: u64| Estimate {
            mean,
            lower: mean - half,
            upper: mean + half,
            half_width: half,
            lambda: 0.0,
            pairs,
            variance: (half / 1.645).powi(2),
        };
        let s = DriftState::evaluate_estimate(&RULE, Some(&est(0.5, 0.05, 40)), None);
        assert!(s.below_floor && !s.dropped);
        assert!(!DriftState::evaluate_estimate(&RULE, Some(&est(0.5, 0.05, 10)), None).any());
        let d = DriftState::evaluate_estimate(
            &RULE,
            Some(&est(0.75, 0.03, 40)),
            Some(&est(0.95, 0.01, 400)),
        );
        assert!(d.dropped && !d.below_floor);
        // 0.95 - 0.1 - hypot(0.01, 0.03): the difference's half-width, not the short side's alone.
        assert!((d.drop_threshold.unwrap() - (0.85 - 0.01f64.hypot(0.03))).abs() < 1e-12);
        // A baseline as uncertain as the window: 0.71 is 0.14 below 0.85 and its upper bound is
        // below 0.85 - 0.1, but the difference is within the two windows' noise.
        let n = DriftState::evaluate_estimate(
            &RULE,
            Some(&est(0.71, 0.03, 40)),
            Some(&est(0.85, 0.06, 40)),
        );
        assert!(!n.dropped && 0.71 + 0.03 < 0.85 - 0.1, "{n:?}");
    }
}
