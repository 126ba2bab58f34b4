//! How fast the faithfulness page (`RagwatchFaithfulnessDrift`) fires on a drop, how often it fires
//! on healthy traffic, and how close it comes to the fastest any rule could be: a seeded simulation
//! that runs the shipped arithmetic ([`ragwatch::window::scan`] on [`EstimateSums`]) on simulated
//! traces, and prints the sizing table of docs/judges.md.
//!
//! ```text
//! cargo bench --bench page_power -- [--years N] [--drops N] [--seed S] [--threads N]
//!                                   [--offline-correlation R] [--page-llr H] [--max-drop D]
//! ```
//!
//! # The verdict model (tests/it/common/judge/labels.rs)
//! A trace is faithful with probability `p` (0.9 healthy). The LLM judge reads it as the human
//! labels do 90 % of the time; a faithful reading has latent score 1 (70 %) or uniform in [0.6, 1],
//! an unfaithful one uniform in [0.2, 0.7]; the verdict is the share of `c` claims supported, `c`
//! uniform in 2..=6, each supported with the latent score's probability: `Binomial(c, s) / c`.
//! Mean verdict: 0.8518 at 90 % faithful, 0.6950 at 50 %, 0.7930 at 75 %, 0.8322 at 85 %.
//!
//! The offline judge scores every trace: `f = clip(a + b * s + sigma * N(0, 1), 0, 1)` with `s` the
//! LLM judge's latent score. `a` and `b` put the class means where docs/judges.md measured them
//! (faithful answers 0.638, unfaithful 0.432); `sigma` is set so that the offline score's AUROC
//! against the trace's truth is the cross-validated 0.759 of docs/judges.md (Monte Carlo,
//! bisection). docs/judges.md measures no offline/LLM correlation, so that AUROC is the figure
//! mapped; the correlation it implies with the LLM verdict at 90 % faithful is printed (about
//! 0.45). The offline score follows the LLM judge's latent reading, misreadings included; an
//! offline judge whose errors were independent of the LLM judge's would correlate less at the same
//! AUROC. `--offline-correlation R` (0.8 unless given; 0 leaves them out) adds the rows of a
//! sharper offline judge: `sigma` set so that the correlation is `R`. The LLM-only rows have no
//! offline judge (a constant `f`, so the PPI++ slope is 0): the rule on LLM verdicts alone.
//!
//! # Traffic and the rule
//! The shipped `config/llm.toml`: sampling rate `pi` (0.05), the faithfulness rule's `max_drop` and
//! `min_samples`, the short and baseline windows (so the scan's windows, [`scan::windows`]). A
//! budget of `v` verdicts per stratum per short window is `v / pi` traces per short window, spread
//! evenly over 30-second steps, each judged independently with probability `pi` (the guaranteed
//! minimum is left out). Each step's traces are summed into one [`EstimateSums`]
//! ([`EstimateSums::population`] for every trace, [`EstimateSums::pair`] for each judged one); at
//! the end of each step (a Prometheus evaluation every 30 s) every scan window's sums are
//! prefix differences, the reference is the last 24 hours minus the longest window
//! ([`scan::reference`], one for every window), and the statistic is [`scan::scan`] over
//! [`Evidence::of`] each window.
//! The alert holds `for: 1m`: it fires at the third consecutive evaluation at or above `h`, and a
//! new crossing after it falls below `h` is a new page.
//!
//! # What it prints
//! Per rule and budget `v` in 15, 30, 60, 120 and 240: one healthy stream of `--years` years (after
//! a healthy warm-up day) counts the false pages at `h` (`--page-llr`, the shipped
//! `DEFAULT_PAGE_LLR`) and gives the smallest `h` on a 0.5 grid with at most one false page per
//! year (at that `h` and every `h` above it on the grid). `--drops` times, spread evenly over that
//! stream, the stream forks: at a random moment in a 30-second step the faithful share falls from
//! 90 % to 50, 75 or 85 %, and the fork runs until the page or 6 hours (an alert already firing at
//! the onset counts as paging at the next evaluation). The delay is from the onset to the page.
//!
//! Lorden's floor: with at most one false page per `ARL0` verdicts, no rule pages faster on
//! average than `ln(ARL0) / KL` verdicts, `KL` the Kullback-Leibler divergence per verdict between
//! the dropped and the healthy verdict distributions (exact: the verdict takes the values `b / c`,
//! whose probabilities are integrated in closed form over the latent score). `ARL0` is a year of
//! verdicts at the budget; the floor is converted to minutes at `v` verdicts per short window. It
//! counts LLM verdicts alone: the combined rule also reads the offline score of every trace, so
//! its ratio to the floor can fall below 1. The rule's delay includes the minute of `for:`.
//!
//! The defaults (`--years 12 --drops 1000`) take about 14 CPU-minutes, 7 minutes on 2 free cores;
//! each (rule, budget) has its own seed, so the figures do not depend on `--threads`.
//! docs/judges.md has the table.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use clap::Parser;
use ragwatch::clock::Instant;
use ragwatch::config::Config;
use ragwatch::dimensions::{JudgeKind, Quality};
use ragwatch::window::scan::{self, DEFAULT_PAGE_LLR, Evidence};
use ragwatch::window::{Accumulate, EstimateSums};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, RngExt, SeedableRng};

