//! The compressed page held to the simulation: the shipped rules at 15x (`ragwatch rules --scale
//! 15`: 5 minutes are 20 s, a day 96 minutes, Prometheus evaluating every 2 s) through real
//! ragwatch, real Prometheus and Alertmanager, seed after seed, each page's delay against the p95
//! that `benches/page_power.rs` simulates for the same drop at the same budget (docs/judges.md's
//! sizing table, divided by the scale).
//!
//! ```text
//! cargo bench --features prometheus,broker,data --bench page_compressed -- \
//!     [--seeds 20] [--first-seed 1] [--history-secs 5760] [--healthy-secs 60]
//! ```
//!
//! Each seed is one run of `tests/it/paging/run.rs`: three strata of the development set's
//! human-labelled answers (`../shared/data`, read from there) at 5 traces/s each, sampled so that
//! each gets about 60 LLM verdicts per compressed 5 minutes, judged by the label-following stand-in
//! (10 % misread). First a healthy history of `--history-secs` per stratum (a full compressed day
//! by default, the reference a production baseline holds), judged by ragwatch as fast as it goes
//! and backfilled into Prometheus's TSDB before it starts; then `--healthy-secs` of live healthy
//! traffic; then stratum `drop` falls from 90 % to 50 % faithful answers, `verbose` answers a
//! sentence longer, `steady` stays. Printed per seed: the delay from the change to the page firing
//! in Prometheus and to Alertmanager's notification, and any alert of the healthy strata; then the
//! tally: seeds whose page was delivered within the simulated p95, and seeds where a healthy
//! stratum raised anything.

#![allow(clippy::unwrap_used)]
// These runs time real processes from outside: std's monotonic clock is the right one here.
#![allow(clippy::disallowed_types)]

#[allow(unused_imports)]
#[path = "../tests/it/common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../tests/it/paging/run.rs"]
mod run;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use common::prometheus::{SCALE, chain_latency, simulated_delay};
use common::ragtruth::Data;
use run::{After, Outcome, Plan, RATE_PER_SEC, SAMPLE_RATE, VERDICTS_PER_SHORT};

#[derive(Parser, Debug)]
#[command(about = "The compressed page through the real chain against the simulated p95")]
struct Args {
    /// Seeded runs.
    #[arg(long, default_value_t = 20)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// Healthy history per stratum backfilled before Prometheus starts, in compressed seconds
    /// (5760: the scaled baseline, 24 h at 15x).
    #[arg(long, default_value_t = 5760)]
    history_secs: u64,
    /// Live healthy traffic before the change, in compressed seconds.
    #[arg(long, default_value_t = 60)]
    healthy_secs: u64,
    /// Passed by `cargo bench`. Without it (`cargo test --all-targets` runs this binary to check
    /// that it works) nothing is run past the simulated p95: each seed is minutes of real
    /// processes, and `tests/it/paging.rs` runs the same chain once.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    let data = Arc::new(Data::load().expect("the labelled data reads (../shared/data)"));
    let (p95_minutes, _) = simulated_delay(VERDICTS_PER_SHORT, "p95");
    // The simulation times the rules; the chain adds a scrape, two evaluations, Alertmanager's
    // group wait and Prometheus's resend delay (as tests/it/paging.rs's deadline).
    let rules_p95 = SCALE.of(Duration::from_secs_f64(p95_minutes * 60.0));
    let p95 = rules_p95 + chain_latency(SCALE);
    println!(
        "simulated p95 to the page at {VERDICTS_PER_SHORT} verdicts/5m, 90->50 %: {p95_minutes} min, {:.1} s at {}x, {:.1} s with the chain's latency",
        rules_p95.as_secs_f64(),
        SCALE.0,
        p95.as_secs_f64()
    );
    if !args.bench {
        println!(
            "not a benchmark run (no --bench): no seed run; tests/it/paging.rs runs the same chain"
        );
        return;
    }
    let strata = vec![
        ("drop".to_owned(), After::Drop),
        ("steady".to_owned(), After::Same),
        ("verbose".to_owned(), After::Verbose),
    ];
    let (mut within, mut fired_within, mut noisy) = (0, 0, 0);
    let started = Instant::now();
    for seed in args.first_seed..args.first_seed + args.seeds {
        let plan = Plan {
            scale: SCALE,
            strata: strata.clone(),
            seed,
            rate_per_sec: RATE_PER_SEC,
            sample_rate: SAMPLE_RATE,
            history: Duration::from_secs(args.history_secs),
            healthy: Duration::from_secs(args.healthy_secs),
            // Past the p95 by half again: a late page is still timed.
            watch: p95 + p95 / 2,
        };
        let run_started = Instant::now();
        let out = run::run(&plan, &data);
        let fired = Outcome::page(&out.firing, "drop");
        let delivered = Outcome::page(&out.delivered, "drop");
        let healthy: Vec<String> = out
            .firing
            .iter()
            .chain(&out.delivered)
            .filter(|((_, s), _)| s != "drop")
            .map(|((a, s), t)| format!("{a}/{s} at {t:+.0} s"))
            .collect();
        let early: Vec<String> = out
            .firing
            .iter()
            .filter(|((a, s), t)| s == "drop" && run::PAGES.contains(&a.as_str()) && **t < 0.0)
            .map(|((a, _), t)| format!("{a} at {t:+.0} s"))
            .collect();
        let ok = delivered.is_some_and(|t| t <= p95.as_secs_f64()) && early.is_empty();
        within += usize::from(ok);
        fired_within += usize::from(fired.is_some_and(|t| t <= p95.as_secs_f64()));
        noisy += usize::from(!healthy.is_empty());
        let show = |t: Option<f64>| t.map_or_else(|| "never".to_owned(), |t| format!("{t:.1} s"));
        println!(
            "seed {seed}: firing {} delivered {} (p95 {:.1} s) {}; healthy strata: {}; verdicts in the last short window at the change {:?}; history {:.0} LLM verdicts; run {:.0} s{}",
            show(fired),
            show(delivered),
            p95.as_secs_f64(),
            if ok { "within" } else { "LATE" },
            if healthy.is_empty() {
                "nothing".to_owned()
            } else {
                healthy.join(", ")
            },
            out.verdicts_at_change,
            out.history_verdicts,
            run_started.elapsed().as_secs_f64(),
            if early.is_empty() {
                String::new()
            } else {
                format!("; paged before the drop: {}", early.join(", "))
            }
        );
    }
    println!(
        "tally: {within} of {} seeds delivered the page within the simulated p95 ({fired_within} fired in Prometheus within it); {noisy} seeds with an alert on a healthy stratum; {:.0} s in all",
        args.seeds,
        started.elapsed().as_secs_f64()
    );
}
