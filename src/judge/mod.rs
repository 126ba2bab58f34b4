//! Judges: score a trace's faithfulness (are the answer's claims supported by the contexts?) and
//! answer relevancy (does it address the question?).
//!
//! The offline judge runs inline on every trace; the sampled judge runs on the sample, off the ingest
//! path, through a bounded queue (the pipeline owns the queue and the pool).

pub mod classifier;
pub mod config;
pub mod llm;
mod offline;
pub(crate) mod records;

pub use offline::{FEATURES, Features, OfflineJudge, OfflineModel, OfflineScore, trainer};
pub(crate) use offline::{is_stopword, word_count};

use serde::Serialize;

use crate::dimensions::{JudgeKind, PerQuality, Quality};

/// A judge's scores for one trace. Scores are finite and in [0, 1] or absent; never NaN.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// The judge.
    pub judge: JudgeKind,
    /// Each metric's score, absent when the judge has none: faithfulness when the answer makes no
    /// claims (its own outcome, never a score), answer relevancy is 0 for a refusal. In a verdict
    /// record, one key per metric.
    #[serde(flatten)]
    pub scores: PerQuality<Option<f64>>,
    /// The answer declines to answer.
    pub refusal: bool,
    /// The judge is unsure (its score is near its decision threshold).
    pub uncertain: bool,
    /// Citations found in the answer and how many point at a retrieved context.
    pub citations: Citations,
    /// Judge-specific detail for the verdict record (features, claims, raw output).
    pub details: serde_json::Value,
}

/// Citation counts of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Citations {
    /// Citations in the answer (`[doc_3]`, `[2]`).
    pub total: u32,
    /// Of those, the ones naming a retrieved context.
    pub valid: u32,
}

impl Verdict {
    /// The score for `metric`.
    pub fn score(&self, metric: Quality) -> Option<f64> {
        self.scores[metric]
    }

    /// The faithfulness score; `None` is the no-claims outcome.
    pub fn faithfulness(&self) -> Option<f64> {
        self.scores[Quality::Faithfulness]
    }
}

/// Clamps to [0, 1] and maps NaN to `None`, so no judge can leak a NaN downstream.
pub(crate) fn clean_score(v: f64) -> Option<f64> {
    if v.is_nan() {
        None
    } else {
        Some(v.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
impl Verdict {
    /// A verdict with only a faithfulness score, for tests.
    pub(crate) fn with_faithfulness(judge: JudgeKind, faithfulness: f64) -> Self {
        Verdict {
            judge,
            scores: PerQuality::default().with(Quality::Faithfulness, Some(faithfulness)),
            refusal: false,
            uncertain: false,
            citations: Citations::default(),
            details: serde_json::Value::Null,
        }
    }
}
