//! The offline judge: zero cost, deterministic, no network, microseconds per trace.
//!
//! It computes cheap lexical signals ([`Features`]) and combines them with a logistic model
//! ([`OfflineModel`]) trained by `ragwatch train-offline` on human-labelled RAG answers. The model's
//! probability that the answer is faithful is the faithfulness score; answers near the decision
//! threshold are marked `uncertain`, which steers the LLM judge's sample towards them.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::text::{Token, TokenSet, bigrams, content_tokens, sentences};
use super::{Citations, JudgeKind, Verdict, clean_score};
use crate::trace::Trace;

/// The committed model, produced by `ragwatch train-offline`.
const MODEL_JSON: &str = include_str!("offline_model.json");

static REFUSAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(i (cannot|can't|can not|am unable to|'m unable to|do not know|don't know)|i'm sorry|i am sorry|unable to (answer|provide|find|determine)|(does|do) not (provide|contain|mention|include|specify|say)|(no|not enough|insufficient) (specific )?information|not (mentioned|provided|specified|stated|available) in|there is no (mention|information)|cannot (be )?(answer|determine))",
    )
    .expect("static regex")
});

static HEDGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(may|might|possibly|likely|probably|generally|typically|usually|approximately|around|about|some|often|could)\b")
        .expect("static regex")
});

static ADVICE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(important to|recommend|consult|it is best|should always|keep in mind|note that|in general|overall|in summary|in conclusion|additionally|furthermore|also)\b")
        .expect("static regex")
});

static CITATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\[([A-Za-z][A-Za-z0-9_.:-]{0,39}|[0-9]{1,3})\]").expect("static regex")
});

/// Number of features.
pub const FEATURES: usize = 28;

/// The signals the offline judge computes for one trace. All finite.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Features {
    /// Mean over answer sentences of the share of their content tokens found in the contexts.
    pub mean_support: f64,
    /// The least supported sentence's support.
    pub min_support: f64,
    /// Share of sentences with support below one half.
    pub weak_sentence_share: f64,
    /// Share of the answer's token pairs found as pairs in the contexts.
    pub bigram_support: f64,
    /// ln(1 + numbers in the answer found in no context).
    pub novel_numbers: f64,
    /// ln(1 + capitalised names in the answer found in no context).
    pub novel_names: f64,
    /// Share of the answer's distinct tokens found neither in the contexts nor in the question.
    pub novel_token_share: f64,
    /// ln(1 + answer content tokens).
    pub answer_len: f64,
    /// ln(1 + context content tokens).
    pub context_len: f64,
    /// Hedging words per answer sentence.
    pub hedges: f64,
    /// Share of the question's tokens that the answer uses.
    pub query_overlap: f64,
    /// 1 when the answer declines to answer.
    pub refusal: f64,
    /// Citations that point at no retrieved context.
    pub bad_citations: f64,
    /// Share of all answer tokens (not per sentence) found in the contexts.
    pub token_support: f64,
    /// ln(1 + distinct answer tokens found neither in the contexts nor in the question).
    pub novel_tokens: f64,
    /// ln(1 + the longest run of consecutive answer tokens absent from the contexts).
    pub longest_novel_run: f64,
    /// Share of the answer's token triples found as triples in the contexts.
    pub trigram_support: f64,
    /// ln(1 + sentences with support below one half).
    pub weak_sentences: f64,
    /// ln(1 + answer sentences).
    pub sentences: f64,
    /// Share of distinct answer tokens whose five-letter prefix occurs in no context.
    pub novel_prefix_share: f64,
    /// Support of the answer's last sentence (add-on sentences are where baseless detail goes).
    pub last_support: f64,
    /// Advice and generic add-on phrases per sentence ("it is important", "consult", "recommend").
    pub advice: f64,
    /// ln(answer tokens / context tokens), answers long for their evidence invent more.
    pub length_ratio: f64,
    /// ln(1 + distinct answer token pairs found in no context).
    pub novel_bigrams: f64,
    /// ln(1 + distinct long (7+ letters) answer words found in no context: specific terms).
    pub novel_long_words: f64,
    /// Share of the question's tokens found in the contexts: low when retrieval missed, which is
    /// when generators make things up.
    pub query_context_overlap: f64,
    /// ln(1 + the most novel tokens in any one sentence).
    pub max_novel_in_sentence: f64,
    /// Share of sentences with no token outside the contexts and the question.
    pub clean_sentence_share: f64,
}

