//! The offline judge: zero cost, deterministic, no network, microseconds per trace.
//!
//! It computes cheap lexical signals ([`Features`]) and combines them with a logistic model
//! ([`OfflineModel`]) trained by `ragwatch train-offline` on human-labelled RAG answers. The model's
//! probability that the answer is faithful is the faithfulness score; answers near the decision
//! threshold are marked `uncertain`, which steers the LLM judge's sample towards them.
//!
//! It runs on every trace, so it is built to cost little: each text is tokenized once into 64-bit
//! hashes that every signal shares; the sets it probes are reusable hash sets in a per-thread
//! [`Scratch`], so a worker allocates nothing per trace once its buffers have grown; the phrase lists
//! are one Aho-Corasick automaton, ASCII case-insensitive, over the answer. The scores are bit-identical to the
//! first, simpler implementation the committed model was trained with (the tests hold both).

use std::cell::RefCell;
use std::ops::Range;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickKind};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::text::{HashSet64, Sentences, Token, Tokenizer, bigram, trigram};
use super::{Citations, JudgeKind, PerQuality, Quality, Verdict, clean_score};
use crate::trace::Trace;

/// The committed model, produced by `ragwatch train-offline`.
const MODEL_JSON: &str = include_str!("offline_model.json");

/// Declares the features once: the struct, its field order, [`FEATURES`], [`Features::NAMES`] and
/// [`Features::to_vec`] all come from this list, so they cannot disagree. The order is the committed
/// model's vector order: append, never reorder.
macro_rules! features {
    ($($(#[$doc:meta])+ $name:ident,)+) => {
        /// The signals the offline judge computes for one trace. All finite.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
        pub struct Features {
            $($(#[$doc])+ pub $name: f64,)+
        }

        /// Number of features.
        pub const FEATURES: usize = [$(stringify!($name)),+].len();

        impl Features {
            /// Names, in the order of [`Features::to_vec`].
            pub const NAMES: [&'static str; FEATURES] = [$(stringify!($name)),+];

            /// The features as a vector, in [`Features::NAMES`] order.
            pub fn to_vec(&self) -> [f64; FEATURES] {
                [$(self.$name),+]
            }
        }
    };
}

features! {
    /// Mean over answer sentences of the share of their content tokens found in the contexts.
    mean_support,
    /// The least supported sentence's support.
    min_support,
    /// Share of sentences with support below one half.
    weak_sentence_share,
    /// Share of the answer's token pairs found as pairs in the contexts.
    bigram_support,
    /// ln(1 + numbers in the answer found in no context).
    novel_numbers,
    /// ln(1 + capitalised names in the answer found in no context).
    novel_names,
    /// Share of the answer's distinct tokens found neither in the contexts nor in the question.
    novel_token_share,
    /// ln(1 + answer content tokens).
    answer_len,
    /// ln(1 + context content tokens).
    context_len,
    /// Hedging words per answer sentence.
    hedges,
    /// Share of the question's tokens that the answer uses.
    query_overlap,
    /// 1 when the answer declines to answer.
    refusal,
    /// Citations that point at no retrieved context.
    bad_citations,
    /// Share of all answer tokens (not per sentence) found in the contexts.
    token_support,
    /// ln(1 + distinct answer tokens found neither in the contexts nor in the question).
    novel_tokens,
    /// ln(1 + the longest run of consecutive answer tokens absent from the contexts).
    longest_novel_run,
    /// Share of the answer's token triples found as triples in the contexts.
    trigram_support,
    /// ln(1 + sentences with support below one half).
    weak_sentences,
    /// ln(1 + answer sentences).
    sentences,
    /// Share of distinct answer tokens whose five-letter prefix occurs in no context.
    novel_prefix_share,
    /// Support of the answer's last sentence (add-on sentences are where baseless detail goes).
    last_support,
    /// Advice and generic add-on phrases per sentence ("it is important", "consult", "recommend").
    advice,
    /// ln(answer tokens / context tokens), answers long for their evidence invent more.
    length_ratio,
    /// ln(1 + distinct answer token pairs found in no context).
    novel_bigrams,
    /// ln(1 + distinct long (7+ letters) answer words found in no context: specific terms).
    novel_long_words,
    /// Share of the question's tokens found in the contexts: low when retrieval missed, which is
    /// when generators make things up.
    query_context_overlap,
    /// ln(1 + the most novel tokens in any one sentence).
    max_novel_in_sentence,
    /// Share of sentences with no token outside the contexts and the question.
    clean_sentence_share,
}

/// Feature indices in name order: `details.features` is a JSON object, which serde_json keeps
/// sorted by key, so [`OfflineDetails`] writes the features in this order.
static NAMES_SORTED: LazyLock<[usize; FEATURES]> = LazyLock::new(|| {
    let mut order: [usize; FEATURES] = std::array::from_fn(|i| i);
    order.sort_by_key(|&i| Features::NAMES[i]);
    order
});

/// What the offline judge reads off one trace.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Extraction {
    /// The signals.
    pub features: Features,
    /// Citations in the answer and how many name a retrieved context.
    pub citations: Citations,
    /// Answer sentences with at least one content token (claims).
    pub sentences: usize,
    /// For each retrieved context, the share of the question's distinct terms it contains, averaged
    /// with rank weights 1/rank (a useful context at rank 1 counts more than at rank 5). A cheap
    /// proxy for RAGAS's reference-free context precision; `None` without contexts or question terms.
    pub context_relevance: Option<f64>,
}

/// The offline judge's scores for one trace, without the allocations of a [`Verdict`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OfflineScore {
    /// The model's probability that the answer is faithful; `None` for no claims or a refusal.
    pub faithfulness: Option<f64>,
    /// From question-answer overlap; 0 for a refusal.
    pub answer_relevancy: Option<f64>,
    /// The answer declines to answer.
    pub refusal: bool,
    /// The score is within the model's uncertain band of 0.5.
    pub uncertain: bool,
    /// The signals behind the scores.
    pub extraction: Extraction,
}

impl OfflineScore {
    /// The verdict, with the features in `details` (for verdict records and `replay` output).
    pub fn verdict(&self) -> Verdict {
        Verdict {
            details: self.details(),
            ..self.verdict_without_details()
        }
    }

    /// The verdict with `details` left `null`: building that JSON object costs more than the judge
    /// itself, and on the ingest path nothing reads it.
    pub fn verdict_without_details(&self) -> Verdict {
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
    pub fn details(&self) -> serde_json::Value {
        serde_json::to_value(self.details_ref()).unwrap_or(serde_json::Value::Null)
    }

    /// The same `details`, borrowed, to serialise straight into a verdict record: `replay` writes
    /// these bytes without building the JSON object.
    pub fn details_ref(&self) -> OfflineDetails<'_> {
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
pub struct OfflineDetails<'a> {
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
    /// The committed model with this build.
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

thread_local! {
    /// Each thread that judges keeps one scratch: the source task's thread on the ingest path, the
    /// pool's threads for sampled re-judging. Borrowed only inside one synchronous call.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
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
    pub fn score_with(&self, trace: &Trace, scratch: &mut Scratch) -> OfflineScore {
        let extraction = extract_with(trace, scratch);
        let features = &extraction.features;
        let refusal = features.refusal > 0.0;
        let faithfulness = if extraction.sentences == 0 || refusal {
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

/// Buffers a worker reuses for every trace it judges.
#[derive(Debug, Default)]
pub struct Scratch {
    tokenizer: Tokenizer,
    answer: AnswerIndex,
    query: QueryIndex,
}

impl Scratch {
    /// Above this many answer tokens (a trace near the decode limits) the buffers are dropped after
    /// use, so one huge trace does not pin its memory for the life of the worker.
    const KEEP_TOKENS: usize = 1 << 15;

    fn release_if_large(&mut self) {
        if self.answer.tokens.capacity() > Self::KEEP_TOKENS {
            *self = Scratch::default();
        }
    }
}

/// Bits of an answer set's values. `IN_CONTEXT`: the hash (token, prefix, pair or triple) occurs in
/// the contexts. The others mark which "novel" counts a distinct answer token belongs to, and
/// `COUNTED` a novel pair already counted.
const IN_CONTEXT: u32 = 1;
const NOVEL: u32 = 2;
const NOVEL_NUMBER: u32 = 4;
const NOVEL_NAME: u32 = 8;
const NOVEL_LONG: u32 = 16;
const NOVEL_PREFIX: u32 = 32;
const COUNTED: u32 = 64;
const NOVEL_FLAGS: [u32; 5] = [NOVEL, NOVEL_NUMBER, NOVEL_NAME, NOVEL_LONG, NOVEL_PREFIX];

/// The answer's tokens by sentence, and small sets of what the contexts are checked for.
///
/// The contexts are many times longer than the answer, so rather than index the contexts and probe
/// them with the answer, the answer is indexed (its tokens, prefixes, pairs and triples) and the
/// contexts stream through once, marking what they contain: small sets that stay in cache.
#[derive(Debug, Default)]
struct AnswerIndex {
    tokens: Vec<Token>,
    /// Each claim-bearing sentence's tokens in `tokens`.
    sentences: Vec<Range<usize>>,
    hashes: HashSet64,
    prefixes: HashSet64,
    pairs: HashSet64,
    triples: HashSet64,
}

impl AnswerIndex {
    /// Tokenizes the answer sentence by sentence (each on its own: a sentence's first word is never
    /// a name) and indexes what the contexts will be checked for. Pairs and triples stay within a
    /// sentence.
    fn build(&mut self, answer: &str, tokenizer: &mut Tokenizer) {
        self.tokens.clear();
        self.sentences.clear();
        for sentence in Sentences::new(answer) {
            let start = self.tokens.len();
            tokenizer.tokens(sentence, &mut self.tokens);
            if self.tokens.len() > start {
                self.sentences.push(start..self.tokens.len());
            }
        }
        let n = self.tokens.len();
        self.hashes.reset(n);
        self.prefixes.reset(n);
        self.pairs.reset(n);
        self.triples.reset(n);
        for t in &self.tokens {
            self.hashes.insert(t.hash, 0);
            self.prefixes.insert(t.prefix, 0);
        }
        for span in &self.sentences {
            let sent = &self.tokens[span.clone()];
            for w in sent.windows(2) {
                self.pairs.insert(bigram(w[0].hash, w[1].hash), 0);
            }
            for w in sent.windows(3) {
                self.triples
                    .insert(trigram(w[0].hash, w[1].hash, w[2].hash), 0);
            }
        }
    }

    /// Marks what the next token of the contexts, `t`, shows the answer's sets. A pair or triple
    /// holding a token that is not the answer's cannot be one of the answer's, so only runs of
    /// answer tokens are hashed and looked up.
    #[inline]
    fn mark(&mut self, t: &Token, stream: &mut ContextStream) {
        let mark = |set: &mut HashSet64, key: u64| match set.value_mut(key) {
            Some(v) => {
                *v |= IN_CONTEXT;
                true
            }
            None => false,
        };
        let in_answer = mark(&mut self.hashes, t.hash);
        mark(&mut self.prefixes, t.prefix);
        let run = stream.state & ContextStream::RUN;
        if in_answer && run >= 1 {
            if stream.state & ContextStream::START == 0 {
                mark(&mut self.pairs, bigram(stream.last, t.hash));
            }
            if run >= 2 {
                mark(
                    &mut self.triples,
                    trigram(stream.before, stream.last, t.hash),
                );
            }
        }
        stream.before = stream.last;
        stream.last = t.hash;
        stream.state = if in_answer { (run + 1).min(2) } else { 0 };
    }

    fn in_context(set: &HashSet64, key: u64) -> bool {
        set.get(key).is_some_and(|v| v & IN_CONTEXT != 0)
    }

    /// Every per-sentence and per-token count, once the contexts have been marked.
    fn stats(&mut self, query: &QueryIndex) -> AnswerStats {
        let mut s = AnswerStats {
            min_support: 1.0,
            ..AnswerStats::default()
        };
        let mut run = 0usize;
        for span in &self.sentences {
            let sent = &self.tokens[span.clone()];
            let (mut found, mut novel_here) = (0usize, 0usize);
            for t in sent {
                let in_ctx = Self::in_context(&self.hashes, t.hash);
                let novel = !in_ctx && !query.hashes.contains(t.hash);
                found += usize::from(in_ctx);
                novel_here += usize::from(novel);
                // Runs of unsupported tokens continue across sentences.
                if in_ctx {
                    run = 0;
                } else {
                    run += 1;
                    s.longest_run = s.longest_run.max(run);
                }
                let mut flags = 0;
                if novel {
                    flags |= NOVEL;
                    if t.long {
                        flags |= NOVEL_LONG;
                    }
                }
                if !in_ctx && t.number {
                    flags |= NOVEL_NUMBER;
                }
                if !in_ctx && t.name && !t.number {
                    flags |= NOVEL_NAME;
                }
                if !Self::in_context(&self.prefixes, t.prefix) {
                    flags |= NOVEL_PREFIX;
                }
                // A distinct token counts for a flag when any of its occurrences has it.
                if let Some(v) = self.hashes.value_mut(t.hash) {
                    for (count, flag) in s.novel_distinct.iter_mut().zip(NOVEL_FLAGS) {
                        *count += usize::from(flags & flag != 0 && *v & flag == 0);
                    }
                    *v |= flags;
                }
            }
            s.in_context += found;
            let support = found as f64 / sent.len() as f64;
            s.support_sum += support;
            s.last_support = support;
            s.min_support = s.min_support.min(support);
            s.weak += usize::from(support < 0.5);
            for w in sent.windows(2) {
                s.pairs += 1;
                if let Some(v) = self.pairs.value_mut(bigram(w[0].hash, w[1].hash)) {
                    if *v & IN_CONTEXT != 0 {
                        s.pairs_found += 1;
                    } else if *v & COUNTED == 0 {
                        *v |= COUNTED;
                        s.novel_pairs += 1;
                    }
                }
            }
            for w in sent.windows(3) {
                s.triples += 1;
                s.triples_found += usize::from(Self::in_context(
                    &self.triples,
                    trigram(w[0].hash, w[1].hash, w[2].hash),
                ));
            }
            s.max_novel = s.max_novel.max(novel_here);
            s.clean += usize::from(novel_here == 0);
            s.sentences += 1;
        }
        s
    }
}

/// Where the contexts' token stream is, for [`AnswerIndex::mark`]: the last two tokens' hashes, how
/// many of the last tokens in a row are answer tokens (triples run across context boundaries, pairs
/// do not, as they did when first trained), and whether the next token starts a context.
#[derive(Debug, Default)]
struct ContextStream {
    /// The last token's hash (meaningful when the run is at least one).
    last: u64,
    /// The hash of the token before it (meaningful when the run is two).
    before: u64,
    /// The run of answer tokens ending at the last token, 0 to 2 (2: two or more), in the low bits
    /// ([`ContextStream::RUN`]), and [`ContextStream::START`] when the next token starts a context.
    state: u8,
}

impl ContextStream {
    const RUN: u8 = 3;
    const START: u8 = 4;

    /// The next token starts a context.
    fn start_context(&mut self) {
        self.state |= Self::START;
    }

    /// Moves past a context token that is neither an answer token nor shares an answer token's
    /// prefix, as [`AnswerIndex::mark`] would after finding it in none of the answer's sets (a
    /// token that is not an answer token never joins a pair or triple, so its hash is not kept).
    #[inline]
    fn pass(&mut self) {
        self.state = 0;
    }
}

/// Bit filters of the answer's and question's token hashes and the answer's prefixes (1,024 bits
/// each, a bit per hash's top ten bits): most context tokens are in none of those sets, and two
/// bit tests tell so without the three set lookups. A set bit only sends the token on to the
/// lookups, so the filter cannot change a count.
#[derive(Debug)]
struct Filter {
    tokens: [u64; 16],
    prefixes: [u64; 16],
}

impl Filter {
    fn of(answer: &AnswerIndex, query: &QueryIndex) -> Filter {
        let mut f = Filter {
            tokens: [0; 16],
            prefixes: [0; 16],
        };
        for t in &answer.tokens {
            set_bit(&mut f.tokens, t.hash);
            set_bit(&mut f.prefixes, t.prefix);
        }
        for t in &query.tokens {
            set_bit(&mut f.tokens, t.hash);
        }
        f
    }

    /// False when `t` is certainly neither an answer or question token nor an answer prefix.
    #[inline]
    fn may_matter(&self, t: &Token) -> bool {
        has_bit(&self.tokens, t.hash) || has_bit(&self.prefixes, t.prefix)
    }
}

fn set_bit(bits: &mut [u64; 16], hash: u64) {
    let i = (hash >> 54) as usize;
    bits[i >> 6] |= 1 << (i & 63);
}

#[inline]
fn has_bit(bits: &[u64; 16], hash: u64) -> bool {
    let i = (hash >> 54) as usize;
    bits[i >> 6] >> (i & 63) & 1 != 0
}

/// Counts over the answer's sentences and tokens.
#[derive(Debug, Default)]
struct AnswerStats {
    sentences: usize,
    support_sum: f64,
    last_support: f64,
    min_support: f64,
    weak: usize,
    pairs: usize,
    pairs_found: usize,
    /// Distinct answer pairs found in no context.
    novel_pairs: usize,
    triples: usize,
    triples_found: usize,
    longest_run: usize,
    max_novel: usize,
    clean: usize,
    /// Answer tokens found in the contexts (with repeats).
    in_context: usize,
    /// Distinct answer tokens per flag of [`NOVEL_FLAGS`].
    novel_distinct: [usize; 5],
}

/// The question's tokens and their distinct hashes, each with the 1-based rank of the last context
/// it was found in (0: none yet).
#[derive(Debug, Default)]
struct QueryIndex {
    tokens: Vec<Token>,
    hashes: HashSet64,
    /// Sum over contexts of 1/rank times the share of the question's distinct terms found there,
    /// and the sum of the weights.
    weighted: f64,
    weights: f64,
}

impl QueryIndex {
    fn build(&mut self, query: &str, tokenizer: &mut Tokenizer) {
        self.tokens.clear();
        tokenizer.tokens(query, &mut self.tokens);
        self.hashes.reset(self.tokens.len());
        for t in &self.tokens {
            self.hashes.insert(t.hash, 0);
        }
        (self.weighted, self.weights) = (0.0, 0.0);
    }

    /// Marks a question term found in the context at 0-based `rank`; true the first time it is found
    /// in that context (a term counts once per context: its stamp records the last context it hit).
    #[inline]
    fn mark(&mut self, t: &Token, rank: usize) -> bool {
        let stamp = rank as u32 + 1;
        match self.hashes.value_mut(t.hash) {
            Some(seen) if *seen != stamp => {
                *seen = stamp;
                true
            }
            _ => false,
        }
    }

    /// Adds the relevance of the context at 0-based `rank`, which held `hits` distinct question
    /// terms.
    fn add_context(&mut self, rank: usize, hits: usize) {
        if !self.hashes.is_empty() {
            let w = 1.0 / (rank + 1) as f64;
            self.weighted += w * hits as f64 / self.hashes.len() as f64;
            self.weights += w;
        }
    }

    /// The rank-weighted share of the question's distinct terms each context contains.
    fn context_relevance(&self, contexts: usize) -> Option<f64> {
        (!self.hashes.is_empty() && contexts > 0).then(|| self.weighted / self.weights)
    }

    /// Question tokens (with repeats) found in some context.
    fn in_context(&self) -> usize {
        self.tokens
            .iter()
            .filter(|t| self.hashes.get(t.hash).is_some_and(|stamp| stamp != 0))
            .count()
    }
}

/// Marks a context token that passed the [`Filter`] in the answer's and question's sets; true
/// when it is a question term not yet seen in the context at `rank`.
#[inline(never)]
fn mark_context_token(
    t: &Token,
    rank: usize,
    answer: &mut AnswerIndex,
    query: &mut QueryIndex,
    stream: &mut ContextStream,
) -> bool {
    answer.mark(t, stream);
    query.mark(t, rank)
}

/// Computes what the offline judge reads off one trace.
pub fn extract(trace: &Trace) -> Extraction {
    extract_with(trace, &mut Scratch::default())
}

/// [`extract`] with reusable buffers.
pub fn extract_with(trace: &Trace, scratch: &mut Scratch) -> Extraction {
    let Scratch {
        tokenizer,
        answer,
        query,
    } = scratch;
    answer.build(&trace.answer, tokenizer);
    query.build(&trace.query, tokenizer);
    let filter = Filter::of(answer, query);
    let mut context_tokens = 0;
    let mut stream = ContextStream::default();
    // The contexts stream through once, token by token, without being stored.
    for (rank, c) in trace.contexts.iter().enumerate() {
        stream.start_context();
        let mut hits = 0;
        // Most context tokens fail the filter: that path stays inlined in the tokenizer's loop,
        // the lookups are out of line.
        tokenizer.each_token(&c.text, |t| {
            context_tokens += 1;
            if filter.may_matter(&t) {
                hits += usize::from(mark_context_token(&t, rank, answer, query, &mut stream));
            } else {
                stream.pass();
            }
        });
        query.add_context(rank, hits);
    }
    let stats = answer.stats(query);
    let phrases = Phrases::scan(&trace.answer);
    let citations = citations(trace);
    let features = features(&stats, answer, context_tokens, query, phrases, citations);
    Extraction {
        features,
        citations,
        sentences: stats.sentences,
        context_relevance: query.context_relevance(trace.contexts.len()),
    }
}

/// Puts the counts together into the signals; the arithmetic is the trained model's, step for step.
fn features(
    s: &AnswerStats,
    answer: &AnswerIndex,
    context_tokens: usize,
    query: &QueryIndex,
    phrases: Phrases,
    citations: Citations,
) -> Features {
    let ln_1p = |n: usize| (n as f64).ln_1p();
    let share = |part: usize, whole: usize| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64
        }
    };
    let n_tokens = answer.tokens.len();
    let distinct = answer.hashes.len();
    let [novel, novel_numbers, novel_names, novel_long, novel_prefix] = s.novel_distinct;
    let mut f = Features::default();
    if s.sentences > 0 {
        let n = s.sentences as f64;
        f.mean_support = s.support_sum / n;
        f.min_support = s.min_support;
        f.weak_sentence_share = s.weak as f64 / n;
        f.hedges = phrases.hedges as f64 / n;
        f.advice = phrases.advice as f64 / n;
    }
    f.last_support = s.last_support;
    f.bigram_support = if s.pairs > 0 {
        s.pairs_found as f64 / s.pairs as f64
    } else {
        f.mean_support
    };
    f.trigram_support = if s.triples > 0 {
        s.triples_found as f64 / s.triples as f64
    } else {
        f.bigram_support
    };
    f.novel_numbers = ln_1p(novel_numbers);
    f.novel_names = ln_1p(novel_names);
    f.novel_tokens = ln_1p(novel);
    f.novel_token_share = share(novel, distinct);
    f.answer_len = ln_1p(n_tokens);
    f.novel_bigrams = ln_1p(s.novel_pairs);
    f.novel_long_words = ln_1p(novel_long);
    f.context_len = ln_1p(context_tokens);
    f.length_ratio = f.answer_len - f.context_len;
    f.novel_prefix_share = share(novel_prefix, distinct);
    f.token_support = share(s.in_context, n_tokens);
    f.longest_novel_run = ln_1p(s.longest_run);
    f.max_novel_in_sentence = ln_1p(s.max_novel);
    f.clean_sentence_share = share(s.clean, s.sentences);
    let q = &query.tokens;
    f.query_context_overlap = share(query.in_context(), q.len());
    f.query_overlap = share(
        q.iter().filter(|t| answer.hashes.contains(t.hash)).count(),
        q.len(),
    );
    f.weak_sentences = ln_1p(s.weak);
    f.sentences = ln_1p(s.sentences);
    f.refusal = f64::from(u8::from(n_tokens <= 60 && phrases.refusal));
    f.bad_citations = f64::from(citations.total - citations.valid);
    f
}

/// Phrase lists, matched case-insensitively on word boundaries.
///
/// They were regular expressions (`(?i)\b(...)`, trailing `\b` for hedges and advice); they are now
/// literals for one ASCII case-insensitive Aho-Corasick automaton over the answer's bytes, with the word
/// boundaries checked by hand on the original text, which finds the same matches (the tests compare
/// both on generated text). Each list's phrases are whole words that cannot overlap one another on
/// word boundaries, so counting every boundary-respecting overlapping match counts what the
/// regexes' leftmost, non-overlapping search counted.
const REFUSAL_PHRASES: &[&str] = &[
    "i cannot",
    "i can't",
    "i can not",
    "i am unable to",
    "i 'm unable to",
    "i do not know",
    "i don't know",
    "i'm sorry",
    "i am sorry",
    "unable to answer",
    "unable to provide",
    "unable to find",
    "unable to determine",
    "does not provide",
    "does not contain",
    "does not mention",
    "does not include",
    "does not specify",
    "does not say",
    "do not provide",
    "do not contain",
    "do not mention",
    "do not include",
    "do not specify",
    "do not say",
    "no information",
    "no specific information",
    "not enough information",
    "not enough specific information",
    "insufficient information",
    "insufficient specific information",
    "not mentioned in",
    "not provided in",
    "not specified in",
    "not stated in",
    "not available in",
    "there is no mention",
    "there is no information",
    "cannot answer",
    "cannot be answer",
    "cannot determine",
    "cannot be determine",
];

const HEDGE_WORDS: &[&str] = &[
    "may",
    "might",
    "possibly",
    "likely",
    "probably",
    "generally",
    "typically",
    "usually",
    "approximately",
    "around",
    "about",
    "some",
    "often",
    "could",
];

const ADVICE_PHRASES: &[&str] = &[
    "important to",
    "recommend",
    "consult",
    "it is best",
    "should always",
    "keep in mind",
    "note that",
    "in general",
    "overall",
    "in summary",
    "in conclusion",
    "additionally",
    "furthermore",
    "also",
];

/// Which list a pattern of [`PHRASES`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lexicon {
    /// Matches on a leading word boundary only.
    Refusal,
    Hedge,
    Advice,
}

/// The three lists as one automaton, and the list of each pattern.
static PHRASES: LazyLock<(AhoCorasick, Vec<Lexicon>)> = LazyLock::new(|| {
    let lists = [
        (REFUSAL_PHRASES, Lexicon::Refusal),
        (HEDGE_WORDS, Lexicon::Hedge),
        (ADVICE_PHRASES, Lexicon::Advice),
    ];
    let (patterns, kinds): (Vec<&str>, Vec<Lexicon>) = lists
        .iter()
        .flat_map(|(list, kind)| list.iter().map(move |p| (*p, *kind)))
        .unzip();
    let automaton = AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .kind(Some(AhoCorasickKind::DFA))
        .build(patterns)
        .expect("static phrase patterns build");
    (automaton, kinds)
});

/// The regular expressions the phrase lists replace, used only for answers holding one of the two
/// non-ASCII characters that Unicode case-insensitive matching equates with an ASCII letter (KELVIN
/// SIGN with k, LONG S with s), which ASCII case-insensitive matching cannot see.
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

/// Characters outside ASCII that `(?i)` matches to an ASCII letter.
const ASCII_FOLDING: [char; 2] = ['\u{17F}', '\u{212A}'];

/// The phrase counts of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Phrases {
    refusal: bool,
    hedges: usize,
    advice: usize,
}

impl Phrases {
    fn scan(answer: &str) -> Phrases {
        if !answer.is_ascii() && answer.contains(ASCII_FOLDING) {
            return Phrases {
                refusal: REFUSAL.is_match(answer),
                hedges: HEDGE.find_iter(answer).count(),
                advice: ADVICE.find_iter(answer).count(),
            };
        }
        let (automaton, kinds) = &*PHRASES;
        let mut p = Phrases::default();
        for m in automaton.find_overlapping_iter(answer) {
            // Every pattern starts and ends with a letter, so `\b` there means no word character
            // beside it.
            if !word_boundary_before(answer, m.start()) {
                continue;
            }
            match kinds[m.pattern().as_usize()] {
                Lexicon::Refusal => p.refusal = true,
                Lexicon::Hedge => p.hedges += usize::from(word_boundary_after(answer, m.end())),
                Lexicon::Advice => p.advice += usize::from(word_boundary_after(answer, m.end())),
            }
        }
        p
    }
}

/// No word character (Unicode `\w`, as the regexes had it) ends at byte `i`.
fn word_boundary_before(text: &str, i: usize) -> bool {
    match text.as_bytes()[..i].last() {
        None => true,
        Some(&b) if b < 0x80 => !(b.is_ascii_alphanumeric() || b == b'_'),
        Some(_) => text[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !regex_syntax::is_word_character(c)),
    }
}

/// No word character starts at byte `i`.
fn word_boundary_after(text: &str, i: usize) -> bool {
    match text.as_bytes().get(i) {
        None => true,
        Some(&b) if b < 0x80 => !(b.is_ascii_alphanumeric() || b == b'_'),
        Some(_) => text[i..]
            .chars()
            .next()
            .is_none_or(|c| !regex_syntax::is_word_character(c)),
    }
}

/// Citations (`[doc_3]`, `[2]`): an id of a letter then up to 39 of `[A-Za-z0-9_.:-]`, or one to
/// three digits, in brackets. A number is valid when it is a context's rank (1-based) or id; a name
/// when it is a context's id.
fn citations(trace: &Trace) -> Citations {
    let mut c = Citations::default();
    let bytes = trace.answer.as_bytes();
    for open in memchr::memchr_iter(b'[', bytes) {
        let Some(id) = citation_id(&bytes[open + 1..]) else {
            continue;
        };
        // The id is ASCII, so this slice is on character boundaries.
        let id = &trace.answer[open + 1..open + 1 + id];
        c.total += 1;
        let by_id = || {
            trace
                .contexts
                .iter()
                .any(|ctx| ctx.id.as_deref() == Some(id))
        };
        let valid = match id.parse::<usize>() {
            Ok(n) => (1..=trace.contexts.len()).contains(&n) || by_id(),
            Err(_) => by_id(),
        };
        c.valid += u32::from(valid);
    }
    c
}

/// The length of the citation id at the start of `s` when a `]` closes it.
fn citation_id(s: &[u8]) -> Option<usize> {
    let first = *s.first()?;
    let (len, max) = if first.is_ascii_alphabetic() {
        let rest = s[1..]
            .iter()
            .take(40)
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
            .count();
        (1 + rest, 40)
    } else {
        (
            s.iter().take(4).take_while(|b| b.is_ascii_digit()).count(),
            3,
        )
    };
    (len > 0 && len <= max && s.get(len) == Some(&b']')).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(query: &str, contexts: &[(&str, &str)], answer: &str) -> Trace {
        Trace::of(query, contexts, answer)
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
        let (g, b) = (good.faithfulness().unwrap(), bad.faithfulness().unwrap());
        assert!(g > b + 0.2, "good {g} bad {b}");
        assert!(
            good.score(Quality::AnswerRelevancy).unwrap()
                > bad.score(Quality::AnswerRelevancy).unwrap()
        );
    }

    #[test]
    fn novel_numbers_and_names_are_counted() {
        let f = extract(&trace(
            "q",
            &[("d1", CTX)],
            "It began in 2023 and Smith said 1999.",
        ))
        .features;
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
        assert_eq!(v.faithfulness(), None);
        assert_eq!(v.score(Quality::AnswerRelevancy), Some(0.0));
    }

    #[test]
    fn empty_answer_is_no_claims_not_a_score() {
        let v = OfflineJudge::default().judge(&trace("q?", &[("d1", CTX)], "  ...  "));
        assert_eq!(v.faithfulness(), None);
        assert!(!v.refusal);
    }

    #[test]
    fn context_relevance_weights_rank() {
        let q = "What carbon pricing mechanism did Canada introduce in 2023?";
        let off = "Bananas are yellow fruit grown in tropical places.";
        let first = extract(&trace(q, &[("a", CTX), ("b", off)], "x"))
            .context_relevance
            .unwrap();
        let last = extract(&trace(q, &[("b", off), ("a", CTX)], "x"))
            .context_relevance
            .unwrap();
        assert!(
            first > last,
            "the useful context at rank 1 counts more: {first} vs {last}"
        );
        assert_eq!(extract(&trace(q, &[], "x")).context_relevance, None);
        let only_off = extract(&trace(q, &[("b", off)], "x"))
            .context_relevance
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
        let e = extract(&trace("q", &[], "Paris is the capital of France."));
        let (f, n) = (e.features, e.sentences);
        assert_eq!(n, 1);
        assert_eq!(f.mean_support, 0.0);
        let v = OfflineJudge::default().judge(&trace("q", &[], "Paris is the capital of France."));
        assert!(v.faithfulness().unwrap() < 0.5);
    }

    /// The previous citation pattern, the reference for the hand-written scanner.
    fn reference_citations(trace: &Trace) -> Citations {
        let re = Regex::new(r"\[([A-Za-z][A-Za-z0-9_.:-]{0,39}|[0-9]{1,3})\]").unwrap();
        let mut c = Citations::default();
        for m in re.captures_iter(&trace.answer) {
            let id = &m[1];
            c.total += 1;
            let by_id = trace
                .contexts
                .iter()
                .any(|ctx| ctx.id.as_deref() == Some(id));
            let valid = match id.parse::<usize>() {
                Ok(n) => (1..=trace.contexts.len()).contains(&n) || by_id,
                Err(_) => by_id,
            };
            c.valid += u32::from(valid);
        }
        c
    }

    #[test]
    fn only_two_non_ascii_characters_fold_to_ascii_letters() {
        let re = Regex::new(r"(?i)^[a-z']$").unwrap();
        let folding: Vec<char> = (0x80..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|c| re.is_match(c.encode_utf8(&mut [0; 4])))
            .collect();
        assert_eq!(folding, ASCII_FOLDING);
    }

    fn fragments() -> Vec<&'static str> {
        let mut f: Vec<&str> = REFUSAL_PHRASES
            .iter()
            .chain(HEDGE_WORDS)
            .chain(ADVICE_PHRASES)
            .copied()
            .collect();
        f.extend([
            " ",
            "  ",
            "I",
            "May",
            "ABOUT",
            "Also",
            "_",
            "x",
            "9",
            "é",
            "É",
            "\u{212A}",
            "\u{17F}",
            "’",
            "'",
            ".",
            ",",
            "\n",
            "not",
            "in",
            "i",
            "s",
            "cannot be",
            "[doc_1]",
            "[2]",
            "[",
            "]",
            "[a.b:c-d_e]",
            "[1234]",
            "[x]",
            "\u{301}",
            "ſome",
            "li\u{212A}ely",
        ]);
        f
    }

    proptest::proptest! {
        #[test]
        fn phrases_match_the_regexes(
            parts in proptest::collection::vec(proptest::sample::select(fragments()), 0..30),
            upper in proptest::collection::vec(proptest::bool::ANY, 30),
        ) {
            let text: String = parts
                .iter()
                .zip(&upper)
                .map(|(p, u)| if *u { p.to_uppercase() } else { (*p).to_owned() })
                .collect();
            let got = Phrases::scan(&text);
            let want = Phrases {
                refusal: REFUSAL.is_match(&text),
                hedges: HEDGE.find_iter(&text).count(),
                advice: ADVICE.find_iter(&text).count(),
            };
            proptest::prop_assert_eq!(got, want, "{:?}", text);
            let t = trace("q", &[("doc_1", CTX), ("x", CTX)], &text);
            proptest::prop_assert_eq!(citations(&t), reference_citations(&t), "{:?}", text);
        }
    }

    #[test]
    fn committed_model_loads_and_is_consistent() {
        assert!(OfflineModel::committed().is_consistent());
    }
}

#[cfg(test)]
mod model_tests {
    use super::*;

    fn trace(query: &str, ctx: &str, answer: &str) -> Trace {
        Trace::of(query, &[("d1", ctx)], answer)
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
            .map(|(q, a)| j.judge(&trace(q, ctx, a)).faithfulness().unwrap())
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
        let f = extract(&trace(
            "At what temperature does water boil?",
            ctx,
            "Water boils at 100 degrees Celsius at sea level.",
        ))
        .features;
        assert_eq!(f.token_support, 1.0);
        assert_eq!(f.novel_tokens, 0.0);
        assert_eq!(f.clean_sentence_share, 1.0);
        assert!(f.query_context_overlap > 0.5);
        let f = extract(&trace(
            "q",
            ctx,
            "Water boils at 90 degrees. It may possibly vary. It is important to consult a chemist.",
        ))
        .features;
        assert!((f.novel_numbers - 1f64.ln_1p()).abs() < 1e-12);
        assert!(f.hedges > 0.0 && f.advice > 0.0);
        assert!(f.weak_sentences > 0.0 && f.novel_long_words > 0.0);
        assert!(f.last_support < 0.5);
    }
}
