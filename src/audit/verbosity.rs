//! The verbosity experiment: what a stream whose answers merely got longer does to a judge's mean,
//! beside what a real drop in faithfulness does.
//!
//! At a 90/10 faithful/unfaithful mix, the mean score of all answers is set against the mean of
//! answers drawn from the longer half of each label class (above the class's median length; each
//! class keeps its share), and against the mean at a 75/25 mix. A judge that reads length as quality
//! moves its mean as far for the longer answers as for the drop, and a shift warning on it cannot
//! tell a verbose model from a hallucinating one.

use serde::Serialize;

use super::{AuditSample, quantile};

/// The three means of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Verbosity {
    /// Mean score at a 90/10 faithful/unfaithful mix, all answers.
    pub mean_90: f64,
    /// The same mix drawn from the longer half of each class.
    pub longer_90: f64,
    /// Mean score at a 75/25 mix, all answers.
    pub mean_75: f64,
}

impl Verbosity {
    /// The experiment on `samples`; `None` unless both classes have an answer longer than their
    /// median.
    pub fn compute(samples: &[AuditSample]) -> Option<Verbosity> {
        let (faithful, faithful_longer) = class_means(samples, true)?;
        let (unfaithful, unfaithful_longer) = class_means(samples, false)?;
        let mix = |share: f64, f: f64, u: f64| share * f + (1.0 - share) * u;
        Some(Verbosity {
            mean_90: mix(0.9, faithful, unfaithful),
            longer_90: mix(0.9, faithful_longer, unfaithful_longer),
            mean_75: mix(0.75, faithful, unfaithful),
        })
    }

    /// How far the longer answers move the mean (negative: down).
    pub fn shift(&self) -> f64 {
        self.longer_90 - self.mean_90
    }

    /// How far the real drop moves it.
    pub fn drop(&self) -> f64 {
        self.mean_75 - self.mean_90
    }

    /// |shift| / |drop|: below 1/3, a stream that got longer moves the mean by less than a third
    /// of what losing 15 points of faithfulness does. `None` when the drop does not move the mean.
    pub fn ratio(&self) -> Option<f64> {
        let drop = self.drop().abs();
        (drop > 0.0).then(|| self.shift().abs() / drop)
    }
}

/// The mean score of one class, and of its answers longer than the class's median length.
fn class_means(samples: &[AuditSample], faithful: bool) -> Option<(f64, f64)> {
    let of: Vec<&AuditSample> = samples.iter().filter(|s| s.faithful == faithful).collect();
    if of.is_empty() {
        return None;
    }
    let mut words: Vec<f64> = of.iter().map(|s| s.answer_words).collect();
    words.sort_by(f64::total_cmp);
    let median = quantile(&words, 0.5);
    let mean = |scores: &[f64]| scores.iter().sum::<f64>() / scores.len() as f64;
    let all: Vec<f64> = of.iter().map(|s| s.score).collect();
    let longer: Vec<f64> = of
        .iter()
        .filter(|s| s.answer_words > median)
        .map(|s| s.score)
        .collect();
    (!longer.is_empty()).then(|| (mean(&all), mean(&longer)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(score: f64, faithful: bool, words: f64) -> AuditSample {
        AuditSample {
            score,
            faithful,
            answer_words: words,
            reversed: None,
        }
    }

    #[test]
    fn a_judge_that_reads_length_shifts_and_one_that_does_not_stays() {
        // Scores fall with length inside each class: the longer half scores lower.
        let biased: Vec<AuditSample> = (1..=10)
            .flat_map(|w| {
                let w = f64::from(w);
                [
                    sample(1.0 - w / 20.0, true, w * 10.0),
                    sample(0.5 - w / 20.0, false, w * 10.0),
                ]
            })
            .collect();
        let v = Verbosity::compute(&biased).unwrap();
        // Faithful mean 0.725, longer 0.6; unfaithful 0.225, longer 0.1.
        assert!((v.mean_90 - (0.9 * 0.725 + 0.1 * 0.225)).abs() < 1e-12);
        assert!((v.longer_90 - (0.9 * 0.6 + 0.1 * 0.1)).abs() < 1e-12);
        assert!((v.drop() - (-0.15 * 0.5)).abs() < 1e-12);
        assert!((v.ratio().unwrap() - 0.125 / 0.075).abs() < 1e-9);
        // Every length holds the same scores: no shift.
        let fair: Vec<AuditSample> = (1..=10)
            .flat_map(|w| {
                let w = f64::from(w);
                [
                    sample(0.9, true, w),
                    sample(0.8, true, w),
                    sample(0.4, false, w),
                    sample(0.3, false, w),
                ]
            })
            .collect();
        let v = Verbosity::compute(&fair).unwrap();
        assert!(v.ratio().unwrap() < 1e-9, "{v:?}");
    }

    #[test]
    fn undefined_without_both_classes_or_a_longer_half() {
        assert_eq!(Verbosity::compute(&[sample(1.0, true, 5.0)]), None);
        let same_length = [sample(1.0, true, 5.0), sample(0.0, false, 5.0)];
        assert_eq!(Verbosity::compute(&same_length), None);
    }
}
