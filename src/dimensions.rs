//! Labels: the bounded sets every metric, config key and rule is keyed by. The bottom layer: it
//! imports nothing from the crate, and everything above names metrics and judges through it.
//!
//! Adding a judge metric means adding a variant to [`Quality`] and its row in [`Quality::spec`] (and
//! teaching the judges to score it); config keys and built-in rules, window rings, the score
//! histogram and its exemplars, gauges, the combined estimate, verdict records and replay's summary
//! follow from [`Quality::ALL`] and [`PerQuality`].

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};

/// A scored quality metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quality {
    /// Share of the answer's claims supported by the contexts.
    Faithfulness,
    /// How well the answer addresses the question.
    AnswerRelevancy,
    /// How relevant the retrieved contexts are to the question (retrieval quality).
    ContextRelevance,
}

/// What the rest of ragwatch knows about a metric, declared once per metric.
#[derive(Debug)]
pub struct QualitySpec {
    /// The label value and config key.
    pub name: &'static str,
    /// The score histogram's family name.
    pub histogram: &'static str,
    /// The score histogram's help text.
    pub(crate) help: &'static str,
    /// The built-in floor of the combined estimate (on the LLM judge's scale).
    pub floor: f64,
    /// The built-in largest drop of the combined estimate below its baseline.
    pub max_drop: f64,
    /// Its shipped alerts: `ragwatch rules` writes their rules, unit tests, dashboard panel and
    /// runbook sections from this row.
    pub alerts: QualityAlerts,
    /// How its verdicts are labelled where they are exported.
    pub labels: VerdictLabels,
}

/// How a metric's verdicts are labelled in verdict export (`[export]`).
#[derive(Debug)]
pub struct VerdictLabels {
    /// A score at or above `export.label_threshold`.
    pub above: VerdictLabel,
    /// A score below it.
    pub below: VerdictLabel,
    /// A verdict without a score: its own outcome (faithfulness: no claims), or nothing to send.
    pub unscored: Option<VerdictLabel>,
    /// A refusal is labelled `refusal` whatever its score.
    pub refusal: bool,
    /// The LLM judge's unsupported claims explain it.
    pub claims_explain: bool,
}

/// What an exported verdict says, from a bounded set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerdictLabel {
    /// Faithfulness at or above the threshold.
    Faithful,
    /// Faithfulness below it.
    Unfaithful,
    /// A relevancy at or above the threshold.
    Relevant,
    /// A relevancy below it.
    Irrelevant,
    /// The answer makes no claims: faithfulness has no score.
    NoClaims,
    /// The answer declines to answer.
    Refusal,
    /// The judge failed on this trace.
    Failed,
}

impl VerdictLabel {
    /// Every label.
    pub const ALL: [VerdictLabel; 7] = [
        VerdictLabel::Faithful,
        VerdictLabel::Unfaithful,
        VerdictLabel::Relevant,
        VerdictLabel::Irrelevant,
        VerdictLabel::NoClaims,
        VerdictLabel::Refusal,
        VerdictLabel::Failed,
    ];

    /// The label as sent.
    pub fn name(self) -> &'static str {
        match self {
            VerdictLabel::Faithful => "faithful",
            VerdictLabel::Unfaithful => "unfaithful",
            VerdictLabel::Relevant => "relevant",
            VerdictLabel::Irrelevant => "irrelevant",
            VerdictLabel::NoClaims => "no_claims",
            VerdictLabel::Refusal => "refusal",
            VerdictLabel::Failed => "failed",
        }
    }
}

/// How a metric's alerts are shipped. Every metric has a floor alert on the combined estimate and
/// a shift warning on the offline judge; these fields say how loud they are and what they mean.
#[derive(Debug)]
pub struct QualityAlerts {
    /// A floor breach pages (`critical`, pending for the short window) rather than warns.
    pub(crate) floor_pages: bool,
    /// A drop of the combined estimate below its 24-hour baseline pages too (a `Drift` alert).
    pub drift: bool,
    /// Strata the config declares out of scope are left out: declining there is right.
    pub(crate) in_scope_only: bool,
    /// The pipeline stage a low score points at, as the alerts' `stage` label.
    pub stage: Option<&'static str>,
    /// What a low score means, closing the floor alert's description (one clause, no full stop).
    pub(crate) meaning: &'static str,
    /// The runbook's advice when the floor alert fires (Markdown).
    pub(crate) floor_advice: &'static str,
    /// The runbook's advice when the shift warning fires (Markdown).
    pub(crate) shift_advice: &'static str,
}

