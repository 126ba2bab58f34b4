//! The answer's and the question's indexes: what the contexts are checked for, marked as the
//! contexts stream past once, then counted.

use std::ops::Range;

use super::sentences::Sentences;
use super::sets::HashSet64;
use super::token::Token;
use super::tokenizer::Tokenizer;

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
pub(crate) struct AnswerIndex {
    pub(crate) tokens: Vec<Token>,
    /// Each claim-bearing sentence's tokens in `tokens`.
    sentences: Vec<Range<usize>>,
    pub(crate) hashes: HashSet64,
    prefixes: HashSet64,
    pairs: HashSet64,
    triples: HashSet64,
}

impl AnswerIndex {
    /// Tokenizes the answer sentence by sentence (each on its own: a sentence's first word is never
    /// a name) and indexes what the contexts will be checked for. Pairs and triples stay within a
    /// sentence.
    pub(crate) fn build(&mut self, answer: &str, tokenizer: &mut Tokenizer) {
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
    pub(crate) fn mark(&mut self, t: &Token, stream: &mut ContextStream) {
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
    pub(crate) fn stats(&mut self, query: &QueryIndex) -> AnswerStats {
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
pub(crate) struct ContextStream {
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
    pub(crate) fn start_context(&mut self) {
        self.state |= Self::START;
    }

    /// Moves past a context token that is neither an answer token nor shares an answer token's
    /// prefix, as [`AnswerIndex::mark`] would after finding it in none of the answer's sets (a
    /// token that is not an answer token never joins a pair or triple, so its hash is not kept).
    #[inline]
    pub(crate) fn pass(&mut self) {
        self.state = 0;
    }
}

/// Counts over the answer's sentences and tokens.
#[derive(Debug, Default)]
pub(crate) struct AnswerStats {
    pub(crate) sentences: usize,
    pub(crate) support_sum: f64,
    pub(crate) last_support: f64,
    pub(crate) min_support: f64,
    pub(crate) weak: usize,
    pub(crate) pairs: usize,
    pub(crate) pairs_found: usize,
    /// Distinct answer pairs found in no context.
    pub(crate) novel_pairs: usize,
    pub(crate) triples: usize,
    pub(crate) triples_found: usize,
    pub(crate) longest_run: usize,
    pub(crate) max_novel: usize,
    pub(crate) clean: usize,
    /// Answer tokens found in the contexts (with repeats).
    pub(crate) in_context: usize,
    /// Distinct answer tokens per flag of [`NOVEL_FLAGS`].
    pub(crate) novel_distinct: [usize; 5],
}

/// The question's tokens and their distinct hashes, each with the 1-based rank of the last context
/// it was found in (0: none yet).
#[derive(Debug, Default)]
pub(crate) struct QueryIndex {
    pub(crate) tokens: Vec<Token>,
    pub(crate) hashes: HashSet64,
    /// Sum over contexts of 1/rank times the share of the question's distinct terms found there,
    /// and the sum of the weights.
    weighted: f64,
    weights: f64,
}

impl QueryIndex {
    pub(crate) fn build(&mut self, query: &str, tokenizer: &mut Tokenizer) {
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
    pub(crate) fn mark(&mut self, t: &Token, rank: usize) -> bool {
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
    pub(crate) fn add_context(&mut self, rank: usize, hits: usize) {
        if !self.hashes.is_empty() {
            let w = 1.0 / (rank + 1) as f64;
            self.weighted += w * hits as f64 / self.hashes.len() as f64;
            self.weights += w;
        }
    }

    /// The rank-weighted share of the question's distinct terms each context contains.
    pub(crate) fn context_relevance(&self, contexts: usize) -> Option<f64> {
        (!self.hashes.is_empty() && contexts > 0).then(|| self.weighted / self.weights)
    }

    /// Question tokens (with repeats) found in some context.
    pub(crate) fn in_context(&self) -> usize {
        self.tokens
            .iter()
            .filter(|t| self.hashes.get(t.hash).is_some_and(|stamp| stamp != 0))
            .count()
    }
}

/// The hash of a token pair, from the tokens' hashes.
fn bigram(a: u64, b: u64) -> u64 {
    a.rotate_left(17) ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The hash of a token triple, from the tokens' hashes.
fn trigram(a: u64, b: u64, c: u64) -> u64 {
    a.rotate_left(29) ^ b.rotate_left(13).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ c
}
