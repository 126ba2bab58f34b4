//! Novelty: whether a question is new to its stratum, judged against a bounded reference of the
//! stratum's recent questions held as MinHash signatures behind an LSH index.
//!
//! A question becomes a set of shingles: its words (lowercased alphanumeric runs, the offline
//! judge's stop words dropped) and each pair of adjacent words. Its signature keeps, for each of 32
//! hash functions, the least hash over that set, so two signatures agree at a position with
//! probability the sets' Jaccard similarity, and the share of agreeing positions estimates it.
//! Sixteen bands of two positions index the signatures: a held question that agrees with the new
//! one on a whole band is a candidate, kept when its estimated Jaccard reaches the similarity. A
//! pair at Jaccard 0.8 shares a band with probability 1 - (1 - 0.8²)^16 > 0.9999999; a pair
//! agreeing at 26 or more of the 32 positions disagrees in at most six bands, so it always shares
//! one.
//!
//! The reference is a ring of eight segments, each a fixed share of the capacity and a fixed
//! span of time; the segments before the current one cover the baseline window, and a segment
//! whose questions have all expired is emptied with its band tables. A question joins the current
//! segment unless that segment already holds a near neighbour, so a popular question takes one
//! place per segment rather than the whole segment; once the segment is full, reservoir sampling
//! (Algorithm R) keeps a uniform sample of what it was offered. A segment allocates its share of
//! the capacity when it first opens and keeps it, so memory is fixed by the capacity: per
//! signature, 200 bytes (the signature, its time, its band links) and 64 to 128 bytes of band
//! table heads (a segment's share rounded up to a power of two).

use std::ops::{ControlFlow, RangeInclusive};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use xxhash_rust::xxh3::xxh3_64;

use crate::judge::is_stopword;

/// Whether a question is new to its stratum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Novelty {
    /// No near neighbour among the reference questions old enough to vouch for it.
    New,
    /// A near neighbour asked at least `known_after_ms` and at most `baseline_ms` ago.
    Known,
    /// Not judged: the question has no words, or the reference is warming up (less than
    /// `known_after_ms` since its first offer, counted again once it has emptied).
    Unchecked,
}

/// One stratum's reference of recent questions.
#[derive(Debug)]
pub(crate) struct QuestionIndex {
    /// The ring; the segment of epoch `e` (time `e * span_ms` onwards) sits at `e % SEGMENTS`.
    segments: Vec<Segment>,
    span_ms: u64,
    known_after_ms: u64,
    baseline_ms: u64,
    /// Agreeing positions (of [`HASHES`]) that make two questions near neighbours.
    need: u32,
    rng: SmallRng,
    /// The latest time seen: time never goes backwards for the index.
    latest_ms: u64,
    /// The first offer since the reference was last empty: the warm-up runs from it.
    warm_since_ms: Option<u64>,
    /// Scratch: the question's word hashes and the word being lowercased.
    words: Vec<u64>,
    word: String,
}

/// Hash functions in a signature.
const HASHES: usize = 32;
/// LSH bands, of [`ROWS`] positions each.
const BANDS: usize = 16;
/// Signature positions per band.
const ROWS: usize = HASHES / BANDS;
// A band key packs two positions into a `u64`.
const _: () = assert!(ROWS == 2 && ROWS * BANDS == HASHES);
/// Segments in the ring: all but the current one span the baseline window.
const SEGMENTS: usize = 8;
/// Chain steps (held signatures looked at) per question, at most.
const MAX_PROBES: u32 = 512;
/// Candidates whose whole signature is compared per question, at most.
const MAX_CHECKS: u32 = 64;
/// The end of a band chain.
const NONE: u32 = u32::MAX;

/// A question's MinHash signature.
type Signature = [u32; HASHES];

