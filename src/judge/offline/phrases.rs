//! Phrase vocabularies: refusals, hedges and advice. Each is one list, from which the matcher (and
//! the tests' reference regex) is built, so a phrase is added in one place.

use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickKind};

/// Phrases that decline to answer, matched on a leading word boundary only ("i cannot be sure",
/// "cannot be answered").
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

/// Hedging words.
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

/// Advice and generic add-on phrases.
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

/// A phrase vocabulary: which list a phrase comes from and how it is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lexicon {
    Refusal,
    Hedge,
    Advice,
}

impl Lexicon {
    pub(crate) const ALL: [Lexicon; 3] = [Lexicon::Refusal, Lexicon::Hedge, Lexicon::Advice];

    /// The vocabulary's phrases: lowercase ASCII, each starting and ending with a letter.
    pub(crate) fn phrases(self) -> &'static [&'static str] {
        match self {
            Lexicon::Refusal => REFUSAL_PHRASES,
            Lexicon::Hedge => HEDGE_WORDS,
            Lexicon::Advice => ADVICE_PHRASES,
        }
    }

    /// Whether a match must end on a word boundary too (it always starts on one).
    pub(crate) fn whole_words(self) -> bool {
        self != Lexicon::Refusal
    }
}

/// Every vocabulary's phrases in one ASCII case-insensitive Aho-Corasick automaton over the
/// answer's bytes, and the vocabulary of each pattern.
///
/// A phrase matches case-insensitively on word boundaries (Unicode `\w`, as a regular expression's
/// `(?i)\b...\b` has it; the tests hold the automaton to such a regex built from the same lists).
/// The boundaries are checked by hand around each match. Each list's phrases are whole words that
/// cannot overlap one another on word boundaries, so counting every boundary-respecting overlapping
/// match counts what a leftmost, non-overlapping search counts.
static PHRASES: LazyLock<(AhoCorasick, Vec<Lexicon>)> = LazyLock::new(|| {
    let (patterns, kinds): (Vec<&str>, Vec<Lexicon>) = Lexicon::ALL
        .iter()
        .flat_map(|&kind| kind.phrases().iter().map(move |p| (*p, kind)))
        .unzip();
    let automaton = AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .kind(Some(AhoCorasickKind::DFA))
        .build(patterns)
        .expect("static phrase patterns build");
    (automaton, kinds)
});

/// The two characters outside ASCII that Unicode case-insensitive matching equates with an ASCII
/// letter (LONG S with s, KELVIN SIGN with k), each with its letter. ASCII case-insensitive matching
/// cannot see them, so they are replaced by their letters first (both sides are word characters, so
/// no word boundary moves).
pub(crate) const ASCII_FOLDING: [(char, &str); 2] = [('\u{17F}', "s"), ('\u{212A}', "k")];

/// The phrase counts of one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Phrases {
    /// A refusal phrase occurs.
    pub(crate) refusal: bool,
    /// Hedging words.
    pub(crate) hedges: usize,
    /// Advice phrases.
    pub(crate) advice: usize,
}

impl Phrases {
    /// Counts the phrases of `answer`.
    pub(crate) fn scan(answer: &str) -> Phrases {
        if !answer.is_ascii() && answer.contains(ASCII_FOLDING.map(|(c, _)| c)) {
            let folded = ASCII_FOLDING
                .iter()
                .fold(answer.to_owned(), |text, (c, letter)| {
                    text.replace(*c, letter)
                });
            return Self::scan_folded(&folded);
        }
        Self::scan_folded(answer)
    }

    /// [`Phrases::scan`] of a text without the characters of [`ASCII_FOLDING`].
    fn scan_folded(answer: &str) -> Phrases {
        let (automaton, kinds) = &*PHRASES;
        let mut p = Phrases::default();
        for m in automaton.find_overlapping_iter(answer) {
            let kind = kinds[m.pattern().as_usize()];
            if !word_boundary_before(answer, m.start())
                || (kind.whole_words() && !word_boundary_after(answer, m.end()))
            {
                continue;
            }
            match kind {
                Lexicon::Refusal => p.refusal = true,
                Lexicon::Hedge => p.hedges += 1,
                Lexicon::Advice => p.advice += 1,
            }
        }
        p
    }
}

/// No word character (Unicode `\w`) ends at byte `i`.
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

#[cfg(test)]
mod tests {
    use regex::Regex;

    use super::super::reference;
    use super::*;

    #[test]
    fn only_two_non_ascii_characters_fold_to_ascii_letters() {
        let re = Regex::new(r"(?i)^[a-z']$").unwrap();
        let folding: Vec<char> = (0x80..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|c| re.is_match(c.encode_utf8(&mut [0; 4])))
            .collect();
        assert_eq!(folding, ASCII_FOLDING.map(|(c, _)| c));
        for (c, letter) in ASCII_FOLDING {
            let re = Regex::new(&format!("(?i)^{letter}$")).unwrap();
            assert!(re.is_match(c.encode_utf8(&mut [0; 4])), "{c} is {letter}");
        }
    }

    #[test]
    fn each_phrase_is_lowercase_ascii_from_letter_to_letter() {
        for kind in Lexicon::ALL {
            for p in kind.phrases() {
                let b = p.as_bytes();
                assert!(
                    p.is_ascii()
                        && *p == p.to_lowercase()
                        && b[0].is_ascii_alphabetic()
                        && b[b.len() - 1].is_ascii_alphabetic(),
                    "{p:?}"
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn phrases_match_the_reference(
            parts in proptest::collection::vec(proptest::sample::select(reference::fragments()), 0..30),
            upper in proptest::collection::vec(proptest::bool::ANY, 30),
        ) {
            let text: String = parts
                .iter()
                .zip(&upper)
                .map(|(p, u)| if *u { p.to_uppercase() } else { (*p).to_owned() })
                .collect();
            proptest::prop_assert_eq!(Phrases::scan(&text), reference::phrases(&text), "{:?}", text);
        }
    }
}
