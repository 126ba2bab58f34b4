//! Text: the cheap lexical machinery the offline judge is built on. Sentences, content tokens
//! (lowercased, light stemming, numbers normalised), and token sets as sorted hash vectors, which are
//! faster to build and probe than a `HashSet` for the few hundred tokens of a trace.

use std::sync::LazyLock;

use xxhash_rust::xxh3::xxh3_64;

/// Words that carry no evidence either way.
const STOPWORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "him",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "may",
    "me",
    "might",
    "more",
    "most",
    "much",
    "must",
    "my",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "out",
    "over",
    "own",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "than",
    "that",
    "the",
    "their",
    "them",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "based",
    "according",
    "provided",
    "passage",
    "passages",
    "context",
    "information",
    "answer",
    "question",
    "however",
    "additionally",
    "overall",
    "therefore",
    "include",
    "including",
    "well",
    "s",
    "t",
    "etc",
    "e",
    "g",
    "ie",
    "eg",
    // Words that talk about the evidence or the conversation rather than make a claim.
    "given",
    "provide",
    "provides",
    "provided",
    "unable",
    "mention",
    "mentions",
    "mentioned",
    "suggest",
    "suggests",
    "state",
    "states",
    "stated",
    "appear",
    "appears",
    "hope",
    "please",
    "know",
    "cannot",
    "alternatively",
    "brief",
    "briefly",
    "following",
    "follows",
    "questions",
    "note",
    "sure",
    "specific",
    "specifically",
    "summary",
    "let",
    "like",
    "seems",
    "refer",
    "refers",
    "described",
    "describes",
    "explain",
    "explains",
    "text",
    "source",
    "sources",
    "documents",
    "document",
    "details",
    "detail",
    "certainly",
    "happy",
    "glad",
    "help",
    "finally",
    "first",
    "hand",
    "step",
    "steps",
    "instructions",
    "making",
    "main",
    "various",
    "possible",
    "used",
    "using",
    "use",
    "one",
    "without",
    "due",
    "type",
    "best",
    "another",
    "instead",
    "either",
    "general",
    "taking",
    "starting",
    "way",
    "ways",
    "make",
    "need",
    "means",
    "mean",
    "called",
    "known",
    "refer",
    "term",
    "terms",
    "find",
    "found",
    "information",
    "answered",
    "answering",
    "asked",
    "ask",
    "however",
    "although",
    "though",
    "yes",
];

/// The stopwords sorted, for binary search: a linear scan per token was the judge's main cost.
static STOPWORDS_SORTED: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut v = STOPWORDS.to_vec();
    v.sort_unstable();
    v.dedup();
    v
});

fn is_stopword(word: &str) -> bool {
    word.len() <= 12 && STOPWORDS_SORTED.binary_search(&word).is_ok()
}

/// One token of text: its hash, and whether it is a number or a capitalised name in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    /// Hash of the normalised form.
    pub hash: u64,
    /// A number (digits, after removing separators and units).
    pub number: bool,
    /// Capitalised in the source and not at the start of a sentence: likely a name.
    pub name: bool,
    /// A word of seven or more letters: specific terms rather than glue.
    pub long: bool,
    /// Hash of the first five characters: a cruder stem that lets morphological variants meet.
    pub prefix: u64,
}

/// A sorted, deduplicated set of token hashes.
#[derive(Debug, Clone, Default)]
pub struct TokenSet(Vec<u64>);

impl TokenSet {
    /// Builds a set from hashes.
    pub fn from_hashes(mut hashes: Vec<u64>) -> Self {
        hashes.sort_unstable();
        hashes.dedup();
        Self(hashes)
    }

    /// Whether `hash` is in the set.
    pub fn contains(&self, hash: u64) -> bool {
        self.0.binary_search(&hash).is_ok()
    }

