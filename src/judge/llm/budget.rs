//! The judge budget: enforced before a call is made, never after.
//!
//! Three limits, all scaled by this replica's share of the fleet (its share of the topic's
//! partitions), so adding replicas does not multiply spend:
//! - requests per minute, a governor rate limiter;
//! - tokens per minute and per day, token buckets charged with an upper-bound estimate before each
//!   call (prompt characters / 3 + the `max_tokens` sent) and refunded with the difference once the
//!   API reports its usage. Since the estimate bounds the real cost, the spend never exceeds the limit.
//!
//! A `reserve_ratio` of every limit is kept for priority calls (each stratum's guaranteed samples):
//! ordinary calls stop where the reserve starts, so head traffic cannot spend the budget that small
//! strata need to be judged in every window.
//!
//! Generic over the clock so tests drive time with governor's fake clock.

use std::sync::Mutex;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use crate::judge::llm::config::BudgetConfig;

type Limiter<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

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

    fn rescale(&mut self, capacity: f64, period: Duration, now: Duration) {
        self.refill(now);
        let used = self.capacity - self.tokens;
        self.capacity = capacity;
        self.per_sec = capacity / period.as_secs_f64();
        self.tokens = (capacity - used).min(capacity);
    }
}

/// Why a call cannot be admitted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverBudget {
    /// The per-minute limits (requests or tokens) will admit it after this long.
    Later(Duration),
    /// Waiting a minute will not help: the daily budget cannot cover it, the call is larger than a
    /// minute's tokens, or this replica has no share.
    Never,
}

/// What a successful `try_charge` took, to be reconciled with the real usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// Tokens reserved.
    pub tokens: u64,
}

/// The budget of one replica.
pub struct Budget<C: Clock = DefaultClock> {
    clock: C,
    start: C::Instant,
    config: BudgetConfig,
    state: Mutex<State<C>>,
}

struct State<C: Clock> {
    share: f64,
    /// All requests, priority or not.
    requests: Option<Limiter<C>>,
    /// Ordinary requests: the limit less the reserve.
    open_requests: Option<Limiter<C>>,
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
    /// A budget on the real clock, with a share of 1 until the source says otherwise.
    pub fn new(config: &BudgetConfig) -> Self {
        Self::with_clock(config, DefaultClock::default())
    }
}

impl<C: Clock + Clone> Budget<C> {
    /// A budget on `clock`.
    pub fn with_clock(config: &BudgetConfig, clock: C) -> Self {
        let start = clock.now();
        let state = State {
            share: 1.0,
            requests: limiter(config.requests_per_minute, 1.0, clock.clone()),
            open_requests: limiter(
                config.requests_per_minute,
                1.0 - config.reserve_ratio,
                clock.clone(),
            ),
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

    /// Sets this replica's share of the fleet's budget (assigned partitions / all partitions).
    pub fn set_share(&self, share: f64) {
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
        s.requests = limiter(self.config.requests_per_minute, share, self.clock.clone());
        s.open_requests = limiter(
            self.config.requests_per_minute,
            share * (1.0 - self.config.reserve_ratio),
            self.clock.clone(),
        );
        s.minute
            .rescale(self.config.tokens_per_minute as f64 * share, MINUTE, now);
        s.day
            .rescale(self.config.tokens_per_day as f64 * share, DAY, now);
    }

    /// This replica's share.
    pub fn share(&self) -> f64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).share
    }

    /// Reserves one request and `estimate` tokens, or refuses. A `priority` call may spend the
    /// reserve; an ordinary one must leave it untouched.
    pub fn try_charge(&self, estimate: u64, priority: bool) -> Option<Charge> {
        self.charge_or_wait(estimate, priority).ok()
    }

    /// Reserves one request and `estimate` tokens, or says how long until the per-minute limits
    /// would admit the call (nothing is taken then), or that waiting will not help. Replay waits;
    /// live judging skips.
    pub fn charge_or_wait(&self, estimate: u64, priority: bool) -> Result<Charge, OverBudget> {
        let now = self.now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.minute.refill(now);
        s.day.refill(now);
        let need = estimate as f64;
        let keep = if priority {
            0.0
        } else {
            self.config.reserve_ratio
        };
        if s.day.tokens - need < keep * s.day.capacity {
            return Err(OverBudget::Never);
        }
        let minute_floor = keep * s.minute.capacity;
        if need > s.minute.capacity - minute_floor {
            return Err(OverBudget::Never);
        }
        if s.minute.tokens - need < minute_floor {
            let short = minute_floor + need - s.minute.tokens;
            return Err(OverBudget::Later(Duration::from_secs_f64(
                short / s.minute.per_sec,
            )));
        }
        // An ordinary call passes the open limiter first; a cell it takes there while the total
        // limiter then refuses only errs towards spending less.
        let clock_now = self.clock.now();
        let wait = |l: &Option<Limiter<C>>| match l {
            None => Err(OverBudget::Never),
            Some(l) => l
                .check()
                .map_err(|not_until| OverBudget::Later(not_until.wait_time_from(clock_now))),
        };
        if !priority {
            wait(&s.open_requests)?;
        }
        wait(&s.requests)?;
        s.minute.tokens -= need;
        s.day.tokens -= need;
        Ok(Charge { tokens: estimate })
    }

    /// Gives back what the call did not use (`actual` below the estimate). An `actual` above it is
    /// charged too, so the accounts stay true even if a server ignores `max_tokens`.
    pub fn reconcile(&self, charge: Charge, actual: u64) {
        let now = self.now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.minute.refill(now);
        s.day.refill(now);
        let delta = charge.tokens as f64 - actual as f64;
        s.minute.tokens = (s.minute.tokens + delta).min(s.minute.capacity);
        s.day.tokens = (s.day.tokens + delta).min(s.day.capacity);
    }

    /// Tokens that could be spent now: the smaller of the minute and day buckets.
    pub fn remaining_tokens(&self) -> f64 {
        let now = self.now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.minute.refill(now);
        s.day.refill(now);
        s.minute.tokens.min(s.day.tokens).max(0.0)
    }
}

fn limiter<C: Clock + Clone>(per_minute: u32, share: f64, clock: C) -> Option<Limiter<C>> {
    let n = (per_minute as f64 * share).floor() as u32;
    let n = std::num::NonZeroU32::new(n)?;
    Some(RateLimiter::direct_with_clock(Quota::per_minute(n), clock))
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
}