/// A span of time's share of the reference, with one chained hash table per band.
#[derive(Debug, Default)]
struct Segment {
    /// The epoch the segment holds; `None` while it holds nothing.
    epoch: Option<u64>,
    /// Signatures held at most.
    cap: usize,
    /// Questions offered since the segment opened (Algorithm R's count).
    offered: u64,
    times: Vec<u64>,
    sigs: Vec<Signature>,
    /// `BANDS << bucket_bits` chain heads, band-major.
    heads: Vec<u32>,
    /// `BANDS` links per held signature: the next slot in that band's chain.
    next: Vec<u32>,
    bucket_bits: u32,
}

/// What a search found among the held signatures.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Found {
    /// A near neighbour whose age is in `[known_after_ms, baseline_ms]`.
    known: bool,
    /// A near neighbour in the current segment.
    duplicate: bool,
}

/// What one question's search may still spend.
#[derive(Debug)]
struct Budget {
    probes: u32,
    checks: u32,
}

/// One question's search, as each segment sees it.
struct Probe<'a> {
    sig: &'a Signature,
    now: u64,
    need: u32,
    window: &'a RangeInclusive<u64>,
    is_current: bool,
}

impl Novelty {
    /// Every value, in label order.
    pub(crate) const ALL: [Novelty; 3] = [Novelty::New, Novelty::Known, Novelty::Unchecked];

    /// The label value.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Novelty::New => "new",
            Novelty::Known => "known",
            Novelty::Unchecked => "unchecked",
        }
    }
}

impl QuestionIndex {
    /// capacity: signatures held at most (memory fixed by it); known_after_ms: a reference question
    /// vouches for a new one only once it is this old; baseline_ms: reference questions older than
    /// this expire; similarity: estimated Jaccard of word shingles at or above which two questions
    /// are near neighbours (clamped to [0, 1], NaN read as 0.5); seed: for the reservoir's rng.
    /// With `known_after_ms` above `baseline_ms` no question is ever known.
    pub(crate) fn new(
        capacity: usize,
        known_after_ms: u64,
        baseline_ms: u64,
        similarity: f64,
        seed: u64,
    ) -> Self {
        let similarity = if similarity.is_nan() {
            0.5
        } else {
            similarity.clamp(0.0, 1.0)
        };
        // At least one agreeing position: a candidate always agrees on a whole band anyway.
        let need = ((similarity * HASHES as f64).ceil() as u32).max(1);
        // The remainder of the capacity goes to the first segments, so the shares sum to it.
        let segments = (0..SEGMENTS)
            .map(|i| Segment {
                cap: (capacity / SEGMENTS + usize::from(i < capacity % SEGMENTS))
                    .min(NONE as usize),
                ..Segment::default()
            })
            .collect();
        Self {
            segments,
            // A segment is reused SEGMENTS epochs later: the SEGMENTS - 1 spans before the
            // current one must reach back a whole baseline window.
            span_ms: baseline_ms.div_ceil(SEGMENTS as u64 - 1).max(1),
            known_after_ms,
            baseline_ms,
            need,
            rng: SmallRng::seed_from_u64(seed),
            latest_ms: 0,
            warm_since_ms: None,
            words: Vec::new(),
            word: String::new(),
        }
    }

    /// Classifies `question` at `now_ms` against the reference, then offers it to the reference.
    /// An earlier `now_ms` than one already seen is read as the latest seen.
    pub(crate) fn observe(&mut self, question: &str, now_ms: u64) -> Novelty {
        let now = self.advance(now_ms);
        let Some(sig) = self.signature_of(question) else {
            return Novelty::Unchecked;
        };
        let found = self.search(&sig, now);
        let novelty = if found.known {
            Novelty::Known
        } else if self.warming(now) {
            Novelty::Unchecked
        } else {
            Novelty::New
        };
        if !found.duplicate {
            self.offer(sig, now);
        }
        novelty
    }

