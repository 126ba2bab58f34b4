//! The judges and their bounded work queue.

use crate::dimensions::JudgeKind;
use crate::section::problems::Problems;
use serde::{Deserialize, Serialize};

/// Which judge scores the sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampledJudge {
    /// No second judge: the sample decision is counted only.
    None,
    /// The offline judge, run again on the sample (useful for testing the queue path).
    Offline,
    /// The LLM judge (`[llm]`, `[budget]`).
    Llm,
    /// The classifier judge (`[classifier]`), built with the cargo feature `classifier`.
    Classifier,
}

impl SampledJudge {
    /// The judge whose verdicts the sampled judge records: the offline judge's again or none
    /// count as the offline judge.
    pub fn kind(self) -> JudgeKind {
        match self {
            SampledJudge::None | SampledJudge::Offline => JudgeKind::Offline,
            SampledJudge::Llm => JudgeKind::Llm,
            SampledJudge::Classifier => JudgeKind::Classifier,
        }
    }

    /// The judges that produce verdicts: the offline judge, and the sampled one when it is another.
    pub fn verdict_judges(self) -> Vec<JudgeKind> {
        let mut judges = vec![JudgeKind::Offline];
        if self.kind() != JudgeKind::Offline {
            judges.push(self.kind());
        }
        judges
    }
}

/// Which judge's score stands in for the sampled judge's on every trace in the combined estimate
/// (its prediction), the sampled judge's verdicts correcting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Prediction {
    /// The offline judge, on every trace at no cost.
    Offline,
    /// The classifier (`[classifier]`), on every trace it keeps pace with: a trace its queue has
    /// no room for keeps the offline judge's score, counted by judge on
    /// `ragwatch_estimate_predictions_total`.
    Classifier,
}

impl Prediction {
    /// The judge whose scores it is.
    pub fn kind(self) -> JudgeKind {
        match self {
            Prediction::Offline => JudgeKind::Offline,
            Prediction::Classifier => JudgeKind::Classifier,
        }
    }
}

/// Judges and their bounded work queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeConfig {
    /// The judge that runs on sampled traces.
    #[serde(default = "default_sampled_judge")]
    pub sampled: SampledJudge,
    /// Sampled traces waiting for a judge; when full, a trace is skipped with reason `queue_full`.
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
    /// Concurrent sampled-judge workers.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Answers whose offline faithfulness is below this count as unfaithful in labelled evaluation.
    #[serde(default = "default_threshold")]
    pub faithful_threshold: f64,
    /// The combined estimate's prediction: the judge scored on every trace whose error the LLM
    /// judge's verdicts on the sample correct. `"classifier"` needs `sampled = "llm"` and
    /// `[classifier]`.
    #[serde(default = "default_prediction")]
    pub prediction: Prediction,
}

crate::section::fields::default_from_serde!(JudgeConfig);

fn default_sampled_judge() -> SampledJudge {
    SampledJudge::None
}

fn default_queue_capacity() -> usize {
    256
}

fn default_workers() -> usize {
    4
}

fn default_prediction() -> Prediction {
    Prediction::Offline
}

fn default_threshold() -> f64 {
    0.5
}

impl JudgeConfig {
    /// Checks `[judge]`.
    pub(crate) fn validate(&self, p: &mut Problems) {
        if self.queue_capacity == 0 {
            p.add("judge.queue_capacity", "must be > 0");
        }
        if self.workers == 0 {
            p.add("judge.workers", "must be > 0");
        }
        p.ratio("judge.faithful_threshold", self.faithful_threshold);
        if self.prediction == Prediction::Classifier && self.sampled != SampledJudge::Llm {
            p.add(
                "judge.prediction",
                "\"classifier\" is a prediction for the LLM judge's combined estimate: needs sampled = \"llm\"",
            );
        }
    }

    /// The judges that produce verdicts: the offline judge, the sampled one when it is another,
    /// and the classifier when it is the prediction.
    pub fn verdict_judges(&self) -> Vec<JudgeKind> {
        let mut judges = self.sampled.verdict_judges();
        if self.prediction == Prediction::Classifier && !judges.contains(&JudgeKind::Classifier) {
            judges.push(JudgeKind::Classifier);
        }
        judges
    }

    /// Whether the classifier runs, as the sampled judge or as the prediction.
    pub fn classifier_runs(&self) -> bool {
        self.sampled == SampledJudge::Classifier || self.prediction == Prediction::Classifier
    }
}
