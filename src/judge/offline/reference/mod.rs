//! A plain implementation of the offline judge's signals, the reference the fast path is held to.
//!
//! Words are `String`s and sets are `HashSet`s; each signal is computed on its own, by a loop written
//! from what it means. No hashes, no reused buffers, no streaming of the contexts, no bit filters,
//! no byte tricks: slow, and only built for the tests. The vocabularies (stopwords, the stemmer's
//! suffixes, the phrase lists) are the judge's own; how they are looked up is not.
//!
//! The property tests in `traces.rs` hold the fast extraction to [`extract`] on generated traces:
//! small ones from a vocabulary of awkward words, and ones shaped like real RAG traces.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

use super::features::{Extraction, Features};
use super::phrases::{Lexicon, Phrases};
use super::stopwords::{MAX_STOPWORD_LEN, STOPWORDS};
use super::token::Token;
use super::words::{key_hash, prefix_hash, stem_bytes};
use crate::judge::Citations;
use crate::trace::Trace;

/// A content word or number of a text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Word {
    /// The normalised form: a word's stem, a number's digits (with its decimal point).
    key: String,
    /// A word's first five characters of its stem; a number's key. (A word never starts with a
    /// digit and a number always does, so the two kinds never share one.)
    prefix: String,
    number: bool,
    /// Starts with an ASCII capital, and a token came before it in its clause.
    name: bool,
    /// Seven bytes or more, lowercased.
    long: bool,
}

impl Word {
    /// The fast tokenizer's token for this word: its key and prefix hashed.
    pub(crate) fn token(&self) -> Token {
        Token {
            hash: key_hash(self.key.as_bytes()),
            number: self.number,
            name: self.name,
            long: self.long,
            prefix: if self.number {
                key_hash(self.key.as_bytes())
            } else {
                prefix_hash(self.prefix.as_bytes())
            },
        }
    }
}

/// The content words of `text`, character by character.
///
/// A word starts at an ASCII letter or a non-ASCII character and runs over ASCII letters, digits,
/// apostrophes and non-ASCII characters; it is lowercased without its apostrophes, loses a final
/// "s" that followed an apostrophe, is dropped when a stopword (of at most twelve bytes), and is
/// then stemmed. A number starts at a digit and runs over digits and over a ',' or '.' that has a
/// digit after it; the ',' is dropped. A clause ends at '.', '!', '?', ':' or a newline outside a
/// number.
pub(crate) fn words(text: &str) -> Vec<Word> {
    let chars: Vec<char> = text.chars().collect();
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '\'' || !c.is_ascii();
    let mut out = Vec::new();
    let mut clause_start = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || !c.is_ascii() {
            let mut end = i;
            while end < chars.len() && word_char(chars[end]) {
                end += 1;
            }
            let raw: String = chars[i..end].iter().collect();
            let mut lower: String = raw
                .chars()
                .filter(|&c| c != '\'')
                .flat_map(char::to_lowercase)
                .collect();
            if raw.ends_with("'s") && lower.ends_with('s') {
                lower.pop();
            }
            let name = c.is_ascii_uppercase() && !clause_start;
            clause_start = false;
            let stopword = lower.len() <= MAX_STOPWORD_LEN && STOPWORDS.contains(&lower.as_str());
            if !stopword {
                let key = String::from_utf8(stem_bytes(lower.as_bytes()).to_vec())
                    .expect("the stemmer cuts ASCII suffixes only");
                out.push(Word {
                    prefix: key.chars().take(5).collect(),
                    key,
                    number: false,
                    name,
                    long: lower.len() >= 7,
                });
            }
            i = end;
        } else if c.is_ascii_digit() {
            let mut key = String::new();
            while let Some(&c) = chars.get(i) {
                let digit_next = chars.get(i + 1).is_some_and(char::is_ascii_digit);
                match c {
                    '0'..='9' => key.push(c),
                    '.' if digit_next => key.push('.'),
                    ',' if digit_next => {}
                    _ => break,
                }
                i += 1;
            }
            clause_start = false;
            out.push(Word {
                prefix: key.clone(),
                key,
                number: true,
                name: false,
                long: false,
            });
        } else {
            clause_start |= matches!(c, '.' | '!' | '?' | ':' | '\n');
            i += 1;
        }
    }
    out
}

