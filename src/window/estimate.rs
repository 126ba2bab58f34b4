//! The combined estimate: the mean score the LLM judge would give a stratum's traces in a window,
//! from the offline score of every trace plus the LLM verdicts on the sample.
//!
//! Prediction-powered inference (Angelopoulos et al., Science 2023) with PPI++'s power tuning
//! (Angelopoulos, Duchi, Zrnic 2023), written for a sample drawn with known, unequal probabilities:
//!
//! ```text
//! theta = Yh + lambda * (f_all - Fh)
//! ```
//! where `f_all` is the mean offline score of the window's `n` traces, and `Yh`, `Fh` are the
//! inverse-probability weighted (Hajek) means of the LLM and offline scores over the `k` judged
//! traces. Any fixed `lambda` keeps `theta` unbiased for the window's mean LLM score; `lambda = 0`
//! is the LLM-only weighted mean. Its variance, by linearisation under Poisson sampling, is
//! estimated by `sum_S c_i (d_i - dh)^2 / w^2` with `d = y - lambda f`, `c_i = 1 / pi_i^2` (the
//! with-replacement form, conservative; see [`EstimateSums::pair`]) and
//! `w = sum_S 1/pi_i` (the Hajek form: when the judge scores only a share r of the sampled traces,
//! budget or errors, `w` shrinks with r and the interval widens as it should, where dividing by the
//! population size would make it r^2 too narrow);
//! `lambda` is the value that minimises it (a weighted regression slope of y on f), clamped to
//! `[0, LAMBDA_MAX]`, so the interval is never wider than the LLM-only one.
//!
//! Every figure is a sum over traces, so windows add bucket by bucket and replicas add in PromQL
//! (`ragwatch_estimate_terms_total{term}` carries the same sums).
//!
//! The baseline a drop is measured against is the long window *minus* the short one
//! ([`EstimateSums::minus`]), so a drop does not dilute its own reference.
//!
//! Limits: the sampled traces that the judge could not score (budget, errors, no claims) are treated
//! as missing at random; when almost every sample of a window was guaranteed (`pi = 1`) and the
//! rest of the stratum's traces went unsampled, the variance is underestimated (there is little
//! randomness left to measure).

use super::ring::Accumulate;

/// `lambda` is not estimated from fewer randomly sampled pairs (inclusion probability below 1) than
/// this; below it the estimate is LLM-only. A slope tuned on a handful of pairs is noisy, and the
/// interval does not account for that noise (measured: 75 % coverage of a nominal 90 % interval with
/// about 20 such pairs).
pub(crate) const MIN_PAIRS_FOR_TUNING: u64 = 30;

/// The largest `lambda`: the offline score's scale is compressed, so the slope can exceed 1, but a
/// huge slope only comes from a degenerate sample.
pub(crate) const LAMBDA_MAX: f64 = 20.0;

/// The additive sums behind one combined estimate (names as in the `term` label).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EstimateSums {
    /// Traces with an offline score.
    pub n: f64,
    /// Sum of their offline scores.
    pub f: f64,
    /// Judged pairs (LLM and offline score).
    pub k: f64,
    /// Of those, the pairs sampled at random (inclusion probability below 1).
    pub(crate) kr: f64,
    /// Sum of 1/pi over the pairs.
    pub w: f64,
    /// Sum of y/pi.
    pub(crate) wy: f64,
    /// Sum of f/pi.
    pub(crate) wf: f64,
    /// Sum of c = 1/pi^2.
    pub c: f64,
    /// Sum of c*y.
    pub(crate) cy: f64,
    /// Sum of c*f.
    pub(crate) cf: f64,
    /// Sum of c*y^2.
    pub(crate) cyy: f64,
    /// Sum of c*f^2.
    pub(crate) cff: f64,
    /// Sum of c*y*f.
    pub(crate) cyf: f64,
}

/// A combined estimate with its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The estimated mean LLM score, clamped to [0, 1].
    pub mean: f64,
    /// Lower confidence bound, clamped to [0, 1].
    pub lower: f64,
    /// Upper confidence bound, clamped to [0, 1].
    pub upper: f64,
    /// Half the interval's width before clamping: z times the standard error.
    pub half_width: f64,
    /// The weight given to the offline score (0: LLM-only).
    pub lambda: f64,
    /// Judged pairs behind it.
    pub pairs: u64,
    /// The estimate's variance (the square of the standard error).
    pub variance: f64,
}

