//! A Space-Saving heavy-hitters sketch (Metwally, Agrawal and El Abbadi, 2005) of string keys, with
//! a payload per held key. It holds at most `capacity` keys: a new key takes the place of the key
//! with the smallest count, inheriting that count as its error, so a key whose true count exceeds
//! (total / capacity) is always held, and every held key's `count - error` is exactly what was
//! counted since it was admitted. The payload counts what happened to the key since admission, so
//! ratios over `count - error` are exact for that span.
//!
//! The smallest count is found through an indexed binary min-heap: an offer is O(log capacity).

use std::collections::HashMap;

use xxhash_rust::xxh3::xxh3_64;

/// Keys longer than this are cut (at a character boundary) before they are held.
pub(crate) const MAX_KEY_BYTES: usize = 128;

/// One held key.
#[derive(Debug, Clone)]
pub(crate) struct Entry<T> {
    /// The key, cut to [`MAX_KEY_BYTES`].
    pub key: Box<str>,
    /// Offers counted for this key, including `error`.
    pub count: u64,
    /// The count it inherited on admission: an upper bound on what it missed before.
    pub error: u64,
    /// What the caller counts since admission.
    pub payload: T,
}

impl<T> Entry<T> {
    /// Offers counted since admission: exact.
    #[cfg(test)]
    pub fn exact(&self) -> u64 {
        self.count - self.error
    }
}

/// The sketch.
#[derive(Debug, Clone)]
pub(crate) struct Sketch<T> {
    capacity: usize,
    entries: Vec<Entry<T>>,
    /// Key hash to slot in `entries`.
    slots: HashMap<u64, u32>,
    /// A min-heap of slots by count.
    heap: Vec<u32>,
    /// Slot to its position in `heap`.
    position: Vec<u32>,
}

