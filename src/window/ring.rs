//! A ring of fixed-width time buckets with exact sums: count, sum and sum of squares per bucket.
//! `now` is always passed in, so tests control time and nothing here reads a clock.
//!
//! A window of W ms with B buckets covers between W - W/B and W of history: the current bucket is
//! partly filled. That resolution is the price of O(B) memory whatever the traffic.
//!
//! A clock that steps back by less than a window loses nothing: the buckets ahead of it are left
//! out of the sums until it catches up. One that steps back further reuses those buckets for the
//! new times, so what they held is dropped, never mixed in.

/// What a bucket accumulates: a value that sums exactly across buckets.
pub trait Accumulate: Default + Clone + std::fmt::Debug {
    /// Adds `other` into `self`.
    fn merge(&mut self, other: &Self);
}

/// Count, sum and sum of squares of scores: mean and variance of a window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moments {
    /// Scores.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// The sum of their squares.
    pub(crate) sum_sq: f64,
}

impl Accumulate for Moments {
    fn merge(&mut self, other: &Self) {
        self.count += other.count;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
    }
}

impl Moments {
    /// The moments of the scores in `self` but not in `part` (a window minus a window it contains).
    pub(crate) fn minus(&self, part: &Moments) -> Moments {
        Moments {
            count: self.count.saturating_sub(part.count),
            sum: (self.sum - part.sum).max(0.0),
            sum_sq: (self.sum_sq - part.sum_sq).max(0.0),
        }
    }

    /// The mean, or `None` without scores.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// The sample variance (n - 1), or `None` with fewer than two scores.
    pub fn variance(&self) -> Option<f64> {
        let n = self.count as f64;
        (self.count > 1).then(|| {
            let mean = self.sum / n;
            ((self.sum_sq - n * mean * mean) / (n - 1.0)).max(0.0)
        })
    }
}

/// One bucket; `epoch` is the absolute bucket number it holds, so stale buckets are recognised
/// without a sweep.
#[derive(Debug, Clone)]
struct Bucket<T> {
    epoch: u64,
    value: T,
}

/// Rolling sums over one window length.
#[derive(Debug, Clone)]
pub(crate) struct Ring<T = Moments> {
    width_ms: u64,
    buckets: Vec<Bucket<T>>,
}

/// The statistics of a window at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WindowStats {
    /// Scores in the window.
    pub count: u64,
    /// Their mean, or `None` when the window is empty.
    pub mean: Option<f64>,
    /// Lower confidence bound of the mean (normal approximation), clamped to [0, 1].
    pub(crate) ci_lower: Option<f64>,
    /// Upper confidence bound of the mean, clamped to [0, 1].
    pub(crate) ci_upper: Option<f64>,
    /// The exact sums behind the figures above.
    pub moments: Moments,
}

impl<T: Accumulate> Ring<T> {
    /// A ring covering `window_ms` with `buckets` buckets (at least 1 ms each).
    pub fn new(window_ms: u64, buckets: u32) -> Self {
        let n = buckets.max(1) as usize;
        Self {
            width_ms: (window_ms / n as u64).max(1),
            // epoch u64::MAX marks a bucket that never held data.
            buckets: vec![
                Bucket {
                    epoch: u64::MAX,
                    value: T::default(),
                };
                n
            ],
        }
    }

    /// Updates the bucket of `now_ms` with `f`.
    pub(crate) fn update(&mut self, now_ms: u64, f: impl FnOnce(&mut T)) {
        let epoch = now_ms / self.width_ms;
        let n = self.buckets.len() as u64;
        let b = &mut self.buckets[(epoch % n) as usize];
        if b.epoch != epoch {
            *b = Bucket {
                epoch,
                value: T::default(),
            };
        }
        f(&mut b.value);
    }

    /// The sum of the buckets still inside the window at `now_ms`.
    pub fn total(&self, now_ms: u64) -> T {
        let epoch = now_ms / self.width_ms;
        let n = self.buckets.len() as u64;
        let oldest = epoch.saturating_sub(n - 1);
        let mut total = T::default();
        for b in &self.buckets {
            if b.epoch != u64::MAX && b.epoch >= oldest && b.epoch <= epoch {
                total.merge(&b.value);
            }
        }
        total
    }
}

