//! How reliably a real drop pages, and how reliably a healthy stratum does not, through the real
//! chain at the shipped budget per stratum, running the shipped rules at 15x (`ragwatch rules
//! --scale 15`: 5 minutes are 20 s, a day 96 minutes; Prometheus scrapes every second and
//! evaluates every 2 s, the shipped 30 s divided). Eight strata of human-labelled RAG answers
//! (`../shared/data`) stream to a tansu topic at 5 traces/s each, 90 % faithful, the sample rate
//! set so that a stratum gets about 60 LLM verdicts per (compressed) short window, as the shipped
//! budget gives one at 5 minutes; the LLM judge is the label-following stand-in. The drop scan's
//! reference is the baseline before its longest look-back (10 min 40 s here), so the run starts
//! with a backfilled healthy history (`paging/run.rs`): 15 compressed minutes of healthy traffic,
//! judged by ragwatch, written into Prometheus's TSDB before it starts. Then, a minute into live
//! traffic, four strata drop to 50 %, two stay as they are and two turn verbose (every answer a
//! sentence longer, copied from a retrieved context: longer, not less grounded).
//!
//! Checked: each drop pages (RagwatchFaithfulnessDrift or BelowFloor delivered by Alertmanager)
//! within the deadline the simulation gives (the sizing table's first delay within which every
//! simulated drop at this budget paged, divided by the scale, plus the chain's own latency: a
//! scrape, two evaluations, Alertmanager's wait); no stratum pages before its change; the healthy
//! strata, verbose or not, raise no alert of any kind. Printed: each drop's delay and each
//! stratum's drop evidence. `benches/page_compressed.rs` runs the same chain seed after seed
//! against the simulation's p95.

pub mod run;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::prometheus::{SCALE, chain_latency, simulated_delay};
use crate::common::ragtruth::Data;
use run::{After, Outcome, PAGES, Plan, RATE_PER_SEC, SAMPLE_RATE, VERDICTS_PER_SHORT};

fn strata() -> Vec<(String, After)> {
    let mut out = Vec::new();
    for i in 0..4 {
        out.push((format!("drop_{i}"), After::Drop));
    }
    for i in 0..2 {
        out.push((format!("steady_{i}"), After::Same));
        out.push((format!("verbose_{i}"), After::Verbose));
    }
    out
}

/// What is wrong with what fired: a drop paged before it came, a healthy stratum alerted, a drop
/// paged late or never; and the delays to each page.
fn problems(out: &Outcome, deadline: Duration) -> (Vec<String>, Vec<f64>) {
    let mut problems = Vec::new();
    let kinds: HashMap<String, After> = strata().into_iter().collect();
    for ((alert, stratum), t) in out.firing.iter().chain(&out.delivered) {
        match kinds.get(stratum) {
            Some(After::Drop) if PAGES.contains(&alert.as_str()) && *t < 0.0 => {
                problems.push(format!("{stratum} paged ({alert}) before its drop"))
            }
            Some(After::Same | After::Verbose) => {
                problems.push(format!("healthy {stratum} raised {alert} at {t:+.0} s"))
            }
            _ => {}
        }
    }
    let mut delays = Vec::new();
    for (stratum, after) in strata() {
        if after != After::Drop {
            continue;
        }
        match Outcome::page(&out.delivered, &stratum) {
            Some(t) if t <= deadline.as_secs_f64() => delays.push(t),
            Some(t) => problems.push(format!("{stratum} paged {t:.0} s after its drop")),
            None => problems.push(format!("{stratum} never paged")),
        }
    }
    delays.sort_by(f64::total_cmp);
    (problems, delays)
}

#[test]
fn four_drops_page_within_the_simulated_delay_and_four_healthy_strata_verbose_or_not_raise_nothing()
{
    let data = Arc::new(Data::load().expect("the labelled data reads"));
    let (minutes, within) = simulated_delay(VERDICTS_PER_SHORT, "all");
    let deadline = SCALE.of(Duration::from_secs_f64(minutes * 60.0)) + chain_latency(SCALE);
    eprintln!(
        "deadline: {within} of the simulated drops paged within {minutes} min, {:.0} s at {}x with the chain's latency",
        deadline.as_secs_f64(),
        SCALE.0
    );
    let plan = Plan {
        scale: SCALE,
        strata: strata(),
        seed: 7,
        rate_per_sec: RATE_PER_SEC,
        sample_rate: SAMPLE_RATE,
        history: Duration::from_secs(900),
        healthy: Duration::from_secs(60),
        watch: deadline + SCALE.of(Duration::from_secs(600)),
    };
    let out = run::run(&plan, &data);
    let (problems, delays) = problems(&out, deadline);
    eprintln!("firing: {:?}", out.firing);
    eprintln!("delivered: {:?}", out.delivered);
    eprintln!("drop evidence at the end: {:?}", out.evidence_at_end);
    eprintln!(
        "LLM verdicts in the backfilled history: {}",
        out.history_verdicts
    );
    eprintln!("delays to the page (s): {delays:?}");
    assert!(problems.is_empty(), "{problems:#?}");
}
