//! The offline judge's signals ([`Features`]) and the fast extractor that reads them off a trace.
//!
//! Every signal is a share or a mean over the answer's sentences, so an answer twice as long with
//! the same supported share has the same features: the judge reads what the claims are, not how
//! many there are. It runs on every trace, so it is built to cost little: each text is tokenized
//! once into 64-bit hashes that every signal shares; the sets it probes are reusable hash sets in
//! a per-thread [`Scratch`], so a worker allocates nothing per trace once its buffers have grown;
//! the contexts stream through once, token by token, marking what the answer's sets hold. The tests
//! hold it equal to a plain reference of sets and loops (`judge/reference.rs`).

use std::ops::Range;

use serde::Serialize;

use super::Citations;
use super::citations::citations;
use super::phrases::Phrases;
use super::sentences::Sentences;
use super::sets::HashSet64;
use super::tokenizer::{Token, Tokenizer, bigram, trigram};
use crate::trace::Trace;

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
    /// Share of the answer's content tokens (with repeats) found in the contexts.
    supported_tokens,
    /// Share of the answer's content tokens found neither in the contexts nor in the question.
    novel_tokens,
    /// Share of the answer's content tokens whose five-letter prefix occurs in no context (no
    /// morphological variant of the word was retrieved either).
    novel_prefixes,
    /// Share of the answer's distinct tokens found neither in the contexts nor in the question.
    novel_distinct,
    /// Share of the answer's distinct tokens that are long words (7+ letters: specific terms)
    /// found neither in the contexts nor in the question.
    novel_long_words,
    /// Share of the answer's content tokens that are numbers found in no context.
    novel_numbers,
    /// Share of the answer's content tokens that are capitalised names found in no context.
    novel_names,
    /// Share of the answer's token pairs (within a sentence) found as pairs in the contexts.
    pair_support,
    /// Share of the answer's token triples found as triples in the contexts.
    triple_support,
    /// Mean over the answer's sentences of the share of their tokens found in the contexts.
    mean_support,
    /// Mean over sentences of the share of their tokens found neither in the contexts nor in the
    /// question.
    mean_novel,
    /// Mean over sentences of the longest run of consecutive tokens absent from the contexts, as a
    /// share of the sentence's tokens.
    novel_run,
    /// Share of sentences with support below one half.
    weak_sentences,
    /// Share of sentences with no token outside the contexts and the question.
    clean_sentences,
    /// Share of the question's tokens that the answer uses.
    query_overlap,
    /// Share of the question's tokens found in the contexts: low when retrieval missed, which is
    /// when generators make things up.
    query_context_overlap,
    /// Hedging words per sentence.
    hedges,
    /// Advice and generic add-on phrases per sentence ("it is important", "consult", "recommend").
    advice,
    /// Share of the answer's citations that name no retrieved context (0 without citations).
    bad_citations,
}

/// What the offline judge reads off one trace.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Extraction {
    /// The signals.
    pub features: Features,
    /// Citations in the answer and how many name a retrieved context.
    pub citations: Citations,
    /// Answer sentences with at least one content token (claims).
    pub sentences: usize,
    /// The answer declines to answer (a refusal phrase in an answer of at most 60 content tokens).
    pub refusal: bool,
    /// For each retrieved context, the share of the question's distinct terms it contains, averaged
    /// with rank weights 1/rank (a useful context at rank 1 counts more than at rank 5). A cheap
    /// proxy for RAGAS's reference-free context precision; `None` without contexts or question terms.
    pub context_relevance: Option<f64>,
}

/// Buffers a worker reuses for every trace it judges.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    tokenizer: Tokenizer,
    answer: AnswerIndex,
    query: QueryIndex,
}

impl Scratch {
    /// Above this many answer tokens (a trace near the decode limits) the buffers are dropped after
    /// use, so one huge trace does not pin its memory for the life of the worker.
    const KEEP_TOKENS: usize = 1 << 15;