    /// Signatures held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.segments.iter().map(|s| s.sigs.len()).sum()
    }

    /// Bytes held (signatures, band tables), for the memory bound's measurement.
    pub(crate) fn heap_bytes(&self) -> usize {
        let ring = self.segments.capacity() * size_of::<Segment>();
        let scratch = self.words.capacity() * size_of::<u64>() + self.word.capacity();
        ring + scratch + self.segments.iter().map(Segment::heap_bytes).sum::<usize>()
    }

    /// Moves the clock to `now_ms` (never backwards) and empties the segments whose questions have
    /// all expired; the warm-up starts over once the reference is empty. Returns the time to use.
    fn advance(&mut self, now_ms: u64) -> u64 {
        let now = now_ms.max(self.latest_ms);
        self.latest_ms = now;
        let epoch = now / self.span_ms;
        for segment in &mut self.segments {
            // Its newest question is older than (SEGMENTS - 1) spans, hence than the baseline.
            if segment.epoch.is_some_and(|e| e + SEGMENTS as u64 <= epoch) {
                segment.clear();
            }
        }
        if self.segments.iter().all(|s| s.sigs.is_empty()) {
            self.warm_since_ms = None;
        }
        now
    }

    /// Whether the reference is too young to vouch for anything: less than `known_after_ms` since
    /// the first offer it still remembers.
    fn warming(&self, now: u64) -> bool {
        self.warm_since_ms
            .is_none_or(|since| now - since < self.known_after_ms)
    }

    /// The question's signature, or `None` when it has no words.
    fn signature_of(&mut self, question: &str) -> Option<Signature> {
        self.words.clear();
        self.word.clear();
        for c in question.chars().chain([' ']) {
            if c.is_alphanumeric() {
                self.word.extend(c.to_lowercase());
            } else if !self.word.is_empty() {
                if !is_stopword(self.word.as_bytes()) {
                    self.words.push(xxh3_64(self.word.as_bytes()));
                }
                self.word.clear();
            }
        }
        (!self.words.is_empty()).then(|| signature(&self.words))
    }

    /// Looks for near neighbours of `sig`: the current segment first (it settles the duplicate),
    /// then the others from the newest, stopping at the first known neighbour or when the budget
    /// is spent.
    fn search(&self, sig: &Signature, now: u64) -> Found {
        let epoch = now / self.span_ms;
        let current = (epoch % SEGMENTS as u64) as usize;
        let window = self.known_after_ms..=self.baseline_ms;
        let mut found = Found::default();
        let mut budget = Budget {
            probes: MAX_PROBES,
            checks: MAX_CHECKS,
        };
        for back in 0..SEGMENTS {
            let segment = &self.segments[(current + SEGMENTS - back) % SEGMENTS];
            let is_current = back == 0 && segment.epoch == Some(epoch);
            let probe = Probe {
                sig,
                now,
                need: self.need,
                window: &window,
                is_current,
            };
            if segment.search(&probe, &mut found, &mut budget).is_break() || found.known {
                break;
            }
        }
        found
    }

    /// Offers `sig` to the current segment, opening it if its epoch has just begun.
    fn offer(&mut self, sig: Signature, now: u64) {
        let epoch = now / self.span_ms;
        let segment = &mut self.segments[(epoch % SEGMENTS as u64) as usize];
        if segment.epoch != Some(epoch) {
            segment.open(epoch);
        }
        segment.offer(sig, now, &mut self.rng);
        self.warm_since_ms.get_or_insert(now);
    }
}

impl Budget {
    /// Spends one chain step; false when none is left.
    fn probe(&mut self) -> bool {
        let left = self.probes > 0;
        self.probes = self.probes.saturating_sub(1);
        left
    }

    /// Spends one full comparison; false when none is left.
    fn check(&mut self) -> bool {
        let left = self.checks > 0;
        self.checks = self.checks.saturating_sub(1);
        left
    }
}

