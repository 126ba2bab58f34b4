//! Stopwords: the words that carry no evidence either way, dropped by the tokenizer, and the table
//! that looks them up in one multiply and a compare or two.

use std::sync::LazyLock;

use super::scan::pack;

/// Words that carry no evidence either way.
pub(crate) const STOPWORDS: &[&str] = &[
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
    "term",
    "terms",
    "find",
    "found",
    "answered",
    "answering",
    "asked",
    "ask",
    "although",
    "though",
    "yes",
];

/// Stopwords are only looked up when at most this long (the list's "alternatively" is longer, so it
/// has never been dropped; the trained model expects that).
pub(crate) const MAX_STOPWORD_LEN: usize = 12;

/// The stopwords as an open-addressing table of words packed into a `u128` (at most 12 bytes, zero
/// padded; words never contain a zero byte), so a lookup is one multiply and an integer compare or two.
/// A sorted list with binary search over `&str` was the judge's main cost.
struct StopwordTable {
    slots: Vec<u128>,
    shift: u32,
}

static STOPWORD_TABLE: LazyLock<StopwordTable> = LazyLock::new(|| {
    let bits = 10; // 1,024 slots for ~250 words: probes stay short.
    let mut table = StopwordTable {
        slots: vec![0; 1 << bits],
        shift: 128 - bits,
    };
    for w in STOPWORDS.iter().filter(|w| w.len() <= MAX_STOPWORD_LEN) {
        let key = pack(w.as_bytes());
        let mut i = table.slot(key);
        while table.slots[i] != 0 && table.slots[i] != key {
            i = (i + 1) & (table.slots.len() - 1);
        }
        table.slots[i] = key;
    }
    table
});

impl StopwordTable {
    fn slot(&self, key: u128) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835) >> self.shift) as usize
    }

    fn contains(&self, word: &[u8]) -> bool {
        if word.is_empty() || word.len() > MAX_STOPWORD_LEN {
            return false;
        }
        let key = pack(word);
        let mut i = self.slot(key);
        loop {
            match self.slots[i] {
                0 => return false,
                k if k == key => return true,
                _ => i = (i + 1) & (self.slots.len() - 1),
            }
        }
    }
}

/// Whether a lowercased word is a stopword.
pub(crate) fn is_stopword(word: &[u8]) -> bool {
    STOPWORD_TABLE.contains(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopword_table_agrees_with_the_list() {
        for w in STOPWORDS {
            assert_eq!(
                is_stopword(w.as_bytes()),
                w.len() <= MAX_STOPWORD_LEN,
                "{w}"
            );
        }
        for w in [
            "",
            "th",
            "them!",
            "alternatively",
            "priced",
            "thee",
            "abovee",
        ] {
            assert!(!is_stopword(w.as_bytes()), "{w}");
        }
    }

    #[test]
    fn the_list_names_each_word_once() {
        let mut words = STOPWORDS.to_vec();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), STOPWORDS.len());
    }
}
