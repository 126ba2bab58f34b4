//! The series every trace touches, kept per stratum once looked up.
//!
//! A label lookup (`with_label_values`) hashes the label values and takes the family's read lock;
//! the ingest path made some twenty of them per trace. Here each (stratum, judge, metric, ...)
//! handle is looked up on its first use and kept, so a trace costs a few atomic adds. Resolving on
//! first use rather than up front keeps `/metrics` showing exactly the series it showed before.

use std::sync::OnceLock;

use prometheus::{Counter, Histogram, IntCounter};

use super::exemplars::SeriesExemplars;
use crate::dimensions::{JudgeKind, PerQuality};
use crate::window::EstimateSums;

/// The rank buckets of `ragwatch_retrieval_score`, by a context's 0-based position.
pub(crate) const RANKS: [&str; 3] = ["1", "2-3", "4+"];

/// Which of [`RANKS`] the context at 0-based position `i` falls in.
pub(crate) fn rank_bucket(i: usize) -> usize {
    match i {
        0 => 0,
        1 | 2 => 1,
        _ => 2,
    }
}

/// One stratum's handles, each looked up on first use.
#[derive(Debug, Default)]
pub(crate) struct StratumSeries {
    pub(super) received: OnceLock<IntCounter>,
    pub(super) sampled: OnceLock<IntCounter>,
    pub(super) contexts: OnceLock<Histogram>,
    /// By [`RANKS`].
    pub(super) retrieval: [OnceLock<Histogram>; RANKS.len()],
    /// The first context's squared retriever score.
    pub(super) retrieval_top_squares: OnceLock<Counter>,
    /// `valid="true"`, then `valid="false"`.
    pub(super) citations: [OnceLock<IntCounter>; 2],
    /// By [`JudgeKind::ALL`].
    pub(super) judges: [JudgeSeries; JudgeKind::ALL.len()],
    /// By [`EstimateSums::TERMS`].
    pub(super) estimate: PerQuality<[OnceLock<Counter>; EstimateSums::TERMS.len()]>,
}

/// One stratum's handles for one judge.
#[derive(Debug, Default)]
pub(super) struct JudgeSeries {
    pub(super) judged: OnceLock<IntCounter>,
    pub(super) refusals: OnceLock<IntCounter>,
    pub(super) no_claims: OnceLock<IntCounter>,
    pub(super) scores: PerQuality<OnceLock<Histogram>>,
    pub(super) squares: PerQuality<OnceLock<Counter>>,
    /// The score histograms' exemplars (`None`: the histogram keeps none).
    pub(super) exemplars: PerQuality<OnceLock<Option<SeriesExemplars>>>,
}

impl StratumSeries {
    /// The handles of `judge`.
    pub(super) fn judge(&self, judge: JudgeKind) -> Option<&JudgeSeries> {
        let i = JudgeKind::ALL.iter().position(|k| *k == judge)?;
        self.judges.get(i)
    }
}

/// Applies `f` to the handle in `cell`, looking it up with `resolve` the first time; without a
/// cell (a stratum or judge the cache was not built for) every call looks it up.
pub(super) fn with<T>(cell: Option<&OnceLock<T>>, resolve: impl FnOnce() -> T, f: impl FnOnce(&T)) {
    match cell {
        Some(cell) => f(cell.get_or_init(resolve)),
        None => f(&resolve()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::dimensions::Quality;
    use crate::metrics::Metrics;

    #[test]
    fn kept_handles_count_on_the_labelled_series() {
        let m = Metrics::new(&["head".to_owned(), "tail".to_owned()], "test");
        for _ in 0..3 {
            m.count_received(1, "tail", 2, [Some(0.9), None].into_iter());
            m.observe_score(
                Quality::Faithfulness,
                1,
                "tail",
                JudgeKind::Llm,
                0.5,
                "t1",
                0,
            );
        }
        m.count_verdict(1, "tail", JudgeKind::Offline, true, false, None);
        assert_eq!(
            m.ingest.traces_received.with_label_values(&["tail"]).get(),
            3
        );
        assert_eq!(
            m.ingest.traces_received.with_label_values(&["head"]).get(),
            0
        );
        let rank1 = m.ingest.retrieval_score.with_label_values(&["tail", "1"]);
        assert_eq!(rank1.get_sample_count(), 3);
        let h = m.verdicts.scores[Quality::Faithfulness].with_label_values(&["tail", "llm"]);
        assert_eq!((h.get_sample_count(), h.get_sample_sum()), (3, 1.5));
        let squares = m
            .verdicts
            .score_squares
            .with_label_values(&["faithfulness", "tail", "llm"]);
        assert_eq!(squares.get(), 0.75);
        // The score's exemplar went to its series through the kept handle.
        let kept = m
            .exemplars
            .series(Quality::Faithfulness.spec().histogram, |l| {
                [("stratum", "tail"), ("judge", "llm")]
                    .into_iter()
                    .find_map(|(k, v)| (k == l).then_some(v))
            });
        assert_eq!(kept.iter().flatten().count(), 1);
        assert_eq!(m.exemplars.len(), 1);
        assert_eq!(
            m.verdicts
                .refusals
                .with_label_values(&["tail", "offline"])
                .get(),
            1
        );
        assert_eq!(
            m.verdicts
                .refusals
                .with_label_values(&["tail", "llm"])
                .get(),
            0
        );
        // The combined judge has no kept handles; a stratum id past the cache neither: both are
        // looked up by name every time, and still counted.
        m.count_verdict(7, "other", JudgeKind::Combined, false, true, None);
        assert_eq!(
            m.verdicts
                .no_claims
                .with_label_values(&["other", "combined"])
                .get(),
            1
        );
    }

    #[test]
    fn ranks_bucket_positions() {
        let buckets: Vec<&str> = (0..6).map(|i| RANKS[rank_bucket(i)]).collect();
        assert_eq!(buckets, ["1", "2-3", "2-3", "4+", "4+", "4+"]);
    }
}