    pub(super) fn release_if_large(&mut self) {
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
const NOVEL_LONG: u32 = 4;
const NOVEL_FLAGS: [u32; 2] = [NOVEL, NOVEL_LONG];

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
        let mut s = AnswerStats::default();
        for span in &self.sentences {
            let sent = &self.tokens[span.clone()];
            let (mut found, mut novel_here, mut run, mut longest) =
                (0usize, 0usize, 0usize, 0usize);
            for t in sent {
                let in_ctx = Self::in_context(&self.hashes, t.hash);
                let novel = !in_ctx && !query.hashes.contains(t.hash);
                found += usize::from(in_ctx);
                novel_here += usize::from(novel);
                run = if in_ctx { 0 } else { run + 1 };
                longest = longest.max(run);
                s.novel_numbers += usize::from(!in_ctx && t.number);
                s.novel_names += usize::from(!in_ctx && t.name && !t.number);
                s.novel_prefixes += usize::from(!Self::in_context(&self.prefixes, t.prefix));
                let mut flags = 0;
                if novel {
                    flags |= NOVEL;
                    if t.long {
                        flags |= NOVEL_LONG;
                    }
                }
                // A distinct token counts for a flag when any of its occurrences has it.
                if let Some(v) = self.hashes.value_mut(t.hash) {
                    for (count, flag) in s.novel_distinct.iter_mut().zip(NOVEL_FLAGS) {
                        *count += usize::from(flags & flag != 0 && *v & flag == 0);
                    }
                    *v |= flags;
                }
            }
            let len = sent.len() as f64;
            s.in_context += found;
            s.novel += novel_here;
            let support = found as f64 / len;
            s.support_sum += support;
            s.novel_sum += novel_here as f64 / len;
            s.run_sum += longest as f64 / len;
            s.weak += usize::from(support < 0.5);
            s.clean += usize::from(novel_here == 0);
            for w in sent.windows(2) {
                s.pairs += 1;
                s.pairs_found +=
                    usize::from(Self::in_context(&self.pairs, bigram(w[0].hash, w[1].hash)));
            }
            for w in sent.windows(3) {
                s.triples += 1;
                s.triples_found += usize::from(Self::in_context(
                    &self.triples,
                    trigram(w[0].hash, w[1].hash, w[2].hash),
                ));
            }
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
    /// Sums over sentences of each one's share of supported tokens, of novel tokens, and of its
    /// longest unsupported run.
    support_sum: f64,
    novel_sum: f64,
    run_sum: f64,
    weak: usize,
    clean: usize,
    pairs: usize,
    pairs_found: usize,
    triples: usize,
    triples_found: usize,
    /// Answer tokens (with repeats) found in the contexts; in neither the contexts nor the
    /// question; whose prefix is in no context; numbers and names in no context.
    in_context: usize,
    novel: usize,
    novel_prefixes: usize,
    novel_numbers: usize,
    novel_names: usize,
    /// Distinct answer tokens per flag of [`NOVEL_FLAGS`].
    novel_distinct: [usize; 2],
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
pub(crate) fn extract(trace: &Trace) -> Extraction {
    extract_with(trace, &mut Scratch::default())
}

/// [`extract`] with reusable buffers.
pub(crate) fn extract_with(trace: &Trace, scratch: &mut Scratch) -> Extraction {
    let Scratch {
        tokenizer,
        answer,
        query,
    } = scratch;
    answer.build(&trace.answer, tokenizer);
    query.build(&trace.query, tokenizer);
    let filter = Filter::of(answer, query);
    let mut stream = ContextStream::default();
    // The contexts stream through once, token by token, without being stored.
    for (rank, c) in trace.contexts.iter().enumerate() {
        stream.start_context();
        let mut hits = 0;
        // Most context tokens fail the filter: that path stays inlined in the tokenizer's loop,
        // the lookups are out of line.
        tokenizer.each_token(&c.text, |t| {
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
    let features = features(&stats, answer, query, phrases, citations);
    Extraction {
        features,
        citations,
        sentences: stats.sentences,
        refusal: answer.tokens.len() <= 60 && phrases.refusal,
        context_relevance: query.context_relevance(trace.contexts.len()),
    }
}

/// Puts the counts together into the signals: every one a share or a mean over sentences, so an
/// answer twice as long with the same supported share has the same features.
fn features(
    s: &AnswerStats,
    answer: &AnswerIndex,
    query: &QueryIndex,
    phrases: Phrases,
    citations: Citations,
) -> Features {
    let share = |part: usize, whole: usize| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64
        }
    };
    let n_tokens = answer.tokens.len();
    let distinct = answer.hashes.len();
    let [novel_distinct, novel_long] = s.novel_distinct;
    let mut f = Features {
        supported_tokens: share(s.in_context, n_tokens),
        novel_tokens: share(s.novel, n_tokens),
        novel_prefixes: share(s.novel_prefixes, n_tokens),
        novel_distinct: share(novel_distinct, distinct),
        novel_long_words: share(novel_long, distinct),
        novel_numbers: share(s.novel_numbers, n_tokens),
        novel_names: share(s.novel_names, n_tokens),
        ..Features::default()
    };
    if s.sentences > 0 {
        let n = s.sentences as f64;
        f.mean_support = s.support_sum / n;
        f.mean_novel = s.novel_sum / n;
        f.novel_run = s.run_sum / n;
        f.weak_sentences = s.weak as f64 / n;
        f.clean_sentences = s.clean as f64 / n;
        f.hedges = phrases.hedges as f64 / n;
        f.advice = phrases.advice as f64 / n;
    }
    f.pair_support = if s.pairs > 0 {
        share(s.pairs_found, s.pairs)
    } else {
        f.mean_support
    };
    f.triple_support = if s.triples > 0 {
        share(s.triples_found, s.triples)
    } else {
        f.pair_support
    };
    let q = &query.tokens;
    f.query_context_overlap = share(query.in_context(), q.len());
    f.query_overlap = share(
        q.iter().filter(|t| answer.hashes.contains(t.hash)).count(),
        q.len(),
    );
    f.bad_citations = share(
        (citations.total - citations.valid) as usize,
        citations.total as usize,
    );
    f
}