impl Accumulate for EstimateSums {
    fn merge(&mut self, o: &Self) {
        for (a, b) in self.terms_mut().into_iter().zip(o.terms()) {
            *a += b;
        }
    }
}

impl EstimateSums {
    /// The `term` label values, in [`EstimateSums::terms`] order.
    pub const TERMS: [&'static str; 13] = [
        "n", "f", "k", "kr", "w", "wy", "wf", "c", "cy", "cf", "cyy", "cff", "cyf",
    ];

    /// Sums from their values in [`EstimateSums::TERMS`] order.
    pub fn from_terms(terms: [f64; 13]) -> EstimateSums {
        let mut out = EstimateSums::default();
        for (a, b) in out.terms_mut().into_iter().zip(terms) {
            *a = b;
        }
        out
    }

    /// The sums, in [`EstimateSums::TERMS`] order.
    pub fn terms(&self) -> [f64; 13] {
        [
            self.n, self.f, self.k, self.kr, self.w, self.wy, self.wf, self.c, self.cy, self.cf,
            self.cyy, self.cff, self.cyf,
        ]
    }

    /// The sums of `self` without those of `part` (a window minus a window it contains), never
    /// below zero.
    pub fn minus(&self, part: &EstimateSums) -> EstimateSums {
        let mut out = *self;
        for (a, b) in out.terms_mut().into_iter().zip(part.terms()) {
            *a = (*a - b).max(0.0);
        }
        out
    }

    fn terms_mut(&mut self) -> [&mut f64; 13] {
        [
            &mut self.n,
            &mut self.f,
            &mut self.k,
            &mut self.kr,
            &mut self.w,
            &mut self.wy,
            &mut self.wf,
            &mut self.c,
            &mut self.cy,
            &mut self.cf,
            &mut self.cyy,
            &mut self.cff,
            &mut self.cyf,
        ]
    }

    /// The sums of one trace's offline score `f`.
    pub fn population(f: f64) -> EstimateSums {
        EstimateSums {
            n: 1.0,
            f,
            ..EstimateSums::default()
        }
    }

    /// The sums of one judged pair: LLM score `y`, offline score `f`, inclusion probability `pi`.
    pub fn pair(y: f64, f: f64, pi: f64) -> EstimateSums {
        let pi = pi.clamp(1e-6, 1.0);
        let w = 1.0 / pi;
        // 1/pi^2 rather than (1 - pi)/pi^2: the sampler's pi is not the whole story when the judge
        // scores only part of the sample (budget, errors), and a stratum's guaranteed traces are the
        // window's first ones, not a census. Conservative: the interval is a little wide when every
        // sampled trace is judged, honest when not (a test checks both).
        let c = 1.0 / (pi * pi);
        EstimateSums {
            k: 1.0,
            kr: if pi < 1.0 { 1.0 } else { 0.0 },
            w,
            wy: w * y,
            wf: w * f,
            c,
            cy: c * y,
            cf: c * f,
            cyy: c * y * y,
            cff: c * f * f,
            cyf: c * y * f,
            ..EstimateSums::default()
        }
    }

    /// The PPI++ estimate at confidence `z`, or `None` without a judged pair or a trace.
    pub fn estimate(&self, z: f64) -> Option<Estimate> {
        self.estimate_with(z, None)
    }

    /// The estimate with a `lambda` tuned elsewhere (cross-fitted: a short window takes its
    /// baseline's, so the slope's own noise stays out of the window's estimate).
    pub fn estimate_with_lambda(&self, z: f64, lambda: f64) -> Option<Estimate> {
        self.estimate_with(z, Some(lambda))
    }

    /// The LLM-only estimate (`lambda = 0`) with the same variance estimator, for comparison.
    #[cfg(test)]
    pub(crate) fn llm_only(&self, z: f64) -> Option<Estimate> {
        self.estimate_with(z, Some(0.0))
    }