impl Quality {
    /// Every metric, in label order (the order of [`Quality::spec`]'s table).
    pub const ALL: [Quality; 3] = [
        Quality::Faithfulness,
        Quality::AnswerRelevancy,
        Quality::ContextRelevance,
    ];
    /// How many metrics there are.
    pub(crate) const COUNT: usize = Quality::ALL.len();
    /// The metric a rollout gate compares when none is named.
    pub const GATED: Quality = Quality::Faithfulness;

    /// The metric's row.
    pub const fn spec(self) -> &'static QualitySpec {
        const SPECS: [QualitySpec; Quality::COUNT] = [
            QualitySpec {
                name: "faithfulness",
                histogram: "ragwatch_faithfulness_ratio",
                help: "Faithfulness scores (supported claims / claims), by stratum and judge.",
                floor: 0.7,
                max_drop: 0.05,
                alerts: QualityAlerts {
                    floor_pages: true,
                    drift: true,
                    in_scope_only: false,
                    stage: None,
                    meaning: "the answers state things their retrieved contexts do not support",
                    floor_advice: "- **Check**: the dashboard's faithfulness panels by judge: does the LLM judge's own mean agree? Did\n  the offline judge move too (a shift warning, inhibited while this fires)? Read a few verdict records\n  of the stratum (`records_path`): which claims are unsupported, and by what contexts.\n- **Then**: what changed: the generator model or prompt (`metadata.model`, `prompt_version` in the\n  traces), the retriever (context counts and scores), the document index. The diagnosis names the\n  stage to look at first (see `RagwatchDiagnosis`). Roll back the change; the alert resolves when the\n  upper bound is back above the floor.",
                    shift_advice: "- **Check**: whether the combined estimate of the stratum is moving too (faithfulness panels); the\n  verdict records of the stratum; what was deployed around the start. A change in the question mix of\n  the stratum (a new customer, a campaign) also shifts it without anything being broken.\n- **Then**: if the LLM judge confirms, treat it as the faithfulness page above; if it does not after an\n  hour of samples, the offline judge is reacting to something the LLM judge does not see (new wording,\n  new document formats): note it, and raise `shift_sd` for the stratum if it repeats.",
                },
                labels: VerdictLabels {
                    above: VerdictLabel::Faithful,
                    below: VerdictLabel::Unfaithful,
                    unscored: Some(VerdictLabel::NoClaims),
                    refusal: true,
                    claims_explain: true,
                },
            },
            QualitySpec {
                name: "answer_relevancy",
                histogram: "ragwatch_answer_relevancy_ratio",
                help: "Answer relevancy scores, by stratum and judge.",
                floor: 0.6,
                max_drop: 0.1,
                alerts: QualityAlerts {
                    floor_pages: false,
                    drift: false,
                    in_scope_only: true,
                    stage: None,
                    meaning: "the answers address their questions poorly",
                    floor_advice: "Often a prompt change, a truncated generation, or retrieval bringing off-topic passages. Check\n`prompt_version` and the answers' lengths in the traces; compare with context relevance (off-topic\ncontexts) before blaming the prompt.",
                    shift_advice: "Usually a prompt or template change, truncated generations, or a new kind of question. Check the\nstratum's answers in the verdict records and the combined answer relevancy; act as for\n`RagwatchAnswerRelevancyBelowFloor`.",
                },
                labels: VerdictLabels {
                    above: VerdictLabel::Relevant,
                    below: VerdictLabel::Irrelevant,
                    unscored: None,
                    refusal: true,
                    claims_explain: false,
                },
            },
            QualitySpec {
                name: "context_relevance",
                histogram: "ragwatch_context_relevance_ratio",
                help: "Rank-weighted relevance of the retrieved contexts to the question (retrieval quality), by stratum and judge.",
                floor: 0.3,
                max_drop: 0.15,
                alerts: QualityAlerts {
                    floor_pages: false,
                    drift: false,
                    in_scope_only: true,
                    stage: Some("retrieval"),
                    meaning: "the retriever, index or embedding model is the first suspect, before the generator",
                    floor_advice: "Look at the retriever before the generator: an index rebuild, an embedding model change, a\nchunking change, a filter dropping documents, or new questions the corpus does not cover (compare\n`ragwatch_retrieval_score` and `ragwatch_contexts_retrieved` on the Retrieval panel; their shift\noften comes first).",
                    shift_advice: "Retrieval got worse for the stratum: look at the retriever before the generator, as for\n`RagwatchContextRelevanceBelowFloor`.",
                },
                labels: VerdictLabels {
                    above: VerdictLabel::Relevant,
                    below: VerdictLabel::Irrelevant,
                    unscored: None,
                    refusal: false,
                    claims_explain: false,
                },
            },
        ];
        &SPECS[self.index()]
    }

    /// The position in [`Quality::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The label value and config key.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Parses a label value.
    #[cfg(test)]
    pub(crate) fn from_name(s: &str) -> Option<Quality> {
        Quality::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// One value per metric, indexed by [`Quality`]; serialized as a map from metric name to value.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PerQuality<T>([T; Quality::COUNT]);

impl<T> PerQuality<T> {
    /// Builds each metric's value with `f`.
    pub(crate) fn from_fn(mut f: impl FnMut(Quality) -> T) -> Self {
        PerQuality(Quality::ALL.map(&mut f))
    }

    /// Every metric with its value, in label order.
    pub fn iter(&self) -> impl Iterator<Item = (Quality, &T)> {
        Quality::ALL.into_iter().zip(self.0.iter())
    }

    /// Every metric with its value, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Quality, &mut T)> {
        Quality::ALL.into_iter().zip(self.0.iter_mut())
    }

    /// Sets `metric`'s value, for building.
    pub fn with(mut self, metric: Quality, value: T) -> Self {
        self[metric] = value;
        self
    }
}

