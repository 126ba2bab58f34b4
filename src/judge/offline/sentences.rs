//! The answer's sentences: where a claim starts and ends, for per-sentence support.

/// The sentences of `text`, split at `.`, `!`, `?` or a newline followed by space/end, keeping
/// decimal numbers ("3.5") and common abbreviations intact enough for scoring. Each sentence is
/// trimmed; fragments without a letter or digit are skipped. Finds candidate ends with `memchr`
/// instead of testing every byte.
#[derive(Debug, Clone)]
pub(crate) struct Sentences<'a> {
    text: &'a str,
    /// Where the current sentence starts.
    start: usize,
    /// Where to look for the next candidate end.
    pos: usize,
    done: bool,
}

impl<'a> Sentences<'a> {
    /// Sentences of `text`.
    pub(crate) fn new(text: &'a str) -> Self {
        Self {
            text,
            start: 0,
            pos: 0,
            done: false,
        }
    }

    /// The next end of a sentence at or after `self.pos` (the index of its final byte).
    fn next_boundary(&mut self) -> Option<usize> {
        let bytes = self.text.as_bytes();
        while self.pos < bytes.len() {
            let rest = &bytes[self.pos..];
            let i = self.pos + memchr::memchr3(b'.', b'!', b'?', rest).unwrap_or(rest.len());
            // A newline always ends a sentence, so a newline before the punctuation comes first.
            let i = memchr::memchr(b'\n', &bytes[self.pos..i]).map_or(i, |n| self.pos + n);
            if i >= bytes.len() {
                self.pos = bytes.len();
                return None;
            }
            self.pos = i + 1;
            if bytes[i] == b'\n' {
                return Some(i);
            }
            let next_ws = bytes
                .get(i + 1)
                .is_none_or(|n| n.is_ascii_whitespace() || *n == b'"');
            // "e.g." and single initials: a one-letter word before the dot is not an end.
            let short_word = i >= 2
                && bytes[i - 1].is_ascii_alphabetic()
                && !bytes[i - 2].is_ascii_alphanumeric();
            if next_ws && !short_word {
                return Some(i);
            }
        }
        None
    }
}

impl<'a> Iterator for Sentences<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        while !self.done {
            let s = match self.next_boundary() {
                Some(i) => {
                    let s = &self.text[self.start..=i];
                    self.start = i + 1;
                    s
                }
                None => {
                    self.done = true;
                    &self.text[self.start..]
                }
            };
            let s = s.trim();
            if has_alphanumeric(s) {
                return Some(s);
            }
        }
        None
    }
}

/// `s.chars().any(char::is_alphanumeric)`, with the ASCII answer found without decoding.
fn has_alphanumeric(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_alphanumeric())
        || (!s.is_ascii() && s.chars().any(char::is_alphanumeric))
}

#[cfg(test)]
mod tests {
    use super::super::reference;
    use super::*;

    fn sentences(text: &str) -> Vec<&str> {
        Sentences::new(text).collect()
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

    proptest::proptest! {
        #[test]
        fn sentences_match_the_reference(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "B", "e.g.", "3.5", ".", "!", "?", "\n", " ", "\"", "J.", "\u{a0}", "é", "—", "…", "x1", "  ",
                ]),
                0..40,
            )
        ) {
            let text: String = parts.concat();
            proptest::prop_assert_eq!(sentences(&text), reference::sentences(&text));
        }
    }
}
