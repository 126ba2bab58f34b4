//! The signals: the 28 features the model weighs, declared once, and the arithmetic that turns the
//! counts of one pass over a trace into them.

use serde::Serialize;

use super::index::{AnswerIndex, AnswerStats, QueryIndex};
use super::phrases::Phrases;
use crate::judge::Citations;

/// Declares the features once: the struct, its field order, [`FEATURES`], [`Features::NAMES`] and
/// [`Features::to_vec`] all come from this list, so they cannot disagree. The order is the committed
/// model's vector order: append, never reorder.
macro_rules! features {
    ($($(#[$doc:meta])+ $name:ident,)+) => {
        /// The signals the offline judge computes for one trace. All finite.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
        pub struct Features {
            $($(#[$doc])+ pub(crate) $name: f64,)+
        }

        /// Number of features.
        pub const FEATURES: usize = [$(stringify!($name)),+].len();

        impl Features {
            /// Names, in field order: the order of the model's vectors.
            pub const NAMES: [&'static str; FEATURES] = [$(stringify!($name)),+];

            /// The features as a vector, in [`Features::NAMES`] order.
            pub(crate) fn to_vec(self) -> [f64; FEATURES] {
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
    /// ln(1 + distinct long (7+ bytes) answer words found in no context: specific terms).
    novel_long_words,
    /// Share of the question's tokens found in the contexts: low when retrieval missed, which is
    /// when generators make things up.
    query_context_overlap,
    /// ln(1 + the most novel tokens in any one sentence).
    max_novel_in_sentence,
    /// Share of sentences with no token outside the contexts and the question.
    clean_sentence_share,
}

/// What the offline judge reads off one trace.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Extraction {
    /// The signals.
    pub(crate) features: Features,
    /// Citations in the answer and how many name a retrieved context.
    pub(crate) citations: Citations,
    /// Answer sentences with at least one content token (claims).
    pub(crate) sentences: usize,
    /// For each retrieved context, the share of the question's distinct terms it contains, averaged
    /// with rank weights 1/rank (a useful context at rank 1 counts more than at rank 5). A cheap
    /// proxy for RAGAS's reference-free context precision; `None` without contexts or question terms.
    pub(crate) context_relevance: Option<f64>,
}

impl Extraction {
    /// Whether the model scores this answer: it has claims and does not decline. The judge gives
    /// no faithfulness score otherwise, and the trainer leaves such answers out.
    pub(crate) fn is_scored(&self) -> bool {
        self.sentences > 0 && self.features.refusal == 0.0
    }
}

/// Puts the counts together into the signals; the arithmetic is the trained model's, step for step.
pub(crate) fn features(
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
