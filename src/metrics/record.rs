//! The recording helpers the ingest path calls for every trace: each goes through the stratum's
//! kept series ([`super::series`]) and falls back to a label lookup for a stratum or judge
//! without them.

use super::Metrics;
use super::judge::JUDGE_DURATION;
use super::series::{RANKS, rank_bucket, with};
use crate::dimensions::{JudgeKind, Quality, StratumId};
use crate::window::EstimateSums;

impl Metrics {
    /// Counts one decoded trace of `stratum` (named `name`): the trace, its number of contexts,
    /// and the retriever score of each context that has one, by rank.
    pub(crate) fn count_received(
        &self,
        stratum: StratumId,
        name: &str,
        contexts: usize,
        scores: impl Iterator<Item = Option<f64>>,
    ) {
        let series = self.series.get(stratum);
        let received = series.map(|s| &s.received);
        with(
            received,
            || self.ingest.traces_received.with_label_values(&[name]),
            |c| c.inc(),
        );
        with(
            series.map(|s| &s.contexts),
            || self.ingest.contexts_retrieved.with_label_values(&[name]),
            |h| h.observe(contexts as f64),
        );
        for (i, score) in scores.enumerate() {
            if let Some(score) = score {
                let rank = rank_bucket(i);
                with(
                    series.map(|s| &s.retrieval[rank]),
                    || {
                        self.ingest
                            .retrieval_score
                            .with_label_values(&[name, RANKS[rank]])
                    },
                    |h| h.observe(score),
                );
                if i == 0 {
                    with(
                        series.map(|s| &s.retrieval_top_squares),
                        || self.ingest.retrieval_top_squares.with_label_values(&[name]),
                        |c| c.inc_by(score * score),
                    );
                }
            }
        }
    }

    /// Counts one trace of `stratum` chosen for the sampled judge.
    pub(crate) fn count_sampled(&self, stratum: StratumId, name: &str) {
        with(
            self.series.get(stratum).map(|s| &s.sampled),
            || self.sample.traces_sampled.with_label_values(&[name]),
            |c| c.inc(),
        );
    }

    /// Counts one verdict of `judge` on a trace of `stratum`: the verdict, a refusal, an answer
    /// without claims, and (when it has any) its citations, valid and not.
    pub(crate) fn count_verdict(
        &self,
        stratum: StratumId,
        name: &str,
        judge: JudgeKind,
        refusal: bool,
        no_claims: bool,
        citations: Option<crate::judge::Citations>,
    ) {
        let series = self.series.get(stratum);
        let js = series.and_then(|s| s.judge(judge));
        let labels = [name, judge.name()];
        with(
            js.map(|j| &j.judged),
            || self.verdicts.traces_judged.with_label_values(&labels),
            |c| c.inc(),
        );
        if refusal {
            with(
                js.map(|j| &j.refusals),
                || self.verdicts.refusals.with_label_values(&labels),
                |c| c.inc(),
            );
        }
        if no_claims {
            with(
                js.map(|j| &j.no_claims),
                || self.verdicts.no_claims.with_label_values(&labels),
                |c| c.inc(),
            );
        }
        if let Some(c) = citations {
            for (i, (valid, n)) in [("true", c.valid), ("false", c.total - c.valid)]
                .into_iter()
                .enumerate()
            {
                with(
                    series.map(|s| &s.citations[i]),
                    || self.verdicts.citations.with_label_values(&[name, valid]),
                    |counter| counter.inc_by(u64::from(n)),
                );
            }
        }
    }

    /// Creates every term of the combined estimate at zero for `strata`, so a recording rule's
    /// `increase()` sees each series start from zero rather than at its first trace's value.
    pub(crate) fn precreate_estimate_terms(&self, strata: &[String], predictions: &[JudgeKind]) {
        for s in strata {
            for j in predictions {
                self.verdicts
                    .estimate_predictions
                    .with_label_values(&[s, j.name()]);
            }
            for metric in Quality::ALL {
                for term in EstimateSums::TERMS {
                    self.verdicts
                        .estimate_terms
                        .with_label_values(&[metric.name(), s, term]);
                }
            }
        }
    }

    /// Adds one trace's or pair's estimate sums to the exported terms.
    pub(crate) fn add_estimate_terms(
        &self,
        metric: Quality,
        stratum: StratumId,
        name: &str,
        sums: &EstimateSums,
    ) {
        let cells = self.series.get(stratum).map(|s| &s.estimate[metric]);
        for (i, (term, v)) in EstimateSums::TERMS.iter().zip(sums.terms()).enumerate() {
            if v != 0.0 {
                with(
                    cells.map(|c| &c[i]),
                    || {
                        self.verdicts
                            .estimate_terms
                            .with_label_values(&[metric.name(), name, term])
                    },
                    |c| c.inc_by(v),
                );
            }
        }
    }

    /// Observes one score of `metric` by `judge` on a trace of `stratum`, with the trace as the
    /// bucket's exemplar, and adds its square to the sum of squares.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn observe_score(
        &self,
        metric: Quality,
        stratum: StratumId,
        name: &str,
        judge: JudgeKind,
        v: f64,
        trace_id: &str,
        now_ms: u64,
    ) {
        let js = self.series.get(stratum).and_then(|s| s.judge(judge));
        let labels = [name, judge.name()];
        with(
            js.map(|j| &j.scores[metric]),
            || self.verdicts.scores[metric].with_label_values(&labels),
            |h| h.observe(v),
        );
        with(
            js.map(|j| &j.squares[metric]),
            || {
                self.verdicts
                    .score_squares
                    .with_label_values(&[metric.name(), name, judge.name()])
            },
            |c| c.inc_by(v * v),
        );
        let histogram = metric.spec().histogram;
        match js {
            Some(j) => {
                let series =
                    j.exemplars[metric].get_or_init(|| self.exemplars.handle(histogram, &labels));
                if let Some(series) = series {
                    self.exemplars.record_in(series, v, trace_id, now_ms);
                }
            }
            None => self
                .exemplars
                .record(histogram, &labels, v, trace_id, now_ms),
        }
    }

    /// Observes one judge call's latency with the judged trace as the bucket's exemplar.
    pub(crate) fn observe_judge_duration(
        &self,
        judge: &str,
        secs: f64,
        trace_id: &str,
        now_ms: u64,
    ) {
        self.judge
            .duration
            .with_label_values(&[judge])
            .observe(secs);
        self.exemplars
            .record(JUDGE_DURATION, &[judge], secs, trace_id, now_ms);
    }
}
