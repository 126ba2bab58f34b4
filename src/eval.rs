//! Labelled evaluation: how well a judge's scores separate human-labelled faithful answers from
//! unfaithful ones. Used by `replay` on golden sets and by `train-offline`.

use serde::Serialize;

/// Area under the ROC curve of `scores` predicting `labels` (true = positive = faithful), with ties
/// counted as one half. `None` when one class is absent.
pub fn auroc(scores: &[f64], labels: &[bool]) -> Option<f64> {
    let mut pairs: Vec<(f64, bool)> = scores.iter().copied().zip(labels.iter().copied()).collect();
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pos = pairs.iter().filter(|p| p.1).count() as f64;
    let neg = pairs.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 {
        return None;
    }
    // Rank-sum (Mann-Whitney U) with average ranks for ties.
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < pairs.len() {
        let mut j = i;
        while j < pairs.len() && pairs[j].0 == pairs[i].0 {
            j += 1;
        }
        let avg_rank = (i + 1 + j) as f64 / 2.0;
        rank_sum += avg_rank * pairs[i..j].iter().filter(|p| p.1).count() as f64;
        i = j;
    }
    Some((rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg))
}

/// Confusion counts for "unfaithful" detection: a score below the threshold flags the answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Confusion {
    /// Flagged and labelled unfaithful.
    pub true_positive: u64,
    /// Flagged but labelled faithful.
    pub false_positive: u64,
    /// Not flagged but labelled unfaithful.
    pub false_negative: u64,
    /// Not flagged and labelled faithful.
    pub true_negative: u64,
}

impl Confusion {
    /// Adds one labelled score.
    pub fn add(&mut self, score: f64, faithful: bool, threshold: f64) {
        match (score < threshold, faithful) {
            (true, false) => self.true_positive += 1,
            (true, true) => self.false_positive += 1,
            (false, false) => self.false_negative += 1,
            (false, true) => self.true_negative += 1,
        }
    }

    /// Of the flagged answers, the share that were unfaithful.
    pub fn precision(&self) -> Option<f64> {
        let flagged = self.true_positive + self.false_positive;
        (flagged > 0).then(|| self.true_positive as f64 / flagged as f64)
    }

    /// Of the unfaithful answers, the share that were flagged.
    pub fn recall(&self) -> Option<f64> {
        let bad = self.true_positive + self.false_negative;
        (bad > 0).then(|| self.true_positive as f64 / bad as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auroc_hand_computed() {
        // Positives 0.8, 0.6; negatives 0.7, 0.2: pairs (0.8>0.7, 0.8>0.2, 0.6<0.7, 0.6>0.2) = 3/4.
        assert_eq!(
            auroc(&[0.8, 0.6, 0.7, 0.2], &[true, true, false, false]),
            Some(0.75)
        );
        // Perfect and inverted.
        assert_eq!(auroc(&[0.9, 0.1], &[true, false]), Some(1.0));
        assert_eq!(auroc(&[0.1, 0.9], &[true, false]), Some(0.0));
        // A tie between classes counts one half.
        assert_eq!(auroc(&[0.5, 0.5], &[true, false]), Some(0.5));
        assert_eq!(auroc(&[0.5, 0.4], &[true, true]), None);
    }

    #[test]
    fn precision_recall_hand_computed() {
        let mut c = Confusion::default();
        // threshold 0.5: flagged = below 0.5.
        for (s, f) in [
            (0.1, false),
            (0.2, false),
            (0.3, true),
            (0.6, false),
            (0.9, true),
            (0.8, true),
        ] {
            c.add(s, f, 0.5);
        }
        assert_eq!(
            c,
            Confusion {
                true_positive: 2,
                false_positive: 1,
                false_negative: 1,
                true_negative: 2
            }
        );
        assert!((c.precision().unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert!((c.recall().unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(Confusion::default().precision(), None);
    }
}
