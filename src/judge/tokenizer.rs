//! The tokenizer: content tokens of a text (stopwords dropped, lowercased, light stemming, numbers
//! normalised, list numbers skipped) as 64-bit hashes, with the flags the judge's signals read
//! (number, name, long word) and a cruder prefix hash.
//!
//! It works on bytes: the text is UTF-8, every delimiter it looks for is ASCII, and non-ASCII words
//! take a slower path that lowercases per `char`. Words repeat, so each worker memoises what a word
//! becomes; the tests hold it to a plain byte-at-a-time reference.

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
#[cfg(test)]
pub(crate) fn content_tokens(text: &str, out: &mut Vec<Token>) {
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
pub(super) fn byte_mask64(block: &[u8; 64], class: impl Fn(u8) -> bool) -> u64 {
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
                    let token = number(bytes, &mut i, word);
                    if !list_marker(bytes, start, i) {
                        emit(token);
                    }
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

/// Whether the number at `start..end` numbers a list item ("1. ", "12) " at the start of a line):
/// one to three digits, alone on the line before them, then `.` or `)` and a space or the end. A
/// list's numbers are layout, not claims: counted as numbers, they would be found in no context.
#[inline(never)]
fn list_marker(bytes: &[u8], start: usize, end: usize) -> bool {
    end - start <= 3
        && bytes[start..end].iter().all(u8::is_ascii_digit)
        && matches!(bytes.get(end), Some(b'.' | b')'))
        && bytes.get(end + 1).is_none_or(u8::is_ascii_whitespace)
        && bytes[..start]
            .iter()
            .rev()
            .find(|&&b| b != b' ' && b != b'\t')
            .is_none_or(|&b| b == b'\n')
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

    fn toks(s: &str) -> Vec<Token> {
        let mut v = Vec::new();
        content_tokens(s, &mut v);
        v
    }

    #[test]
    fn numbers_normalise() {
        assert_eq!(toks("1,200 people")[0], toks("1200 persons")[0]);
        assert!(toks("5%")[0].number);
        assert_eq!(toks("$3.50")[0].hash, toks("3.50")[0].hash);
        assert_ne!(toks("3.5")[0].hash, toks("35")[0].hash);
    }

    #[test]
    fn list_numbers_are_not_tokens() {
        let t = toks("1. Preheat the oven.\n2) Bake 2 loaves.\n  3. Cool. Step 4. Serve 5.");
        let numbers: Vec<u64> = t.iter().filter(|t| t.number).map(|t| t.hash).collect();
        assert_eq!(
            numbers,
            [toks("2")[0].hash, toks("4")[0].hash, toks("5")[0].hash]
        );
        assert!(!t[0].name, "a list item's first word starts a sentence");
        assert!(toks("1.5 cups")[0].number && toks("1999.")[0].number);
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
                let start = i;
                let token = number(bytes, &mut i, &mut digits);
                let line = text[..start].rsplit('\n').next().unwrap_or("");
                let mut after = text[i..].chars();
                let marker = line.chars().all(|c| c == ' ' || c == '\t')
                    && i - start <= 3
                    && text[start..i].chars().all(|c| c.is_ascii_digit())
                    && matches!(after.next(), Some('.' | ')'))
                    && after.next().is_none_or(|c| c.is_ascii_whitespace());
                if !marker {
                    out.push(token);
                }
                sentence_start = false;
            } else {
                sentence_start |= class & CLAUSE_END != 0;
                i += 1;
            }
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
                    "a", "The", "the", "Ada", "prices", "1. ", "\n2) ", "\n 12.", "1234. ", "\t3.\t", "PRICING", "it's", "'", "''", "Bob's", "9", "1,200",
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
    }
}
