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

/// Upper bounds of the fixed score buckets in which labelled judge scores are counted (width 0.05):
/// the `le` values of `ragwatch_labelled_score_ratio` and the `bucket` values of
/// `ragwatch_labelled_scores_total`. The
/// AUROC from these counts treats two scores in one bucket as a tie.
pub const LABEL_SCORE_BOUNDS: [f64; 20] = [
    0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85,
    0.9, 0.95, 1.0,
];

/// The bucket of [`LABEL_SCORE_BOUNDS`] a score falls in: the first whose upper bound is at or
/// above it (a histogram's `le`); scores above 1 go to the last.
pub(crate) fn label_score_bucket(score: f64) -> usize {
    LABEL_SCORE_BOUNDS
        .iter()
        .position(|&b| score <= b)
        .unwrap_or(LABEL_SCORE_BOUNDS.len() - 1)
}

/// AUROC from per-bucket counts of positive (faithful) and negative (unfaithful) scores, buckets in
/// ascending score order: the Mann-Whitney statistic with every pair in one bucket counted as a tie
/// (1/2). `None` when a class is empty. The recording rule `ragwatch:label_auroc:ratio_1h` computes
/// the same sum from pooled counters: `sum_b pos_b * (neg_cum_b - neg_b / 2) / (pos * neg)`, where
/// `neg_cum_b` is the negatives in bucket `b` and below (a histogram's cumulative `le` count).
pub(crate) fn auroc_binned(pos: &[u64], neg: &[u64]) -> Option<f64> {
    let (p, n) = (pos.iter().sum::<u64>(), neg.iter().sum::<u64>());
    if p == 0 || n == 0 {
        return None;
    }
    let mut below_and_in = 0u64;
    let mut u = 0.0;
    for (&pb, &nb) in pos.iter().zip(neg) {
        below_and_in += nb;
        u += pb as f64 * (below_and_in as f64 - nb as f64 / 2.0);
    }
    Some(u / (p as f64 * n as f64))
}

/// Confusion counts for "unfaithful" detection: a score below the threshold flags the answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Confusion {
    /// Flagged and labelled unfaithful.
    pub(crate) true_positive: u64,
    /// Flagged but labelled faithful.
    pub(crate) false_positive: u64,
    /// Not flagged but labelled unfaithful.
    pub(crate) false_negative: u64,
    /// Not flagged and labelled faithful.
    pub(crate) true_negative: u64,
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

    /// Adds another set of counts (pooling strata).
    pub fn merge(&mut self, o: &Confusion) {
        self.true_positive += o.true_positive;
        self.false_positive += o.false_positive;
        self.false_negative += o.false_negative;
        self.true_negative += o.true_negative;
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
    fn binned_auroc_hand_computed_with_ties_in_a_bucket() {
        // Three buckets. Positives: 1 in b0, 2 in b2; negatives: 2 in b0, 1 in b1.
        // Pairs (6): the b2 positives beat all 3 negatives (6 wins); the b0 positive ties the two
        // b0 negatives (2 x 1/2) and loses to b1. U = 6 + 1 = 7; AUROC = 7 / (3 * 3) = 7/9.
        let a = auroc_binned(&[1, 0, 2], &[2, 1, 0]).unwrap();
        assert!((a - 7.0 / 9.0).abs() < 1e-12, "{a}");
        // The pooled example of deploy/prometheus/rules_test.yaml: 10.5 of 16 pairs.
        assert_eq!(auroc_binned(&[1, 1, 2], &[2, 1, 1]), Some(0.65625));
        // Everything in one bucket: all ties, 1/2 whatever the scores inside were.
        assert_eq!(auroc_binned(&[5, 0], &[3, 0]), Some(0.5));
        // Perfect, inverted, and a class missing.
        assert_eq!(auroc_binned(&[0, 4], &[4, 0]), Some(1.0));
        assert_eq!(auroc_binned(&[4, 0], &[0, 4]), Some(0.0));
        assert_eq!(auroc_binned(&[4, 0], &[0, 0]), None);
        // Against the exact AUROC: equal when no bucket holds both classes, and pulled towards 1/2
        // by the within-bucket pairs otherwise. Scores 0.81 (faithful) and 0.84 (unfaithful) share
        // the bucket (0.8, 0.85]: exact AUROC counts the pair as a loss, binned as a tie.
        let scores = [0.93, 0.81, 0.84, 0.12];
        let labels = [true, true, false, false];
        let mut pos = [0u64; LABEL_SCORE_BOUNDS.len()];
        let mut neg = [0u64; LABEL_SCORE_BOUNDS.len()];
        for (&s, &l) in scores.iter().zip(&labels) {
            if l {
                pos[label_score_bucket(s)] += 1;
            } else {
                neg[label_score_bucket(s)] += 1;
            }
        }
        assert_eq!(auroc(&scores, &labels), Some(0.75));
        assert_eq!(auroc_binned(&pos, &neg), Some(0.875));
    }

    #[test]
    fn label_score_buckets_are_le_buckets() {
        assert_eq!(label_score_bucket(0.0), 0);
        assert_eq!(label_score_bucket(0.05), 0);
        assert_eq!(label_score_bucket(0.051), 1);
        assert_eq!(label_score_bucket(0.8), 15);
        assert_eq!(label_score_bucket(1.0), 19);
        assert_eq!(label_score_bucket(1.5), 19);
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
    pub(crate) recall_at: Vec<(usize, f64)>,
    /// Precision at each k: relevant in the top k / k.
    pub(crate) precision_at: Vec<(usize, f64)>,
    /// nDCG at each k: gain 2^rel - 1, log2 position discount, normalised by the ideal ranking.
    pub(crate) ndcg_at: Vec<(usize, f64)>,
    /// Reciprocal rank of the first relevant result (0 when none).
    pub(crate) reciprocal_rank: f64,
    /// Average precision (mean of precision at each relevant rank, over all relevant).
    pub(crate) average_precision: f64,
}

/// Scores `ranked` (retrieved ids, best first) against `gold`: an id is relevant when it is in
/// `relevant_ids` or has a grade above 0; grades default to 1 for listed ids. `None` when nothing is
/// relevant (the metrics are undefined, not zero).
pub(crate) fn retrieval_scores(
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
pub(crate) fn context_precision(verdicts: &[bool]) -> Option<f64> {
    if verdicts.is_empty() {
        return None;
    }
    let (sum, found) = precision_sum(verdicts.iter().copied());
    Some(if found == 0 { 0.0 } else { sum / found as f64 })
}

/// The p-th percentile (0..=100) by nearest rank; `None` for no values.
pub(crate) fn percentile(values: &mut [f64], p: f64) -> Option<f64> {
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
