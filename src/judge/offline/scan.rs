//! Byte scans 64 and 8 bytes at a time: word bytes and spaces as bitmasks, words packed into
//! integers and lowercased in one step. The tokenizer's inner loop and [`word_count`] are built on
//! these; each is held to a byte-at-a-time definition in the tests.

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

/// Eight bytes at a time ("SWAR"): a `u64` of eight bytes, little-endian, and bit 7 of a byte as
/// that byte's answer.
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The end of the run of word bytes from `start`, byte by byte: only for a run that fills a whole
/// block of [`super::tokenizer::Tokenizer::each_token`] (64 bytes or more).
#[inline(never)]
pub(crate) fn word_end(bytes: &[u8], start: usize) -> usize {
    bytes[start..]
        .iter()
        .position(|&b| !is_word_byte(b))
        .map_or(bytes.len(), |n| start + n)
}

/// The last bytes of a text, fewer than eight, zero padded. Out of line: inlined, the compiler
/// merges it with the eight-byte load into one `memcpy` call of either length, for every word.
#[cold]
#[inline(never)]
fn load_tail(rest: &[u8]) -> u64 {
    let mut chunk = [0u8; 8];
    chunk[..rest.len()].copy_from_slice(rest);
    u64::from_le_bytes(chunk)
}

/// Whether a byte continues a word (an ASCII letter or digit, an apostrophe or a non-ASCII byte), by
/// arithmetic rather than a table, so that [`word_mask64`] vectorises.
#[inline(always)]
fn is_word_byte(b: u8) -> bool {
    ((b | 0x20).wrapping_sub(b'a') < 26) | (b.wrapping_sub(b'0') < 10) | (b == b'\'') | (b >= 0x80)
}

/// Gathers bit 0 of each of eight bytes into the top byte of the product, byte `k` to bit `56 + k`
/// (each pair of set bits lands on a bit of its own, so nothing carries).
const GATHER: u64 = 0x0102_0408_1020_4080;

/// The word bytes of 64 bytes as a bitmask, bit `j` for byte `j`.
#[inline(always)]
fn word_mask64(block: &[u8; 64]) -> u64 {
    byte_mask64(block, is_word_byte)
}

/// The bytes of 64 bytes that `class` holds for, as a bitmask, bit `j` for byte `j`. Written so
/// that the compiler vectorises the classification (a flag byte per byte); one multiply then
/// gathers eight flags.
#[inline(always)]
fn byte_mask64(block: &[u8; 64], class: impl Fn(u8) -> bool) -> u64 {
    let flags: [u8; 64] = std::array::from_fn(|j| u8::from(class(block[j])));
    let mut mask = 0;
    for (k, eight) in flags.as_chunks::<8>().0.iter().enumerate() {
        mask |= (u64::from_le_bytes(*eight).wrapping_mul(GATHER) >> 56) << (8 * k);
    }
    mask
}

/// [`word_mask64`] of the (up to) 64 bytes of `bytes` from `start`; bytes past the end are no word
/// bytes.
#[inline(always)]
pub(crate) fn word_mask(bytes: &[u8], start: usize) -> u64 {
    match bytes[start..].first_chunk::<64>() {
        Some(block) => word_mask64(block),
        None => word_mask_tail(&bytes[start..]),
    }
}

/// [`word_mask`] of a text's last bytes, fewer than 64, zero padded (out of line, once a text).
#[inline(never)]
fn word_mask_tail(rest: &[u8]) -> u64 {
    let mut block = [0u8; 64];
    block[..rest.len()].copy_from_slice(rest);
    word_mask64(&block)
}

/// The eight bytes from `start`, zero padded at the text's end.
#[inline(always)]
pub(crate) fn load8(bytes: &[u8], start: usize) -> u64 {
    match bytes[start..].first_chunk::<8>() {
        Some(c) => u64::from_le_bytes(*c),
        None => load_tail(&bytes[start..]),
    }
}

/// Whether the (zero padded) bytes of a word are plain: no non-ASCII byte and no apostrophe (a
/// zero byte of `x ^ '\''`, which adding 0x7F to each 7-bit byte finds without carries).
#[inline(always)]
pub(crate) fn plain8(x: u64) -> bool {
    x & HIGH == 0 && ((x ^ (u64::from(b'\'') * ONES)) + 0x7F * ONES) & HIGH == HIGH
}

