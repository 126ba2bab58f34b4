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

/// Why a sampled trace was not judged by the sampled judge; a label value of
/// `ragwatch_traces_skipped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The bounded judge queue was full.
    QueueFull,
    /// A rate-sampled trace the budget could not cover (expected when traffic outgrows it).
    Budget,
    /// A stratum's guaranteed sample skipped: even the budget's reserve is spent.
    BudgetReserve,
    /// Still queued or in flight when the grace period ran out (not acked: redelivered).
    Shutdown,
    /// The judge call failed after its retries.
    JudgeError,
}

impl SkipReason {
    /// Every reason, for pre-registering series.
    pub const ALL: [SkipReason; 5] = [
        SkipReason::QueueFull,
        SkipReason::Budget,
        SkipReason::BudgetReserve,
        SkipReason::Shutdown,
        SkipReason::JudgeError,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::QueueFull => "queue_full",
            SkipReason::Budget => "budget",
            SkipReason::BudgetReserve => "budget_reserve",
            SkipReason::Shutdown => "shutdown",
            SkipReason::JudgeError => "judge_error",
        }
    }
}

/// How one judge call ended: the `outcome` label of `ragwatch_judge_requests_total`, and the
/// status of a failed call's verdict record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JudgeOutcome {
    /// A verdict with a faithfulness score.
    Ok,
    /// A verdict whose answer makes no claims (its own outcome, never a score).
    NoClaims,
    /// A verdict reused from the cache: no call was made.
    Cached,
    /// The reply did not validate, after the re-ask.
    ParseError,
    /// The reply hit its token limit, after the retry with room.
    Truncated,
    /// The trace deadline passed.
    Timeout,
    /// 429 after the retries.
    RateLimited,
    /// Another HTTP status or a transport failure after the retries.
    HttpError,
    /// The budget could not cover the call.
    BudgetExhausted,
}

impl JudgeOutcome {
    /// Every outcome, for pre-registering series.
    pub const ALL: [JudgeOutcome; 9] = [
        JudgeOutcome::Ok,
        JudgeOutcome::NoClaims,
        JudgeOutcome::Cached,
        JudgeOutcome::ParseError,
        JudgeOutcome::Truncated,
        JudgeOutcome::Timeout,
        JudgeOutcome::RateLimited,
        JudgeOutcome::HttpError,
        JudgeOutcome::BudgetExhausted,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            JudgeOutcome::Ok => "ok",
            JudgeOutcome::NoClaims => "no_claims",
            JudgeOutcome::Cached => "cached",
            JudgeOutcome::ParseError => "parse_error",
            JudgeOutcome::Truncated => "truncated",
            JudgeOutcome::Timeout => "timeout",
            JudgeOutcome::RateLimited => "rate_limited",
            JudgeOutcome::HttpError => "http_error",
            JudgeOutcome::BudgetExhausted => "budget_exhausted",
        }
    }
}