impl Segment {
    /// Starts holding `epoch`, empty, allocating the segment's share on first use.
    fn open(&mut self, epoch: u64) {
        self.clear();
        self.epoch = Some(epoch);
        if self.cap == 0 {
            return;
        }
        self.bucket_bits = self.cap.next_power_of_two().max(2).trailing_zeros();
        let heads = BANDS << self.bucket_bits;
        if self.heads.len() == heads {
            self.heads.fill(NONE);
        } else {
            self.heads = vec![NONE; heads];
            self.times.reserve_exact(self.cap);
            self.sigs.reserve_exact(self.cap);
            self.next.reserve_exact(self.cap * BANDS);
        }
    }

    /// Holds nothing; keeps the allocation for the next epoch.
    fn clear(&mut self) {
        self.epoch = None;
        self.offered = 0;
        self.times.clear();
        self.sigs.clear();
        self.next.clear();
        self.heads.fill(NONE);
    }

    /// Algorithm R: the first `cap` offers are held; the n-th after that replaces a held one with
    /// probability `cap / n`, so the segment holds a uniform sample of its offers.
    fn offer(&mut self, sig: Signature, now: u64, rng: &mut SmallRng) {
        if self.cap == 0 {
            return;
        }
        self.offered += 1;
        if self.sigs.len() < self.cap {
            self.sigs.push(sig);
            self.times.push(now);
            self.next.extend([NONE; BANDS]);
            self.link(self.sigs.len() - 1);
            return;
        }
        let pick = rng.random_range(0..self.offered);
        if let Ok(slot) = usize::try_from(pick)
            && slot < self.cap
        {
            self.unlink(slot);
            self.sigs[slot] = sig;
            self.times[slot] = now;
            self.link(slot);
        }
    }