impl<T> std::ops::Index<Quality> for PerQuality<T> {
    type Output = T;
    fn index(&self, m: Quality) -> &T {
        &self.0[m.index()]
    }
}

impl<T> std::ops::IndexMut<Quality> for PerQuality<T> {
    fn index_mut(&mut self, m: Quality) -> &mut T {
        &mut self.0[m.index()]
    }
}

impl<T: Serialize> Serialize for PerQuality<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(Quality::COUNT))?;
        for (m, v) in self.iter() {
            map.serialize_entry(m.name(), v)?;
        }
        map.end()
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
    /// A small trained model: an encoder and a head (`[classifier]`).
    Classifier,
    /// The prediction-powered estimate of the LLM judge's mean (see `window::estimate`).
    Combined,
}

impl JudgeKind {
    /// The judges that produce verdicts, for pre-registering series and window rings.
    pub const ALL: [JudgeKind; 3] = [JudgeKind::Offline, JudgeKind::Llm, JudgeKind::Classifier];

    /// The judges whose series every deployment starts at zero; the classifier's start when it
    /// runs (`Metrics::start_judge`).
    pub const STARTED: [JudgeKind; 2] = [JudgeKind::Offline, JudgeKind::Llm];

    /// Every label value, estimates included: what drift rules and thresholds are keyed by.
    pub(crate) const RULED: [JudgeKind; 4] = [
        JudgeKind::Offline,
        JudgeKind::Llm,
        JudgeKind::Classifier,
        JudgeKind::Combined,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            JudgeKind::Offline => "offline",
            JudgeKind::Llm => "llm",
            JudgeKind::Classifier => "classifier",
            JudgeKind::Combined => "combined",
        }
    }
}

/// Index into the stratifier's names; cheap to copy and to use as a map key.
pub(crate) type StratumId = usize;

/// The stratum of traces that name none and match no rule.
pub(crate) const DEFAULT_STRATUM: &str = "default";

/// The stratum of traces naming a stratum that is not declared (bounded label cardinality).
pub(crate) const OTHER_STRATUM: &str = "other";

/// Why a sampled trace was not judged by the sampled judge; a label value of
/// `ragwatch_traces_skipped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SkipReason {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_listed_in_declaration_order_and_their_names_round_trip() {
        for (i, m) in Quality::ALL.into_iter().enumerate() {
            assert_eq!(m.index(), i);
            assert_eq!(Quality::from_name(m.name()), Some(m));
            // Config keys are read through serde: the same name.
            assert_eq!(serde_json::to_value(m).unwrap(), m.name());
            assert_eq!(m.spec().histogram, format!("ragwatch_{}_ratio", m.name()));
        }
    }

    #[test]
    fn per_metric_values_serialize_as_a_map_by_metric_name() {
        let v = PerQuality::<Option<f64>>::default().with(Quality::AnswerRelevancy, Some(0.5));
        assert_eq!(
            serde_json::to_value(v).unwrap(),
            serde_json::json!({"faithfulness": null, "answer_relevancy": 0.5, "context_relevance": null})
        );
    }
}
