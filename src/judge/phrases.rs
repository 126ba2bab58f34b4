//! The phrase vocabulary of the offline judge: refusals, hedges and advice, each phrase once, matched
//! case-insensitively on word boundaries.
//!
//! The lists are literals for one ASCII case-insensitive Aho-Corasick automaton over the answer's
//! bytes, with the word boundaries checked by hand. Each list's phrases are whole words that cannot
//! overlap one another on word boundaries, so counting every boundary-respecting overlapping match
//! counts what a regular expression's leftmost, non-overlapping search over the same list counts;
//! the tests build those expressions from these lists ([`reference_phrases`]) and compare both on
//! generated text.

use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickKind};

pub(super) const REFUSAL_PHRASES: &[&str] = &[
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

pub(super) const HEDGE_WORDS: &[&str] = &[
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

pub(super) const ADVICE_PHRASES: &[&str] = &[
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

/// The two characters outside ASCII that Unicode case-insensitive matching equates with an ASCII
/// letter (LONG S with s, KELVIN SIGN with k), which ASCII case-insensitive matching cannot see: an
/// answer holding one is scanned with it replaced by its letter.
const ASCII_FOLDING: [(char, char); 2] = [('\u{17F}', 's'), ('\u{212A}', 'k')];

/// The phrase counts of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Phrases {
    /// A refusal phrase occurs.
    pub(super) refusal: bool,
    /// Hedging words.
    pub(super) hedges: usize,
    /// Advice and add-on phrases.
    pub(super) advice: usize,
}

impl Phrases {
    /// Counts the phrases of `answer`.
    pub(super) fn scan(answer: &str) -> Phrases {
        if !answer.is_ascii() && answer.contains(ASCII_FOLDING.map(|(c, _)| c)) {
            let folded: String = answer
                .chars()
                .map(|c| {
                    ASCII_FOLDING
                        .iter()
                        .find(|(from, _)| *from == c)
                        .map_or(c, |(_, to)| *to)
                })
                .collect();
            return Self::scan_ascii_folded(&folded);
        }
        Self::scan_ascii_folded(answer)
    }

    fn scan_ascii_folded(answer: &str) -> Phrases {
        let (automaton, kinds) = &*PHRASES;
        let mut p = Phrases::default();
        for m in automaton.find_overlapping_iter(answer) {
            // Every pattern starts and ends with a letter, so a word boundary there means no word
            // character beside it.
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

/// The phrase counts by regular expressions built from the same lists (Unicode case-insensitive,
/// `\b` word boundaries; a refusal needs one only before it): the reference for [`Phrases::scan`].
#[cfg(test)]
pub(super) fn reference_phrases(answer: &str) -> Phrases {
    let alternatives = |list: &[&str]| {
        list.iter()
            .map(|p| regex::escape(p))
            .collect::<Vec<_>>()
            .join("|")
    };
    let re = |list: &[&str], closed: bool| {
        let end = if closed { r"\b" } else { "" };
        regex::Regex::new(&format!(r"(?i)\b(?:{}){end}", alternatives(list))).expect("phrase regex")
    };
    Phrases {
        refusal: re(REFUSAL_PHRASES, false).is_match(answer),
        hedges: re(HEDGE_WORDS, true).find_iter(answer).count(),
        advice: re(ADVICE_PHRASES, true).find_iter(answer).count(),
    }
}

#[cfg(test)]
mod tests {
    use regex::Regex;

    use super::*;
    use crate::judge::citations::{citations, reference_citations};
    use crate::trace::Trace;

    const CTX: &str = "Canada introduced a carbon contract.";

    #[test]
    fn only_two_non_ascii_characters_fold_to_ascii_letters() {
        let re = Regex::new(r"(?i)^[a-z']$").unwrap();
        let folding: Vec<char> = (0x80..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|c| re.is_match(c.encode_utf8(&mut [0; 4])))
            .collect();
        assert_eq!(folding, ASCII_FOLDING.map(|(c, _)| c));
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
            let want = reference_phrases(&text);
            proptest::prop_assert_eq!(got, want, "{:?}", text);
            let t = Trace::of("q", &[("doc_1", CTX), ("x", CTX)], &text);
            proptest::prop_assert_eq!(citations(&t), reference_citations(&t), "{:?}", text);
        }
    }
}
