//! The drop scan: the page rule of a metric's combined estimate, a multi-window log-likelihood
//! scan that approaches the fastest detection the verdicts allow.
//!
//! A drop of size `d` turns the combined estimate's mean `mu0` into `mu0 - d`. Over a look-back
//! window whose estimate is `m` with variance `v`, the Gaussian log-likelihood ratio of "dropped by
//! d" against "unchanged" is
//!
//! ```text
//! L(window, d) = (d * (mu0 - m) - d^2 / 2) / (v + v0)
//! ```
//! where `mu0` and `v0` are the estimate and variance of the reference: the baseline before the
//! longest window ([`horizon`]; 24 hours without the last 160 minutes as shipped), one reference
//! for every window. A drop younger than the longest window is in no reference, so no window is
//! compared with a reference that the same drop has already filled (a reference that ended where
//! each window starts would hold the older part of the drop for every window shorter than the
//! drop). While the baseline holds less history than a full day, the reference is what it holds
//! before the longest window: nothing during the first 160 minutes (no window qualifies and the
//! scan is silent), then a reference that grows, its larger variance weighed by the ratio, and a
//! window is compared only with a reference holding at least `min_samples` and at least as many
//! judged pairs as the window. Page's CUSUM is the largest
//! such ratio over every start point; the scan takes it over a geometric set of windows
//! ([`WINDOWS`], 1 to 160 minutes as shipped), which keeps its memory bounded and lets it be written
//! in PromQL over exact-window sums, so replicas pool. The drop sizes are 1, 2 and 4 times the
//! metric's `max_drop` ([`DROP_MULTIPLES`]); one statistic covers small and large drops. It pages
//! when the largest ratio reaches `windows.page_llr`.
//!
//! Two choices keep a short window's noise out of it (a window of twenty verdicts estimates its
//! own variance and power-tuning slope badly, and a small variance there is a large ratio):
//! the PPI++ slope `lambda` of every window is the baseline's (cross-fitted), and the window's
//! variance is the baseline's scaled by their numbers of judged pairs, `v = v0 * k0 / k`.
//!
//! `benches/page_power.rs` runs [`llr`] and [`scan`] on simulated verdicts: the delay to a page,
//! the false pages per healthy year, and Lorden's floor under any rule; the PromQL that
//! `ragwatch rules` writes is held to [`llr`] by the rules' unit tests.

use std::time::Duration;

use super::estimate::EstimateSums;

/// The scan's windows as fractions (numerator, denominator) of the short window: 1, 2, 5, 10,
/// 20, 40, 80 and 160 minutes for the shipped 5-minute window.
pub const WINDOWS: [(u64, u64); 8] = [
    (1, 5),
    (2, 5),
    (1, 1),
    (2, 1),
    (4, 1),
    (8, 1),
    (16, 1),
    (32, 1),
];

/// The drop sizes the scan weighs, as multiples of the metric's `max_drop`.
pub const DROP_MULTIPLES: [f64; 3] = [1.0, 2.0, 4.0];

pub use super::config::DEFAULT_PAGE_LLR;

/// The scan's windows for a short window and a baseline: those at most half the baseline, so the
/// rest of the baseline holds at least as much as the window.
pub fn windows(short: Duration, baseline: Duration) -> Vec<Duration> {
    let short_ms = short.as_millis() as u64;
    let mut out: Vec<Duration> = WINDOWS
        .iter()
        .map(|&(num, den)| Duration::from_millis(short_ms * num / den))
        .filter(|w| !w.is_zero() && *w * 2 <= baseline)
        .collect();
    out.dedup();
    out
}

/// The reference a window is compared with: the baseline before the longest window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reference {
    /// Its combined estimate, clamped to [0, 1].
    pub mean: f64,
    /// The estimate's variance.
    pub variance: f64,
    /// Its judged pairs.
    pub pairs: f64,
}

/// One look-back window's evidence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    /// The window's combined estimate with the reference's `lambda`, clamped to [0, 1].
    pub mean: f64,
    /// Its judged pairs.
    pub pairs: f64,
    /// The baseline before the longest window.
    pub reference: Reference,
}

impl Evidence {
    /// A window's evidence from its sums and those of the reference ([`reference()`]): the reference's
    /// estimate tunes its own `lambda`, the window's takes it. `None` without an estimate on
    /// either side.
    pub fn of(window: &EstimateSums, rest: &EstimateSums) -> Option<Evidence> {
        let reference = rest.estimate(1.0)?;
        let own = window.estimate_with_lambda(1.0, reference.lambda)?;
        Some(Evidence {
            mean: own.mean,
            pairs: window.k,
            reference: Reference {
                mean: reference.mean,
                variance: reference.variance,
                pairs: rest.k,
            },
        })
    }
}

/// The scan's horizon: its longest window, where the reference ends. `None` where the baseline
/// holds no window twice.
pub fn horizon(short: Duration, baseline: Duration) -> Option<Duration> {
    windows(short, baseline).last().copied()
}

/// The reference's sums: those of the baseline (`baseline`, up to now) less those of the
/// horizon (`horizon`, the longest window, up to now).
pub fn reference(baseline: &EstimateSums, horizon: &EstimateSums) -> EstimateSums {
    baseline.minus(horizon)
}