/// Seconds between two evaluations (Prometheus's interval), the simulation's step.
const STEP_SECS: u64 = 30;
/// Consecutive evaluations at or above `h` before the alert fires (`for: 1m` at 30 s).
const HOLD_EVALS: u32 = 3;
/// A drop not paged within this many minutes counts as never paged.
const CAP_MINUTES: f64 = 360.0;
/// Verdicts per stratum per short window.
const BUDGETS: [u32; 5] = [15, 30, 60, 120, 240];
/// The healthy faithful share.
const HEALTHY: f64 = 0.9;
/// The faithful shares a drop falls to.
const DROPS: [f64; 3] = [0.5, 0.75, 0.85];
/// The share of traces the LLM judge reads as the human labels do.
const AGREEMENT: f64 = 0.9;
/// The offline judge's mean score on faithful and unfaithful answers (docs/judges.md, "What the
/// numbers mean").
const OFFLINE_MEANS: (f64, f64) = (0.638, 0.432);
/// The offline judge's cross-validated AUROC against human labels (docs/judges.md, "Offline
/// judge").
const OFFLINE_AUROC: f64 = 0.759;
/// The offline score of every trace when there is no offline judge (0: its sums stay exactly 0, so
/// the PPI++ slope is exactly 0).
const ABSENT_F: f64 = 0.0;
/// The grid of thresholds for the false-page count: 0.5, 1.0, ... up to `GRID * 0.5`.
const GRID: usize = 400;

#[derive(Parser, Debug)]
#[command(about = "The page rule's sizing table: delays, false pages, Lorden's floor")]
struct Args {
    /// Years of healthy traffic per rule and budget (after a warm-up day).
    #[arg(long, default_value_t = 12.0)]
    years: f64,
    /// Drops per rule, budget and drop size.
    #[arg(long, default_value_t = 1000)]
    drops: usize,
    /// The seed of every random draw.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Also run the combined rule with an offline judge of this correlation with the LLM verdict
    /// (0: not run).
    #[arg(long, default_value_t = 0.8)]
    offline_correlation: f64,
    /// The page threshold `h` the delays and the false pages are measured at.
    #[arg(long, default_value_t = DEFAULT_PAGE_LLR)]
    page_llr: f64,
    /// The rule's `max_drop` (default: the shipped one).
    #[arg(long)]
    max_drop: Option<f64>,
    /// Passed by `cargo bench`. Without it (`cargo test --all-targets` runs this binary to check
    /// that it works) the run is a short smoke run: a few healthy days and a few drops.
    #[arg(long, hide = true)]
    bench: bool,
}

/// What the shipped configuration sets.
#[derive(Debug, Clone)]
struct Shipped {
    /// The sampling rate, each judged pair's inclusion probability.
    pi: f64,
    max_drop: f64,
    min_samples: f64,
    /// Steps in the short window.
    short_steps: u64,
    /// Steps in the baseline window.
    day_steps: usize,
    /// The scan's windows, in steps.
    windows: Vec<usize>,
}

impl Shipped {
    fn load() -> Shipped {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/llm.toml");
        let config = Config::load(&path, &Default::default()).expect("config/llm.toml loads");
        let rule = config
            .drift
            .rule(Quality::Faithfulness, JudgeKind::Combined, "default");
        let short = Duration::from_secs(config.windows.short_secs);
        let baseline = Duration::from_secs(config.windows.baseline_secs);
        let windows = scan::windows(short, baseline)
            .iter()
            .map(|w| {
                assert!(
                    w.as_secs() % STEP_SECS == 0,
                    "window {w:?} is not whole steps"
                );
                (w.as_secs() / STEP_SECS) as usize
            })
            .collect();
        Shipped {
            pi: config.sample.default_rate,
            max_drop: rule.max_drop.expect("the faithfulness rule has a max_drop"),
            min_samples: rule.min_samples as f64,
            short_steps: config.windows.short_secs / STEP_SECS,
            day_steps: (config.windows.baseline_secs / STEP_SECS) as usize,
            windows,
        }
    }

