//! The judge audit: is a judge measuring what it claims to? Agreement with human labels (AUROC and
//! Cohen's kappa at the judge's threshold, each with a seeded bootstrap 95 % interval), verbosity
//! bias (Spearman correlation of the score with answer length, overall and within each label class:
//! a judge that rewards length shows it inside a class, where the label is held fixed; and the
//! verbosity experiment, [`Verbosity`]: what longer answers do to the mean), and position
//! bias (the same traces re-judged with their contexts reversed). Used by `replay --audit`; its
//! figures are the input of `ragwatch gate` like a replay summary's, keyed by judge instead of
//! stratum.

pub mod config;
mod verbosity;
use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

use crate::eval::auroc;
pub use verbosity::Verbosity;

/// One labelled trace as one judge scored it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditSample {
    /// The judge's faithfulness score.
    pub score: f64,
    /// The human label: true means no hallucination.
    pub faithful: bool,
    /// The answer's length in whitespace-separated words.
    pub(crate) answer_words: f64,
    /// The position check: the score with the contexts in reverse order (`None` when not re-judged,
    /// `Some(None)` when the re-judging gave no score).
    pub reversed: Option<Option<f64>>,
}

/// A figure with its bootstrap 95 % interval (percentiles 2.5 and 97.5 of the resampled figure).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// The figure on the whole set.
    pub value: f64,
    /// Lower end of the interval (`None` when too few resamples had the figure defined).
    pub low: Option<f64>,
    /// Upper end of the interval.
    pub high: Option<f64>,
}

/// The position-bias check: scores with the contexts as retrieved and reversed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PositionCheck {
    /// Traces scored both ways.
    pub traces: usize,
    /// Traces whose re-judging gave no score (a failed call or no claims), counted, not used.
    pub(crate) unscored: usize,
    /// Mean absolute score change.
    pub(crate) mean_abs_change: f64,
    /// Share of traces whose verdict (score at or above the threshold) flipped.
    pub(crate) flip_share: f64,
}

/// The audit of one judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeAudit {
    /// Labelled traces the judge scored.
    pub traces: usize,
    /// Of which labelled faithful.
    pub faithful: usize,
    /// The threshold kappa is computed at: a score at or above it calls the answer faithful.
    pub threshold: f64,
    /// AUROC of the score for the human label.
    pub auroc: Option<Estimate>,
    /// Cohen's kappa between the judge's call at the threshold and the human label.
    pub kappa: Option<Estimate>,
    /// Spearman correlation of score with answer length, all traces.
    pub(crate) length_spearman: Option<f64>,
    /// The same within the faithful class.
    pub length_spearman_faithful: Option<f64>,
    /// The same within the unfaithful class.
    pub length_spearman_unfaithful: Option<f64>,
    /// The position check, when the judge re-judged with reversed contexts.
    pub position: Option<PositionCheck>,
    /// The verbosity experiment.
    pub verbosity: Option<Verbosity>,
}

/// Average ranks (1-based) of `v`: tied values share the mean of the ranks they span.
pub fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j < order.len() && v[order[j]] == v[order[i]] {
            j += 1;
        }
        let avg = (i + 1 + j) as f64 / 2.0;
        for &k in &order[i..j] {
            out[k] = avg;
        }
        i = j;
    }
    out
}

/// Pearson correlation; `None` for fewer than two pairs or a constant side.
pub(crate) fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len().min(y.len());
    if n < 2 {
        return None;
    }
    let (mx, my) = (
        x[..n].iter().sum::<f64>() / n as f64,
        y[..n].iter().sum::<f64>() / n as f64,
    );
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx).powi(2);
        syy += (b - my).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// Spearman rank correlation: Pearson on average ranks, so ties are handled.
pub(crate) fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    pearson(&ranks(x), &ranks(y))
}

/// Cohen's kappa between two binary raters: (observed agreement - chance agreement) / (1 - chance).
/// `None` when chance agreement is 1 (both raters constant and equal).
pub fn kappa(a: &[bool], b: &[bool]) -> Option<f64> {
    let n = a.len().min(b.len());
    if n == 0 {
        return None;
    }
    let nf = n as f64;
    let agree = a.iter().zip(b).filter(|(x, y)| x == y).count() as f64 / nf;
    let pa = a[..n].iter().filter(|x| **x).count() as f64 / nf;
    let pb = b[..n].iter().filter(|x| **x).count() as f64 / nf;
    let chance = pa * pb + (1.0 - pa) * (1.0 - pb);
    (chance < 1.0).then(|| (agree - chance) / (1.0 - chance))
}