/// The lowercase form of the word of `len` <= 16 bytes at `start`, packed as [`pack`] does, if it
/// is plain (ASCII letters and digits; `None` otherwise). For letters and digits, lowercasing is
/// setting bit 5 wherever bit 6 is set, which a 128-bit word does for all 16 bytes at once.
#[inline]
pub(crate) fn pack_plain(bytes: &[u8], start: usize, len: usize) -> Option<u128> {
    let raw = match bytes[start..].first_chunk::<16>() {
        Some(chunk) => u128::from_le_bytes(*chunk),
        None => pack_tail(&bytes[start..start + len]),
    };
    let word = raw & KEEP_BYTES[len];
    (plain8(word as u64) && plain8((word >> 64) as u64))
        .then_some(word | ((word & 0x4040_4040_4040_4040_4040_4040_4040_4040) >> 1))
}

/// [`pack_plain`] for a word of up to eight bytes already loaded (and masked to its length).
#[inline(always)]
pub(crate) fn lower_plain8(word: u64) -> u64 {
    word | ((word & 0x4040_4040_4040_4040) >> 1)
}

/// [`pack`], out of line for the reason [`load_tail`] is.
#[cold]
#[inline(never)]
fn pack_tail(word: &[u8]) -> u128 {
    pack(word)
}

/// `KEEP_BYTES[n]` keeps the low `n` bytes of a `u128` (a table, because the shift for 16 would
/// overflow and a 128-bit variable shift is slow).
pub(crate) static KEEP_BYTES: [u128; 17] = {
    let mut t = [0u128; 17];
    let mut n = 1;
    while n < 17 {
        t[n] = (t[n - 1] << 8) | 0xFF;
        n += 1;
    }
    t
};

/// Packs up to 16 bytes into a `u128`, little-endian, zero padded.
pub(crate) fn pack(word: &[u8]) -> u128 {
    let mut buf = [0u8; 16];
    buf[..word.len()].copy_from_slice(word);
    u128::from_le_bytes(buf)
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
    fn plain_words_pack_as_their_lowercase() {
        let text = b"Hello WORLD abcdefghijklmnop Z09az x";
        for (start, len) in [(0, 5), (6, 5), (12, 16), (29, 5), (35, 1)] {
            let lower = text[start..start + len].to_ascii_lowercase();
            assert_eq!(pack_plain(text, start, len), Some(pack(&lower)), "{start}");
            if len <= 8 {
                let chunk = load8(text, start) & KEEP_BYTES[len] as u64;
                assert!(plain8(chunk), "{start}");
                let short = u128::from(lower_plain8(chunk));
                assert_eq!(short, pack(&lower), "{start}");
            }
        }
    }

    /// A word byte, by its definition: an ASCII letter or digit, an apostrophe, any byte of a
    /// non-ASCII character.
    fn reference_word_byte(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'\'' || b >= 0x80
    }

    /// The end of a run of word bytes, by the definition, byte by byte.
    fn reference_word_end(bytes: &[u8], start: usize) -> usize {
        let mut i = start;
        while bytes.get(i).is_some_and(|&b| reference_word_byte(b)) {
            i += 1;
        }
        i
    }

    /// The word-byte bitmask of `bytes[start..]`'s first 64 bytes, by the definition.
    fn reference_word_mask(bytes: &[u8], start: usize) -> u64 {
        (0..64).fold(0, |mask, j| {
            let word = bytes
                .get(start + j)
                .is_some_and(|&b| reference_word_byte(b));
            mask | (u64::from(word) << j)
        })
    }

    #[test]
    fn word_scan_classifies_every_byte_by_the_definition() {
        let bytes: Vec<u8> = (0..=255u8).collect();
        for b in 0..=255u8 {
            assert_eq!(is_word_byte(b), reference_word_byte(b), "{b}");
            if reference_word_byte(b) {
                // A one-byte word, zero padded: plain when an ASCII letter or digit (no apostrophe
                // or Unicode handling).
                assert_eq!(plain8(u64::from(b)), b.is_ascii_alphanumeric(), "{b}");
            }
            assert_eq!(
                word_end(&bytes, usize::from(b)),
                reference_word_end(&bytes, usize::from(b))
            );
        }
        for start in [0, 64, 128, 192, 200] {
            assert_eq!(
                word_mask(&bytes, start),
                reference_word_mask(&bytes, start),
                "{start}"
            );
        }
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
        fn word_scan_matches_the_reference(
            text in proptest::collection::vec(
                proptest::sample::select(vec![
                    b'a', b'Z', b'0', b'9', b'\'', b' ', b'.', b'@', b'[', b'`', b'{', b'/', b':',
                    0xC3, 0xA9, 0x80, 0xFF, 0x00, b'-', b'_',
                ]),
                0..150,
            ),
            start in 0usize..150,
        ) {
            let start = start.min(text.len());
            proptest::prop_assert_eq!(word_end(&text, start), reference_word_end(&text, start));
            if start < text.len() {
                proptest::prop_assert_eq!(
                    word_mask(&text, start),
                    reference_word_mask(&text, start)
                );
            }
        }
    }
}