    /// Traces per step at `v` verdicts per short window.
    fn traces_per_step(&self, v: u32) -> usize {
        (f64::from(v) / self.pi / self.short_steps as f64).round() as usize
    }
}

/// The share of traces the LLM judge reads as faithful when a share `p` is.
fn reads_faithful(p: f64) -> f64 {
    p * AGREEMENT + (1.0 - p) * (1.0 - AGREEMENT)
}

/// The latent score of a trace from one uniform draw `u`, with `q` the share read as faithful:
/// the inverse distribution function of the mixture (1 with probability 0.7 q, uniform in
/// [0.6, 1] with 0.3 q, uniform in [0.2, 0.7] with 1 - q).
fn latent(u: f64, q: f64) -> f64 {
    let one = 0.7 * q;
    if u < one {
        1.0
    } else if u < q {
        0.6 + 0.4 * (u - one) / (q - one)
    } else {
        0.2 + 0.5 * (u - q) / (1.0 - q)
    }
}

/// The offline judge of a simulation.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Offline {
    /// No offline judge: every trace has the same offline score.
    Absent,
    /// `f = clip(a + b * s + sigma * N(0, 1), 0, 1)`.
    Score { a: f64, b: f64, sigma: f64 },
}

impl Offline {
    /// The model with the documented class means and noise `sigma`.
    fn with_sigma(sigma: f64) -> Offline {
        let (faithful, unfaithful) = OFFLINE_MEANS;
        let (s1, s0) = (class_latent_mean(true), class_latent_mean(false));
        let b = (faithful - unfaithful) / (s1 - s0);
        Offline::Score {
            a: unfaithful - b * s0,
            b,
            sigma,
        }
    }

    fn score(&self, s: f64, z: f64) -> f64 {
        match *self {
            Offline::Absent => ABSENT_F,
            Offline::Score { a, b, sigma } => (a + b * s + sigma * z).clamp(0.0, 1.0),
        }
    }
}

/// The mean latent score of a faithful (or unfaithful) trace.
fn class_latent_mean(faithful: bool) -> f64 {
    let q = if faithful { AGREEMENT } else { 1.0 - AGREEMENT };
    q * (0.7 + 0.3 * 0.8) + (1.0 - q) * 0.45
}

/// Layers of the normal sampler's ziggurat.
const LAYERS: usize = 128;
/// The ziggurat's base layer edge and every layer's area (Marsaglia and Tsang, 2000, 128 layers).
const ZIGGURAT_R: f64 = 3.442_619_855_899;
const ZIGGURAT_AREA: f64 = 9.912_563_035_262_17e-3;

/// The unnormalised standard normal density.
fn bell(x: f64) -> f64 {
    (-0.5 * x * x).exp()
}

/// The ziggurat of the standard normal: layer `i` spans `[0, x[i]]` between the heights `y[i]` and
/// `y[i + 1]`; the base layer carries the tail beyond `ZIGGURAT_R`.
struct Ziggurat {
    x: [f64; LAYERS + 1],
    y: [f64; LAYERS + 1],
}

impl Ziggurat {
    fn new() -> Ziggurat {
        let mut x = [0.0; LAYERS + 1];
        x[0] = ZIGGURAT_AREA / bell(ZIGGURAT_R);
        x[1] = ZIGGURAT_R;
        for i in 1..LAYERS - 1 {
            x[i + 1] = (-2.0 * (bell(x[i]) + ZIGGURAT_AREA / x[i]).ln()).sqrt();
        }
        let top = bell(x[LAYERS - 1]) + ZIGGURAT_AREA / x[LAYERS - 1];
        assert!(
            (top - 1.0).abs() < 1e-9,
            "the ziggurat closes at the top: {top}"
        );
        let y = x.map(bell);
        Ziggurat { x, y }
    }
}

/// Uniform and normal draws from one seeded generator.
struct Draws {
    rng: Xoshiro256PlusPlus,
    ziggurat: &'static Ziggurat,
}

impl Draws {
    fn new(seed: u64) -> Draws {
        static ZIGGURAT: std::sync::OnceLock<Ziggurat> = std::sync::OnceLock::new();
        Draws {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            ziggurat: ZIGGURAT.get_or_init(Ziggurat::new),
        }
    }

    fn uniform(&mut self) -> f64 {
        self.rng.random::<f64>()
    }