    /// Walks the band chains of `probe.sig`, recording near neighbours in `found`. Breaks when the
    /// budget is spent or nothing more can change the answer.
    fn search(&self, probe: &Probe<'_>, found: &mut Found, budget: &mut Budget) -> ControlFlow<()> {
        if self.sigs.is_empty() {
            return ControlFlow::Continue(());
        }
        for band in 0..BANDS {
            let key = band_key(probe.sig, band);
            let mut at = self.heads[self.head(band, key)];
            while at != NONE {
                let slot = at as usize;
                at = self.next[slot * BANDS + band];
                if !budget.probe() {
                    return ControlFlow::Break(());
                }
                let held = &self.sigs[slot];
                // A signature agreeing on an earlier band was compared in that band's chain.
                if band_key(held, band) != key
                    || (0..band).any(|b| band_key(held, b) == band_key(probe.sig, b))
                {
                    continue;
                }
                if !budget.check() {
                    return ControlFlow::Break(());
                }
                if agreement(probe.sig, held) >= probe.need {
                    found.known |= probe.window.contains(&(probe.now - self.times[slot]));
                    found.duplicate |= probe.is_current;
                    if found.known && (found.duplicate || !probe.is_current) {
                        return ControlFlow::Break(());
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// The chain head of `key` in `band`.
    fn head(&self, band: usize, key: u64) -> usize {
        (band << self.bucket_bits) | (mix(key) >> (64 - self.bucket_bits)) as usize
    }

    /// Puts `slot` at the head of its chain in every band.
    fn link(&mut self, slot: usize) {
        for band in 0..BANDS {
            let head = self.head(band, band_key(&self.sigs[slot], band));
            self.next[slot * BANDS + band] = self.heads[head];
            self.heads[head] = slot as u32;
        }
    }

    /// Takes `slot` out of its chain in every band (before its signature is replaced).
    fn unlink(&mut self, slot: usize) {
        for band in 0..BANDS {
            let head = self.head(band, band_key(&self.sigs[slot], band));
            let after = self.next[slot * BANDS + band];
            if self.heads[head] == slot as u32 {
                self.heads[head] = after;
                continue;
            }
            let mut at = self.heads[head];
            while at != NONE {
                let link = at as usize * BANDS + band;
                if self.next[link] == slot as u32 {
                    self.next[link] = after;
                    break;
                }
                at = self.next[link];
            }
        }
    }

    /// Bytes allocated for signatures, times and band tables.
    fn heap_bytes(&self) -> usize {
        self.times.capacity() * size_of::<u64>()
            + self.sigs.capacity() * size_of::<Signature>()
            + (self.heads.capacity() + self.next.capacity()) * size_of::<u32>()
    }
}

/// The MinHash signature of the shingles of `words` (word hashes, in order): each word, and each
/// pair of adjacent words.
fn signature(words: &[u64]) -> Signature {
    let mut sig = [u32::MAX; HASHES];
    for (i, &word) in words.iter().enumerate() {
        fold(&mut sig, word);
        if let Some(&after) = words.get(i + 1) {
            // Rotated so "a b" and "b a" differ; the constant keeps pairs apart from words.
            fold(
                &mut sig,
                word.rotate_left(23) ^ after ^ 0x6a09_e667_f3bc_c909,
            );
        }
    }
    sig
}

/// Lowers each position of `sig` to the shingle's hash under that position's function. The 32
/// functions come from two mixes of the shingle (`a + k·b`, finished by a multiply and shift), so a
/// shingle costs two mixes and 32 multiplies.
fn fold(sig: &mut Signature, shingle: u64) {
    let a = mix(shingle ^ 0x243f_6a88_85a3_08d3);
    let b = mix(shingle ^ 0x1319_8a2e_0370_7344) | 1;
    for (k, slot) in sig.iter_mut().enumerate() {
        let x = a.wrapping_add(b.wrapping_mul(k as u64));
        let h = ((x ^ (x >> 31)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32;
        *slot = (*slot).min(h);
    }
}

/// The splitmix64 finaliser.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Band `band` of `sig` as one key.
fn band_key(sig: &Signature, band: usize) -> u64 {
    (u64::from(sig[band * ROWS]) << 32) | u64::from(sig[band * ROWS + 1])
}

/// Positions at which two signatures agree: their estimated Jaccard times [`HASHES`].
fn agreement(a: &Signature, b: &Signature) -> u32 {
    a.iter().zip(b).filter(|(x, y)| x == y).count() as u32
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use proptest::prelude::*;

    use super::*;

    const MINUTE: u64 = 60_000;
    const DAY: u64 = 24 * 60 * MINUTE;
    const QUESTION: &str =
        "Kubernetes pod restarts whenever the cluster node pool autoscaler version upgrade";

    fn index(capacity: usize) -> QuestionIndex {
        QuestionIndex::new(capacity, 10 * MINUTE, DAY, 0.5, 7)
    }

    /// The plain reference for [`QuestionIndex::search`]: every held signature compared in full,
    /// neighbours at `need` agreeing positions or more.
    fn scan(index: &QuestionIndex, sig: &Signature, now: u64, need: u32) -> Found {
        let epoch = now / index.span_ms;
        let window = index.known_after_ms..=index.baseline_ms;
        let mut found = Found::default();
        for segment in &index.segments {
            for (held, &at) in segment.sigs.iter().zip(&segment.times) {
                if agreement(sig, held) >= need {
                    found.known |= window.contains(&(now - at));
                    found.duplicate |= segment.epoch == Some(epoch);
                }
            }
        }
        found
    }

    #[test]
    fn names_are_the_label_values() {
        let names: Vec<_> = Novelty::ALL.iter().map(|n| n.name()).collect();
        assert_eq!(names, ["new", "known", "unchecked"]);
    }

    #[test]
    fn words_are_lowercased_alphanumeric_runs_without_stop_words() {
        let mut index = index(64);
        assert!(index.signature_of(QUESTION).is_some());
        assert_eq!(index.words.len(), 10);
        let a = index.signature_of("Pod RESTARTS? (kubernetes)");
        let b = index.signature_of("pod restarts kubernetes");
        assert_eq!(a, b);
        for empty in ["", "   ", "?!", "is it the one?"] {
            assert_eq!(index.signature_of(empty), None, "{empty:?}");
        }
        assert_ne!(
            index.signature_of("pod restarts"),
            index.signature_of("restarts pod")
        );
    }

    #[test]
    fn a_question_without_words_is_unchecked_and_not_held() {
        let mut index = index(64);
        index.observe("warm the reference up", 0);
        assert_eq!(index.observe("is it?", DAY / 2), Novelty::Unchecked);
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn the_same_question_is_known_once_old_enough() {
        let mut index = index(64);
        assert_eq!(index.observe(QUESTION, 0), Novelty::Unchecked);
        // Warm-up: nothing held is old enough to vouch yet.
        assert_eq!(index.observe(QUESTION, 10 * MINUTE - 1), Novelty::Unchecked);
        assert_eq!(index.observe(QUESTION, 10 * MINUTE), Novelty::Known);
        assert_eq!(index.observe(QUESTION, DAY), Novelty::Known);
    }

    #[test]
    fn a_younger_copy_does_not_vouch() {
        let mut index = index(64);
        index.observe("printer driver install", 0);
        let asked = 2 * 60 * MINUTE;
        assert_eq!(index.observe(QUESTION, asked), Novelty::New);
        assert_eq!(
            index.observe(QUESTION, asked + 10 * MINUTE - 1),
            Novelty::New
        );
        assert_eq!(index.observe(QUESTION, asked + 10 * MINUTE), Novelty::Known);
    }

    #[test]
    fn a_question_sharing_no_word_is_new() {
        let mut index = index(64);
        index.observe(QUESTION, 0);
        index.observe("invoice refund delayed", MINUTE);
        assert_eq!(
            index.observe("laptop battery drains overnight", 60 * MINUTE),
            Novelty::New
        );
    }

    #[test]
    fn a_paraphrase_dropping_one_word_is_known() {
        let words: Vec<&str> = QUESTION
            .split(' ')
            .filter(|w| !["the"].contains(w))
            .collect();
        assert_eq!(words.len(), 10);
        for drop in 0..words.len() {
            let mut index = index(64);
            index.observe(QUESTION, 0);
            let mut paraphrase = words.clone();
            paraphrase.remove(drop);
            let paraphrase = paraphrase.join(" ");
            assert_eq!(
                index.observe(&paraphrase, 60 * MINUTE),
                Novelty::Known,
                "{paraphrase}"
            );
        }
    }

    #[test]
    fn reference_questions_expire_after_the_baseline() {
        let mut index = index(64);
        index.observe(QUESTION, 0);
        index.observe("invoice refund delayed", DAY / 2);
        assert_eq!(index.observe(QUESTION, DAY + 1), Novelty::New);
        // The refund question has expired too.
        assert_eq!(
            index.observe("invoice refund delayed", 2 * DAY),
            Novelty::New
        );
        // Nothing held for a whole baseline window: the warm-up starts over.
        let later = 4 * DAY;
        assert_eq!(index.observe(QUESTION, later), Novelty::Unchecked);
        assert_eq!(index.len(), 1);
        assert_eq!(index.observe(QUESTION, later + 10 * MINUTE), Novelty::Known);
    }

    #[test]
    fn a_segment_holds_a_question_once() {
        let mut index = index(64);
        for i in 0..100 {
            index.observe(QUESTION, i);
        }
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_full_segment_keeps_a_sample_of_all_it_was_offered() {
        let mut index = index(80);
        let mut question = String::new();
        for i in 0..1000 {
            question.clear();
            write!(question, "topic{i} detail{i}").unwrap();
            index.observe(&question, i);
        }
        let segment = &index.segments[0];
        assert_eq!((segment.offered, segment.sigs.len()), (1000, 10));
        let late = segment.times.iter().filter(|&&t| t >= 500).count();
        assert!((2..=9).contains(&late), "{:?}", segment.times);
    }

    #[test]
    fn len_never_exceeds_the_capacity() {
        let mut index = QuestionIndex::new(2048, MINUTE, 60 * MINUTE, 0.5, 1);
        let mut question = String::new();
        let mut full = None;
        for i in 0..1_000_000u64 {
            question.clear();
            write!(question, "q{i} about{}", i % 977).unwrap();
            index.observe(&question, i * 7);
            assert!(index.len() <= 2048);
            // By now every segment has opened (a span is 514,286 ms).
            if i == 600_000 {
                full = Some(index.heap_bytes());
            }
        }
        // Each segment allocates once: rotating segments reuse it.
        assert_eq!(Some(index.heap_bytes()), full);
    }

    #[test]
    fn heap_bytes_at_capacity_2048() {
        let span = DAY.div_ceil(SEGMENTS as u64 - 1);
        let mut index = QuestionIndex::new(2048, 10 * MINUTE, DAY, 0.5, 3);
        let mut question = String::new();
        for epoch in 0..SEGMENTS as u64 {
            for k in 0..400 {
                question.clear();
                write!(question, "alpha{epoch} beta{k} gamma{k}").unwrap();
                index.observe(&question, epoch * span + k);
            }
        }
        assert_eq!(index.len(), 2048);
        let bytes = index.heap_bytes();
        println!(
            "heap_bytes at capacity 2048, full: {bytes} ({} a signature)",
            bytes / 2048
        );
        assert!(bytes <= 2048 * 300, "{bytes}");
    }

    #[test]
    fn the_seed_fixes_the_sample() {
        let run = |seed| {
            let mut index = QuestionIndex::new(16, 0, DAY, 0.5, seed);
            let mut question = String::new();
            for i in 0..200 {
                question.clear();
                write!(question, "topic{i}").unwrap();
                index.observe(&question, i);
            }
            index.segments[0].times.clone()
        };
        assert_eq!(run(5), run(5));
    }

    /// Twelve words: short questions over them collide often, so neighbours and duplicates abound.
    const VOCAB: [&str; 12] = [
        "pod", "node", "pool", "cluster", "upgrade", "restart", "invoice", "refund", "printer",
        "driver", "battery", "laptop",
    ];

    proptest! {
        /// The LSH path against a plain scan over the same held signatures: whatever it finds the
        /// scan finds, and it finds every neighbour agreeing at 26 of 32 positions (Jaccard 0.8).
        #[test]
        fn the_lsh_path_agrees_with_a_plain_scan(
            steps in proptest::collection::vec(
                (proptest::collection::vec(0..VOCAB.len(), 1..8), 0u64..40),
                1..300,
            ),
            seed in any::<u64>(),
        ) {
            // 24 held at most: the budget never runs out, so every candidate is compared.
            let mut index = QuestionIndex::new(24, 50, 700, 0.5, seed);
            let mut now = 0;
            for (words, gap) in steps {
                now += gap;
                let question: Vec<&str> = words.iter().map(|&w| VOCAB[w]).collect();
                let question = question.join(" ");
                let at = index.advance(now);
                if let Some(sig) = index.signature_of(&question) {
                    let fast = index.search(&sig, at);
                    let plain = scan(&index, &sig, at, index.need);
                    let close = scan(&index, &sig, at, 26);
                    prop_assert!(!fast.known || plain.known);
                    prop_assert!(!fast.duplicate || plain.duplicate);
                    prop_assert!(!close.known || fast.known);
                    prop_assert!(!close.duplicate || fast.duplicate);
                    let novelty = index.observe(&question, now);
                    prop_assert_eq!(novelty == Novelty::Known, fast.known);
                }
                prop_assert!(index.len() <= 24);
            }
        }
    }
}
