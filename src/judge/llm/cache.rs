//! A bounded verdict cache: an identical (query, contexts, answer) within the TTL reuses its verdict,
//! so a retried or duplicated trace costs nothing. Oldest entries are evicted first.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use xxhash_rust::xxh3::Xxh3;

use crate::clock::Instant;
use crate::judge::Verdict;
use crate::trace::Trace;

/// Entries by key, and keys in insertion order for eviction.
type Entries = (HashMap<u128, (Instant, Verdict)>, VecDeque<u128>);

/// The cache.
#[derive(Debug)]
pub(crate) struct VerdictCache {
    ttl: Duration,
    capacity: usize,
    inner: Mutex<Entries>,
}

impl VerdictCache {
    /// A cache of at most `capacity` verdicts, each valid for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self {
            ttl,
            capacity,
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// The key of a trace's judged content.
    pub fn key(trace: &Trace) -> u128 {
        let mut h = Xxh3::new();
        for part in std::iter::once(&trace.query)
            .chain(trace.contexts.iter().map(|c| &c.text))
            .chain(std::iter::once(&trace.answer))
        {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        h.digest128()
    }

    /// A fresh cached verdict.
    pub fn get(&self, key: u128, now: Instant) -> Option<Verdict> {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .0
            .get(&key)
            .filter(|(at, _)| now.duration_since(*at) < self.ttl)
            .map(|(_, v)| v.clone())
    }

    /// Stores a verdict.
    pub(crate) fn put(&self, key: u128, verdict: Verdict, now: Instant) {
        if self.capacity == 0 {
            return;
        }
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (map, order) = &mut *guard;
        if map.insert(key, (now, verdict)).is_none() {
            order.push_back(key);
        }
        while map.len() > self.capacity {
            match order.pop_front() {
                Some(old) => {
                    map.remove(&old);
                }
                None => break,
            }
        }
    }

    /// Entries held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dimensions::JudgeKind;

    fn verdict(f: f64) -> Verdict {
        Verdict::with_faithfulness(JudgeKind::Llm, f)
    }

    #[test]
    fn bounded_and_expiring() {
        let c = VerdictCache::new(2, Duration::from_secs(10));
        let t0 = Instant::now();
        c.put(1, verdict(0.1), t0);
        c.put(2, verdict(0.2), t0);
        c.put(3, verdict(0.3), t0);
        assert_eq!(c.len(), 2);
        assert!(c.get(1, t0).is_none(), "oldest evicted");
        assert_eq!(c.get(3, t0).unwrap().faithfulness(), Some(0.3));
        assert!(c.get(3, t0 + Duration::from_secs(11)).is_none(), "expired");
    }
}