    /// A standard normal draw: a layer, a sign and a position from one 64-bit draw; the point is
    /// kept when it lies under the density (always, inside the next layer's width).
    fn normal(&mut self) -> f64 {
        let z = self.ziggurat;
        loop {
            let bits = self.rng.next_u64();
            let i = (bits % LAYERS as u64) as usize;
            let sign = if bits & 0x80 == 0 { 1.0 } else { -1.0 };
            let x = (bits >> 11) as f64 / (1u64 << 53) as f64 * z.x[i];
            if x < z.x[i + 1] {
                return sign * x;
            }
            if i == 0 {
                // The tail beyond R (Marsaglia's exponential rejection).
                loop {
                    let a = -(1.0 - self.uniform()).ln() / ZIGGURAT_R;
                    let b = -(1.0 - self.uniform()).ln();
                    if 2.0 * b > a * a {
                        return sign * (ZIGGURAT_R + a);
                    }
                }
            }
            if z.y[i] + self.uniform() * (z.y[i + 1] - z.y[i]) < bell(x) {
                return sign * x;
            }
        }
    }

    /// The LLM verdict on a trace of latent score `s`: the share of 2 to 6 claims supported.
    fn verdict(&mut self, s: f64) -> f64 {
        let claims = self.rng.random_range(2..=6u32);
        let supported = (0..claims).filter(|_| self.uniform() < s).count();
        supported as f64 / f64::from(claims)
    }
}

/// One step's traffic.
#[derive(Debug, Clone, Copy)]
struct Traffic {
    traces: usize,
    pi: f64,
    offline: Offline,
}

impl Traffic {
    /// The sums of one step whose first `split` traces are read as faithful with probability
    /// `q_before` and the rest with `q_after`.
    fn step(&self, d: &mut Draws, split: usize, q_before: f64, q_after: f64) -> EstimateSums {
        let mut sums = EstimateSums::default();
        let mut f_total = 0.0;
        for i in 0..self.traces {
            let q = if i < split { q_before } else { q_after };
            let judged = d.uniform() < self.pi;
            match self.offline {
                Offline::Absent => {
                    if judged {
                        let s = latent(d.uniform(), q);
                        let y = d.verdict(s);
                        sums.merge(&EstimateSums::pair(y, ABSENT_F, self.pi));
                    }
                }
                offline @ Offline::Score { .. } => {
                    let s = latent(d.uniform(), q);
                    let f = offline.score(s, d.normal());
                    f_total += f;
                    if judged {
                        let y = d.verdict(s);
                        sums.merge(&EstimateSums::pair(y, f, self.pi));
                    }
                }
            }
        }
        if self.offline == Offline::Absent {
            f_total = ABSENT_F * self.traces as f64;
        }
        // The population sums of every trace: `population(f)` for each, added up.
        let mut population = EstimateSums::population(f_total);
        population.n = self.traces as f64;
        sums.merge(&population);
        sums
    }
}

/// Prefix sums of the steps, the last baseline's worth of them.
#[derive(Clone)]
struct Prefix {
    ring: Vec<EstimateSums>,
    /// Steps added.
    t: usize,
    day: usize,
}

impl Prefix {
    fn new(day: usize) -> Prefix {
        Prefix {
            ring: vec![EstimateSums::default(); day + 1],
            t: 0,
            day,
        }
    }

    /// The sums of the steps before step `t` (kept: the last `day` steps' worth).
    fn at(&self, t: usize) -> &EstimateSums {
        debug_assert!(t <= self.t && t + self.day >= self.t);
        &self.ring[t % self.ring.len()]
    }

    fn push(&mut self, step: &EstimateSums) {
        let mut next = *self.at(self.t);
        next.merge(step);
        self.t += 1;
        let len = self.ring.len();
        self.ring[self.t % len] = next;
        if self.t.is_multiple_of(self.day) {
            // Keep the sums small: every prefix less the oldest one kept (prefixes only grow, so
            // nothing is clamped).
            let base = *self.at(self.t - self.day);
            for e in &mut self.ring {
                *e = e.minus(&base);
            }
        }
    }

    /// The scan statistic at the end of the last step (`None` as no window qualifies).
    fn scan(&self, shipped: &Shipped, evidence: &mut Vec<Evidence>) -> Option<f64> {
        let now = self.at(self.t);
        let day = now.minus(self.at(self.t - self.day));
        // The reference: the baseline before the longest window, one for every window.
        let longest = shipped.windows.iter().copied().max().unwrap_or(0);
        let rest = scan::reference(&day, &now.minus(self.at(self.t - longest)));
        evidence.clear();
        for &w in &shipped.windows {
            let window = now.minus(self.at(self.t - w));
            evidence.extend(Evidence::of(&window, &rest));
        }
        scan::scan(evidence, shipped.max_drop, shipped.min_samples)
    }
}