/// The log-likelihood ratio of "dropped by `drop`" against "unchanged" for one window, or `None`
/// where the window or its reference holds fewer than `min_samples` judged pairs, or the reference
/// fewer than the window.
pub fn llr(e: &Evidence, drop: f64, min_samples: f64) -> Option<f64> {
    let r = &e.reference;
    if e.pairs < min_samples || r.pairs < min_samples || r.pairs < e.pairs || e.pairs <= 0.0 {
        return None;
    }
    let variance = r.variance * r.pairs / e.pairs + r.variance;
    if variance <= 0.0 {
        return None;
    }
    Some((drop * (r.mean - e.mean) - drop * drop / 2.0) / variance)
}

/// The scan statistic: the largest [`llr`] over the windows and the drop sizes
/// `DROP_MULTIPLES * max_drop`; `None` where no window qualifies.
pub fn scan(windows: &[Evidence], max_drop: f64, min_samples: f64) -> Option<f64> {
    windows
        .iter()
        .flat_map(|e| {
            DROP_MULTIPLES
                .iter()
                .filter_map(move |m| llr(e, m * max_drop, min_samples))
        })
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::Accumulate;

    fn evidence(mean: f64, pairs: f64) -> Evidence {
        Evidence {
            mean,
            pairs,
            reference: Reference {
                mean: 0.85,
                variance: 0.07 / 3_000.0,
                pairs: 3_000.0,
            },
        }
    }

    #[test]
    fn shipped_windows_are_one_to_160_minutes() {
        let w = windows(Duration::from_secs(300), Duration::from_secs(86_400));
        let minutes: Vec<u64> = w.iter().map(|d| d.as_secs() / 60).collect();
        assert_eq!(minutes, [1, 2, 5, 10, 20, 40, 80, 160]);
        // A short baseline keeps only the windows it can hold twice.
        let w = windows(Duration::from_secs(20), Duration::from_secs(300));
        let secs: Vec<u64> = w.iter().map(|d| d.as_secs()).collect();
        assert_eq!(secs, [4, 8, 20, 40, 80]);
        // The reference ends where the longest window starts: 160 minutes ago as shipped.
        assert_eq!(
            horizon(Duration::from_secs(300), Duration::from_secs(86_400)),
            Some(Duration::from_secs(160 * 60))
        );
        assert_eq!(
            horizon(Duration::from_secs(300), Duration::from_secs(60)),
            None
        );
    }

    #[test]
    fn a_drop_younger_than_the_horizon_is_in_no_reference() {
        // Twenty minutes a step: healthy (mean 0.9) for 24 hours, then dropped (0.5) for the last
        // forty minutes. Every window's reference is the baseline before the longest window, so
        // none of them holds a dropped verdict, whichever window is judged.
        let step = |mean: f64| {
            let mut s = EstimateSums::default();
            for i in 0..40 {
                let y = if (i as f64) < mean * 40.0 { 1.0 } else { 0.0 };
                s.merge(&EstimateSums::pair(y, 0.5, 0.5));
                s.merge(&EstimateSums::population(0.5));
            }
            s
        };
        let mut prefix = vec![EstimateSums::default()];
        for i in 0..74 {
            let mut next = *prefix.last().unwrap();
            next.merge(&step(if i < 72 { 0.9 } else { 0.5 }));
            prefix.push(next);
        }
        let now = prefix[74];
        let baseline = now.minus(&prefix[2]);
        let horizon = now.minus(&prefix[74 - 8]);
        let r = reference(&baseline, &horizon);
        assert_eq!(r.k, 64.0 * 40.0);
        let rest = r.estimate(1.0).unwrap();
        assert!((rest.mean - 0.9).abs() < 1e-9, "{}", rest.mean);
    }

    #[test]
    fn hand_checked_ratio() {
        // 60 pairs at 0.70 against 0.85 (v0 = 0.07 / 3000): v = v0 * 50 + v0 = 51 v0.
        let e = evidence(0.70, 60.0);
        let v = 0.07 / 3_000.0 * 51.0;
        let want = (0.1 * 0.15 - 0.005) / v;
        assert!((llr(&e, 0.1, 20.0).unwrap() - want).abs() < 1e-9);
        // Unchanged: the ratio is negative, and the scan is the least negative of the sizes.
        let flat = evidence(0.85, 60.0);
        assert!(llr(&flat, 0.05, 20.0).unwrap() < 0.0);
        assert_eq!(
            scan(&[flat], 0.05, 20.0),
            llr(&flat, 0.05, 20.0),
            "the smallest drop costs least when nothing changed"
        );
    }

    #[test]
    fn thin_windows_and_thin_references_are_left_out() {
        assert_eq!(llr(&evidence(0.2, 19.0), 0.05, 20.0), None);
        let mut e = evidence(0.2, 60.0);
        e.reference.pairs = 59.0;
        assert_eq!(llr(&e, 0.05, 20.0), None);
        assert_eq!(scan(&[], 0.05, 20.0), None);
    }

    #[test]
    fn more_evidence_of_the_same_drop_weighs_more() {
        let short = scan(&[evidence(0.70, 60.0)], 0.05, 20.0).unwrap();
        let long = scan(&[evidence(0.70, 240.0)], 0.05, 20.0).unwrap();
        assert!(long > 3.0 * short, "{short} {long}");
    }
}