impl Features {
    /// Names, in the order of [`Features::to_vec`].
    pub const NAMES: [&'static str; FEATURES] = [
        "mean_support",
        "min_support",
        "weak_sentence_share",
        "bigram_support",
        "novel_numbers",
        "novel_names",
        "novel_token_share",
        "answer_len",
        "context_len",
        "hedges",
        "query_overlap",
        "refusal",
        "bad_citations",
        "token_support",
        "novel_tokens",
        "longest_novel_run",
        "trigram_support",
        "weak_sentences",
        "sentences",
        "novel_prefix_share",
        "last_support",
        "advice",
        "length_ratio",
        "novel_bigrams",
        "novel_long_words",
        "query_context_overlap",
        "max_novel_in_sentence",
        "clean_sentence_share",
    ];

    /// The features as a vector, in [`Features::NAMES`] order.
    pub fn to_vec(&self) -> [f64; FEATURES] {
        [
            self.mean_support,
            self.min_support,
            self.weak_sentence_share,
            self.bigram_support,
            self.novel_numbers,
            self.novel_names,
            self.novel_token_share,
            self.answer_len,
            self.context_len,
            self.hedges,
            self.query_overlap,
            self.refusal,
            self.bad_citations,
            self.token_support,
            self.novel_tokens,
            self.longest_novel_run,
            self.trigram_support,
            self.weak_sentences,
            self.sentences,
            self.novel_prefix_share,
            self.last_support,
            self.advice,
            self.length_ratio,
            self.novel_bigrams,
            self.novel_long_words,
            self.query_context_overlap,
            self.max_novel_in_sentence,
            self.clean_sentence_share,
        ]
    }
}

/// A standardised logistic model over [`Features`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfflineModel {
    /// Feature names, checked against [`Features::NAMES`] at load.
    pub features: Vec<String>,
    /// Per-feature mean used for standardisation.
    pub mean: Vec<f64>,
    /// Per-feature standard deviation used for standardisation.
    pub std: Vec<f64>,
    /// Weights on the standardised features.
    pub weights: Vec<f64>,
    /// Intercept.
    pub bias: f64,
    /// Probabilities within this distance of 0.5 are `uncertain`.
    pub uncertain_band: f64,
    /// How the model was made: data, folds, cross-validated AUROC, date.
    pub report: serde_json::Value,
}

impl OfflineModel {
    /// The model committed with this build.
    pub fn committed() -> OfflineModel {
        let model: OfflineModel =
            serde_json::from_str(MODEL_JSON).expect("the committed offline model is valid JSON");
        assert!(
            model.is_consistent(),
            "the committed offline model matches Features::NAMES"
        );
        model
    }

    /// Whether the vectors line up with [`Features::NAMES`].
    pub fn is_consistent(&self) -> bool {
        let n = Features::NAMES.len();
        self.features.iter().map(String::as_str).eq(Features::NAMES)
            && self.mean.len() == n
            && self.std.len() == n
            && self.weights.len() == n
    }

