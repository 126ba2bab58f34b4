//! The offline judge: zero cost, deterministic, no network, microseconds per trace.
//!
//! It computes cheap lexical signals ([`Features`]) and combines them with a logistic model
//! ([`OfflineModel`]) trained by `ragwatch train-offline` ([`trainer`]) on human-labelled RAG
//! answers. The model's probability that the answer is faithful is the faithfulness score; answers
//! near the decision threshold are marked `uncertain`, which steers the LLM judge's sample towards
//! them.
//!
//! # From a trace to a score
//! ```text
//! Trace { query, contexts, answer }
//!   ├─ sentences   the answer's sentences (claims)
//!   │   └─ tokenizer   each text to content tokens (token: a 64-bit hash of a stem or number, with
//!   │       flags)
//!   │       (scan: 64 bytes at a time; words: stopwords, stems, hashes, memoised; stopwords)
//!   ├─ index       the answer's tokens, prefixes, pairs and triples, and the question's tokens, in
//!   │              reusable hash sets (sets)
//!   ├─ extract     the contexts stream through once, token by token, marking what they hold;
//!   │              then every per-sentence and per-token count
//!   ├─ phrases     refusal, hedge and advice vocabularies over the answer
//!   ├─ citations   [doc_3], [2] against the retrieved contexts
//!   └─ features    the counts as the 28 signals
//!       └─ model   the logistic model: the faithfulness probability
//!           └─ OfflineScore: faithfulness, answer relevancy, context relevance, refusal, uncertain
//! ```
//!
//! It runs on every trace, so it is built to cost little: each text is tokenized once into hashes
//! that every signal shares; the sets it probes are reusable hash sets in a per-thread scratch, so a
//! worker allocates nothing per trace once its buffers have grown; the phrase lists are one
//! Aho-Corasick automaton over the answer. A plain implementation of every signal, over strings and
//! standard sets, sits beside it in the tests (`reference/`), and property tests hold the two
//! equal on generated traces.

mod citations;
mod extract;
mod features;
mod index;
mod model;
mod phrases;
#[cfg(test)]
mod reference;
mod scan;
mod sentences;
mod sets;
mod stopwords;
mod token;
mod tokenizer;
pub mod trainer;
mod words;

use std::cell::RefCell;
use std::sync::LazyLock;

use serde::Serialize;

pub(crate) use extract::{Scratch, extract_with};
pub(crate) use features::Extraction;
pub use features::{FEATURES, Features};
pub use model::OfflineModel;
pub(crate) use scan::word_count;
pub(crate) use stopwords::is_stopword;

use super::{JudgeKind, PerQuality, Quality, Verdict, clean_score};
use crate::trace::Trace;

/// Feature indices in name order: `details.features` is a JSON object, which serde_json keeps
/// sorted by key, so [`OfflineDetails`] writes the features in this order.
static NAMES_SORTED: LazyLock<[usize; FEATURES]> = LazyLock::new(|| {
    let mut order: [usize; FEATURES] = std::array::from_fn(|i| i);
    order.sort_by_key(|&i| Features::NAMES[i]);
    order
});

/// The offline judge's scores for one trace, without the allocations of a [`Verdict`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OfflineScore {
    /// The model's probability that the answer is faithful; `None` for no claims or a refusal.
    pub faithfulness: Option<f64>,
    /// From question-answer overlap; 0 for a refusal.
    pub(crate) answer_relevancy: Option<f64>,
    /// The answer declines to answer.
    pub(crate) refusal: bool,
    /// The score is within the model's uncertain band of 0.5.
    pub(crate) uncertain: bool,
    /// The signals behind the scores.
    pub(crate) extraction: Extraction,
}

impl OfflineScore {
    /// The verdict, with the features in `details` (for verdict records and `replay` output).
    pub(crate) fn verdict(&self) -> Verdict {
        Verdict {
            details: self.details(),
            ..self.verdict_without_details()
        }
    }

    /// The verdict with `details` left `null`: building that JSON object costs more than the judge
    /// itself, and on the ingest path nothing reads it.
    pub(crate) fn verdict_without_details(&self) -> Verdict {
        Verdict {
            judge: JudgeKind::Offline,
            scores: PerQuality::default()
                .with(Quality::Faithfulness, self.faithfulness)
                .with(Quality::AnswerRelevancy, self.answer_relevancy)
                .with(
                    Quality::ContextRelevance,
                    self.extraction.context_relevance.and_then(clean_score),
                ),
            refusal: self.refusal,
            uncertain: self.uncertain,
            citations: self.extraction.citations,
            details: serde_json::Value::Null,
        }
    }

    /// `{"features": {name: value...}, "sentences": n}` as JSON.
    pub(crate) fn details(&self) -> serde_json::Value {
        serde_json::to_value(self.details_ref()).unwrap_or(serde_json::Value::Null)
    }

    /// The same `details`, borrowed, to serialise straight into a verdict record: `replay` writes
    /// these bytes without building the JSON object.
    pub(crate) fn details_ref(&self) -> OfflineDetails<'_> {
        OfflineDetails {
            features: SortedFeatures(&self.extraction.features),
            sentences: self.extraction.sentences,
        }
    }
}

/// An offline verdict's `details`, borrowed from its [`OfflineScore`]: serialises as
/// `{"features": {name: value...}, "sentences": n}`, the features by name (as a JSON object keeps
/// them), a non-finite value as `null`.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct OfflineDetails<'a> {
    features: SortedFeatures<'a>,
    sentences: usize,
}

#[derive(Debug, Clone, Copy)]
struct SortedFeatures<'a>(&'a Features);