/// The bootstrap 95 % percentile interval of `stat` over `resamples` resamples (with replacement)
/// of `n` items, drawn from `seed`: the same seed gives the same interval. Resamples where the
/// statistic is undefined (one class drawn only) are left out; `None` when fewer than half remain.
pub fn bootstrap(
    n: usize,
    resamples: usize,
    seed: u64,
    mut stat: impl FnMut(&[usize]) -> Option<f64>,
) -> Option<(f64, f64)> {
    if n == 0 || resamples == 0 {
        return None;
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut idx = vec![0usize; n];
    let mut values = Vec::with_capacity(resamples);
    for _ in 0..resamples {
        for i in idx.iter_mut() {
            *i = rng.random_range(0..n);
        }
        if let Some(v) = stat(&idx).filter(|v| v.is_finite()) {
            values.push(v);
        }
    }
    if values.len() * 2 < resamples {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some((quantile(&values, 0.025), quantile(&values, 0.975)))
}

/// Spearman correlation of the score with answer length over `samples`, or over one label class
/// of them (`Some(true)`: the faithful ones).
pub(crate) fn length_spearman(samples: &[AuditSample], class: Option<bool>) -> Option<f64> {
    let (x, y): (Vec<f64>, Vec<f64>) = samples
        .iter()
        .filter(|s| class.is_none_or(|c| s.faithful == c))
        .map(|s| (s.answer_words, s.score))
        .unzip();
    spearman(&x, &y)
}

/// The q-quantile of sorted `v`, interpolated linearly between order statistics.
fn quantile(v: &[f64], q: f64) -> f64 {
    let at = q * (v.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (at - lo as f64)
}

impl JudgeAudit {
    /// Audits one judge's `samples` at `threshold`, with `resamples` bootstrap resamples from `seed`.
    pub(crate) fn compute(
        samples: &[AuditSample],
        threshold: f64,
        resamples: usize,
        seed: u64,
    ) -> Self {
        let scores: Vec<f64> = samples.iter().map(|s| s.score).collect();
        let labels: Vec<bool> = samples.iter().map(|s| s.faithful).collect();
        let calls: Vec<bool> = scores.iter().map(|s| *s >= threshold).collect();
        let estimate = |whole: Option<f64>, stat: &dyn Fn(&[usize]) -> Option<f64>| {
            whole.map(|value| {
                let ci = bootstrap(samples.len(), resamples, seed, stat);
                Estimate {
                    value,
                    low: ci.map(|c| c.0),
                    high: ci.map(|c| c.1),
                }
            })
        };
        let auroc_of = |idx: &[usize]| {
            let s: Vec<f64> = idx.iter().map(|&i| scores[i]).collect();
            let l: Vec<bool> = idx.iter().map(|&i| labels[i]).collect();
            auroc(&s, &l)
        };
        let kappa_of = |idx: &[usize]| {
            let c: Vec<bool> = idx.iter().map(|&i| calls[i]).collect();
            let l: Vec<bool> = idx.iter().map(|&i| labels[i]).collect();
            kappa(&c, &l)
        };
        let length_rho = |class| length_spearman(samples, class);
        JudgeAudit {
            traces: samples.len(),
            faithful: labels.iter().filter(|l| **l).count(),
            threshold,
            auroc: estimate(auroc(&scores, &labels), &auroc_of),
            kappa: estimate(kappa(&calls, &labels), &kappa_of),
            length_spearman: length_rho(None),
            length_spearman_faithful: length_rho(Some(true)),
            length_spearman_unfaithful: length_rho(Some(false)),
            position: position(samples, threshold),
            verbosity: Verbosity::compute(samples),
        }
    }

    /// The audit as flat named figures, the shape `ragwatch gate` reads (`auroc`, `auroc_low`,
    /// `kappa_high`, `length_spearman_faithful`, `length_spearman_within_max_abs`,
    /// `position_flip_share`...).
    pub fn figures(&self) -> BTreeMap<String, f64> {
        let mut f = BTreeMap::new();
        let mut put = |k: &str, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                f.insert(k.to_owned(), v);
            }
        };
        put("traces", Some(self.traces as f64));
        put("faithful", Some(self.faithful as f64));
        put("threshold", Some(self.threshold));
        for (name, e) in [("auroc", self.auroc), ("kappa", self.kappa)] {
            put(name, e.map(|e| e.value));
            put(&format!("{name}_low"), e.and_then(|e| e.low));
            put(&format!("{name}_high"), e.and_then(|e| e.high));
        }
        put("length_spearman", self.length_spearman);
        put("length_spearman_faithful", self.length_spearman_faithful);
        put(
            "length_spearman_unfaithful",
            self.length_spearman_unfaithful,
        );
        let within = [
            self.length_spearman_faithful,
            self.length_spearman_unfaithful,
        ];
        put(
            "length_spearman_within_max_abs",
            within.iter().flatten().map(|r| r.abs()).reduce(f64::max),
        );
        if let Some(v) = self.verbosity {
            put("verbosity_shift", Some(v.shift()));
            put("verbosity_drop", Some(v.drop()));
            put("verbosity_ratio", v.ratio());
        }
        if let Some(p) = self.position {
            put("position_traces", Some(p.traces as f64));
            put("position_unscored", Some(p.unscored as f64));
            put("position_mean_abs_change", Some(p.mean_abs_change));
            put("position_flip_share", Some(p.flip_share));
        }
        f
    }

    /// One row of the audit table.
    pub fn row(&self, judge: &str) -> String {
        let fmt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:+.3}"));
        let est = |e: Option<Estimate>| match e {
            Some(e) => format!(
                "{:.3} [{}, {}]",
                e.value,
                e.low.map_or("-".to_owned(), |v| format!("{v:.3}")),
                e.high.map_or("-".to_owned(), |v| format!("{v:.3}"))
            ),
            None => "-".to_owned(),
        };
        let position = self.position.map_or("-".to_owned(), |p| {
            format!(
                "{:.3} / {:.3} (n {})",
                p.mean_abs_change, p.flip_share, p.traces
            )
        });
        let verbosity = self
            .verbosity
            .and_then(|v| v.ratio())
            .map_or("-".to_owned(), |r| format!("{r:.3}"));
        format!(
            "{:<8} {:>6} {:>6} {:>5}  {:<22} {:<23} {:>7} {:>7} {:>7} {:>9}  {}\n",
            judge,
            self.traces,
            self.faithful,
            self.threshold,
            est(self.auroc),
            est(self.kappa),
            fmt(self.length_spearman),
            fmt(self.length_spearman_faithful),
            fmt(self.length_spearman_unfaithful),
            verbosity,
            position
        )
    }

    /// The header of [`JudgeAudit::row`]s.
    pub fn header() -> String {
        format!(
            "{:<8} {:>6} {:>6} {:>5}  {:<22} {:<23} {:>7} {:>7} {:>7} {:>9}  {}\n",
            "judge",
            "traces",
            "faith",
            "thr",
            "auroc [95% CI]",
            "kappa [95% CI]",
            "len_rho",
            "|faith",
            "|unfth",
            "verbosity",
            "position |dscore| / flips"
        )
    }
}

