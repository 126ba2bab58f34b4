//! The judge budget: enforced before a call is made, never after.
//!
//! Three limits, all scaled by this replica's share of the fleet (`fleet.membership`: its share of
//! the topic's partitions, or one over the replicas), so adding replicas does not multiply spend:
//! - requests per minute;
//! - tokens per minute and per day, charged with an upper-bound estimate before each call (prompt
//!   characters / 3 + the `max_tokens` sent) and refunded with the difference once the API reports
//!   its usage. Since the estimate bounds the real cost, the spend never exceeds the limit.
//!
//! Each limit is a token bucket refilled continuously (a request is one token), holding at most one
//! period's worth of this replica's share. A fresh budget is full at a share of 1; the wiring sets
//! the share before the first trace, and a replica joining a fleet that may be spending empties
//! its per-minute buckets ([`Budget::join_spending_fleet`]). A new share adds no per-minute
//! tokens: a bucket that grows keeps what it holds and refills towards its new capacity at the new
//! rate, one that shrinks keeps at most its new capacity, so the per-minute buckets of a fleet
//! whose shares add up to 1 hold at most the fleet's. The daily bucket keeps what was spent and
//! moves the rest with the share. A share of zero admits nothing and leaves every bucket as it is,
//! so a share that comes back (a rebalance's revoke, then its assignment) finds what it left.
//!
//! A `reserve_ratio` of every limit is kept for priority calls (each stratum's guaranteed samples):
//! ordinary calls stop where the reserve starts, so head traffic cannot spend the budget that small
//! strata need to be judged in every window. For requests the reserve is a rate: ordinary requests
//! also pass a bucket of their own, refilled at the limit less the reserve.
//!
//! Generic over the clock so tests drive time with governor's fake clock.

use std::sync::Mutex;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock, Reference};

use crate::judge::llm::config::BudgetConfig;

/// Rounding slack when a bucket is compared with what a call needs: a bucket refilled to exactly
/// one request must admit it.
const EPSILON: f64 = 1e-9;

/// A token bucket refilled continuously.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    capacity: f64,
    tokens: f64,
    per_sec: f64,
    last: Duration,
}

impl Bucket {
    fn new(capacity: f64, period: Duration) -> Self {
        Self {
            capacity,
            tokens: capacity,
            per_sec: capacity / period.as_secs_f64(),
            last: Duration::ZERO,
        }
    }

    fn refill(&mut self, now: Duration) {
        let dt = now.saturating_sub(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.per_sec).min(self.capacity);
        self.last = now;
    }

    /// A new capacity (and rate) for a new share. It never adds tokens: growing, the bucket keeps
    /// what it holds and refills at the new rate; shrinking, it keeps at most the new capacity.
    /// (Scaling what is left with the capacity would hand a replica whose share grows part of
    /// the new capacity at once, a burst the other replicas' spend has not made room for.)
    fn rescale(&mut self, capacity: f64, period: Duration, now: Duration) {
        self.refill(now);
        self.capacity = capacity;
        self.per_sec = capacity / period.as_secs_f64();
        self.tokens = self.tokens.min(capacity);
    }

    /// A new capacity (and rate) that keeps what was spent in the period spent: what the bucket
    /// holds moves with the capacity. For the daily bucket, where a share that dips to zero
    /// while partitions are rebalanced must come back to what it was, not to an empty day that
    /// refills over a day. (A minute bucket refills within a minute; the daily one would not.)
    fn rescale_keeping_spent(&mut self, capacity: f64, period: Duration, now: Duration) {
        self.refill(now);
        let spent = self.capacity - self.tokens;
        self.capacity = capacity;
        self.per_sec = capacity / period.as_secs_f64();
        self.tokens = (capacity - spent).min(capacity);
    }

    /// Whether `need` fits above `floor` now, else how long until it does, or `Never` when it
    /// cannot fit even in a full bucket.
    fn admits(&self, need: f64, floor: f64) -> Result<(), OverBudget> {
        if need > self.capacity - floor + EPSILON {
            return Err(OverBudget::Never);
        }
        let short = floor + need - self.tokens;
        if short <= EPSILON {
            return Ok(());
        }
        Err(OverBudget::Later(Duration::from_secs_f64(
            short / self.per_sec,
        )))
    }
}