impl Ring<Moments> {
    /// Adds `value` at `now_ms`. Non-finite values are ignored (judges never produce them).
    pub fn record(&mut self, value: f64, now_ms: u64) {
        if !value.is_finite() {
            return;
        }
        self.update(now_ms, |m| {
            m.count += 1;
            m.sum += value;
            m.sum_sq += value * value;
        });
    }

    /// Statistics of the buckets still inside the window at `now_ms`; `z` sets the bound's width.
    pub(crate) fn stats(&self, now_ms: u64, z: f64) -> WindowStats {
        WindowStats::from_moments(self.total(now_ms), z)
    }
}

impl WindowStats {
    /// Mean and normal-approximation bounds of `moments`.
    pub(crate) fn from_moments(moments: Moments, z: f64) -> WindowStats {
        let Some(mean) = moments.mean() else {
            return WindowStats {
                count: 0,
                mean: None,
                ci_lower: None,
                ci_upper: None,
                moments,
            };
        };
        // One sample says nothing about spread: assume the widest a [0,1] score can have.
        let var = moments.variance().unwrap_or(0.25);
        let half = z * (var / moments.count as f64).sqrt();
        WindowStats {
            count: moments.count,
            mean: Some(mean.clamp(0.0, 1.0)),
            ci_lower: Some((mean - half).clamp(0.0, 1.0)),
            ci_upper: Some((mean + half).clamp(0.0, 1.0)),
            moments,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn old_buckets_fall_out() {
        let mut r = Ring::new(10_000, 10);
        r.record(1.0, 0);
        r.record(0.0, 5_000);
        assert_eq!(r.stats(9_999, 0.0).count, 2);
        assert_eq!(r.stats(9_999, 0.0).mean, Some(0.5));
        // At 10 s the bucket of t=0 is out.
        let s = r.stats(10_000, 0.0);
        assert_eq!((s.count, s.mean), (1, Some(0.0)));
        assert_eq!(r.stats(16_000, 0.0).count, 0);
        assert_eq!(r.stats(16_000, 0.0).mean, None);
    }

    #[test]
    fn reused_slot_is_reset() {
        let mut r = Ring::new(10_000, 10);
        r.record(1.0, 500);
        r.record(0.0, 10_500); // same slot, next lap
        let s = r.stats(10_500, 0.0);
        assert_eq!((s.count, s.mean), (1, Some(0.0)));
    }

    #[test]
    fn confidence_bound_narrows_with_samples() {
        let mut small = Ring::new(60_000, 6);
        let mut big = Ring::new(60_000, 6);
        for i in 0..4 {
            small.record(if i % 2 == 0 { 0.6 } else { 0.8 }, 100);
        }
        for i in 0..400 {
            big.record(if i % 2 == 0 { 0.6 } else { 0.8 }, 100);
        }
        let (s, b) = (small.stats(100, 1.645), big.stats(100, 1.645));
        assert!((s.mean.unwrap() - 0.7).abs() < 1e-9);
        assert!(s.ci_lower.unwrap() < b.ci_lower.unwrap());
        assert!(b.ci_lower.unwrap() < 0.7 && b.ci_upper.unwrap() > 0.7);
        let one = {
            let mut r = Ring::new(1000, 2);
            r.record(0.9, 0);
            r.stats(0, 1.645)
        };
        assert!(
            one.ci_lower.unwrap() < 0.2,
            "a single sample gives a wide bound"
        );
    }

    #[test]
    fn a_score_counts_until_its_bucket_leaves_the_window() {
        // 60 s in six buckets of 10 s: a bucket leaves when the one six places on opens.
        let mut r = Ring::new(60_000, 6);
        r.record(1.0, 9_999);
        r.record(0.0, 10_000);
        assert_eq!(r.stats(59_999, 0.0).count, 2);
        let s = r.stats(60_000, 0.0);
        assert_eq!(
            (s.count, s.mean),
            (1, Some(0.0)),
            "the 0-10 s bucket left at 60 s"
        );
        assert_eq!(r.stats(69_999, 0.0).count, 1);
        assert_eq!(r.stats(70_000, 0.0).count, 0);
    }

    #[test]
    fn a_gap_longer_than_the_window_clears_everything() {
        let mut r = Ring::new(10_000, 10);
        for t in (0..10_000).step_by(500) {
            r.record(1.0, 50_000 + t);
        }
        assert_eq!(r.stats(59_999, 0.0).count, 20);
        assert_eq!(r.stats(70_000, 0.0).count, 0, "a window later");
        // Whole laps later every slot is reused: only what comes after the gap counts.
        for gap in [10_000, 30_000, 1_000_000] {
            let t = 59_500 + gap;
            let mut r = r.clone();
            assert_eq!(r.stats(t, 0.0).count, 0, "gap {gap}");
            r.record(0.25, t);
            let s = r.stats(t, 0.0);
            assert_eq!((s.count, s.mean), (1, Some(0.25)), "gap {gap}");
        }
    }

    #[test]
    fn a_clock_stepped_back_past_the_window_mixes_nothing_in() {
        let mut r = Ring::new(10_000, 10);
        for _ in 0..3 {
            r.record(1.0, 100_000);
        }
        // Stepped back 50 s: the scores "ahead" are not in this window, and the slot they share
        // with 50 s is reused for it.
        assert_eq!(r.stats(50_000, 0.0).count, 0);
        r.record(0.0, 50_000);
        let s = r.stats(50_000, 0.0);
        assert_eq!((s.count, s.mean), (1, Some(0.0)));
        assert_eq!(r.stats(100_000, 0.0).count, 0, "dropped, not mixed in");
        assert_eq!(r.stats(0, 0.0).count, 0, "no underflow at the epoch");
    }

    proptest! {
        /// Scores recorded out of order, as threads that read the clock before taking the lock
        /// do, or after a small step back of the wall clock: within a window's span of times the
        /// ring matches a naive window at any moment, before, during or after them.
        #[test]
        fn out_of_order_times_within_a_window_are_kept_exactly(
            events in proptest::collection::vec((0u64..9_000, 0.0f64..=1.0), 0..100),
            start in 0u64..1_000_000,
            now in 0u64..40_000,
        ) {
            let mut r = Ring::new(10_000, 10);
            for (t, v) in &events { r.record(*v, start + t); }
            let now = (start + now).saturating_sub(10_000);
            let epoch = now / 1000;
            let oldest = epoch.saturating_sub(9);
            let inside: Vec<f64> = events.iter()
                .filter(|(t, _)| (oldest..=epoch).contains(&((start + t) / 1000)))
                .map(|e| e.1)
                .collect();
            let s = r.stats(now, 0.0);
            prop_assert_eq!(s.count, inside.len() as u64);
            if !inside.is_empty() {
                let mean = inside.iter().sum::<f64>() / inside.len() as f64;
                prop_assert!((s.mean.unwrap() - mean).abs() < 1e-9);
            }
        }

        #[test]
        fn matches_a_naive_window(events in proptest::collection::vec((0u64..100_000, 0.0f64..=1.0), 0..200), now in 0u64..120_000) {
            let mut sorted = events.clone();
            sorted.sort_by_key(|e| e.0);
            let mut r = Ring::new(10_000, 10);
            for (t, v) in &sorted { if *t <= now { r.record(*v, *t); } }
            let epoch = now / 1000;
            let oldest = epoch.saturating_sub(9);
            let inside: Vec<f64> = sorted.iter().filter(|(t, _)| *t <= now && t / 1000 >= oldest).map(|e| e.1).collect();
            let s = r.stats(now, 1.645);
            prop_assert_eq!(s.count, inside.len() as u64);
            if !inside.is_empty() {
                let mean = inside.iter().sum::<f64>() / inside.len() as f64;
                prop_assert!((s.mean.unwrap() - mean).abs() < 1e-9);
                prop_assert!(s.ci_lower.unwrap() <= s.mean.unwrap() && s.mean.unwrap() <= s.ci_upper.unwrap());
            }
        }
    }
}