fn position(samples: &[AuditSample], threshold: f64) -> Option<PositionCheck> {
    let asked: Vec<(f64, Option<f64>)> = samples
        .iter()
        .filter_map(|s| s.reversed.map(|r| (s.score, r)))
        .collect();
    if asked.is_empty() {
        return None;
    }
    let pairs: Vec<(f64, f64)> = asked
        .iter()
        .filter_map(|&(a, b)| b.map(|b| (a, b)))
        .collect();
    let n = pairs.len();
    let mean = |f: &dyn Fn(&(f64, f64)) -> f64| {
        if n == 0 {
            0.0
        } else {
            pairs.iter().map(f).sum::<f64>() / n as f64
        }
    };
    Some(PositionCheck {
        traces: n,
        unscored: asked.len() - n,
        mean_abs_change: mean(&|(a, b)| (a - b).abs()),
        flip_share: mean(&|(a, b)| f64::from(u8::from((*a >= threshold) != (*b >= threshold)))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) {
        let a = a.expect("defined");
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn average_ranks_for_ties() {
        assert_eq!(ranks(&[10.0, 20.0, 20.0, 5.0]), vec![2.0, 3.5, 3.5, 1.0]);
        assert_eq!(ranks(&[1.0, 1.0, 1.0]), vec![2.0, 2.0, 2.0]);
    }

    #[test]
    fn spearman_hand_computed() {
        // Monotone but not linear: rho 1, Pearson below 1.
        close(
            spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 4.0, 9.0, 100.0]),
            1.0,
        );
        close(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0);
        // With ties: x ranks [1, 2.5, 2.5, 4], y ranks [1, 2, 3, 4].
        // Deviations x [-1.5, 0, 0, 1.5], y [-1.5, -0.5, 0.5, 1.5]: sxy 4.5, sxx 4.5, syy 5.
        close(
            spearman(&[1.0, 2.0, 2.0, 3.0], &[1.0, 2.0, 3.0, 4.0]),
            4.5 / (4.5f64 * 5.0).sqrt(),
        );
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&[1.0], &[1.0]), None);
    }

    #[test]
    fn kappa_hand_computed() {
        // 10 items: both yes 4, a yes b no 1, a no b yes 2, both no 3. po 0.7; pa 0.5, pb 0.6;
        // pe 0.5*0.6 + 0.5*0.4 = 0.5; kappa (0.7 - 0.5) / 0.5 = 0.4.
        let mut a = Vec::new();
        let mut b = Vec::new();
        for (x, y, n) in [
            (true, true, 4),
            (true, false, 1),
            (false, true, 2),
            (false, false, 3),
        ] {
            for _ in 0..n {
                a.push(x);
                b.push(y);
            }
        }
        close(kappa(&a, &b), 0.4);
        close(kappa(&[true, false], &[true, false]), 1.0);
        close(kappa(&[true, false], &[false, true]), -1.0);
        assert_eq!(kappa(&[true, true], &[true, true]), None);
    }

    #[test]
    fn audit_hand_computed_and_bootstrap_reproducible() {
        // Scores 0.9 0.8 0.4 | 0.7 0.3 0.2 for labels T T T | F F F; threshold 0.5.
        // AUROC: positives beat negatives in 8 of 9 pairs (0.4 < 0.7): 8/9.
        // Calls T T F | T F F vs labels: po 4/6, pa = pb = 1/2, pe 1/2: kappa 1/3.
        let s = |score, faithful, words| AuditSample {
            score,
            faithful,
            answer_words: words,
            reversed: Some(Some(if faithful { score } else { 1.0 - score })),
        };
        let samples = [
            s(0.9, true, 30.0),
            s(0.8, true, 20.0),
            s(0.4, true, 10.0),
            s(0.7, false, 30.0),
            s(0.3, false, 20.0),
            s(0.2, false, 10.0),
        ];
        let a = JudgeAudit::compute(&samples, 0.5, 500, 7);
        close(a.auroc.map(|e| e.value), 8.0 / 9.0);
        close(a.kappa.map(|e| e.value), 1.0 / 3.0);
        close(a.length_spearman_faithful, 1.0);
        close(a.length_spearman_unfaithful, 1.0);
        // Reversed: unchanged for the faithful three; 0.7->0.3, 0.3->0.7, 0.2->0.8 for the rest:
        // changes 0.4 0.4 0.6 over six traces, all three flip.
        let p = a.position.unwrap();
        assert!((p.mean_abs_change - 1.4 / 6.0).abs() < 1e-9);
        assert!((p.flip_share - 0.5).abs() < 1e-9);
        let again = JudgeAudit::compute(&samples, 0.5, 500, 7);
        assert_eq!(a, again, "same seed, same intervals");
        let other = JudgeAudit::compute(&samples, 0.5, 500, 8);
        assert_ne!(a.auroc, other.auroc, "another seed draws other resamples");
        let e = a.auroc.unwrap();
        assert!(e.low.unwrap() <= e.value && e.value <= e.high.unwrap());
        assert_eq!(a.figures()["length_spearman_within_max_abs"], 1.0);
    }
}