/// Why a call cannot be admitted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OverBudget {
    /// The per-minute limits (requests or tokens) will admit it after this long.
    Later(Duration),
    /// Waiting a minute will not help: the daily budget cannot cover it, the call is larger than a
    /// minute's tokens, or this replica has no share.
    Never,
}

impl OverBudget {
    /// The longer wait of two refusals; `Never` wins.
    fn max(self, other: OverBudget) -> OverBudget {
        match (self, other) {
            (OverBudget::Later(a), OverBudget::Later(b)) => OverBudget::Later(a.max(b)),
            _ => OverBudget::Never,
        }
    }
}

/// What a successful `try_charge` took, to be reconciled with the real usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Charge {
    /// Tokens reserved.
    pub tokens: u64,
}

/// The budget of one replica.
pub struct Budget<C: Clock = DefaultClock> {
    clock: C,
    start: C::Instant,
    config: BudgetConfig,
    state: Mutex<State>,
}

struct State {
    share: f64,
    /// All requests, priority or not.
    requests: Bucket,
    /// Ordinary requests: the limit less the reserve.
    open_requests: Bucket,
    minute: Bucket,
    day: Bucket,
}

impl<C: Clock> std::fmt::Debug for Budget<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget")
            .field("config", &self.config)
            .finish()
    }
}

const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

