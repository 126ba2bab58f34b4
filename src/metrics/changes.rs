//! What changed: the families that say which questions are new, which traces retrieval did not
//! cover, and which sources' traces are low, as counters the rules pool across replicas; the
//! thresholds of those rules; the sketches' size.

use prometheus::{GaugeVec, IntCounter, IntCounterVec, IntGauge, Registry};

use super::family::{counter, gauge, int_gauge};
use crate::changes::Novelty;

/// Label values of `coverage`.
pub(crate) const COVERAGE: [&str; 2] = ["covered", "uncovered"];
/// Label values of `low`, by `bool as usize`.
const LOW: [&str; 2] = ["false", "true"];
/// Label values of `judge`, by the attribution's judge index.
const JUDGES: [&str; 2] = ["offline", "llm"];

/// Every series of the declared strata (and sources), resolved at start.
#[derive(Debug, Clone)]
pub(crate) struct ChangesMetrics {
    /// By stratum, then [`Novelty::ALL`].
    questions: Vec<[IntCounter; 3]>,
    /// By stratum, then [`COVERAGE`]; empty without a coverage level.
    coverage: Vec<[IntCounter; 2]>,
    /// By stratum, judge, then low.
    verdicts: Vec<[[IntCounter; 2]; 2]>,
    /// By stratum, source, judge, then low; empty without sources.
    sources: Vec<Vec<[[IntCounter; 2]; 2]>>,
    /// By stratum.
    ids: Vec<IntGauge>,
}

/// What the families are made for.
pub(crate) struct Dimensions<'a> {
    pub strata: &'a [String],
    /// Source label values (declared, `other`, `unknown`); empty without sources.
    pub sources: &'a [String],
    /// Whether a coverage level is set.
    pub coverage: bool,
    /// The rules' thresholds, as exported.
    pub thresholds: &'a [(&'static str, f64)],
}

fn per_judge_low(v: &IntCounterVec, prefix: &[&str]) -> [[IntCounter; 2]; 2] {
    JUDGES.map(|j| {
        LOW.map(|low| {
            let mut labels = prefix.to_vec();
            labels.extend([j, low]);
            v.with_label_values(&labels)
        })
    })
}

impl ChangesMetrics {
    /// Registers the families on `r` and creates every series at zero.
    pub fn register(r: &Registry, d: &Dimensions<'_>) -> Self {
        let questions = counter(
            r,
            "ragwatch_questions_total",
            "Questions by stratum and novelty: new (no near neighbour among the stratum's sampled questions older than changes.novelty.known_after_secs and within the baseline window), known, unchecked (no reference old enough yet, or no words).",
            &["stratum", "novelty"],
        );
        let verdicts = counter(
            r,
            "ragwatch_changes_verdicts_total",
            "Verdicts the change attribution counted, by stratum, judge and whether they are low (faithfulness below changes.low_faithfulness, or another metric below its level in changes.low_scores).",
            &["stratum", "judge", "low"],
        );
        let ids = int_gauge(
            r,
            "ragwatch_suspect_ids",
            "Document ids this replica's suspect sketches hold, by stratum (bounded by changes.capacity times 10 epochs).",
            &["stratum"],
        );
        let threshold = gauge(
            r,
            "ragwatch_changes_threshold",
            "Thresholds of the what-changed rules, from [changes.rules].",
            &["rule"],
        );
        set_thresholds(&threshold, d.thresholds);
        let coverage = d.coverage.then(|| {
            counter(
                r,
                "ragwatch_retrieval_coverage_total",
                "Traces whose first context has a retriever score, by stratum and whether that score reaches changes.coverage.level (covered) or not (uncovered).",
                &["stratum", "coverage"],
            )
        });
        let sources = (!d.sources.is_empty()).then(|| {
            counter(
                r,
                "ragwatch_source_verdicts_total",
                "Verdicts on traces that retrieved a context from a source, by stratum, source (declared, other, unknown), judge and low; a trace counts once per distinct source.",
                &["stratum", "source", "judge", "low"],
            )
        });
        Self {
            questions: d
                .strata
                .iter()
                .map(|s| Novelty::ALL.map(|n| questions.with_label_values(&[s.as_str(), n.name()])))
                .collect(),
            coverage: coverage.map_or_else(Vec::new, |c| {
                d.strata
                    .iter()
                    .map(|s| COVERAGE.map(|v| c.with_label_values(&[s.as_str(), v])))
                    .collect()
            }),
            verdicts: d
                .strata
                .iter()
                .map(|s| per_judge_low(&verdicts, &[s]))
                .collect(),
            sources: sources.map_or_else(Vec::new, |v| {
                d.strata
                    .iter()
                    .map(|s| {
                        d.sources
                            .iter()
                            .map(|src| per_judge_low(&v, &[s, src]))
                            .collect()
                    })
                    .collect()
            }),
            ids: d
                .strata
                .iter()
                .map(|s| ids.with_label_values(&[s.as_str()]))
                .collect(),
        }
    }

    /// Counts one question of `stratum`.
    pub fn question(&self, stratum: usize, novelty: Novelty) {
        let i = Novelty::ALL.iter().position(|n| *n == novelty);
        if let Some(c) = self
            .questions
            .get(stratum)
            .zip(i)
            .and_then(|(q, i)| q.get(i))
        {
            c.inc();
        }
    }

    /// Counts one trace of `stratum` whose first context's score was or was not covered.
    pub fn coverage(&self, stratum: usize, covered: bool) {
        if let Some(c) = self.coverage.get(stratum) {
            c[usize::from(!covered)].inc();
        }
    }

    /// Counts one verdict of judge index `judge` on a trace of `stratum` from `sources` (indexes
    /// into the source label values).
    pub fn verdict(
        &self,
        stratum: usize,
        judge: usize,
        low: bool,
        sources: impl Iterator<Item = usize>,
    ) {
        if let Some(c) = self.verdicts.get(stratum) {
            c[judge][usize::from(low)].inc();
        }
        if let Some(per_source) = self.sources.get(stratum) {
            for s in sources {
                if let Some(c) = per_source.get(s) {
                    c[judge][usize::from(low)].inc();
                }
            }
        }
    }

    /// Sets the ids `stratum`'s sketches hold.
    pub fn ids_held(&self, stratum: usize, ids: usize) {
        if let Some(g) = self.ids.get(stratum) {
            g.set(ids as i64);
        }
    }
}

fn set_thresholds(g: &GaugeVec, thresholds: &[(&'static str, f64)]) {
    for (rule, v) in thresholds {
        g.with_label_values(&[rule]).set(*v);
    }
}