/// A rule to simulate.
#[derive(Debug, Clone, Copy)]
struct Rule {
    name: &'static str,
    offline: Offline,
}

/// One rule at one budget.
#[derive(Debug, Clone, Copy)]
struct Task {
    rule: usize,
    v: u32,
}

/// What one task measured.
#[derive(Debug, Clone)]
struct Measured {
    years: f64,
    /// False pages at the page threshold.
    false_pages: u64,
    /// False pages at each grid threshold.
    grid_pages: Vec<i64>,
    /// Per drop: the delays in minutes, `INFINITY` when not paged within the cap.
    delays: Vec<Vec<f64>>,
}

/// A seed from a list of numbers.
fn mix(parts: &[u64]) -> u64 {
    parts.iter().fold(0x243f_6a88_85a3_08d3u64, |h, &p| {
        let x = (h ^ p).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 31)
    })
}

/// The grid index range of thresholds `h` with `below < h <= at`: the crossings at this
/// evaluation.
fn crossed(below: f64, at: f64) -> Option<(usize, usize)> {
    if at <= below || at < 0.5 {
        return None;
    }
    let lo = if below < 0.0 {
        0
    } else {
        (2.0 * below).floor() as usize
    };
    let hi = ((2.0 * at).floor() as usize)
        .saturating_sub(1)
        .min(GRID - 1);
    (lo <= hi).then_some((lo, hi))
}

fn run_task(task: Task, rule: Rule, shipped: &Shipped, args: &Args) -> Measured {
    let traffic = Traffic {
        traces: shipped.traces_per_step(task.v),
        pi: shipped.pi,
        offline: rule.offline,
    };
    let h = args.page_llr;
    let day = shipped.day_steps;
    let healthy_steps = (args.years * 365.0 * day as f64).round() as usize;
    let spacing = (healthy_steps / args.drops.max(1)).max(1);
    let q_healthy = reads_faithful(HEALTHY);
    let mut d = Draws::new(mix(&[args.seed, task.rule as u64, u64::from(task.v)]));
    let mut prefix = Prefix::new(day);
    for _ in 0..day {
        prefix.push(&traffic.step(&mut d, 0, q_healthy, q_healthy));
    }
    let mut evidence = Vec::with_capacity(shipped.windows.len());
    let mut diff = vec![0i64; GRID + 1];
    let mut false_pages = 0;
    // The last three statistics (-inf where none), their minimum before this evaluation, and the
    // evaluations in a row at or above h.
    let mut last = [f64::NEG_INFINITY; HOLD_EVALS as usize];
    let mut held_min = f64::NEG_INFINITY;
    let mut run = 0u32;
    let mut delays = vec![Vec::with_capacity(args.drops); DROPS.len()];
    let mut trial = 0;
    for i in 0..healthy_steps {
        if i % spacing == 0 && trial < args.drops {
            for (k, &to) in DROPS.iter().enumerate() {
                let seed = mix(&[
                    args.seed,
                    task.rule as u64,
                    u64::from(task.v),
                    k as u64,
                    trial as u64,
                ]);
                let delay = drop_delay(&prefix, run, traffic, shipped, h, to, seed);
                delays[k].push(delay.unwrap_or(f64::INFINITY));
            }
            trial += 1;
        }
        prefix.push(&traffic.step(&mut d, 0, q_healthy, q_healthy));
        let s = prefix
            .scan(shipped, &mut evidence)
            .unwrap_or(f64::NEG_INFINITY);
        last[i % last.len()] = s;
        let m = last.iter().copied().fold(f64::INFINITY, f64::min);
        if let Some((lo, hi)) = crossed(held_min, m) {
            diff[lo] += 1;
            diff[hi + 1] -= 1;
        }
        if held_min < h && m >= h {
            false_pages += 1;
        }
        held_min = m;
        run = if s >= h { run + 1 } else { 0 };
    }
    let grid_pages = diff
        .iter()
        .scan(0i64, |acc, x| {
            *acc += x;
            Some(*acc)
        })
        .take(GRID)
        .collect();
    Measured {
        years: healthy_steps as f64 / (365.0 * day as f64),
        false_pages,
        grid_pages,
        delays,
    }
}