impl Budget<DefaultClock> {
    /// A budget on the real clock, with a share of 1 until the fleet says otherwise.
    pub fn new(config: &BudgetConfig) -> Self {
        Self::with_clock(config, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Budget<C> {
    /// A budget on `clock`.
    pub(crate) fn with_clock(config: &BudgetConfig, clock: C) -> Self {
        let start = clock.now();
        let rpm = f64::from(config.requests_per_minute);
        let state = State {
            share: 1.0,
            requests: Bucket::new(rpm, MINUTE),
            open_requests: Bucket::new(rpm * (1.0 - config.reserve_ratio), MINUTE),
            minute: Bucket::new(config.tokens_per_minute as f64, MINUTE),
            day: Bucket::new(config.tokens_per_day as f64, DAY),
        };
        Self {
            clock,
            start,
            config: config.clone(),
            state: Mutex::new(state),
        }
    }

    fn now(&self) -> Duration {
        Duration::from(self.clock.now().duration_since(self.start))
    }

    /// Sets this replica's share of the fleet's budget (`fleet.membership`). Tokens and requests
    /// already spent stay spent; a larger share refills faster but adds nothing at once.
    pub(crate) fn set_share(&self, share: f64) {
        let share = if share.is_finite() {
            share.clamp(0.0, 1.0)
        } else {
            1.0
        };
        let now = self.now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if (s.share - share).abs() < 1e-9 {
            return;
        }
        s.share = share;
        // No share (a Kafka replica between a rebalance's revoke and its assignment, or a spare
        // one): nothing is admitted, and the buckets stay as they are, so a share that comes back
        // finds the minute and the day it left rather than empty buckets to refill.
        if share == 0.0 {
            return;
        }
        let rpm = f64::from(self.config.requests_per_minute);
        s.requests.rescale(rpm * share, MINUTE, now);
        s.open_requests
            .rescale(rpm * share * (1.0 - self.config.reserve_ratio), MINUTE, now);
        s.minute
            .rescale(self.config.tokens_per_minute as f64 * share, MINUTE, now);
        s.day
            .rescale_keeping_spent(self.config.tokens_per_day as f64 * share, DAY, now);
    }

    /// A replica that joins a fleet already spending: its per-minute buckets (requests and
    /// tokens) start empty, so it spends at its share's rate from the first second instead of a
    /// minute of its share at once, which the others' spend has not made room for. The daily
    /// bucket keeps its share.
    pub(crate) fn join_spending_fleet(&self) {
        let now = self.now();
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let s = &mut *guard;
        for bucket in [&mut s.requests, &mut s.open_requests, &mut s.minute] {
            bucket.refill(now);
            bucket.tokens = 0.0;
        }
    }

    /// This replica's share.
    pub fn share(&self) -> f64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).share
    }

    /// Reserves one request and `estimate` tokens, or refuses. A `priority` call may spend the
    /// reserve; an ordinary one must leave it untouched.
    pub(crate) fn try_charge(&self, estimate: u64, priority: bool) -> Option<Charge> {
        self.charge_or_wait(estimate, priority).ok()
    }

    /// Reserves one request and `estimate` tokens, or says how long until the per-minute limits
    /// would admit the call (nothing is taken then), or that waiting will not help. Replay waits;
    /// live judging skips.
    pub(crate) fn charge_or_wait(
        &self,
        estimate: u64,
        priority: bool,
    ) -> Result<Charge, OverBudget> {
        let now = self.now();
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let s = &mut *guard;
        if s.share == 0.0 {
            return Err(OverBudget::Never);
        }
        for b in [
            &mut s.minute,
            &mut s.day,
            &mut s.requests,
            &mut s.open_requests,
        ] {
            b.refill(now);
        }
        let need = estimate as f64;
        let keep = if priority {
            0.0
        } else {
            self.config.reserve_ratio
        };
        if s.day.tokens - need < keep * s.day.capacity {
            return Err(OverBudget::Never);
        }
        s.minute.admits(need, keep * s.minute.capacity)?;
        // Nothing is taken unless every limit admits the call.
        let requests = s.requests.admits(1.0, 0.0);
        let open = if priority {
            Ok(())
        } else {
            s.open_requests.admits(1.0, 0.0)
        };
        match (requests, open) {
            (Ok(()), Ok(())) => {}
            (Err(a), Err(b)) => return Err(a.max(b)),
            (Err(e), Ok(())) | (Ok(()), Err(e)) => return Err(e),
        }
        s.requests.tokens -= 1.0;
        if !priority {
            s.open_requests.tokens -= 1.0;
        }
        s.minute.tokens -= need;
        s.day.tokens -= need;
        Ok(Charge { tokens: estimate })
    }

    /// Gives back what the call did not use (`actual` below the estimate). An `actual` above it is
    /// charged too, so the accounts stay true even if a server ignores `max_tokens`.
    pub(crate) fn reconcile(&self, charge: Charge, actual: u64) {
        let now = self.now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.minute.refill(now);
        s.day.refill(now);
        let delta = charge.tokens as f64 - actual as f64;
        s.minute.tokens = (s.minute.tokens + delta).min(s.minute.capacity);
        s.day.tokens = (s.day.tokens + delta).min(s.day.capacity);
    }

    /// Tokens that could be spent now: the smaller of the minute and day buckets.
    pub(crate) fn remaining_tokens(&self) -> f64 {
        let now = self.now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.share == 0.0 {
            return 0.0;
        }
        s.minute.refill(now);
        s.day.refill(now);
        s.minute.tokens.min(s.day.tokens).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn config(rpm: u32, tpm: u64, tpd: u64) -> BudgetConfig {
        BudgetConfig {
            requests_per_minute: rpm,
            tokens_per_minute: tpm,
            tokens_per_day: tpd,
            reserve_ratio: 0.0,
        }
    }

    /// A replica joining a fleet at a quarter share spends nothing at once, then its quarter of
    /// the tokens per minute.
    /// A rebalance revokes every partition, then assigns them back: the share dips to zero and
    /// returns. The day's spend stays what it was, and the rest of the day is there again at once.
    #[test]
    fn a_share_that_dips_to_zero_and_returns_keeps_the_days_budget() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(1000, 1_000_000, 10_000), clock.clone());
        assert!(b.try_charge(4000, true).is_some());
        b.set_share(0.0);
        assert!(b.try_charge(1, true).is_none(), "no share, no call");
        b.set_share(1.0);
        clock.advance(Duration::from_secs(60));
        assert!(b.try_charge(5900, true).is_some(), "the rest of the day");
        assert!(b.try_charge(200, true).is_none(), "and no more");
    }