/// The sentences of `text`, byte by byte: a sentence ends at a newline, or at '.', '!' or '?'
/// followed by whitespace, a '"' or the end, unless a lone letter comes before it ("e.g.", "J.").
/// Each is trimmed; one without a letter or digit is no sentence.
pub(crate) fn sentences(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    for i in 0..bytes.len() {
        let boundary = match bytes[i] {
            b'\n' => true,
            b'.' | b'!' | b'?' => {
                let next = bytes.get(i + 1).copied();
                let prev = if i > 0 { bytes[i - 1] } else { b' ' };
                let next_ws = next.is_none_or(|n| n.is_ascii_whitespace() || n == b'"');
                let short_word =
                    i >= 2 && prev.is_ascii_alphabetic() && !bytes[i - 2].is_ascii_alphanumeric();
                next_ws && !short_word
            }
            _ => false,
        };
        if boundary {
            let s = text[start..=i].trim();
            if s.chars().any(char::is_alphanumeric) {
                out.push(s);
            }
            start = i + 1;
        }
    }
    let rest = text[start..].trim();
    if rest.chars().any(char::is_alphanumeric) {
        out.push(rest);
    }
    out
}

/// Each vocabulary as the regular expression its list reads as: any phrase, case-insensitive
/// (Unicode), on a word boundary before it and, for whole-word vocabularies, after it.
static VOCABULARIES: LazyLock<Vec<(Lexicon, Regex)>> = LazyLock::new(|| {
    Lexicon::ALL
        .iter()
        .map(|&kind| {
            let phrases: Vec<String> = kind.phrases().iter().map(|p| regex::escape(p)).collect();
            let end = if kind.whole_words() { r"\b" } else { "" };
            let re = Regex::new(&format!(r"(?i)\b(?:{}){end}", phrases.join("|")))
                .expect("phrase regex");
            (kind, re)
        })
        .collect()
});

/// The phrase counts of `text`: the matches of each vocabulary's regex.
pub(crate) fn phrases(text: &str) -> Phrases {
    let mut p = Phrases::default();
    for (kind, re) in VOCABULARIES.iter() {
        let n = re.find_iter(text).count();
        match kind {
            Lexicon::Refusal => p.refusal = n > 0,
            Lexicon::Hedge => p.hedges = n,
            Lexicon::Advice => p.advice = n,
        }
    }
    p
}

