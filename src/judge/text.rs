//! Text: the cheap lexical machinery the offline judge is built on. Sentences, content tokens
//! (lowercased, light stemming, numbers normalised) as 64-bit hashes, and small hash sets of those
//! hashes that a worker clears and refills for every trace instead of allocating new ones.
//!
//! Everything here works on bytes: the text is UTF-8, every delimiter the tokenizer and the sentence
//! splitter look for is ASCII, and non-ASCII words take a slower path that lowercases per `char`.

use std::ops::Range;
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

/// Stopwords are only looked up when at most this long (the list's "alternatively" is longer, so it
/// has never been dropped; the trained model expects that).
const MAX_STOPWORD_LEN: usize = 12;

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

/// Packs up to 16 bytes into a `u128`, little-endian, zero padded.
fn pack(word: &[u8]) -> u128 {
    let mut buf = [0u8; 16];
    buf[..word.len()].copy_from_slice(word);
    u128::from_le_bytes(buf)
}

fn is_stopword(word: &[u8]) -> bool {
    STOPWORD_TABLE.contains(word)
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

/// A sorted, deduplicated set of token hashes (for callers that build a set once; the judge itself
/// uses the reusable [`HashSet64`]).
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

/// A set of 64-bit hashes with a small value per member (flags, or a stamp), by open addressing.
///
/// Made to be reused: [`HashSet64::reset`] empties it in constant time by moving to a new epoch (a
/// slot whose epoch is not the set's is empty), so a worker's sets neither allocate nor clear memory
/// per trace once they have grown to the largest trace seen. Keys are hashes already, so one
/// multiply spreads them over the slots.
#[derive(Debug, Clone)]
pub struct HashSet64 {
    slots: Vec<Slot>,
    epoch: u32,
    /// Slots in use minus one (a power of two minus one).
    mask: usize,
    /// 64 minus log2 of the slots in use: the multiply's top bits pick the slot.
    shift: u32,
    len: usize,
}

/// One slot, in one cache line access: key, value, and the epoch that makes it live.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    key: u64,
    value: u32,
    epoch: u32,
}

impl Default for HashSet64 {
    fn default() -> Self {
        let mut s = Self {
            slots: Vec::new(),
            epoch: 0,
            mask: 0,
            shift: 0,
            len: 0,
        };
        s.reset(0);
        s
    }
}

impl HashSet64 {
    /// Empties the set and sizes it for up to `expected` members (at most half full).
    pub fn reset(&mut self, expected: usize) {
        let slots = (expected.max(8) * 2).next_power_of_two();
        if self.slots.len() < slots {
            self.slots.resize(slots, Slot::default());
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Once per 4 billion resets: old epochs could come back to life.
            self.slots.fill(Slot::default());
            self.epoch = 1;
        }
        self.mask = slots - 1;
        self.shift = 64 - slots.trailing_zeros();
        self.len = 0;
    }