/// The key as held: cut to [`MAX_KEY_BYTES`] at a character boundary.
pub(crate) fn held_key(key: &str) -> &str {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut end = MAX_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

impl<T: Default> Sketch<T> {
    /// An empty sketch of at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: Vec::new(),
            slots: HashMap::new(),
            heap: Vec::new(),
            position: Vec::new(),
        }
    }

    /// Counts one offer of `key` and returns its entry (admitted, by eviction if full).
    pub fn offer(&mut self, key: &str) -> &mut Entry<T> {
        let key = held_key(key);
        let hash = xxh3_64(key.as_bytes());
        let slot = match self.slots.get(&hash) {
            Some(&slot) => slot,
            None if self.entries.len() < self.capacity => self.admit(hash, key),
            None => self.replace_min(hash, key),
        };
        let s = slot as usize;
        self.entries[s].count += 1;
        self.sift_down(self.position[s] as usize);
        &mut self.entries[s]
    }

    /// The entry of `key` when held.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Entry<T>> {
        let key = held_key(key);
        let slot = *self.slots.get(&xxh3_64(key.as_bytes()))?;
        Some(&mut self.entries[slot as usize])
    }

    /// The held entries, in no order.
    pub fn entries(&self) -> &[Entry<T>] {
        &self.entries
    }

    /// The entry of `key` when held.
    pub fn get(&self, key: &str) -> Option<&Entry<T>> {
        let key = held_key(key);
        let slot = *self.slots.get(&xxh3_64(key.as_bytes()))?;
        Some(&self.entries[slot as usize])
    }

    /// The smallest held count when full (what an absent key may have had), else 0.
    pub fn floor(&self) -> u64 {
        if self.entries.len() < self.capacity {
            return 0;
        }
        self.heap
            .first()
            .map_or(0, |&s| self.entries[s as usize].count)
    }

    /// Forgets every key.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.slots.clear();
        self.heap.clear();
        self.position.clear();
    }

    /// Bytes held on the heap: entries, keys, the index and the heap.
    pub fn heap_bytes(&self) -> usize {
        let keys: usize = self.entries.iter().map(|e| e.key.len()).sum();
        self.entries.capacity() * std::mem::size_of::<Entry<T>>()
            + keys
            + self.slots.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
            + (self.heap.capacity() + self.position.capacity()) * 4
    }

    fn admit(&mut self, hash: u64, key: &str) -> u32 {
        let slot = self.entries.len() as u32;
        self.entries.push(Entry {
            key: key.into(),
            count: 0,
            error: 0,
            payload: T::default(),
        });
        self.slots.insert(hash, slot);
        self.position.push(self.heap.len() as u32);
        self.heap.push(slot);
        self.sift_up(self.heap.len() - 1);
        slot
    }

    fn replace_min(&mut self, hash: u64, key: &str) -> u32 {
        let slot = self.heap[0];
        let e = &mut self.entries[slot as usize];
        self.slots.remove(&xxh3_64(e.key.as_bytes()));
        e.key = key.into();
        e.error = e.count;
        e.payload = T::default();
        self.slots.insert(hash, slot);
        slot
    }

    fn count_at(&self, i: usize) -> u64 {
        self.entries[self.heap[i] as usize].count
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.position[self.heap[i] as usize] = i as u32;
        self.position[self.heap[j] as usize] = j as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.count_at(parent) <= self.count_at(i) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut smallest = i;
            if l < n && self.count_at(l) < self.count_at(smallest) {
                smallest = l;
            }
            if r < n && self.count_at(r) < self.count_at(smallest) {
                smallest = r;
            }
            if smallest == i {
                return;
            }
            self.swap(i, smallest);
            i = smallest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The heap's smallest count is the linear scan's after every offer; the counts add up
        /// to the offers; every held key's count bounds its truth; every key counted more than
        /// total/capacity is held.
        #[test]
        fn agrees_with_the_linear_scan(capacity in 1usize..12, stream in prop::collection::vec(0u8..40, 0..400)) {
            let mut sketch: Sketch<()> = Sketch::new(capacity);
            for k in &stream {
                sketch.offer(&k.to_string());
                let scan = sketch.entries().iter().map(|e| e.count).min().unwrap_or(0);
                let full = sketch.entries().len() == capacity;
                prop_assert_eq!(sketch.floor(), if full { scan } else { 0 });
            }
            let sum: u64 = sketch.entries().iter().map(|e| e.count).sum();
            prop_assert_eq!(sum, stream.len() as u64);
            let total = stream.len() as u64;
            for e in sketch.entries() {
                let truth = stream.iter().filter(|k| k.to_string() == *e.key).count() as u64;
                prop_assert!(e.exact() <= truth && truth <= e.count);
            }
            for k in 0u8..40 {
                let truth = stream.iter().filter(|x| **x == k).count() as u64;
                if truth * capacity as u64 > total {
                    prop_assert!(sketch.entries().iter().any(|e| *e.key == *k.to_string()));
                }
            }
        }
    }

    #[test]
    fn payload_counts_since_admission() {
        let mut sketch: Sketch<u32> = Sketch::new(1);
        sketch.offer("a").payload += 1;
        sketch.offer("a").payload += 1;
        let b = sketch.offer("b");
        assert_eq!((b.count, b.error, b.exact(), b.payload), (3, 2, 1, 0));
        assert!(sketch.get_mut("a").is_none());
        assert_eq!(sketch.floor(), 3);
    }

    #[test]
    fn a_million_distinct_keys_stay_within_capacity() {
        let mut sketch: Sketch<[u32; 3]> = Sketch::new(512);
        for i in 0..1_000_000u32 {
            sketch.offer(&format!("doc-{i:09}"));
            if i % 50 == 0 {
                sketch.offer("popular");
            }
        }
        assert_eq!(sketch.entries().len(), 512);
        assert!(sketch.entries().iter().any(|e| &*e.key == "popular"));
        assert!(sketch.heap_bytes() < 512 * 200, "{}", sketch.heap_bytes());
    }

    #[test]
    fn long_keys_are_cut_at_a_character_boundary() {
        let long = "é".repeat(100);
        let held = held_key(&long);
        assert!(held.len() <= MAX_KEY_BYTES && held.len() >= MAX_KEY_BYTES - 1);
        let mut sketch: Sketch<()> = Sketch::new(4);
        sketch.offer(&long);
        assert!(sketch.get_mut(&long).is_some());
    }
}
