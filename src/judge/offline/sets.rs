//! The hash set every signal probes: token hashes (already hashes, so one multiply spreads them)
//! with a small value per member, emptied in constant time so a worker reuses it for every trace.

/// A set of 64-bit hashes with a small value per member (flags, or a stamp), by open addressing.
///
/// Made to be reused: [`HashSet64::reset`] empties it in constant time by moving to a new epoch (a
/// slot whose epoch is not the set's is empty), so a worker's sets neither allocate nor clear memory
/// per trace once they have grown to the largest trace seen. Keys are hashes already, so one
/// multiply spreads them over the slots.
#[derive(Debug, Clone)]
pub(crate) struct HashSet64 {
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
    pub(crate) fn reset(&mut self, expected: usize) {
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
    pub(crate) fn insert(&mut self, key: u64, value: u32) -> Option<u32> {
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
    pub(crate) fn contains(&self, key: u64) -> bool {
        self.find(key).1
    }

    /// The value of `key`, when present.
    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        let (i, present) = self.find(key);
        present.then(|| self.slots[i].value)
    }

    /// The value of `key`, to change in place, when present.
    pub(crate) fn value_mut(&mut self, key: u64) -> Option<&mut u32> {
        let (i, present) = self.find(key);
        present.then(|| &mut self.slots[i].value)
    }

    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Members and their values, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.slots[..=self.mask]
            .iter()
            .filter(|s| s.epoch == self.epoch)
            .map(|s| (s.key, s.value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