/// The minutes from a drop's onset to the page, forked from a healthy stream whose statistic has
/// been at or above `h` for the last `run` evaluations; `None` if not within the cap.
fn drop_delay(
    healthy: &Prefix,
    mut run: u32,
    traffic: Traffic,
    shipped: &Shipped,
    h: f64,
    to: f64,
    seed: u64,
) -> Option<f64> {
    let mut prefix = healthy.clone();
    let mut d = Draws::new(seed);
    let mut evidence = Vec::with_capacity(shipped.windows.len());
    // The onset, as a share of the first step: the traces after it are dropped ones.
    let onset = d.uniform();
    let split = (onset * traffic.traces as f64).ceil() as usize;
    let (q_healthy, q_dropped) = (reads_faithful(HEALTHY), reads_faithful(to));
    let step_minutes = STEP_SECS as f64 / 60.0;
    for k in 0.. {
        let minutes = ((k + 1) as f64 - onset) * step_minutes;
        if minutes > CAP_MINUTES {
            return None;
        }
        let split = if k == 0 { split } else { 0 };
        prefix.push(&traffic.step(&mut d, split, q_healthy, q_dropped));
        let s = prefix.scan(shipped, &mut evidence);
        run = if s.is_some_and(|s| s >= h) {
            run + 1
        } else {
            0
        };
        if run >= HOLD_EVALS {
            return Some(minutes);
        }
    }
    None
}

/// The verdict's distribution at faithful share `p`: (value, probability) for each share `b / c`,
/// equal shares pooled, integrated exactly over the latent score.
fn verdict_pmf(p: f64) -> Vec<(u32, u32, f64)> {
    let q = reads_faithful(p);
    // The mean of s^b (1 - s)^m over s uniform in [lo, hi], from its antiderivative.
    let mean_over = |b: u32, m: u32, lo: f64, hi: f64| -> f64 {
        (0..=m)
            .map(|j| {
                let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
                let e = (b + j + 1) as i32;
                sign * binomial(m, j) * (hi.powi(e) - lo.powi(e)) / f64::from(b + j + 1)
            })
            .sum::<f64>()
            / (hi - lo)
    };
    let mut out: Vec<(u32, u32, f64)> = Vec::new();
    for c in 2..=6u32 {
        for b in 0..=c {
            let m = c - b;
            let at_one = if b == c { 1.0 } else { 0.0 };
            let prob = binomial(c, b)
                * (0.3 * q * mean_over(b, m, 0.6, 1.0) + (1.0 - q) * mean_over(b, m, 0.2, 0.7))
                + 0.7 * q * at_one;
            let g = gcd(b, c);
            let key = (b / g, c / g);
            match out.iter_mut().find(|(n, d, _)| (*n, *d) == key) {
                Some(e) => e.2 += prob / 5.0,
                None => out.push((key.0, key.1, prob / 5.0)),
            }
        }
    }
    out
}

fn binomial(n: u32, k: u32) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * f64::from(n - i) / f64::from(i + 1))
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The Kullback-Leibler divergence of the verdicts at faithful share `p` from the healthy ones,
/// nats per verdict.
fn kl_from_healthy(p: f64) -> f64 {
    let healthy = verdict_pmf(HEALTHY);
    verdict_pmf(p)
        .iter()
        .zip(&healthy)
        .map(|(&(n, d, pd), &(hn, hd, ph))| {
            assert_eq!((n, d), (hn, hd));
            if pd > 0.0 { pd * (pd / ph).ln() } else { 0.0 }
        })
        .sum()
}

fn pmf_mean(p: f64) -> f64 {
    verdict_pmf(p)
        .iter()
        .map(|&(n, d, pr)| f64::from(n) / f64::from(d) * pr)
        .sum()
}

/// Monte Carlo draws for calibrating the offline judge's noise (common random numbers, so the
/// figures move smoothly with `sigma`).
struct Calibration {
    /// Latent scores and noise of faithful and of unfaithful traces.
    faithful: Vec<(f64, f64)>,
    unfaithful: Vec<(f64, f64)>,
    /// Latent score, noise and verdict of healthy traffic.
    healthy: Vec<(f64, f64, f64)>,
}

impl Calibration {
    fn new(seed: u64, n: usize) -> Calibration {
        let mut d = Draws::new(mix(&[seed, 0xca1]));
        let class = |q: f64, d: &mut Draws| -> Vec<(f64, f64)> {
            (0..n)
                .map(|_| (latent(d.uniform(), q), d.normal()))
                .collect()
        };
        let faithful = class(AGREEMENT, &mut d);
        let unfaithful = class(1.0 - AGREEMENT, &mut d);
        let q = reads_faithful(HEALTHY);
        let healthy = (0..n)
            .map(|_| {
                let s = latent(d.uniform(), q);
                (s, d.normal(), d.verdict(s))
            })
            .collect();
        Calibration {
            faithful,
            unfaithful,
            healthy,
        }
    }