    fn estimate_with(&self, z: f64, lambda: Option<f64>) -> Option<Estimate> {
        if self.k < 1.0 || self.w <= 0.0 || self.n < 1.0 {
            return None;
        }
        let yh = self.wy / self.w;
        let fh = self.wf / self.w;
        let saa = self.cyy - 2.0 * yh * self.cy + yh * yh * self.c;
        let sbb = self.cff - 2.0 * fh * self.cf + fh * fh * self.c;
        let sab = self.cyf - yh * self.cf - fh * self.cy + yh * fh * self.c;
        let lambda = lambda.unwrap_or_else(|| {
            if sbb > 0.0 && self.kr >= MIN_PAIRS_FOR_TUNING as f64 {
                (sab / sbb).clamp(0.0, LAMBDA_MAX)
            } else {
                0.0
            }
        });
        let mean = yh + lambda * (self.f / self.n - fh);
        let var = ((saa - 2.0 * lambda * sab + lambda * lambda * sbb).max(0.0)) / (self.w * self.w);
        let half = z * var.sqrt();
        if !(mean.is_finite() && half.is_finite()) {
            return None;
        }
        Some(Estimate {
            mean: mean.clamp(0.0, 1.0),
            lower: (mean - half).clamp(0.0, 1.0),
            upper: (mean + half).clamp(0.0, 1.0),
            half_width: half,
            lambda,
            pairs: self.k as u64,
            variance: var,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// A window of `n` traces: a latent quality q, an LLM score tracking q, an offline score on a
    /// compressed scale tracking q with more noise, and "uncertain" traces the offline judge flags
    /// (those near its middle), which tiering samples at `boost` times the rate. The first `min`
    /// traces are guaranteed samples (pi = 1), as the sampler's per-window minimum does.
    struct World {
        y: Vec<f64>,
        f: Vec<f64>,
        uncertain: Vec<bool>,
    }

    fn world(rng: &mut StdRng, n: usize, bad_share: f64) -> World {
        let mut w = World {
            y: Vec::with_capacity(n),
            f: Vec::with_capacity(n),
            uncertain: Vec::with_capacity(n),
        };
        for _ in 0..n {
            let bad = rng.random::<f64>() < bad_share;
            let y: f64 = if bad {
                0.3 + 0.4 * rng.random::<f64>()
            } else {
                0.85 + 0.15 * rng.random::<f64>()
            };
            let f = (0.45 + 0.25 * y + 0.15 * (rng.random::<f64>() - 0.5)).clamp(0.0, 1.0);
            w.uncertain.push((0.55..0.65).contains(&f));
            w.y.push(y);
            w.f.push(f);
        }
        w
    }

    fn sample(
        rng: &mut StdRng,
        w: &World,
        rate: f64,
        boost: f64,
        min: usize,
    ) -> (EstimateSums, f64, f64) {
        sample_judged(rng, w, rate, boost, min, 1.0)
    }

    /// As [`sample`], with only a share `judged` of the sampled traces scored (the rest lost to the
    /// budget or errors, at random).
    fn sample_judged(
        rng: &mut StdRng,
        w: &World,
        rate: f64,
        boost: f64,
        min: usize,
        judged: f64,
    ) -> (EstimateSums, f64, f64) {
        let mut sums = EstimateSums::default();
        let mut taken = 0;
        let mut naive = 0.0;
        for i in 0..w.y.len() {
            sums.merge(&EstimateSums::population(w.f[i]));
            let pi = if taken < min {
                1.0
            } else if w.uncertain[i] {
                (rate * boost).min(1.0)
            } else {
                rate
            };
            if rng.random::<f64>() < pi && rng.random::<f64>() < judged {
                taken += 1;
                naive += w.y[i];
                sums.merge(&EstimateSums::pair(w.y[i], w.f[i], pi));
            }
        }
        let truth = w.y.iter().sum::<f64>() / w.y.len() as f64;
        (sums, truth, naive / taken as f64)
    }

    #[test]
    fn unbiased_under_tiering_and_covers_at_the_stated_rate() {
        let mut rng = StdRng::seed_from_u64(7);
        let z = 1.96;
        let runs = 2000;
        let (mut covered, mut covered_llm, mut err, mut naive_err) = (0, 0, 0.0, 0.0);
        let (mut width, mut width_llm) = (0.0, 0.0);
        for _ in 0..runs {
            let w = world(&mut rng, 2000, 0.2);
            let (sums, truth, naive) = sample(&mut rng, &w, 0.05, 4.0, 10);
            let e = sums.estimate(z).unwrap();
            let l = sums.llm_only(z).unwrap();
            err += e.mean - truth;
            // The unweighted mean of the sample is what ignoring tiering would report.
            naive_err += naive - truth;
            covered += usize::from(e.lower <= truth && truth <= e.upper);
            covered_llm += usize::from(l.lower <= truth && truth <= l.upper);
            width += e.upper - e.lower;
            width_llm += l.upper - l.lower;
        }
        let bias = err / runs as f64;
        let naive_bias = naive_err / runs as f64;
        let coverage = covered as f64 / runs as f64;
        let coverage_llm = covered_llm as f64 / runs as f64;
        assert!(bias.abs() < 0.003, "bias {bias}");
        assert!(
            naive_bias.abs() > 0.01,
            "tiering skews the unweighted mean: {naive_bias}"
        );
        assert!((0.93..=0.97).contains(&coverage), "coverage {coverage}");
        assert!(
            (0.93..=0.97).contains(&coverage_llm),
            "coverage {coverage_llm}"
        );
        assert!(
            width < 0.8 * width_llm,
            "PPI sharpens: {width} vs {width_llm}"
        );
    }

    #[test]
    fn covers_when_the_judge_scores_only_part_of_the_sample() {
        let mut rng = StdRng::seed_from_u64(11);
        let runs = 1000;
        let mut covered = 0;
        for _ in 0..runs {
            let w = world(&mut rng, 4000, 0.2);
            // The budget lets one sampled trace in five through.
            let (sums, truth, _) = sample_judged(&mut rng, &w, 0.2, 3.0, 0, 0.2);
            let e = sums.estimate(1.96).unwrap();
            covered += usize::from(e.lower <= truth && truth <= e.upper);
        }
        let coverage = covered as f64 / runs as f64;
        assert!((0.93..=0.97).contains(&coverage), "coverage {coverage}");
    }

    #[test]
    fn guaranteed_samples_still_carry_uncertainty_and_an_empty_sample_no_estimate() {
        let mut s = EstimateSums::default();
        for (y, f) in [(0.9, 0.6), (0.5, 0.4), (1.0, 0.7)] {
            s.merge(&EstimateSums::population(f));
            s.merge(&EstimateSums::pair(y, f, 1.0));
        }
        let e = s.estimate(1.645).unwrap();
        // The first traces of a window are not the window: their spread is the uncertainty.
        assert!((e.mean - 0.8).abs() < 1e-12 && e.half_width > 0.1, "{e:?}");
        assert_eq!(EstimateSums::population(0.5).estimate(1.645), None);
    }

    #[test]
    fn hand_checked_example() {
        // Four traces, offline 0.6 0.4 0.7 0.5; traces 1 and 2 judged (y = 0.9, 0.5) with
        // pi = 0.5. Yh = 0.7, Fh = 0.5, w = 4, c = 4 each; Saa = 4*(0.04+0.04) = 0.32. Fewer than
        // 30 random pairs: lambda = 0, theta = 0.7, V = 0.32/16 = 0.02, half-width 2*0.1414.
        let mut s = EstimateSums::default();
        for f in [0.6, 0.4, 0.7, 0.5] {
            s.merge(&EstimateSums::population(f));
        }
        s.merge(&EstimateSums::pair(0.9, 0.6, 0.5));
        s.merge(&EstimateSums::pair(0.5, 0.4, 0.5));
        let e = s.estimate(2.0).unwrap();
        assert!((e.mean - 0.7).abs() < 1e-12, "{e:?}");
        let half = 2.0 * 0.02f64.sqrt();
        assert!(
            (e.upper - (0.7 + half)).abs() < 1e-12 && (e.lower - (0.7 - half)).abs() < 1e-12,
            "{e:?}"
        );
        // The same with lambda forced to the slope 2: theta = 0.7 + 2*(0.55-0.5) = 0.8, and
        // d = y - 2f is 0.9-1.2 = -0.3 and 0.5-0.8 = -0.3: no spread left, V = 0.
        let forced = s.estimate_with(2.0, Some(2.0)).unwrap();
        assert!(
            (forced.mean - 0.8).abs() < 1e-12 && forced.half_width < 1e-6,
            "{forced:?}"
        );
    }

    proptest! {
        #[test]
        fn never_wider_than_llm_only(
            pairs in proptest::collection::vec((0.0f64..=1.0, 0.0f64..=1.0, 0.01f64..=1.0), 1..60),
            extra in proptest::collection::vec(0.0f64..=1.0, 0..200),
        ) {
            let mut s = EstimateSums::default();
            for (y, f, pi) in &pairs {
                s.merge(&EstimateSums::population(*f));
                s.merge(&EstimateSums::pair(*y, *f, *pi));
            }
            for f in &extra {
                s.merge(&EstimateSums::population(*f));
            }
            let e = s.estimate(1.645).unwrap();
            let l = s.llm_only(1.645).unwrap();
            prop_assert!(e.half_width <= l.half_width + 1e-12, "{} > {}", e.half_width, l.half_width);
            prop_assert!(e.mean.is_finite() && (0.0..=1.0).contains(&e.mean));
        }
    }
}