    /// Probability that the answer is faithful.
    pub fn predict(&self, x: &[f64]) -> f64 {
        let mut z = self.bias;
        for (((x, w), mean), std) in x.iter().zip(&self.weights).zip(&self.mean).zip(&self.std) {
            let s = if *std > 0.0 { *std } else { 1.0 };
            z += w * (x - mean) / s;
        }
        1.0 / (1.0 + (-z).exp())
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

impl OfflineJudge {
    /// A judge with this model.
    pub fn new(model: OfflineModel) -> Self {
        Self { model }
    }

    /// The model in use.
    pub fn model(&self) -> &OfflineModel {
        &self.model
    }

    /// Scores one trace.
    pub fn judge(&self, trace: &Trace) -> Verdict {
        let (features, citations, claims, context_relevance) =
            extract_with_context_relevance(trace);
        let refusal = features.refusal > 0.0;
        let faithfulness = if claims == 0 || refusal {
            None
        } else {
            clean_score(self.model.predict(&features.to_vec()))
        };
        let answer_relevancy = if refusal {
            Some(0.0)
        } else {
            clean_score(relevancy(&features))
        };
        let uncertain = faithfulness.is_some_and(|p| (p - 0.5).abs() < self.model.uncertain_band);
        Verdict {
            judge: JudgeKind::Offline,
            faithfulness,
            answer_relevancy,
            refusal,
            uncertain,
            citations,
            context_relevance: context_relevance.and_then(clean_score),
            details: serde_json::json!({ "sentences": claims, "features": features }),
        }
    }
}

/// Relevancy from question-answer overlap: an answer that uses most of the question's terms scores
/// high; a short overlap still earns partial credit because answers paraphrase.
fn relevancy(f: &Features) -> f64 {
    (f.query_overlap * 1.6).sqrt().min(1.0)
}

/// Computes the features of one trace, its citations, and its number of claim-bearing sentences.
pub fn extract(trace: &Trace) -> (Features, Citations, usize) {
    let (f, c, n, _) = extract_with_context_relevance(trace);
    (f, c, n)
}

/// [`extract`], plus the offline context relevance: for each retrieved context, the share of the
/// question's distinct terms it contains, averaged with rank weights 1/rank (a useful context at rank 1
/// counts more than at rank 5). A cheap proxy for RAGAS's reference-free context precision; `None`
/// without contexts or question terms.
pub fn extract_with_context_relevance(trace: &Trace) -> (Features, Citations, usize, Option<f64>) {
    let mut ctx_tokens: Vec<Token> = Vec::with_capacity(512);
    let mut ctx_bigrams = Vec::with_capacity(512);
    let mut spans = Vec::with_capacity(trace.contexts.len());
    for c in &trace.contexts {
        let start = ctx_tokens.len();
        content_tokens(&c.text, &mut ctx_tokens);
        ctx_bigrams.extend(bigrams(&ctx_tokens[start..]));
        spans.push(start..ctx_tokens.len());
    }
    let ctx = TokenSet::from_hashes(ctx_tokens.iter().map(|t| t.hash).collect());
    let ctx_prefixes = TokenSet::from_hashes(ctx_tokens.iter().map(|t| t.prefix).collect());
    let ctx_pairs = TokenSet::from_hashes(ctx_bigrams);
    let mut ctx_triples = Vec::with_capacity(ctx_tokens.len());
    for c in ctx_tokens.windows(3) {
        ctx_triples.push(trigram(&c[0], &c[1], &c[2]));
    }
    let ctx_triples = TokenSet::from_hashes(ctx_triples);
    let mut q_tokens = Vec::with_capacity(32);
    content_tokens(&trace.query, &mut q_tokens);
    let query = TokenSet::from_hashes(q_tokens.iter().map(|t| t.hash).collect());

    let mut f = Features::default();
    let mut sentence_count = 0usize;
    let mut min_support: f64 = 1.0;
    let mut weak = 0usize;
    let (mut pairs, mut pairs_found) = (0usize, 0usize);
    let mut novel_pairs: Vec<u64> = Vec::with_capacity(64);
    let (mut triples, mut triples_found) = (0usize, 0usize);
    let (mut run, mut longest_run) = (0usize, 0usize);
    let (mut max_novel, mut clean) = (0usize, 0usize);
    let mut answer_tokens: Vec<Token> = Vec::with_capacity(128);
    let mut sent = Vec::with_capacity(64);
    for s in sentences(&trace.answer) {
        sent.clear();
        content_tokens(s, &mut sent);
        if sent.is_empty() {
            continue;
        }
        let found = sent.iter().filter(|t| ctx.contains(t.hash)).count();
        let support = found as f64 / sent.len() as f64;
        f.mean_support += support;
        f.last_support = support;
        min_support = min_support.min(support);
        if support < 0.5 {
            weak += 1;
        }
        for b in bigrams(&sent) {
            pairs += 1;
            if ctx_pairs.contains(b) {
                pairs_found += 1;
            } else {
                novel_pairs.push(b);
            }
        }
        for t in sent.windows(3) {
            triples += 1;
            triples_found += usize::from(ctx_triples.contains(trigram(&t[0], &t[1], &t[2])));
        }
        let novel_here = sent
            .iter()
            .filter(|t| !ctx.contains(t.hash) && !query.contains(t.hash))
            .count();
        max_novel = max_novel.max(novel_here);
        clean += usize::from(novel_here == 0);
        for t in &sent {
            if ctx.contains(t.hash) {
                run = 0;
            } else {
                run += 1;
                longest_run = longest_run.max(run);
            }
        }
        sentence_count += 1;
        answer_tokens.extend_from_slice(&sent);
    }
    if sentence_count > 0 {
        f.mean_support /= sentence_count as f64;
        f.min_support = min_support;
        f.weak_sentence_share = weak as f64 / sentence_count as f64;
        f.hedges = HEDGE.find_iter(&trace.answer).count() as f64 / sentence_count as f64;
        f.advice = ADVICE.find_iter(&trace.answer).count() as f64 / sentence_count as f64;
    }
    f.bigram_support = if pairs > 0 {
        pairs_found as f64 / pairs as f64
    } else {
        f.mean_support
    };
    let novel = |pred: fn(&Token) -> bool| {
        let mut h: Vec<u64> = answer_tokens
            .iter()
            .filter(|t| pred(t) && !ctx.contains(t.hash))
            .map(|t| t.hash)
            .collect();
        h.sort_unstable();
        h.dedup();
        (h.len() as f64).ln_1p()
    };
    f.novel_numbers = novel(|t| t.number);
    f.novel_names = novel(|t| t.name && !t.number);
    let distinct = TokenSet::from_hashes(answer_tokens.iter().map(|t| t.hash).collect());
    let novel_tokens = answer_tokens
        .iter()
        .map(|t| t.hash)
        .filter(|&h| !ctx.contains(h) && !query.contains(h))
        .collect::<Vec<_>>();
    let novel_distinct = TokenSet::from_hashes(novel_tokens).len() as f64;
    f.novel_tokens = novel_distinct.ln_1p();
    f.novel_token_share = if distinct.is_empty() {
        0.0
    } else {
        novel_distinct / distinct.len() as f64
    };
    f.answer_len = (answer_tokens.len() as f64).ln_1p();
    f.novel_bigrams = (TokenSet::from_hashes(novel_pairs).len() as f64).ln_1p();
    f.novel_long_words = (TokenSet::from_hashes(
        answer_tokens
            .iter()
            .filter(|t| t.long && !ctx.contains(t.hash) && !query.contains(t.hash))
            .map(|t| t.hash)
            .collect(),
    )
    .len() as f64)
        .ln_1p();
    f.length_ratio = f.answer_len - (ctx_tokens.len() as f64).ln_1p();
    f.novel_prefix_share = if distinct.is_empty() {
        0.0
    } else {
        let mut novel: Vec<u64> = answer_tokens
            .iter()
            .filter(|t| !ctx_prefixes.contains(t.prefix))
            .map(|t| t.hash)
            .collect();
        novel.sort_unstable();
        novel.dedup();
        novel.len() as f64 / distinct.len() as f64
    };
    f.token_support = share_in(&answer_tokens, &ctx);
    f.trigram_support = if triples > 0 {
        triples_found as f64 / triples as f64
    } else {
        f.bigram_support
    };
    f.longest_novel_run = (longest_run as f64).ln_1p();
    f.max_novel_in_sentence = (max_novel as f64).ln_1p();
    f.clean_sentence_share = if sentence_count > 0 {
        clean as f64 / sentence_count as f64
    } else {
        0.0
    };
    f.query_context_overlap = share_in(&q_tokens, &ctx);
    f.weak_sentences = (weak as f64).ln_1p();
    f.sentences = (sentence_count as f64).ln_1p();
    f.context_len = (ctx_tokens.len() as f64).ln_1p();
    f.query_overlap = share_in(&q_tokens, &distinct);
    f.refusal = f64::from(u8::from(
        answer_tokens.len() <= 60 && REFUSAL.is_match(&trace.answer),
    ));
    let citations = citations(trace);
    f.bad_citations = f64::from(citations.total - citations.valid);
    let context_relevance = (!query.is_empty() && !spans.is_empty()).then(|| {
        let (mut weighted, mut weights) = (0.0, 0.0);
        for (rank, span) in spans.iter().enumerate() {
            let mut hit: Vec<u64> = ctx_tokens[span.clone()]
                .iter()
                .map(|t| t.hash)
                .filter(|h| query.contains(*h))
                .collect();
            hit.sort_unstable();
            hit.dedup();
            let w = 1.0 / (rank + 1) as f64;
            weighted += w * hit.len() as f64 / query.len() as f64;
            weights += w;
        }
        weighted / weights
    });
    (f, citations, sentence_count, context_relevance)
}

/// Share of `tokens` (with repeats) found in `set`; 0 for no tokens.
fn share_in(tokens: &[Token], set: &TokenSet) -> f64 {
    if tokens.is_empty() {
        0.0
    } else {
        tokens.iter().filter(|t| set.contains(t.hash)).count() as f64 / tokens.len() as f64
    }
}

fn trigram(a: &Token, b: &Token, c: &Token) -> u64 {
    a.hash.rotate_left(29) ^ b.hash.rotate_left(13).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ c.hash
}

fn citations(trace: &Trace) -> Citations {
    let mut c = Citations::default();
    for m in CITATION.captures_iter(&trace.answer) {
        let id = &m[1];
        c.total += 1;
        let valid = match id.parse::<usize>() {
            Ok(n) => {
                (1..=trace.contexts.len()).contains(&n)
                    || trace
                        .contexts
                        .iter()
                        .any(|ctx| ctx.id.as_deref() == Some(id))
            }
            Err(_) => trace
                .contexts
                .iter()
                .any(|ctx| ctx.id.as_deref() == Some(id)),
        };
        c.valid += u32::from(valid);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Context;

    fn trace(query: &str, contexts: &[(&str, &str)], answer: &str) -> Trace {
        Trace {
            trace_id: "t".into(),
            timestamp_ms: None,
            query: query.into(),
            contexts: contexts
                .iter()
                .map(|(id, text)| Context {
                    id: Some((*id).into()),
                    text: (*text).into(),
                    score: None,
                })
                .collect(),
            answer: answer.into(),
            stratum: None,
            metadata: serde_json::Value::Null,
            label_faithful: None,
            gold: None,
        }
    }

    const CTX: &str = "Canada introduced a carbon contract for difference in 2023 to guarantee the price of carbon for investors.";

    #[test]
    fn supported_answer_scores_above_fabricated_one() {
        let j = OfflineJudge::default();
        let q = "What carbon pricing mechanism did Canada introduce in 2023?";
        let good = j.judge(&trace(
            q,
            &[("d1", CTX)],
            "Canada introduced a carbon contract for difference in 2023.",
        ));
        let bad = j.judge(&trace(
            q,
            &[("d1", CTX)],
            "Norway adopted a fishing quota of 4,500 tonnes in 1987 under Olsen.",
        ));
        let (g, b) = (good.faithfulness.unwrap(), bad.faithfulness.unwrap());
        assert!(g > b + 0.2, "good {g} bad {b}");
        assert!(good.answer_relevancy.unwrap() > bad.answer_relevancy.unwrap());
    }

    #[test]
    fn novel_numbers_and_names_are_counted() {
        let (f, _, _) = extract(&trace(
            "q",
            &[("d1", CTX)],
            "It began in 2023 and Smith said 1999.",
        ));
        assert!((f.novel_numbers - 1f64.ln_1p()).abs() < 1e-12);
        assert!((f.novel_names - 1f64.ln_1p()).abs() < 1e-12);
    }

    #[test]
    fn refusal_has_no_claims_score_and_zero_relevancy() {
        let v = OfflineJudge::default().judge(&trace(
            "What is the weather on Mars?",
            &[("d1", CTX)],
            "I'm sorry, the passages do not provide information about that.",
        ));
        assert!(v.refusal);
        assert_eq!(v.faithfulness, None);
        assert_eq!(v.answer_relevancy, Some(0.0));
    }

    #[test]
    fn empty_answer_is_no_claims_not_a_score() {
        let v = OfflineJudge::default().judge(&trace("q?", &[("d1", CTX)], "  ...  "));
        assert_eq!(v.faithfulness, None);
        assert!(!v.refusal);
    }

    #[test]
    fn context_relevance_weights_rank() {
        let q = "What carbon pricing mechanism did Canada introduce in 2023?";
        let off = "Bananas are yellow fruit grown in tropical places.";
        let first = extract_with_context_relevance(&trace(q, &[("a", CTX), ("b", off)], "x"))
            .3
            .unwrap();
        let last = extract_with_context_relevance(&trace(q, &[("b", off), ("a", CTX)], "x"))
            .3
            .unwrap();
        assert!(
            first > last,
            "the useful context at rank 1 counts more: {first} vs {last}"
        );
        assert_eq!(extract_with_context_relevance(&trace(q, &[], "x")).3, None);
        let only_off = extract_with_context_relevance(&trace(q, &[("b", off)], "x"))
            .3
            .unwrap();
        assert_eq!(only_off, 0.0);
    }

    #[test]
    fn citations_checked_against_ids_and_ranks() {
        let t = trace(
            "q",
            &[("doc_3", CTX), ("doc_4", CTX)],
            "A [doc_3]. B [doc_9]. C [2]. D [7].",
        );
        assert_eq!(citations(&t), Citations { total: 4, valid: 2 });
    }

    #[test]
    fn no_contexts_means_no_support() {
        let (f, _, n) = extract(&trace("q", &[], "Paris is the capital of France."));
        assert_eq!(n, 1);
        assert_eq!(f.mean_support, 0.0);
        let v = OfflineJudge::default().judge(&trace("q", &[], "Paris is the capital of France."));
        assert!(v.faithfulness.unwrap() < 0.5);
    }

    #[test]
    fn committed_model_loads_and_is_consistent() {
        assert!(OfflineModel::committed().is_consistent());
    }
}

#[cfg(test)]
mod model_tests {
    use super::*;
    use crate::trace::Context;

    fn trace(query: &str, ctx: &str, answer: &str) -> Trace {
        Trace {
            trace_id: "t".into(),
            timestamp_ms: None,
            query: query.into(),
            contexts: vec![Context {
                id: Some("d1".into()),
                text: ctx.into(),
                score: None,
            }],
            answer: answer.into(),
            stratum: None,
            metadata: serde_json::Value::Null,
            label_faithful: None,
            gold: None,
        }
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
            .map(|(q, a)| j.judge(&trace(q, ctx, a)).faithfulness.unwrap())
            .collect();
        let recorded = [0.9841736514348308, 0.9366253418069969, 0.23455436942949645];
        for (g, r) in got.iter().zip(recorded) {
            assert!((g - r).abs() < 1e-12, "scores changed: {got:?}");
        }
        assert!(got[0] > got[2] && got[1] > got[2]);
    }

    /// `train-offline` reproduces the committed weights exactly from the development set. The data set
    /// is read from `../shared/data` (beside the checkout, as on the developers' machines and in CI).
    #[test]
    fn trainer_reproduces_committed_model() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/ragtruth_qa_train.jsonl");
        let Ok(text) = std::fs::read_to_string(&path) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have {}",
                path.display()
            );
            eprintln!("skipped: {} not present", path.display());
            return;
        };
        let decoder = crate::trace::Decoder::new(&Default::default());
        let traces: Vec<_> = text
            .lines()
            .filter_map(|l| decoder.decode(l.as_bytes()).ok())
            .collect();
        let cfg = super::super::trainer::TrainConfig::default();
        let examples = super::super::trainer::examples(&traces, cfg.folds);
        let committed = OfflineModel::committed();
        let date = committed.report["trained"].as_str().unwrap().to_owned();
        let model = super::super::trainer::train(&examples, &cfg, "ragtruth_qa_train.jsonl", &date);
        assert_eq!(model, committed);
        assert!(model.report["cv_auroc_pooled"].as_f64().unwrap() >= 0.78);
    }

    #[test]
    fn signals_on_hand_cases() {
        let ctx = "Water boils at 100 degrees Celsius at sea level.";
        let (f, _, _) = extract(&trace(
            "At what temperature does water boil?",
            ctx,
            "Water boils at 100 degrees Celsius at sea level.",
        ));
        assert_eq!(f.token_support, 1.0);
        assert_eq!(f.novel_tokens, 0.0);
        assert_eq!(f.clean_sentence_share, 1.0);
        assert!(f.query_context_overlap > 0.5);
        let (f, _, _) = extract(&trace(
            "q",
            ctx,
            "Water boils at 90 degrees. It may possibly vary. It is important to consult a chemist.",
        ));
        assert!((f.novel_numbers - 1f64.ln_1p()).abs() < 1e-12);
        assert!(f.hedges > 0.0 && f.advice > 0.0);
        assert!(f.weak_sentences > 0.0 && f.novel_long_words > 0.0);
        assert!(f.last_support < 0.5);
    }
}