    /// Number of distinct hashes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Splits text into sentences at `.`, `!`, `?` or a newline followed by space/end, keeping
/// decimal numbers ("3.5") and common abbreviations intact enough for scoring.
pub fn sentences(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    for i in 0..bytes.len() {
        let b = bytes[i];
        let boundary = match b {
            b'\n' => true,
            b'.' | b'!' | b'?' => {
                let next = bytes.get(i + 1).copied();
                let prev = if i > 0 { bytes[i - 1] } else { b' ' };
                let next_ws = next.is_none_or(|n| n.is_ascii_whitespace() || n == b'"');
                // "e.g." and single initials: a one-letter word before the dot is not an end.
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

/// Content tokens of `text`: stopwords dropped, lowercased, lightly stemmed, numbers normalised
/// ("1,200" and "1200" agree; "5%" is "5"; "$3.50" is "3.50").
pub fn content_tokens(text: &str, out: &mut Vec<Token>) {
    let mut word = String::with_capacity(32);
    let mut sentence_start = true;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() {
            // A number: digits with inner ',' or '.' separators.
            word.clear();
            while i < bytes.len() {
                let b = bytes[i];
                if b.is_ascii_digit() {
                    word.push(b as char);
                } else if (b == b',' || b == b'.')
                    && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
                {
                    if b == b'.' {
                        word.push('.');
                    }
                } else {
                    break;
                }
                i += 1;
            }
            let hash = xxh3_64(word.as_bytes());
            out.push(Token {
                hash,
                number: true,
                name: false,
                long: false,
                prefix: hash,
            });
            sentence_start = false;
            continue;
        }
        if c.is_ascii_alphabetic() || c >= 0x80 {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] >= 0x80 || bytes[i] == b'\'')
            {
                i += 1;
            }
            let raw = &text[start..i];
            let capital = c.is_ascii_uppercase();
            word.clear();
            if raw.is_ascii() {
                word.extend(
                    raw.bytes()
                        .filter(|&b| b != b'\'')
                        .map(|b| b.to_ascii_lowercase() as char),
                );
            } else {
                for ch in raw.chars().filter(|&ch| ch != '\'') {
                    word.extend(ch.to_lowercase());
                }
            }
            if word.ends_with("s") && raw.ends_with("'s") {
                word.pop();
            }
            if !is_stopword(&word) {
                let stem = stem(&word);
                let cut = stem.char_indices().nth(5).map_or(stem.len(), |(i, _)| i);
                out.push(Token {
                    hash: xxh3_64(stem.as_bytes()),
                    number: false,
                    name: capital && !sentence_start,
                    long: word.len() >= 7,
                    prefix: xxh3_64(&stem.as_bytes()[..cut]) ^ 0x5f5f,
                });
            }
            sentence_start = false;
            continue;
        }
        if matches!(c, b'.' | b'!' | b'?' | b'\n' | b':') {
            sentence_start = true;
        }
        i += 1;
    }
}

/// A light suffix stripper: enough that "prices", "priced" and "pricing" meet at "pric".
pub fn stem(word: &str) -> &str {
    let n = word.len();
    for suffix in ["ing", "ies", "ed", "es", "ly", "s"] {
        if n > suffix.len() + 3 && word.ends_with(suffix) && word.is_char_boundary(n - suffix.len())
        {
            let cut = &word[..n - suffix.len()];
            return cut.strip_suffix('e').unwrap_or(cut);
        }
    }
    word.strip_suffix('e')
        .filter(|w| w.len() > 3)
        .unwrap_or(word)
}

/// Hashes of consecutive token pairs.
pub fn bigrams(tokens: &[Token]) -> impl Iterator<Item = u64> + '_ {
    tokens
        .windows(2)
        .map(|w| w[0].hash.rotate_left(17) ^ w[1].hash.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Token> {
        let mut v = Vec::new();
        content_tokens(s, &mut v);
        v
    }

    #[test]
    fn sentences_split_but_keep_decimals_and_initials() {
        assert_eq!(
            sentences("It costs 3.5 dollars. J. Smith said so! Really?\nYes"),
            vec![
                "It costs 3.5 dollars.",
                "J. Smith said so!",
                "Really?",
                "Yes"
            ]
        );
        assert!(sentences("  ... ").is_empty());
    }

    #[test]
    fn numbers_normalise() {
        assert_eq!(toks("1,200 people")[0], toks("1200 persons")[0]);
        assert!(toks("5%")[0].number);
        assert_eq!(toks("$3.50")[0].hash, toks("3.50")[0].hash);
        assert_ne!(toks("3.5")[0].hash, toks("35")[0].hash);
    }

    #[test]
    fn stopwords_dropped_and_stems_meet() {
        assert!(toks("the of and is").is_empty());
        assert_eq!(toks("prices")[0].hash, toks("priced")[0].hash);
        assert_eq!(toks("pricing")[0].hash, toks("price")[0].hash);
    }

    #[test]
    fn names_are_capitals_inside_a_sentence() {
        let t = toks("The author was Ada Lovelace. Then nothing.");
        assert!(!t[0].name);
        assert!(t[1].name && t[2].name);
        assert!(!t[3].name);
    }

    #[test]
    fn token_set_membership() {
        let s = TokenSet::from_hashes(vec![5, 1, 5, 3]);
        assert_eq!(s.len(), 3);
        assert!(s.contains(3) && !s.contains(4));
    }
}
