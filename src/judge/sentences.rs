//! Sentences and words: the sentence splitter that cuts an answer into claims, and the word count
//! the audit and the length signals use. Both work on bytes (every delimiter they look for is
//! ASCII) and find candidates with `memchr` or 64 bytes at a time.

use super::tokenizer::byte_mask64;

/// The words of `text` as `split_whitespace` counts them. ASCII text (most answers) is counted a
/// byte at a time without decoding characters: a word starts at a byte that is not whitespace
/// after one that is (or at the start).
pub(crate) fn word_count(text: &str) -> usize {
    if !text.is_ascii() {
        return text.split_whitespace().count();
    }
    // ASCII's `char::is_whitespace`: space, \t, \n, vertical tab, form feed, \r.
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');
    let bytes = text.as_bytes();
    // 64 bytes at a time: a word starts at each byte that is no space after one that is (or, for
    // the first byte of a block, after a space ending the block before; the text starts after one).
    let mut words = 0;
    let mut space_before = 1u64;
    let mut blocks = bytes.chunks_exact(64);
    for block in &mut blocks {
        let spaces = byte_mask64(block.try_into().expect("64-byte block"), space);
        words += (!spaces & (spaces << 1 | space_before)).count_ones() as usize;
        space_before = spaces >> 63;
    }
    let mut after_space = space_before == 1;
    for &b in blocks.remainder() {
        let s = space(b);
        words += usize::from(after_space && !s);
        after_space = s;
    }
    words
}

/// The sentences of `text`, split at `.`, `!`, `?` or a newline followed by space/end, keeping
/// decimal numbers ("3.5") and common abbreviations intact enough for scoring. Each sentence is
/// trimmed; fragments without a letter or digit are skipped.
#[cfg(test)]
pub(crate) fn sentences(text: &str) -> Vec<&str> {
    Sentences::new(text).collect()
}

/// The iterator behind [`sentences`]: finds candidate ends with `memchr` instead of testing every byte.
#[derive(Debug, Clone)]
pub struct Sentences<'a> {
    text: &'a str,
    /// Where the current sentence starts.
    start: usize,
    /// Where to look for the next candidate end.
    pos: usize,
    done: bool,
}

impl<'a> Sentences<'a> {
    /// Sentences of `text`.
    pub fn new(text: &'a str) -> Self {
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
    use super::*;

    #[test]
    fn words_counted_as_split_whitespace_counts_them() {
        for text in [
            "",
            " ",
            "one",
            "  two  words ",
            "tab\tnew\nline\rcr\x0bvt\x0cff",
            "a\u{85}b\u{a0}c d",
            "caf\u{e9} au lait",
            "x\x1fy",
        ] {
            assert_eq!(
                word_count(text),
                text.split_whitespace().count(),
                "{text:?}"
            );
        }
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

    /// The previous byte-at-a-time splitter, kept as the reference the memchr one must match.
    fn reference_sentences(text: &str) -> Vec<&str> {
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
                    let short_word = i >= 2
                        && prev.is_ascii_alphabetic()
                        && !bytes[i - 2].is_ascii_alphanumeric();
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

    proptest::proptest! {
        /// Runs of spaces and words that cross 64-byte blocks, as `split_whitespace` counts them.
        #[test]
        fn word_count_matches_split_whitespace(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "word", " ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\x1f", "x.y",
                    "sixty-three-bytes-of-one-word-that-ends-right-at-the-block-end!",
                ]),
                0..60,
            ),
        ) {
            let text = parts.concat();
            proptest::prop_assert_eq!(word_count(&text), text.split_whitespace().count());
        }

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
            proptest::prop_assert_eq!(sentences(&text), reference_sentences(&text));
        }
    }
}