    /// The slot holding `key`, or the empty slot where it would go; and whether it holds it.
    fn find(&self, key: u64) -> (usize, bool) {
        let mut i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize;
        loop {
            let slot = &self.slots[i];
            if slot.epoch != self.epoch {
                return (i, false);
            }
            if slot.key == key {
                return (i, true);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Adds `key` with `value` ORed into its value; returns the value it had, `None` when it is new.
    /// Grows when more than half full, so [`HashSet64::reset`] with the right size avoids that.
    pub fn insert(&mut self, key: u64, value: u32) -> Option<u32> {
        if (self.len + 1) * 2 > self.mask + 1 {
            self.grow();
        }
        let (i, present) = self.find(key);
        let slot = &mut self.slots[i];
        if present {
            let old = slot.value;
            slot.value |= value;
            Some(old)
        } else {
            *slot = Slot {
                key,
                value,
                epoch: self.epoch,
            };
            self.len += 1;
            None
        }
    }

    fn grow(&mut self) {
        let members: Vec<(u64, u32)> = self.iter().collect();
        self.reset(self.mask + 1);
        for (k, v) in members {
            self.insert(k, v);
        }
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: u64) -> bool {
        self.find(key).1
    }

    /// The value of `key`, when present.
    pub fn get(&self, key: u64) -> Option<u32> {
        let (i, present) = self.find(key);
        present.then(|| self.slots[i].value)
    }

    /// The value of `key`, to change in place, when present.
    pub fn value_mut(&mut self, key: u64) -> Option<&mut u32> {
        let (i, present) = self.find(key);
        present.then(|| &mut self.slots[i].value)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Members and their values, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.slots[..=self.mask]
            .iter()
            .filter(|s| s.epoch == self.epoch)
            .map(|s| (s.key, s.value))
    }
}

/// The words of `text` as `split_whitespace` counts them. ASCII text (most answers) is counted a
/// byte at a time without decoding characters: a word starts at a byte that is not whitespace
/// after one that is (or at the start).
pub fn word_count(text: &str) -> usize {
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
pub fn sentences(text: &str) -> Vec<&str> {
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

/// What a byte starts in the tokenizer: a number, a word (a letter or a non-ASCII byte), or the
/// end of a clause. Which bytes continue a word is [`is_word_byte`]'s.
const DIGIT: u8 = 1;
const WORD_START: u8 = 2;
const CLAUSE_END: u8 = 4;

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_digit() {
            t[b] |= DIGIT;
        }
        if c.is_ascii_alphabetic() || c >= 0x80 {
            t[b] |= WORD_START;
        }
        if matches!(c, b'.' | b'!' | b'?' | b'\n' | b':') {
            t[b] |= CLAUSE_END;
        }
        b += 1;
    }
    t
};

/// Content tokens of `text`: stopwords dropped, lowercased, lightly stemmed, numbers normalised
/// ("1,200" and "1200" agree; "5%" is "5"; "$3.50" is "3.50"). Appends to `out`.
pub fn content_tokens(text: &str, out: &mut Vec<Token>) {
    Tokenizer::default().tokens(text, out);
}

/// The tokenizer with its word buffer and word cache, kept by a worker so tokenizing allocates
/// nothing.
#[derive(Debug, Clone, Default)]
pub struct Tokenizer {
    word: Vec<u8>,
    cache: WordCache,
}

/// A word of this many bytes or more is long ([`Token::long`]).
fn is_long(len: usize) -> bool {
    len >= 7
}

/// What a lowercased word becomes: nothing (a stopword), or a token's hash, prefix and length flag.
#[derive(Debug, Clone, Copy, Default)]
struct WordEntry {
    stopword: bool,
    long: bool,
    hash: u64,
    prefix: u64,
}

impl WordEntry {
    fn token(&self, name: bool) -> Token {
        Token {
            hash: self.hash,
            number: false,
            name,
            long: self.long,
            prefix: self.prefix,
        }
    }

    fn of(word: &[u8]) -> WordEntry {
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
            hash: xxh3_64(stem),
            prefix: xxh3_64(&stem[..prefix_len(stem)]) ^ 0x5f5f,
        }
    }
}

/// Words repeat (Zipf, and retrieved passages repeat each other), so the stopword check, the stem
/// and both hashes of a word are memoised per worker, keyed by the lowercased word packed into a
/// `u128` (words of up to [`WordCache::MAX_LEN`] bytes; longer ones are computed each time). It only
/// memoises a pure function, so it cannot change a score. Bounded: emptied when half full.
#[derive(Debug, Clone)]
struct WordCache {
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
    const MAX_LEN: usize = 15;
    /// The stopword mark, in the top byte of a slot's key.
    const STOPWORD: u128 = 1 << 127;

    fn get(&mut self, word: &[u8]) -> WordEntry {
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
    fn get_packed(&mut self, key: u128, len: usize) -> WordEntry {
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

/// Eight bytes at a time ("SWAR"): a `u64` of eight bytes, little-endian, and bit 7 of a byte as
/// that byte's answer.
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The end of the run of word bytes from `start`, byte by byte: only for a run that fills a whole
/// block of [`Tokenizer::each_token`] (64 bytes or more).
#[inline(never)]
fn word_end(bytes: &[u8], start: usize) -> usize {
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
fn word_mask(bytes: &[u8], start: usize) -> u64 {
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
fn load8(bytes: &[u8], start: usize) -> u64 {
    match bytes[start..].first_chunk::<8>() {
        Some(c) => u64::from_le_bytes(*c),
        None => load_tail(&bytes[start..]),
    }
}

impl Tokenizer {
    /// [`content_tokens`], reusing this tokenizer's buffers.
    pub fn tokens(&mut self, text: &str, out: &mut Vec<Token>) {
        self.each_token(text, |t| out.push(t));
    }

    /// Calls `emit` with each content token of `text` in order, as [`Tokenizer::tokens`] would
    /// append them, for callers that stream tokens rather than keep them.
    ///
    /// The text is taken 64 bytes at a time as a bitmask of its word bytes; each run of word bytes
    /// is a word (when it starts with a letter or a non-ASCII byte), a number and what follows it
    /// (a digit), or a stray apostrophe and what follows it. The bytes between tokens are only read
    /// to tell a name from a sentence's first word.
    #[inline]
    pub fn each_token(&mut self, text: &str, mut emit: impl FnMut(Token)) {
        let Tokenizer { word, cache } = self;
        let bytes = text.as_bytes();
        // Where the last token ended, `None` before the first: a capitalised word is a name unless
        // a clause ends between that token and it.
        let mut last_end = None;
        let mut base = 0;
        'blocks: while base < bytes.len() {
            let mut words = word_mask(bytes, base);
            while words != 0 {
                let skip = words.trailing_zeros() as usize;
                let run = (!(words >> skip)).trailing_zeros() as usize;
                let start = base + skip;
                let mut end = start + run;
                if skip + run == 64 && end < bytes.len() {
                    // The run may go on past this block: take a block from its start, or past 64
                    // bytes, find its end byte by byte.
                    if skip > 0 {
                        base = start;
                        continue 'blocks;
                    }
                    end = word_end(bytes, start);
                }
                let c = bytes[start];
                let class = CLASS[usize::from(c)];
                let next = if class & WORD_START != 0 {
                    let name = c.is_ascii_uppercase() && !starts_sentence(bytes, last_end, start);
                    let entry = word_entry(text, start..end, word, cache);
                    if !entry.stopword {
                        emit(entry.token(name));
                    }
                    last_end = Some(end);
                    end
                } else if class & DIGIT != 0 {
                    let mut i = start;
                    emit(number(bytes, &mut i, word));
                    last_end = Some(i);
                    i
                } else {
                    // An apostrophe that starts no word.
                    start + 1
                };
                if next - base >= 64 {
                    base = next;
                    continue 'blocks;
                }
                words &= u64::MAX << (next - base);
            }
            base += 64;
        }
    }
}

/// Whether a capitalised word at `start` begins a sentence: no token before it, or a clause end
/// ('.', '!', '?', ':', a newline) since the last one, which ended at `last_end`.
#[inline(never)]
fn starts_sentence(bytes: &[u8], last_end: Option<usize>, start: usize) -> bool {
    last_end.is_none_or(|e| {
        bytes[e..start]
            .iter()
            .any(|&b| CLASS[usize::from(b)] & CLAUSE_END != 0)
    })
}

/// Whether the (zero padded) bytes of a word are plain: no non-ASCII byte and no apostrophe (a
/// zero byte of `x ^ '\''`, which adding 0x7F to each 7-bit byte finds without carries).
#[inline(always)]
fn plain8(x: u64) -> bool {
    x & HIGH == 0 && ((x ^ (u64::from(b'\'') * ONES)) + 0x7F * ONES) & HIGH == HIGH
}

/// The entry of the word at `span`: from the word cache by its packed lowercase bytes when it is
/// plain and short enough to be a key, else by [`other_word`].
#[inline(always)]
fn word_entry(
    text: &str,
    span: Range<usize>,
    word: &mut Vec<u8>,
    cache: &mut WordCache,
) -> WordEntry {
    let bytes = text.as_bytes();
    let len = span.len();
    if len <= 8 {
        let chunk = load8(bytes, span.start) & KEEP_BYTES[len] as u64;
        if plain8(chunk) {
            return cache.get_packed(u128::from(lower_plain8(chunk)), len);
        }
    } else if len <= WordCache::MAX_LEN
        && let Some(key) = pack_plain(bytes, span.start, len)
    {
        return cache.get_packed(key, len);
    }
    other_word(text, span, word, cache)
}

/// The entry of a word that is not plain (an apostrophe, non-ASCII letters) or longer than the
/// cache's keys: lowercased (Unicode-aware), apostrophes dropped, a trailing "'s" cut. Out of line:
/// rare, and the hot loop stays small.
#[inline(never)]
fn other_word(
    text: &str,
    span: Range<usize>,
    word: &mut Vec<u8>,
    cache: &mut WordCache,
) -> WordEntry {
    let raw = &text.as_bytes()[span.clone()];
    word.clear();
    if raw.is_ascii() {
        word.extend(
            raw.iter()
                .filter(|&&b| b != b'\'')
                .map(u8::to_ascii_lowercase),
        );
    } else {
        let mut buf = [0u8; 4];
        for ch in text[span].chars().filter(|&ch| ch != '\'') {
            for lower in ch.to_lowercase() {
                word.extend_from_slice(lower.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    if word.ends_with(b"s") && raw.ends_with(b"'s") {
        word.pop();
    }
    cache.get(word)
}

/// The number token starting at `*i` (digits with inner ',' or '.' separators: "1,200" is "1200",
/// "3.50" stays), advancing `*i` past it. Out of line: numbers are a few tokens a text.
#[inline(never)]
fn number(bytes: &[u8], i: &mut usize, word: &mut Vec<u8>) -> Token {
    word.clear();
    while let Some(&b) = bytes.get(*i) {
        if b.is_ascii_digit() {
            word.push(b);
        } else if (b == b',' || b == b'.') && bytes.get(*i + 1).is_some_and(u8::is_ascii_digit) {
            if b == b'.' {
                word.push(b'.');
            }
        } else {
            break;
        }
        *i += 1;
    }
    let hash = xxh3_64(word);
    Token {
        hash,
        number: true,
        name: false,
        long: false,
        prefix: hash,
    }
}

/// The lowercase form of the word of `len` <= 16 bytes at `start`, packed as [`pack`] does, if it
/// is plain (ASCII letters and digits; `None` otherwise). For letters and digits, lowercasing is
/// setting bit 5 wherever bit 6 is set, which a 128-bit word does for all 16 bytes at once.
#[inline]
fn pack_plain(bytes: &[u8], start: usize, len: usize) -> Option<u128> {
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
fn lower_plain8(word: u64) -> u64 {
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
static KEEP_BYTES: [u128; 17] = {
    let mut t = [0u128; 17];
    let mut n = 1;
    while n < 17 {
        t[n] = (t[n - 1] << 8) | 0xFF;
        n += 1;
    }
    t
};

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
fn stem_bytes(word: &[u8]) -> &[u8] {
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

/// The hash of a token pair, from the tokens' hashes.
pub fn bigram(a: u64, b: u64) -> u64 {
    a.rotate_left(17) ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The hash of a token triple, from the tokens' hashes.
pub fn trigram(a: u64, b: u64, c: u64) -> u64 {
    a.rotate_left(29) ^ b.rotate_left(13).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ c
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

    #[test]
    fn word_cache_gives_what_it_would_compute() {
        let mut t = Tokenizer::default();
        let text = "Prices priced pricing the THE The élan Élan naïve's internationalization x1 a \
                    ABCDEFGHIJKLMNOPqrstuvwxyz0123456789 Zz9 MIXEDcase16bytes MIXEDcase17bytesX end";
        let (mut first, mut again) = (Vec::new(), Vec::new());
        t.tokens(text, &mut first);
        t.tokens(text, &mut again);
        assert_eq!(first, again);
        assert_eq!(first, toks(text));
        // Past half full the cache starts over, and still answers right.
        for n in 0..5000 {
            let w = format!("word{n}x");
            assert_eq!(
                t.cache.get(w.as_bytes()).hash,
                WordEntry::of(w.as_bytes()).hash
            );
        }
        assert_eq!(toks(text), {
            let mut v = Vec::new();
            t.tokens(text, &mut v);
            v
        });
    }

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
    fn hash_set_counts_distinct_members_and_grows() {
        let mut s = HashSet64::default();
        s.reset(2);
        for k in [0u64, 7, 7, 0, 1 << 63, 42] {
            s.insert(k, 1);
        }
        assert_eq!(s.len(), 4);
        assert!(s.contains(0) && s.contains(7) && !s.contains(8));
        assert_eq!(s.iter().count(), 4);
        for k in 100..1100u64 {
            s.insert(k * 0x1234_5678_9abc, 2);
        }
        assert_eq!(s.len(), 1004);
        assert_eq!(s.get(7), Some(1));
        assert_eq!(s.get(100 * 0x1234_5678_9abc), Some(2));
        *s.value_mut(7).unwrap() = 5;
        assert_eq!(s.insert(7, 2), Some(5));
        assert_eq!(s.get(7), Some(7));
        assert_eq!(s.value_mut(8), None);
        s.reset(3);
        assert!(s.is_empty() && !s.contains(7) && !s.contains(0));
    }

    /// The byte-at-a-time tokenizer, as first written: the reference every faster scan must match
    /// token for token (no word cache, no chunked scans; Unicode lowercasing for every word).
    fn reference_tokens(text: &str) -> Vec<Token> {
        let bytes = text.as_bytes();
        let (mut out, mut digits) = (Vec::new(), Vec::new());
        let mut sentence_start = true;
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            let class = CLASS[usize::from(c)];
            if class & WORD_START != 0 {
                let end = reference_word_end(bytes, i);
                let name = c.is_ascii_uppercase() && !sentence_start;
                sentence_start = false;
                let raw = &text[i..end];
                let mut word: String = raw
                    .chars()
                    .filter(|&ch| ch != '\'')
                    .flat_map(char::to_lowercase)
                    .collect();
                if word.ends_with('s') && raw.ends_with("'s") {
                    word.pop();
                }
                let entry = WordEntry::of(word.as_bytes());
                if !entry.stopword {
                    out.push(entry.token(name));
                }
                i = end;
            } else if class & DIGIT != 0 {
                out.push(number(bytes, &mut i, &mut digits));
                sentence_start = false;
            } else {
                sentence_start |= class & CLAUSE_END != 0;
                i += 1;
            }
        }
        out
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

    /// A word byte, by its definition: what starts a word or a number, and an apostrophe.
    fn reference_word_byte(b: u8) -> bool {
        CLASS[usize::from(b)] & (WORD_START | DIGIT) != 0 || b == b'\''
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
    fn word_scan_classifies_every_byte_as_the_table_does() {
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

        #[test]
        fn tokens_match_the_reference(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", "The", "the", "Ada", "prices", "PRICING", "it's", "'", "''", "Bob's", "9", "1,200",
                    "3.50", "3.", ",5", "x1", "12abc", " ", "  ", ".", ". ", "!", "?", "\n", ":", "-", "é",
                    "Élan", "naïve's", "—", "internationalization", "ABCDEFGHIJKLMNOPqrstuvwxyz0123456789",
                    "MIXEDcase16bytes", "eightchr", "ninechars", "fifteencharsxyz", "sixteencharsxyzw",
                    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                ]),
                0..60,
            )
        ) {
            let text: String = parts.concat();
            let mut tokens = Vec::new();
            let mut tokenizer = Tokenizer::default();
            tokenizer.tokens(&text, &mut tokens);
            proptest::prop_assert_eq!(&tokens, &reference_tokens(&text));
            // Again, from the word cache.
            tokens.clear();
            tokenizer.tokens(&text, &mut tokens);
            proptest::prop_assert_eq!(tokens, reference_tokens(&text));
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