impl Serialize for SortedFeatures<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let values = self.0.to_vec();
        let mut map = s.serialize_map(Some(FEATURES))?;
        for &i in NAMES_SORTED.iter() {
            map.serialize_entry(Features::NAMES[i], &values[i])?;
        }
        map.end()
    }
}

/// The offline judge.
#[derive(Debug, Clone)]
pub struct OfflineJudge {
    model: OfflineModel,
}

impl Default for OfflineJudge {
    fn default() -> Self {
        Self::new(OfflineModel::committed())
    }
}

thread_local! {
    /// Each thread that judges keeps one scratch: the source task's thread on the ingest path, the
    /// pool's threads for sampled re-judging. Borrowed only inside one synchronous call.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

impl OfflineJudge {
    /// A judge with this model.
    pub(crate) fn new(model: OfflineModel) -> Self {
        Self { model }
    }

    /// The model in use.
    pub(crate) fn model(&self) -> &OfflineModel {
        &self.model
    }

    /// Scores one trace, with the features in the verdict's `details`.
    pub fn judge(&self, trace: &Trace) -> Verdict {
        self.score(trace).verdict()
    }

    /// Scores one trace with this thread's reusable buffers.
    pub fn score(&self, trace: &Trace) -> OfflineScore {
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => {
                let score = self.score_with(trace, &mut scratch);
                scratch.release_if_large();
                score
            }
            // Only reachable if scoring ever re-entered itself on this thread.
            Err(_) => self.score_with(trace, &mut Scratch::default()),
        })
    }

    /// Scores one trace with the caller's buffers.
    pub(crate) fn score_with(&self, trace: &Trace, scratch: &mut Scratch) -> OfflineScore {
        let extraction = extract_with(trace, scratch);
        let features = &extraction.features;
        let refusal = features.refusal > 0.0;
        let faithfulness = if !extraction.is_scored() {
            None
        } else {
            clean_score(self.model.predict(&features.to_vec()))
        };
        let answer_relevancy = if refusal {
            Some(0.0)
        } else {
            clean_score(relevancy(features))
        };
        let uncertain = faithfulness.is_some_and(|p| (p - 0.5).abs() < self.model.uncertain_band);
        OfflineScore {
            faithfulness,
            answer_relevancy,
            refusal,
            uncertain,
            extraction,
        }
    }
}

/// Relevancy from question-answer overlap: an answer that uses most of the question's terms scores
/// high; a short overlap still earns partial credit because answers paraphrase.
fn relevancy(f: &Features) -> f64 {
    (f.query_overlap * 1.6).sqrt().min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: &str = "Canada introduced a carbon contract for difference in 2023 to guarantee the price of carbon for investors.";

    #[test]
    fn supported_answer_scores_above_fabricated_one() {
        let j = OfflineJudge::default();
        let q = "What carbon pricing mechanism did Canada introduce in 2023?";
        let good = j.judge(&Trace::of(
            q,
            &[("d1", CTX)],
            "Canada introduced a carbon contract for difference in 2023.",
        ));
        let bad = j.judge(&Trace::of(
            q,
            &[("d1", CTX)],
            "Norway adopted a fishing quota of 4,500 tonnes in 1987 under Olsen.",
        ));
        let (g, b) = (good.faithfulness().unwrap(), bad.faithfulness().unwrap());
        assert!(g > b + 0.2, "good {g} bad {b}");
        assert!(
            good.score(Quality::AnswerRelevancy).unwrap()
                > bad.score(Quality::AnswerRelevancy).unwrap()
        );
    }

    #[test]
    fn refusal_has_no_claims_score_and_zero_relevancy() {
        let v = OfflineJudge::default().judge(&Trace::of(
            "What is the weather on Mars?",
            &[("d1", CTX)],
            "I'm sorry, the passages do not provide information about that.",
        ));
        assert!(v.refusal);
        assert_eq!(v.faithfulness(), None);
        assert_eq!(v.score(Quality::AnswerRelevancy), Some(0.0));
    }

    #[test]
    fn empty_answer_is_no_claims_not_a_score() {
        let v = OfflineJudge::default().judge(&Trace::of("q?", &[("d1", CTX)], "  ...  "));
        assert_eq!(v.faithfulness(), None);
        assert!(!v.refusal);
    }

    #[test]
    fn no_contexts_means_no_support() {
        let v =
            OfflineJudge::default().judge(&Trace::of("q", &[], "Paris is the capital of France."));
        assert!(v.faithfulness().unwrap() < 0.5);
    }

    /// The committed model scores a fixed set exactly as recorded; a retrained model must update this.
    #[test]
    fn committed_model_scores_fixed_set_identically() {
        let j = OfflineJudge::default();
        let ctx = "The museum opens at 9 am and closes at 5 pm. Entry costs 12 euros for adults and is free for children under 12.";
        let cases = [
            (
                "When does the museum open?",
                "The museum opens at 9 am and closes at 5 pm.",
            ),
            (
                "How much is entry?",
                "Entry costs 12 euros for adults; children under 12 enter free.",
            ),
            (
                "How much is entry?",
                "Entry costs 25 euros, and the curator Paul Dubois recommends booking the rooftop terrace restaurant in advance.",
            ),
        ];
        let got: Vec<f64> = cases
            .iter()
            .map(|(q, a)| {
                j.judge(&Trace::of(q, &[("d1", ctx)], a))
                    .faithfulness()
                    .unwrap()
            })
            .collect();
        let recorded = [0.9121895129179689, 0.7271160215693512, 0.03643984448862637];
        for (g, r) in got.iter().zip(recorded) {
            assert!((g - r).abs() < 1e-12, "scores changed: {got:?}");
        }
        assert!(got[0] > got[2] && got[1] > got[2]);
    }
}
