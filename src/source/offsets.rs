//! Offsets: which offset of each partition may be stored. A message's offset moves on only when it
//! and every earlier message of its partition are accounted for, so a slow sampled judgement holds
//! back its partition's commit (never the consumer) and a crash redelivers it: at-least-once.

use std::collections::{BTreeSet, HashMap};

/// Per-partition progress.
#[derive(Debug, Default)]
struct PartitionState {
    /// Highest offset received.
    seen: Option<i64>,
    /// Offsets received but not yet accounted for.
    pending: BTreeSet<i64>,
    /// Last offset reported as storable.
    stored: Option<i64>,
}

/// Tracks received and accounted offsets per (topic index, partition).
#[derive(Debug, Default)]
pub(crate) struct OffsetTracker {
    partitions: HashMap<(usize, i32), PartitionState>,
}

impl OffsetTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a received message; `done` when it is already accounted for.
    /// Returns the offset that may now be stored (all up to it accounted for), if it moved.
    pub fn received(
        &mut self,
        topic: usize,
        partition: i32,
        offset: i64,
        done: bool,
    ) -> Option<i64> {
        let p = self.partitions.entry((topic, partition)).or_default();
        p.seen = Some(p.seen.map_or(offset, |s| s.max(offset)));
        if !done {
            p.pending.insert(offset);
        }
        Self::advance(p)
    }

    /// Records that a pending message is accounted for; returns the storable offset if it moved.
    /// Offsets of partitions no longer tracked (revoked) are ignored.
    pub fn accounted(&mut self, topic: usize, partition: i32, offset: i64) -> Option<i64> {
        let p = self.partitions.get_mut(&(topic, partition))?;
        if !p.pending.remove(&offset) {
            return None;
        }
        Self::advance(p)
    }

    /// Forgets a partition (revoked): pending work there will be redelivered to its next owner.
    pub(crate) fn forget(&mut self, topic: usize, partition: i32) {
        self.partitions.remove(&(topic, partition));
    }

    /// Messages received but not yet accounted for, over all partitions.
    pub fn pending(&self) -> usize {
        self.partitions.values().map(|p| p.pending.len()).sum()
    }

    fn advance(p: &mut PartitionState) -> Option<i64> {
        let upto = match p.pending.first() {
            Some(&first) => first - 1,
            None => p.seen?,
        };
        if p.stored.is_none_or(|s| upto > s) && upto >= 0 {
            p.stored = Some(upto);
            Some(upto)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pending_holds_back_its_partition_only() {
        let mut t = OffsetTracker::new();
        assert_eq!(t.received(0, 0, 0, true), Some(0));
        assert_eq!(t.received(0, 0, 1, false), None);
        assert_eq!(t.received(0, 0, 2, true), None);
        assert_eq!(t.received(0, 1, 7, true), Some(7));
        assert_eq!(t.accounted(0, 0, 1), Some(2));
        assert_eq!(t.pending(), 0);
        t.forget(0, 0);
        assert_eq!(t.accounted(0, 0, 2), None);
    }

    proptest! {
        /// Whatever the completion order, the stored offset never passes an unaccounted message,
        /// and once all are accounted it reaches the last one.
        #[test]
        fn never_passes_a_pending_offset(order in Just((0..30i64).collect::<Vec<_>>()).prop_shuffle(), pending_mask in proptest::collection::vec(any::<bool>(), 30)) {
            let mut t = OffsetTracker::new();
            let mut open = BTreeSet::new();
            let mut stored = -1;
            for o in 0..30i64 {
                let done = !pending_mask[o as usize];
                if !done { open.insert(o); }
                if let Some(s) = t.received(0, 0, o, done) { stored = s; }
                prop_assert!(open.first().is_none_or(|&f| stored < f));
            }
            for o in order {
                if open.remove(&o) {
                    if let Some(s) = t.accounted(0, 0, o) { stored = s; }
                    prop_assert!(open.first().is_none_or(|&f| stored < f));
                }
            }
            prop_assert_eq!(stored, 29);
        }
    }
}
