//! What a lowercased word becomes: nothing (a stopword), or a token's stem hash, five-character
//! prefix hash and length flag; memoised per worker, since words repeat.

use xxhash_rust::xxh3::xxh3_64;

use super::scan::pack;
use super::stopwords::is_stopword;
use super::token::Token;

/// The hash of a token's normalised form (a word's stem, a number's digits).
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// The hash of a word's prefix, apart from the key hashes.
pub(crate) fn prefix_hash(prefix: &[u8]) -> u64 {
    xxh3_64(prefix) ^ 0x5f5f
}

/// A word of this many bytes or more is long ([`Token::long`]).
fn is_long(len: usize) -> bool {
    len >= 7
}

/// What a lowercased word becomes: nothing (a stopword), or a token's hash, prefix and length flag.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WordEntry {
    pub(crate) stopword: bool,
    long: bool,
    hash: u64,
    prefix: u64,
}

impl WordEntry {
    pub(crate) fn token(&self, name: bool) -> Token {
        Token {
            hash: self.hash,
            number: false,
            name,
            long: self.long,
            prefix: self.prefix,
        }
    }

    pub(crate) fn of(word: &[u8]) -> WordEntry {
        if is_stopword(word) {
            return WordEntry {
                stopword: true,
                ..WordEntry::default()
            };
        }
        let stem = stem_bytes(word);
        WordEntry {
            stopword: false,
            long: is_long(word.len()),
            hash: key_hash(stem),
            prefix: prefix_hash(&stem[..prefix_len(stem)]),
        }
    }
}

/// Words repeat (Zipf, and retrieved passages repeat each other), so the stopword check, the stem
/// and both hashes of a word are memoised per worker, keyed by the lowercased word packed into a
/// `u128` (words of up to [`WordCache::MAX_LEN`] bytes; longer ones are computed each time). It only
/// memoises a pure function, so it cannot change a score. Bounded: emptied when half full.
#[derive(Debug, Clone)]
pub(crate) struct WordCache {
    slots: Vec<CacheSlot>,
    used: usize,
}

/// One word of the cache: the packed word, whose unused 16th byte carries the stopword mark, and its
/// two hashes. 32 bytes, aligned: a hit reads one cache line.
#[derive(Debug, Clone, Copy, Default)]
#[repr(align(32))]
struct CacheSlot {
    key: u128,
    hash: u64,
    prefix: u64,
}

impl WordCache {
    /// 4,096 slots: 128 KB per worker.
    const SLOTS: usize = 1 << 12;
    /// Longest word cached: the 16th byte of a key is the stopword mark.
    pub(crate) const MAX_LEN: usize = 15;
    /// The stopword mark, in the top byte of a slot's key.
    const STOPWORD: u128 = 1 << 127;

    pub(crate) fn get(&mut self, word: &[u8]) -> WordEntry {
        if word.is_empty() || word.len() > Self::MAX_LEN {
            return WordEntry::of(word);
        }
        self.get_packed(pack(word), word.len())
    }

    /// The home slot of a key: its two halves mixed by one 64-bit multiply, top 12 bits.
    fn home(key: u128) -> usize {
        let mixed = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
        (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize
    }

    /// The entry of the word of `len` (1 to [`WordCache::MAX_LEN`]) bytes packed in `key`. The hit
    /// is the hot path and is inlined into the tokenizer's loop; the miss computes the entry out of
    /// line.
    #[inline(always)]
    pub(crate) fn get_packed(&mut self, key: u128, len: usize) -> WordEntry {
        let mask = Self::SLOTS - 1;
        let mut i = Self::home(key);
        loop {
            let slot = &self.slots[i];
            if slot.key & !Self::STOPWORD == key {
                return WordEntry {
                    stopword: slot.key & Self::STOPWORD != 0,
                    long: is_long(len),
                    hash: slot.hash,
                    prefix: slot.prefix,
                };
            }
            if slot.key == 0 {
                return self.insert(key, len, i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Computes and stores the entry of a word not in the cache; `empty` is the slot it goes to.
    #[cold]
    #[inline(never)]
    fn insert(&mut self, key: u128, len: usize, empty: usize) -> WordEntry {
        let entry = WordEntry::of(&key.to_le_bytes()[..len]);
        let mut i = empty;
        if self.used * 2 >= Self::SLOTS {
            self.slots.fill(CacheSlot::default());
            self.used = 0;
            i = Self::home(key);
        }
        self.slots[i] = CacheSlot {
            key: if entry.stopword {
                key | Self::STOPWORD
            } else {
                key
            },
            hash: entry.hash,
            prefix: entry.prefix,
        };
        self.used += 1;
        entry
    }
}

impl Default for WordCache {
    fn default() -> Self {
        Self {
            slots: vec![CacheSlot::default(); Self::SLOTS],
            used: 0,
        }
    }
}

/// Bytes in the first five characters of UTF-8 `s`.
fn prefix_len(s: &[u8]) -> usize {
    let mut chars = 0;
    for (i, b) in s.iter().enumerate() {
        // A byte that is not a continuation byte starts a character.
        if b & 0xC0 != 0x80 {
            if chars == 5 {
                return i;
            }
            chars += 1;
        }
    }
    s.len()
}

/// A light suffix stripper: enough that "prices", "priced" and "pricing" meet at "pric".
pub(crate) fn stem_bytes(word: &[u8]) -> &[u8] {
    let n = word.len();
    for suffix in [&b"ing"[..], b"ies", b"ed", b"es", b"ly", b"s"] {
        if n > suffix.len() + 3 && word.ends_with(suffix) {
            let cut = &word[..n - suffix.len()];
            return cut.strip_suffix(b"e").unwrap_or(cut);
        }
    }
    word.strip_suffix(b"e")
        .filter(|w| w.len() > 3)
        .unwrap_or(word)
}
