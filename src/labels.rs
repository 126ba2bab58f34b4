//! Labels: the bounded sets every metric, config key and rule is keyed by. The bottom layer: it
//! imports nothing from the crate, and everything above names metrics and judges through it.
//!
//! Adding a judge metric means adding a variant to [`Metric`] (and teaching the judges to score it);
//! config keys, window rings, gauges and the combined estimate follow from [`Metric::ALL`].

use serde::{Deserialize, Serialize};

/// A scored quality metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Share of the answer's claims supported by the contexts.
    Faithfulness,
    /// How well the answer addresses the question.
    AnswerRelevancy,
    /// How relevant the retrieved contexts are to the question (retrieval quality).
    ContextRelevance,
}

impl Metric {
    /// Every metric, in label order.
    pub const ALL: [Metric; 3] = [
        Metric::Faithfulness,
        Metric::AnswerRelevancy,
        Metric::ContextRelevance,
    ];

    /// The label value and config key.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Faithfulness => "faithfulness",
            Metric::AnswerRelevancy => "answer_relevancy",
            Metric::ContextRelevance => "context_relevance",
        }
    }

    /// Parses a label value.
    pub fn from_name(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// Where a score comes from; a label value. `Offline` and `Llm` are judges that produce verdicts;
/// `Combined` is the estimate built from both (offline on every trace, LLM verdicts on the sample),
/// on the LLM judge's scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JudgeKind {
    /// The zero-cost lexical judge.
    Offline,
    /// A language model behind an OpenAI-compatible API.
    Llm,
    /// The prediction-powered estimate of the LLM judge's mean (see `window::estimate`).
    Combined,
}

impl JudgeKind {
    /// The judges that produce verdicts, for pre-registering series and window rings.
    pub const ALL: [JudgeKind; 2] = [JudgeKind::Offline, JudgeKind::Llm];

    /// Every label value, estimates included: what drift rules and thresholds are keyed by.
    pub const RULED: [JudgeKind; 3] = [JudgeKind::Offline, JudgeKind::Llm, JudgeKind::Combined];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            JudgeKind::Offline => "offline",
            JudgeKind::Llm => "llm",
            JudgeKind::Combined => "combined",
        }
    }
}

/// Index into the stratifier's names; cheap to copy and to use as a map key.
pub type StratumId = usize;

/// The stratum of traces that name none and match no rule.
pub const DEFAULT_STRATUM: &str = "default";

/// The stratum of traces naming a stratum that is not declared (bounded label cardinality).
pub const OTHER_STRATUM: &str = "other";