/// The citations of the answer as a regex finds them; a number is valid as a context's rank or id,
/// a name as a context's id.
pub(crate) fn citations(trace: &Trace) -> Citations {
    let re = Regex::new(r"\[([A-Za-z][A-Za-z0-9_.:-]{0,39}|[0-9]{1,3})\]").expect("citation regex");
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

/// Text fragments for generated answers: every phrase, citations, cases, word characters and
/// boundaries that are easy to get wrong.
pub(crate) fn fragments() -> Vec<&'static str> {
    let mut f: Vec<&str> = Lexicon::ALL
        .iter()
        .flat_map(|kind| kind.phrases().iter().copied())
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

/// The share `part / whole`, 0 for nothing.
fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn ln_1p(n: usize) -> f64 {
    (n as f64).ln_1p()
}

/// What the offline judge reads off `trace`, signal by signal.
pub(crate) fn extract(trace: &Trace) -> Extraction {
    // The answer's claims: its sentences with at least one content word.
    let claims: Vec<Vec<Word>> = sentences(&trace.answer)
        .into_iter()
        .map(words)
        .filter(|s| !s.is_empty())
        .collect();
    let answer: Vec<&Word> = claims.iter().flatten().collect();
    let question = words(&trace.query);
    let contexts: Vec<Vec<Word>> = trace.contexts.iter().map(|c| words(&c.text)).collect();

    // What the contexts hold. Pairs are read within each context; triples over all the contexts'
    // words in a row, across one context's end and the next one's start (as the committed model
    // was trained).
    let context_words: Vec<&Word> = contexts.iter().flatten().collect();
    let context_keys: HashSet<&str> = context_words.iter().map(|w| w.key.as_str()).collect();
    let context_prefixes: HashSet<&str> = context_words.iter().map(|w| w.prefix.as_str()).collect();
    let context_pairs: HashSet<(&str, &str)> = contexts
        .iter()
        .flat_map(|c| c.windows(2).map(|w| (w[0].key.as_str(), w[1].key.as_str())))
        .collect();
    let context_triples: HashSet<(&str, &str, &str)> = context_words
        .windows(3)
        .map(|w| (w[0].key.as_str(), w[1].key.as_str(), w[2].key.as_str()))
        .collect();
    let question_keys: HashSet<&str> = question.iter().map(|w| w.key.as_str()).collect();
    let answer_keys: HashSet<&str> = answer.iter().map(|w| w.key.as_str()).collect();

    let in_context = |w: &Word| context_keys.contains(w.key.as_str());
    // Novel: in neither the contexts nor the question.
    let novel = |w: &Word| !in_context(w) && !question_keys.contains(w.key.as_str());
    // Distinct answer words (by key) with an occurrence that has the property.
    let distinct = |property: &dyn Fn(&Word) -> bool| {
        let keys: HashSet<&str> = answer
            .iter()
            .filter(|w| property(w))
            .map(|w| w.key.as_str())
            .collect();
        keys.len()
    };

    // Per claim: the share of its words found in the contexts, and its novel words.
    let support: Vec<f64> = claims
        .iter()
        .map(|s| s.iter().filter(|w| in_context(w)).count() as f64 / s.len() as f64)
        .collect();
    let novel_in: Vec<usize> = claims
        .iter()
        .map(|s| s.iter().filter(|w| novel(w)).count())
        .collect();
    let weak = support.iter().filter(|&&s| s < 0.5).count();

    // Pairs and triples of the answer, within each claim.
    let pairs: Vec<(&str, &str)> = claims
        .iter()
        .flat_map(|s| s.windows(2).map(|w| (w[0].key.as_str(), w[1].key.as_str())))
        .collect();
    let triples: Vec<(&str, &str, &str)> = claims
        .iter()
        .flat_map(|s| {
            s.windows(3)
                .map(|w| (w[0].key.as_str(), w[1].key.as_str(), w[2].key.as_str()))
        })
        .collect();
    let pairs_found = pairs.iter().filter(|p| context_pairs.contains(p)).count();
    let novel_pairs: HashSet<&(&str, &str)> = pairs
        .iter()
        .filter(|p| !context_pairs.contains(p))
        .collect();
    let triples_found = triples
        .iter()
        .filter(|t| context_triples.contains(t))
        .count();

    // The longest run of answer words not in the contexts, across claim ends.
    let (mut longest_run, mut run) = (0, 0);
    for w in &answer {
        run = if in_context(w) { 0 } else { run + 1 };
        longest_run = longest_run.max(run);
    }

    let phrases = phrases(&trace.answer);
    let citations = citations(trace);
    let n = claims.len();
    let mut f = Features::default();
    if n > 0 {
        f.mean_support = support.iter().sum::<f64>() / n as f64;
        f.min_support = support.iter().copied().fold(f64::INFINITY, f64::min);
        f.weak_sentence_share = weak as f64 / n as f64;
        f.hedges = phrases.hedges as f64 / n as f64;
        f.advice = phrases.advice as f64 / n as f64;
        f.last_support = support[n - 1];
    }
    f.bigram_support = if pairs.is_empty() {
        f.mean_support
    } else {
        pairs_found as f64 / pairs.len() as f64
    };
    f.trigram_support = if triples.is_empty() {
        f.bigram_support
    } else {
        triples_found as f64 / triples.len() as f64
    };
    f.novel_numbers = ln_1p(distinct(&|w| w.number && !in_context(w)));
    f.novel_names = ln_1p(distinct(&|w| w.name && !w.number && !in_context(w)));
    f.novel_tokens = ln_1p(distinct(&novel));
    f.novel_token_share = share(distinct(&novel), answer_keys.len());
    f.answer_len = ln_1p(answer.len());
    f.context_len = ln_1p(context_words.len());
    f.length_ratio = f.answer_len - f.context_len;
    f.novel_bigrams = ln_1p(novel_pairs.len());
    f.novel_long_words = ln_1p(distinct(&|w| w.long && novel(w)));
    f.novel_prefix_share = share(
        distinct(&|w| !context_prefixes.contains(w.prefix.as_str())),
        answer_keys.len(),
    );
    f.token_support = share(
        answer.iter().filter(|w| in_context(w)).count(),
        answer.len(),
    );
    f.longest_novel_run = ln_1p(longest_run);
    f.max_novel_in_sentence = ln_1p(novel_in.iter().copied().max().unwrap_or(0));
    f.clean_sentence_share = share(novel_in.iter().filter(|&&k| k == 0).count(), n);
    f.query_context_overlap = share(
        question.iter().filter(|w| in_context(w)).count(),
        question.len(),
    );
    f.query_overlap = share(
        question
            .iter()
            .filter(|w| answer_keys.contains(w.key.as_str()))
            .count(),
        question.len(),
    );
    f.weak_sentences = ln_1p(weak);
    f.sentences = ln_1p(n);
    f.refusal = if answer.len() <= 60 && phrases.refusal {
        1.0
    } else {
        0.0
    };
    f.bad_citations = f64::from(citations.total - citations.valid);

    Extraction {
        features: f,
        citations,
        sentences: n,
        context_relevance: context_relevance(&question_keys, &contexts),
    }
}

/// For each context, the share of the question's distinct words it holds, weighted 1/rank (rank
/// from 1); `None` without contexts or question words.
fn context_relevance(question: &HashSet<&str>, contexts: &[Vec<Word>]) -> Option<f64> {
    if question.is_empty() || contexts.is_empty() {
        return None;
    }
    let (mut weighted, mut weights) = (0.0, 0.0);
    for (rank, c) in contexts.iter().enumerate() {
        let keys: HashSet<&str> = c.iter().map(|w| w.key.as_str()).collect();
        let hits = question.intersection(&keys).count();
        let w = 1.0 / (rank + 1) as f64;
        weighted += w * hits as f64 / question.len() as f64;
        weights += w;
    }
    Some(weighted / weights)
}

mod traces;
