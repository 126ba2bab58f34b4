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

/// Retrieval quality of one ranked list against gold labels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrievalScores {
    /// Recall at each k: relevant retrieved in the top k / all relevant.
    pub recall_at: Vec<(usize, f64)>,
    /// Precision at each k: relevant in the top k / k.
    pub precision_at: Vec<(usize, f64)>,
    /// nDCG at each k: gain 2^rel - 1, log2 position discount, normalised by the ideal ranking.
    pub ndcg_at: Vec<(usize, f64)>,
    /// Reciprocal rank of the first relevant result (0 when none).
    pub reciprocal_rank: f64,
    /// Average precision (mean of precision at each relevant rank, over all relevant).
    pub average_precision: f64,
}

/// Scores `ranked` (retrieved ids, best first) against `gold`: an id is relevant when it is in
/// `relevant_ids` or has a grade above 0; grades default to 1 for listed ids. `None` when nothing is
/// relevant (the metrics are undefined, not zero).
pub fn retrieval_scores(
    ranked: &[Option<&str>],
    gold: &crate::trace::Gold,
    ks: &[usize],
) -> Option<RetrievalScores> {
    let grade = |id: Option<&str>| -> f64 {
        let Some(id) = id else { return 0.0 };
        gold.relevance.get(id).copied().unwrap_or_else(|| {
            if gold.relevant_ids.iter().any(|r| r == id) {
                1.0
            } else {
                0.0
            }
        })
    };
    let mut all: Vec<f64> = gold
        .relevance
        .values()
        .copied()
        .filter(|g| *g > 0.0)
        .collect();
    for id in &gold.relevant_ids {
        if !gold.relevance.contains_key(id) {
            all.push(1.0);
        }
    }
    let total = all.len();
    if total == 0 {
        return None;
    }
    let grades: Vec<f64> = ranked.iter().map(|id| grade(*id)).collect();
    let hits = |k: usize| grades.iter().take(k).filter(|g| **g > 0.0).count() as f64;
    let dcg = |gs: &[f64], k: usize| -> f64 {
        gs.iter()
            .take(k)
            .enumerate()
            .map(|(i, g)| (2f64.powf(*g) - 1.0) / ((i + 2) as f64).log2())
            .sum()
    };
    all.sort_by(|a, b| b.total_cmp(a));
    let (ap, _) = precision_sum(grades.iter().map(|g| *g > 0.0));
    Some(RetrievalScores {
        recall_at: ks.iter().map(|&k| (k, hits(k) / total as f64)).collect(),
        precision_at: ks.iter().map(|&k| (k, hits(k) / k.max(1) as f64)).collect(),
        ndcg_at: ks
            .iter()
            .map(|&k| {
                let ideal = dcg(&all, k);
                (
                    k,
                    if ideal > 0.0 {
                        dcg(&grades, k) / ideal
                    } else {
                        0.0
                    },
                )
            })
            .collect(),
        reciprocal_rank: grades
            .iter()
            .position(|g| *g > 0.0)
            .map_or(0.0, |i| 1.0 / (i + 1) as f64),
        average_precision: ap / total as f64,
    })
}

/// Sum of precision@k over the relevant ranks k, and how many were relevant: the numerator of
/// average precision.
fn precision_sum(relevant: impl Iterator<Item = bool>) -> (f64, usize) {
    let (mut sum, mut found) = (0.0, 0usize);
    for (i, hit) in relevant.enumerate() {
        if hit {
            found += 1;
            sum += found as f64 / (i + 1) as f64;
        }
    }
    (sum, found)
}

/// Context precision without reference, as RAGAS computes it from one relevance verdict per
/// retrieved context (rank order): the mean of precision@k over the ranks k that hold a relevant
/// context, so a useful context at rank 1 counts more than at rank 5. 0 when none is relevant;
/// `None` when nothing was retrieved.
pub fn context_precision(verdicts: &[bool]) -> Option<f64> {
    if verdicts.is_empty() {
        return None;
    }
    let (sum, found) = precision_sum(verdicts.iter().copied());
    Some(if found == 0 { 0.0 } else { sum / found as f64 })
}

/// The p-th percentile (0..=100) by nearest rank; `None` for no values.
pub fn percentile(values: &mut [f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil().max(1.0) as usize;
    Some(values[rank.min(values.len()) - 1])
}

#[cfg(test)]
mod retrieval_tests {
    use super::*;
    use crate::trace::Gold;

    /// The worked example: grades [0, 2, 3, 1, 1] at ranks 1..5, four relevant documents.
    #[test]
    fn worked_example() {
        let ids = ["a", "b", "c", "d", "e"];
        let gold = Gold {
            relevant_ids: vec![],
            relevance: [("b", 2.0), ("c", 3.0), ("d", 1.0), ("e", 1.0), ("a", 0.0)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        };
        let ranked: Vec<Option<&str>> = ids.iter().map(|i| Some(*i)).collect();
        let s = retrieval_scores(&ranked, &gold, &[3, 5]).unwrap();
        assert_eq!(s.recall_at[0], (3, 0.5));
        assert!((s.precision_at[0].1 - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.reciprocal_rank, 0.5);
        assert!((s.ndcg_at[1].1 - 0.632).abs() < 5e-4, "{}", s.ndcg_at[1].1);
        let ap = (1.0 / 2.0 + 2.0 / 3.0 + 3.0 / 4.0 + 4.0 / 5.0) / 4.0;
        assert!((s.average_precision - ap).abs() < 1e-12);
    }

    #[test]
    fn binary_labels_and_misses() {
        let gold = Gold {
            relevant_ids: vec!["x".into(), "z".into()],
            relevance: Default::default(),
        };
        let s = retrieval_scores(&[Some("y"), Some("x"), None], &gold, &[1, 2]).unwrap();
        assert_eq!(s.recall_at, vec![(1, 0.0), (2, 0.5)]);
        assert_eq!(s.reciprocal_rank, 0.5);
        assert!(
            (s.average_precision - 0.25).abs() < 1e-12,
            "one of two relevant found at rank 2"
        );
        assert!(retrieval_scores(&[Some("y")], &Gold::default(), &[1]).is_none());
    }

    #[test]
    fn percentiles() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&mut v, 50.0), Some(3.0));
        assert_eq!(percentile(&mut v, 95.0), Some(5.0));
        assert_eq!(percentile(&mut [], 50.0), None);
    }

    #[test]
    fn context_precision_weights_rank() {
        assert_eq!(context_precision(&[]), None);
        assert_eq!(context_precision(&[false, false]), Some(0.0));
        assert_eq!(context_precision(&[true, false, false]), Some(1.0));
        assert_eq!(context_precision(&[false, true]), Some(0.5));
        // [1, 0, 1]: (1/1 + 2/3) / 2
        let v = context_precision(&[true, false, true]).unwrap();
        assert!((v - 5.0 / 6.0).abs() < 1e-12);
    }
}
