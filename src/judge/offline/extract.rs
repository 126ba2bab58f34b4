//! One pass over a trace: the answer and the question are indexed, the contexts stream through
//! once, token by token, without being stored, marking what they contain; the counts then become
//! the features.

use super::citations::citations;
use super::features::{Extraction, features};
use super::index::{AnswerIndex, ContextStream, QueryIndex};
use super::phrases::Phrases;
use super::token::Token;
use super::tokenizer::Tokenizer;
use crate::trace::Trace;

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

    pub(crate) fn release_if_large(&mut self) {
        if self.answer.tokens.capacity() > Self::KEEP_TOKENS {
            *self = Scratch::default();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: &str = "Canada introduced a carbon contract for difference in 2023 to guarantee the price of carbon for investors.";

    #[test]
    fn novel_numbers_and_names_are_counted() {
        let f = extract(&Trace::of(
            "q",
            &[("d1", CTX)],
            "It began in 2023 and Smith said 1999.",
        ))
        .features;
        assert!((f.novel_numbers - 1f64.ln_1p()).abs() < 1e-12);
        assert!((f.novel_names - 1f64.ln_1p()).abs() < 1e-12);
    }

    #[test]
    fn context_relevance_weights_rank() {
        let q = "What carbon pricing mechanism did Canada introduce in 2023?";
        let off = "Bananas are yellow fruit grown in tropical places.";
        let first = extract(&Trace::of(q, &[("a", CTX), ("b", off)], "x"))
            .context_relevance
            .unwrap();
        let last = extract(&Trace::of(q, &[("b", off), ("a", CTX)], "x"))
            .context_relevance
            .unwrap();
        assert!(
            first > last,
            "the useful context at rank 1 counts more: {first} vs {last}"
        );
        assert_eq!(extract(&Trace::of(q, &[], "x")).context_relevance, None);
        let only_off = extract(&Trace::of(q, &[("b", off)], "x"))
            .context_relevance
            .unwrap();
        assert_eq!(only_off, 0.0);
    }

    #[test]
    fn no_contexts_means_no_support() {
        let e = extract(&Trace::of("q", &[], "Paris is the capital of France."));
        assert_eq!(e.sentences, 1);
        assert_eq!(e.features.mean_support, 0.0);
    }

    #[test]
    fn signals_on_hand_cases() {
        let ctx = [("d1", "Water boils at 100 degrees Celsius at sea level.")];
        let f = extract(&Trace::of(
            "At what temperature does water boil?",
            &ctx,
            "Water boils at 100 degrees Celsius at sea level.",
        ))
        .features;
        assert_eq!(f.token_support, 1.0);
        assert_eq!(f.novel_tokens, 0.0);
        assert_eq!(f.clean_sentence_share, 1.0);
        assert!(f.query_context_overlap > 0.5);
        let f = extract(&Trace::of(
            "q",
            &ctx,
            "Water boils at 90 degrees. It may possibly vary. It is important to consult a chemist.",
        ))
        .features;
        assert!((f.novel_numbers - 1f64.ln_1p()).abs() < 1e-12);
        assert!(f.hedges > 0.0 && f.advice > 0.0);
        assert!(f.weak_sentences > 0.0 && f.novel_long_words > 0.0);
        assert!(f.last_support < 0.5);
    }
}