    /// The offline score's AUROC against the trace's truth (ties count half).
    fn auroc(&self, offline: Offline) -> f64 {
        let mut negatives: Vec<f64> = self
            .unfaithful
            .iter()
            .map(|&(s, z)| offline.score(s, z))
            .collect();
        negatives.sort_by(f64::total_cmp);
        let wins: f64 = self
            .faithful
            .iter()
            .map(|&(s, z)| {
                let f = offline.score(s, z);
                let below = negatives.partition_point(|&x| x < f);
                let tied = negatives.partition_point(|&x| x <= f) - below;
                below as f64 + 0.5 * tied as f64
            })
            .sum();
        wins / (self.faithful.len() as f64 * negatives.len() as f64)
    }

    /// The correlation of the offline score with the LLM verdict on healthy traffic.
    fn correlation(&self, offline: Offline) -> f64 {
        let n = self.healthy.len() as f64;
        let (mut sf, mut sy, mut sff, mut syy, mut sfy) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for &(s, z, y) in &self.healthy {
            let f = offline.score(s, z);
            sf += f;
            sy += y;
            sff += f * f;
            syy += y * y;
            sfy += f * y;
        }
        let cov = sfy / n - sf / n * sy / n;
        cov / ((sff / n - (sf / n).powi(2)) * (syy / n - (sy / n).powi(2))).sqrt()
    }