    /// The same dip within a minute: the minute's buckets come back as they were, not empty.
    #[test]
    fn a_share_that_dips_to_zero_and_returns_keeps_the_minute() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(60, 6000, 1_000_000), clock.clone());
        assert!(b.try_charge(1000, true).is_some());
        b.set_share(0.0);
        clock.advance(Duration::from_millis(500));
        b.set_share(1.0);
        assert!(
            b.try_charge(4900, true).is_some(),
            "what the minute had left, at once"
        );
    }

    #[test]
    fn a_replica_joining_a_spending_fleet_starts_with_empty_minute_buckets() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(1000, 4000, 1_000_000), clock.clone());
        b.set_share(0.25);
        b.join_spending_fleet();
        assert!(b.try_charge(10, true).is_none(), "no burst at start");
        let mut spent = 0;
        for _ in 0..600 {
            clock.advance(Duration::from_millis(100));
            while let Some(c) = b.try_charge(10, true) {
                spent += c.tokens;
            }
        }
        assert!(
            (990..=1000).contains(&spent),
            "a minute at a quarter of 4000: {spent}"
        );
    }

    #[test]
    fn ordinary_calls_leave_the_reserve_to_priority_calls() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(
            &BudgetConfig {
                reserve_ratio: 0.3,
                ..config(10, 1000, 100_000)
            },
            clock,
        );
        let mut ordinary = 0;
        while let Some(c) = b.try_charge(100, false) {
            ordinary += c.tokens;
        }
        assert_eq!(ordinary, 700, "ordinary calls stop at the 30% reserve");
        let mut priority = 0;
        while let Some(c) = b.try_charge(100, true) {
            priority += c.tokens;
        }
        assert_eq!(priority, 300, "priority calls spend the reserve, then stop");
    }

    #[test]
    fn ordinary_requests_leave_reserved_requests() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(
            &BudgetConfig {
                reserve_ratio: 0.5,
                ..config(10, 1_000_000, 1_000_000)
            },
            clock,
        );
        let ordinary = (0..20).filter(|_| b.try_charge(1, false).is_some()).count();
        let priority = (0..20).filter(|_| b.try_charge(1, true).is_some()).count();
        assert_eq!((ordinary, priority), (5, 5));
    }

    /// A head stratum floods the judge at 50 sampled traces a minute against a budget for 20; a
    /// small stratum sends 3 a minute, each guaranteed by the sampler's minimum. Over an hour every
    /// small-stratum trace is judged, and head gets the rest.
    #[test]
    fn a_flooding_stratum_does_not_starve_a_small_one() {
        use crate::sample::config::SampleConfig;
        use crate::sample::{Sampler, SamplerDecision};
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(
            &BudgetConfig {
                reserve_ratio: 0.2,
                ..config(1000, 20_000, 100_000_000)
            },
            clock.clone(),
        );
        let mut sample = SampleConfig {
            default_rate: 0.0,
            min_per_window: 3,
            ..SampleConfig::default()
        };
        sample.rates.insert("head".into(), 1.0);
        let mut sampler = Sampler::new(&sample, 60, &["head".into(), "out_of_scope".into()]);
        let (mut head, mut small, mut small_sampled) = (0, 0, 0);
        for minute in 0..60u64 {
            for i in 0..60u64 {
                let now = minute * 60 + i;
                // head: about one a second; the small stratum: one every 20 s.
                for (stratum, id) in [(0, format!("h{now}")), (1, format!("s{now}"))] {
                    if stratum == 1 && i % 20 != 0 {
                        continue;
                    }
                    let d = sampler.decide(stratum, &id, now, false);
                    if !d.sampled() {
                        continue;
                    }
                    small_sampled += stratum;
                    if let Some(c) = b.try_charge(1000, d == SamplerDecision::Minimum) {
                        b.reconcile(c, 1000);
                        if stratum == 0 {
                            head += 1;
                        } else {
                            small += 1;
                        }
                    }
                }
                clock.advance(Duration::from_secs(1));
            }
        }
        assert_eq!(small_sampled, 180);
        assert_eq!(
            small, 180,
            "every guaranteed small-stratum sample was judged"
        );
        assert!(head >= 60 * 15, "head used the rest: {head}");
    }

    #[test]
    fn token_budget_refuses_before_overspending_and_refills() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(1000, 1000, 100_000), clock.clone());
        let mut spent = 0;
        while let Some(c) = b.try_charge(300, false) {
            spent += c.tokens;
        }
        assert_eq!(
            spent, 900,
            "three calls of 300 fit in 1000, a fourth would not"
        );
        clock.advance(Duration::from_secs(30));
        assert!(
            b.try_charge(300, false).is_some(),
            "half a minute refills 500"
        );
    }

    #[test]
    fn over_budget_says_how_long_to_wait_and_only_the_day_is_final() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(6, 1200, 100_000), clock.clone());
        assert!(b.charge_or_wait(600, true).is_ok());
        assert!(b.charge_or_wait(600, true).is_ok());
        // The minute's tokens are spent: 600 more come back in 30 s (20 tokens a second).
        assert_eq!(
            b.charge_or_wait(600, true),
            Err(OverBudget::Later(Duration::from_secs(30)))
        );
        assert_eq!(
            b.charge_or_wait(1300, true),
            Err(OverBudget::Never),
            "larger than a minute's tokens"
        );
        clock.advance(Duration::from_secs(30));
        assert!(b.charge_or_wait(600, true).is_ok(), "after the wait");
        let b = Budget::with_clock(&config(6, 1_000_000, 1000), clock.clone());
        assert!(b.charge_or_wait(600, true).is_ok());
        assert_eq!(
            b.charge_or_wait(600, true),
            Err(OverBudget::Never),
            "the day's 1000 tokens cannot cover a second call of 600"
        );
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(6, 1_000_000, 1_000_000), clock.clone());
        for _ in 0..6 {
            assert!(b.charge_or_wait(1, true).is_ok());
        }
        assert_eq!(
            b.charge_or_wait(1, true),
            Err(OverBudget::Later(Duration::from_secs(10))),
            "one request per 10 s"
        );
        clock.advance(Duration::from_secs(10));
        assert!(b.charge_or_wait(1, true).is_ok());
    }

    /// Calls of `tokens` admitted in a row now.
    fn admitted<C: Clock + Clone>(b: &Budget<C>, tokens: u64) -> usize {
        std::iter::from_fn(|| b.try_charge(tokens, false))
            .take(10_000)
            .count()
    }

    #[test]
    fn a_minute_later_the_whole_minute_is_back_and_idling_saves_no_more() {
        let clock = FakeRelativeClock::default();
        let tokens = Budget::with_clock(&config(1000, 600, 1_000_000), clock.clone());
        let requests = Budget::with_clock(&config(6, 1_000_000, 1_000_000), clock.clone());
        let both = || (admitted(&tokens, 100), admitted(&requests, 1));
        assert_eq!(both(), (6, 6));
        clock.advance(Duration::from_secs(59));
        assert_eq!(
            both(),
            (5, 5),
            "59 s give back 590 tokens and five requests"
        );
        clock.advance(Duration::from_secs(60));
        assert_eq!(both(), (6, 6));
        clock.advance(Duration::from_secs(600));
        assert_eq!(both(), (6, 6), "ten idle minutes still hold one minute");
    }

    /// The day's tokens are a bucket refilled over 24 hours, not a calendar day reset at midnight:
    /// half a day after spending all of them, half are back; a day later, all of them and no more.
    #[test]
    fn the_days_tokens_come_back_over_24_hours() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(1000, 1_000_000, 1000), clock.clone());
        assert_eq!(admitted(&b, 100), 10);
        assert_eq!(b.charge_or_wait(100, true), Err(OverBudget::Never));
        clock.advance(DAY / 2);
        assert_eq!(admitted(&b, 100), 5);
        clock.advance(DAY - Duration::from_secs(1));
        assert_eq!(
            admitted(&b, 100),
            9,
            "a second short of a day after the last spend"
        );
        clock.advance(Duration::from_secs(1) + 7 * DAY);
        assert_eq!(admitted(&b, 100), 10, "a week idle still holds one day");
    }

    #[test]
    fn reconcile_refunds_unused_tokens() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(1000, 1000, 100_000), clock);
        let c = b.try_charge(800, false).unwrap();
        assert!(b.try_charge(800, false).is_none());
        b.reconcile(c, 100);
        assert!((b.remaining_tokens() - 900.0).abs() < 1e-6);
        assert!(b.try_charge(800, false).is_some());
    }

    #[test]
    fn request_rate_is_limited() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(6, 1_000_000, 1_000_000), clock.clone());
        let n = (0..20).filter(|_| b.try_charge(1, false).is_some()).count();
        assert_eq!(n, 6);
        clock.advance(Duration::from_secs(10));
        assert!(
            b.try_charge(1, false).is_some(),
            "one request per 10 s comes back"
        );
        assert!(b.try_charge(1, false).is_none());
    }

    #[test]
    fn share_scales_every_limit() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(60, 1000, 100_000), clock.clone());
        b.set_share(1.0 / 3.0);
        let mut spent = 0;
        while let Some(c) = b.try_charge(100, false) {
            spent += c.tokens;
        }
        assert_eq!(spent, 300, "a third of 1000 tokens per minute");
        b.set_share(0.0);
        clock.advance(Duration::from_secs(120));
        assert!(b.try_charge(1, false).is_none(), "no partitions, no spend");
    }

    /// Over a simulated day with random call sizes and usage, the tokens actually used never exceed
    /// what the limits allow over the elapsed time.
    #[test]
    fn never_exceeds_the_limit_over_time() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(600, 5_000, 10_000_000), clock.clone());
        let mut used = 0u64;
        let mut x = 12345u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let estimate = 100 + (x >> 33) % 900;
            if let Some(c) = b.try_charge(estimate, false) {
                let actual = estimate * ((x >> 20) % 100) / 100;
                used += actual;
                b.reconcile(c, actual);
            }
            clock.advance(Duration::from_millis(50));
        }
        let elapsed_min = 20_000.0 * 0.05 / 60.0;
        assert!(used as f64 <= 5_000.0 * (elapsed_min + 1.0), "used {used}");
        assert!(used > 0);
    }

    /// Saturating demand on `budgets` for `secs` seconds, in steps of 100 ms: at every step each
    /// budget takes calls of `estimate` tokens until it refuses, each billed at 60 % of its
    /// estimate. Returns the tokens billed by each second's end, summed over the budgets.
    fn saturate(
        clock: &FakeRelativeClock,
        budgets: &[&Budget<FakeRelativeClock>],
        secs: usize,
        estimate: u64,
    ) -> Vec<u64> {
        let mut billed = 0;
        let mut by_second = Vec::with_capacity(secs);
        for step in 1..=secs * 10 {
            for b in budgets {
                while let Some(c) = b.try_charge(estimate, false) {
                    let actual = estimate * 6 / 10;
                    b.reconcile(c, actual);
                    billed += actual;
                }
            }
            clock.advance(Duration::from_millis(100));
            if step % 10 == 0 {
                by_second.push(billed);
            }
        }
        by_second
    }

    /// Tokens billed per minute from second `from` to the end of `billed`.
    fn rate_from(billed: &[u64], from: usize) -> f64 {
        let end = billed.len();
        (billed[end - 1] - billed[from - 1]) as f64 * 60.0 / (end - from) as f64
    }

    fn within(got: f64, want: f64, tolerance: f64) -> bool {
        (got - want).abs() <= tolerance * want
    }

    /// Three replicas at a third each, flooded for ten minutes: together they spend the fleet's
    /// tokens per minute, plus the one minute's worth their full buckets start with.
    #[test]
    fn three_replicas_at_a_third_spend_the_fleets_tokens_per_minute() {
        const TPM: u64 = 60_000;
        let clock = FakeRelativeClock::default();
        let budgets: Vec<_> = (0..3)
            .map(|_| Budget::with_clock(&config(100_000, TPM, 1_000_000_000), clock.clone()))
            .collect();
        for b in &budgets {
            b.set_share(1.0 / 3.0);
        }
        let refs: Vec<_> = budgets.iter().collect();
        let billed = saturate(&clock, &refs, 600, 400);
        let total = *billed.last().unwrap() as f64;
        assert!(
            total <= (TPM * 11) as f64,
            "ten minutes and one burst: {total}"
        );
        let steady = rate_from(&billed, 60);
        assert!(
            within(steady, TPM as f64, 0.05),
            "{steady} tokens a minute after the first minute, against {TPM}"
        );
    }

    /// A fleet of three loses one replica, then gains two: after each change the replicas' new
    /// shares (1/2, then 1/4) add up to the fleet's budget again. A larger share adds no tokens at
    /// once, so the change itself is no burst; new replicas bring the minute of their share their
    /// full buckets start with.
    #[test]
    fn resharing_three_two_four_keeps_the_fleet_within_its_budget() {
        const TPM: u64 = 60_000;
        let clock = FakeRelativeClock::default();
        let budget = || {
            Budget::with_clock(
                &BudgetConfig {
                    reserve_ratio: 0.2,
                    ..config(100_000, TPM, 1_000_000_000)
                },
                clock.clone(),
            )
        };
        let (a, b, c) = (budget(), budget(), budget());
        for x in [&a, &b, &c] {
            x.set_share(1.0 / 3.0);
        }
        let three = saturate(&clock, &[&a, &b, &c], 180, 400);
        let rate = rate_from(&three, 60);
        assert!(within(rate, TPM as f64, 0.05), "three replicas: {rate}");

        drop(c);
        for x in [&a, &b] {
            x.set_share(0.5);
        }
        let two = saturate(&clock, &[&a, &b], 180, 400);
        let rate = rate_from(&two, 60);
        assert!(within(rate, TPM as f64, 0.05), "two replicas: {rate}");
        let whole = *two.last().unwrap() as f64;
        assert!(
            whole <= 3.0 * TPM as f64 * 1.02,
            "growing shares add no tokens at once: {whole} in three minutes"
        );

        let (d, e) = (budget(), budget());
        for x in [&a, &b, &d, &e] {
            x.set_share(0.25);
        }
        let four = saturate(&clock, &[&a, &b, &d, &e], 180, 400);
        let rate = rate_from(&four, 60);
        assert!(within(rate, TPM as f64, 0.05), "four replicas: {rate}");
        let whole = *four.last().unwrap() as f64;
        assert!(
            whole <= (3.0 + 0.5) * TPM as f64 * 1.02,
            "three minutes and the new replicas' full buckets: {whole}"
        );
    }

    /// A larger share refills faster but grants nothing at once; a smaller one keeps at most its
    /// own period's worth.
    #[test]
    fn a_new_share_never_grants_a_burst() {
        let clock = FakeRelativeClock::default();
        let b = Budget::with_clock(&config(60, 1_000_000, 1_000_000_000), clock.clone());
        b.set_share(1.0 / 3.0);
        assert_eq!(admitted(&b, 1), 20, "a third of 60 requests");
        b.set_share(0.5);
        assert_eq!(
            admitted(&b, 1),
            0,
            "no burst of requests when the share grows"
        );
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            admitted(&b, 1),
            1,
            "one request a second at half of 60 a minute"
        );
        clock.advance(Duration::from_secs(120));
        assert_eq!(admitted(&b, 1), 30);

        let b = Budget::with_clock(&config(1000, 1200, 1_000_000_000), clock.clone());
        b.set_share(1.0 / 3.0);
        assert_eq!(
            admitted(&b, 100),
            4,
            "a fresh budget holds a third of the minute"
        );
        b.set_share(1.0);
        assert_eq!(admitted(&b, 100), 0, "and no more when its share grows");
        clock.advance(Duration::from_secs(30));
        assert_eq!(admitted(&b, 100), 6, "half a minute at the whole rate");
    }
}