    /// The noise at which `figure` (falling as the noise grows) reaches `target`.
    fn sigma_for(&self, target: f64, figure: impl Fn(&Self, Offline) -> f64) -> Option<f64> {
        let (mut lo, mut hi) = (0.0, 2.0);
        if figure(self, Offline::with_sigma(lo)) < target {
            return None;
        }
        for _ in 0..40 {
            let mid = (lo + hi) / 2.0;
            if figure(self, Offline::with_sigma(mid)) >= target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some((lo + hi) / 2.0)
    }
}

/// Minutes, or "> 6 h" past the cap.
fn minutes(m: f64) -> String {
    if m.is_finite() {
        format!("{m:.1}")
    } else {
        format!("> {} h", CAP_MINUTES / 60.0)
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn share(delays: &[f64], within: f64) -> String {
    let n = delays.iter().filter(|&&d| d <= within).count();
    format!("{:.0} %", 100.0 * n as f64 / delays.len() as f64)
}

/// The share of drops not paged within the cap.
fn never(delays: &[f64]) -> String {
    let n = delays.iter().filter(|d| !d.is_finite()).count();
    format!("{:.0} %", 100.0 * n as f64 / delays.len() as f64)
}

fn main() {
    let mut args = Args::parse();
    if !args.bench {
        args.years = 0.01;
        args.drops = 4;
    }
    let started = Instant::now();
    let mut shipped = Shipped::load();
    if let Some(max_drop) = args.max_drop {
        shipped.max_drop = max_drop;
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);

    let calibration = Calibration::new(args.seed, 200_000);
    let mapped_sigma = calibration
        .sigma_for(OFFLINE_AUROC, Calibration::auroc)
        .expect("the model reaches the measured AUROC");
    let mapped = Offline::with_sigma(mapped_sigma);
    let mapped_corr = calibration.correlation(mapped);
    let mut rules = vec![
        Rule {
            name: "combined",
            offline: mapped,
        },
        Rule {
            name: "LLM only",
            offline: Offline::Absent,
        },
    ];
    let mut sharper = None;
    if args.offline_correlation > 0.0 {
        let sigma = calibration
            .sigma_for(args.offline_correlation, Calibration::correlation)
            .unwrap_or_else(|| {
                panic!(
                    "the model's offline judge correlates at most {:.3} with the LLM verdict",
                    calibration.correlation(Offline::with_sigma(0.0))
                )
            });
        sharper = Some((sigma, calibration.auroc(Offline::with_sigma(sigma))));
        rules.push(Rule {
            name: "combined, sharper offline",
            offline: Offline::with_sigma(sigma),
        });
    }

    // Largest tasks first, so the threads finish together.
    let mut tasks: Vec<Task> = (0..rules.len())
        .flat_map(|rule| BUDGETS.iter().map(move |&v| Task { rule, v }))
        .collect();
    tasks.sort_by_key(|t| {
        let offline = rules[t.rule].offline != Offline::Absent;
        std::cmp::Reverse(t.v * if offline { 4 } else { 1 } + 40)
    });
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(Task, Measured)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&task) = tasks.get(i) else { break };
                    let t0 = Instant::now();
                    let measured = run_task(task, rules[task.rule], &shipped, &args);
                    eprintln!(
                        "{} at {} verdicts/5m: {:.0} s",
                        rules[task.rule].name,
                        task.v,
                        t0.elapsed().as_secs_f64()
                    );
                    results
                        .lock()
                        .expect("no worker panicked")
                        .push((task, measured));
                }
            });
        }
    });
    let mut results = results.into_inner().expect("no worker panicked");
    results.sort_by_key(|(t, _)| (t.rule, t.v));

    let kl: Vec<f64> = DROPS.iter().map(|&p| kl_from_healthy(p)).collect();
    let short_minutes = shipped.short_steps as f64 * STEP_SECS as f64 / 60.0;
    println!(
        "page_power: seed {}, {:.1} healthy years and {} drops per rule, budget and drop; h = {}; \
         {} threads, {:.0} s",
        args.seed,
        results.first().map_or(0.0, |(_, m)| m.years),
        args.drops,
        args.page_llr,
        threads,
        started.elapsed().as_secs_f64()
    );
    println!(
        "rule (config/llm.toml, flags aside): sampling rate {}, max_drop {}, min_samples {}, \
         windows {:?} min, \
         for: 1m at 30 s evaluations",
        shipped.pi,
        shipped.max_drop,
        shipped.min_samples,
        shipped
            .windows
            .iter()
            .map(|w| *w as f64 * STEP_SECS as f64 / 60.0)
            .collect::<Vec<_>>()
    );
    println!(
        "verdict means: healthy {:.4}; {}",
        pmf_mean(HEALTHY),
        DROPS
            .iter()
            .zip(&kl)
            .map(|(&p, k)| format!(
                "90->{:.0} %: {:.4} (KL {:.5} nats)",
                p * 100.0,
                pmf_mean(p),
                k
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Offline::Score { a, b, sigma } = mapped {
        println!(
            "offline judge (combined): f = clip({a:.4} + {b:.4} s + {sigma:.4} N(0,1)): \
             AUROC {:.3} \
             against the truth, correlation {:.3} with the LLM verdict",
            calibration.auroc(mapped),
            mapped_corr
        );
    }
    if let Some((sigma, auroc)) = sharper {
        println!(
            "offline judge (sharper): noise {sigma:.4}: AUROC {auroc:.3}, correlation {:.3}",
            args.offline_correlation
        );
    }
    println!();
    println!(
        "| rule | verdicts/5m | drop | median | p95 | mean | floor | mean/floor | <=15m | <=30m | \
         > 6 h | false pages/yr at h={} | h for <=1/yr |",
        args.page_llr
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (task, m) in &results {
        let rule = rules[task.rule];
        let name = match rule.offline {
            Offline::Absent => rule.name.to_owned(),
            Offline::Score { .. } if rule.offline == mapped => {
                format!("{} (r = {mapped_corr:.2})", rule.name)
            }
            Offline::Score { .. } => format!("{} (r = {:.2})", rule.name, args.offline_correlation),
        };
        // The smallest grid threshold at and above which every threshold keeps to one a year.
        let allowed = m.years;
        let h_ok = (0..GRID)
            .rev()
            .take_while(|&j| m.grid_pages[j] as f64 <= allowed)
            .last()
            .map_or_else(
                || format!("> {}", 0.5 * GRID as f64),
                |j| format!("{}", 0.5 * (j + 1) as f64),
            );
        for (k, &to) in DROPS.iter().enumerate() {
            let mut delays = m.delays[k].clone();
            delays.sort_by(f64::total_cmp);
            let censored = delays.iter().any(|d| !d.is_finite());
            let mean = delays.iter().map(|d| d.min(CAP_MINUTES)).sum::<f64>() / delays.len() as f64;
            let v = f64::from(task.v);
            let arl0 = v / short_minutes * 60.0 * 24.0 * 365.0;
            let floor = arl0.ln() / kl[k] / v * short_minutes;
            let (pages, h_col) = if k == 0 {
                (
                    format!("{:.2}", m.false_pages as f64 / m.years),
                    h_ok.clone(),
                )
            } else {
                (String::new(), String::new())
            };
            println!(
                "| {name} | {} | 90->{:.0} % | {} | {} | {}{:.1} | {:.1} | {}{:.2} | {} | {} | {} | {} | {} |",
                task.v,
                to * 100.0,
                minutes(quantile(&delays, 0.5)),
                minutes(quantile(&delays, 0.95)),
                if censored { ">= " } else { "" },
                mean,
                floor,
                if censored { ">= " } else { "" },
                mean / floor,
                share(&delays, 15.0),
                share(&delays, 30.0),
                never(&delays),
                pages,
                h_col,
            );
        }
    }
    eprintln!("done in {:.0} s", started.elapsed().as_secs_f64());
}
