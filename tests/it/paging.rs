//! How reliably a real drop pages, and how reliably a healthy stratum does not, through the real
//! chain at the shipped budget per stratum. Twenty strata of human-labelled RAG answers
//! (`../shared/data`, labels used only to build the stream and drive the judge stand-in) stream
//! to a tansu topic at 5 traces/s each, each stratum its own seeded run, all 90 % faithful; then
//! at once ten of them drop to 50 %, five stay as they are, and five turn verbose (every answer a
//! sentence longer, copied from a retrieved context: longer, not less grounded). ragwatch runs the
//! shipped `config/llm.toml` with the windows shortened as the rules are (a 20 s short window, a
//! 300 s baseline) and the sample rate set so that a stratum gets about 60 LLM verdicts per short
//! window, as the shipped budget gives one at 5 minutes; the LLM judge is the stand-in of
//! `tests/it/common/judge/labels.rs`. Debian's Prometheus scrapes and evaluates the shipped rules,
//! shortened: it scrapes every second and evaluates every 2 s (30 s shortened as the windows are),
//! and each alert waits its shipped `for:` shortened by the same factor.
//!
//! Checked: each of the ten drops pages (RagwatchFaithfulnessDrift or BelowFloor firing) within
//! 120 s of the change; no stratum pages before it; the ten healthy strata, verbose or not, raise
//! no alert of any kind. Printed: each drop's delay and each stratum's drop evidence.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::judge::JudgeServer;
use crate::common::prometheus::{
    Killed, WINDOWS, by_stratum, load_rules_after_first_scrape, query, start_prometheus,
    test_windows,
};
use crate::common::ragtruth::Data;
use crate::common::*;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;

const RATE_PER_SEC: u64 = 5;
/// About 60 verdicts per stratum per 20 s window at 5 traces/s (with the offline judge's
/// uncertain traces sampled at three times the rate).
const SAMPLE_RATE: f64 = 0.36;
/// Healthy traffic from Prometheus's start to the change: ten short windows of verdicts. The
/// shortened baseline (300 s, where 24 h holds 288 short windows) soon holds the drop itself, which
/// a day would not; a longer healthy start keeps that share near what it is in production.
const HEALTHY: Duration = Duration::from_secs(200);
const PAGE_DEADLINE: Duration = Duration::from_secs(120);
const PAGES: [&str; 2] = [
    "RagwatchFaithfulnessDrift",
    "RagwatchFaithfulnessBelowFloor",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum After {
    Drop,
    Same,
    Verbose,
}

fn strata() -> Vec<(String, After)> {
    let mut out = Vec::new();
    for i in 0..10 {
        out.push((format!("drop_{i}"), After::Drop));
    }
    for i in 0..5 {
        out.push((format!("steady_{i}"), After::Same));
        out.push((format!("verbose_{i}"), After::Verbose));
    }
    out
}

/// An answer one sentence longer: a retrieved context's text appended.
fn verbose(trace: &Value) -> String {
    let contexts = trace["contexts"].as_array().unwrap();
    let extra = contexts[contexts.len().min(2) - 1]["text"]
        .as_str()
        .unwrap();
    format!("{} {extra}", trace["answer"].as_str().unwrap())
}

/// The shipped rules with the tests' windows, each alert waiting its shipped `for:` shortened as
/// the short window is (5 minutes to 20 s): a page holds its condition 4 s or 20 s, a warning 40 s.
fn rules() -> String {
    let windows = ragwatch::rules::Windows {
        pending: None,
        ..test_windows()
    };
    let scale = WINDOWS[0] as f64 / 300.0;
    ragwatch::rules::rules_yaml(&windows, &ragwatch::rules::Pooling::shipped())
        .lines()
        .map(|line| {
            let Some(d) = line.trim().strip_prefix("for: ") else {
                return line.to_owned();
            };
            let secs = match d {
                "1m" => 60.0,
                "5m" => 300.0,
                "10m" => 600.0,
                "15m" => 900.0,
                other => panic!("a pending duration the rules ship: {other}"),
            };
            let indent = &line[..line.len() - line.trim_start().len()];
            format!("{indent}for: {}s", (secs * scale).round())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Streams every stratum at `RATE_PER_SEC`, each from its own seed, until `stop`; once `changed`
/// is set, the drop strata are 50 % faithful and the verbose ones answer a sentence longer.
fn stream(
    data: Arc<Data>,
    brokers: String,
    topic: String,
    changed: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let strata = strata();
    let mut rngs: Vec<StdRng> = (0..strata.len())
        .map(|i| StdRng::seed_from_u64(100 + i as u64))
        .collect();
    let mut n = 0u64;
    stream_traces(brokers, topic, RATE_PER_SEC, stop, move || {
        let now_changed = changed.load(Ordering::Relaxed);
        let mut traces = Vec::with_capacity(strata.len());
        for ((stratum, after), rng) in strata.iter().zip(rngs.iter_mut()) {
            let share = if now_changed && *after == After::Drop {
                0.5
            } else {
                0.9
            };
            let pool = if rng.random::<f64>() < share {
                &data.faithful
            } else {
                &data.unfaithful
            };
            let mut trace = pool[rng.random_range(0..pool.len())].clone();
            if now_changed && *after == After::Verbose {
                trace["answer"] = Value::from(verbose(&trace));
            }
            n += 1;
            trace["trace_id"] = Value::from(format!("{stratum}-{n}"));
            trace["stratum"] = Value::from(stratum.as_str());
            traces.push(trace);
        }
        traces
    })
}

/// (alertname, stratum) of every alert firing now.
fn firing(prom: u16) -> Vec<(String, String)> {
    query(prom, "ALERTS{alertstate=\"firing\"}")
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            let l = &r["metric"];
            (
                l["alertname"].as_str().unwrap_or("?").to_owned(),
                l["stratum"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// ragwatch's environment: the shipped LLM config with every stratum declared, the windows
/// shortened, the judge at `base_url`, the sample at `SAMPLE_RATE` and the budget out of its way.
fn paging_env(
    brokers: &str,
    topic: &str,
    declared: &[String],
    base_url: String,
) -> Vec<(&'static str, String)> {
    let mut env = Ragwatch::kafka_env(brokers, topic, &unique("g"));
    env.extend([
        ("RAGWATCH__STRATA__DECLARED", declared.join(",")),
        ("RAGWATCH__SAMPLE__RATES", "{}".to_owned()),
        (
            "RAGWATCH__WINDOWS__WINDOW_SECS",
            format!("[{}, {}, {}]", WINDOWS[0], WINDOWS[1], WINDOWS[2]),
        ),
        ("RAGWATCH__WINDOWS__SHORT_SECS", WINDOWS[0].to_string()),
        ("RAGWATCH__WINDOWS__BASELINE_SECS", WINDOWS[2].to_string()),
        ("RAGWATCH__LLM__BASE_URL", base_url),
        ("RAGWATCH__SAMPLE__DEFAULT_RATE", SAMPLE_RATE.to_string()),
        ("RAGWATCH__JUDGE__WORKERS", "16".to_owned()),
        ("RAGWATCH__JUDGE__QUEUE_CAPACITY", "4096".to_owned()),
        ("RAGWATCH__BUDGET__REQUESTS_PER_MINUTE", "60000".to_owned()),
        (
            "RAGWATCH__BUDGET__TOKENS_PER_MINUTE",
            "100000000".to_owned(),
        ),
        ("RAGWATCH__BUDGET__TOKENS_PER_DAY", "10000000000".to_owned()),
        ("RAGWATCH_LLM_API_KEY", "sk-test".to_owned()),
    ]);
    env
}

/// Prometheus scraping `rw` every second, its rules loaded once it scrapes ragwatch; when it
/// started.
fn start_prometheus_on(dir: &Path, rw: &Ragwatch) -> (u16, Killed, Instant) {
    std::fs::write(dir.join("rules.yaml"), "groups: []\n").unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 2s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{}\"]\n\
             \x20       labels: {{namespace: rag-test, pod: ragwatch-0}}\n",
            rw.addr
        ),
    )
    .unwrap();
    let started = Instant::now();
    let (prom, prom_child) = start_prometheus(dir, &[]);
    load_rules_after_first_scrape(
        dir,
        prom,
        &prom_child,
        &rules(),
        "RagwatchFaithfulnessDrift",
    );
    (prom, prom_child, started)
}

/// Every alert of every stratum, with the second (from the change) it was first seen firing: the
/// change comes `HEALTHY` after Prometheus's start, the watch ends `PAGE_DEADLINE` and 10 s later.
fn watch(prom: u16, started: Instant, changed: &AtomicBool) -> BTreeMap<(String, String), f64> {
    let mut seen: BTreeMap<(String, String), f64> = BTreeMap::new();
    let change_at = started + HEALTHY;
    let end = change_at + PAGE_DEADLINE + Duration::from_secs(10);
    let mut last_log = Instant::now();
    while Instant::now() < end {
        if !changed.load(Ordering::Relaxed) && Instant::now() >= change_at {
            changed.store(true, Ordering::Relaxed);
            eprintln!(
                "the change, {} s after Prometheus's start; verdicts per stratum in the last short window: {:?}",
                started.elapsed().as_secs(),
                by_stratum(prom, "ragwatch:faithfulness:combined_samples_5m")
            );
        }
        let t = Instant::now().duration_since(change_at).as_secs_f64()
            - change_at
                .saturating_duration_since(Instant::now())
                .as_secs_f64();
        for key in firing(prom) {
            seen.entry(key).or_insert(t);
        }
        if last_log.elapsed() >= Duration::from_secs(20) {
            last_log = Instant::now();
            eprintln!(
                "{t:+6.0} s: drop evidence {:?}",
                by_stratum(prom, "round(ragwatch:faithfulness:combined_drop_llr, 0.1)")
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    seen
}

/// What is wrong with what fired: a drop paged before it came, a healthy stratum alerted, a drop
/// paged late or never; and the delays to each page.
fn problems(seen: &BTreeMap<(String, String), f64>) -> (Vec<String>, Vec<f64>) {
    let mut problems = Vec::new();
    let kinds: HashMap<String, After> = strata().into_iter().collect();
    for ((alert, stratum), t) in seen {
        eprintln!("{alert} {stratum}: first firing {t:+.0} s from the change");
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
        let page = PAGES
            .iter()
            .filter_map(|a| seen.get(&(a.to_string(), stratum.clone())))
            .copied()
            .filter(|t| *t >= 0.0)
            .reduce(f64::min);
        match page {
            Some(t) if t <= PAGE_DEADLINE.as_secs_f64() => delays.push(t),
            Some(t) => problems.push(format!("{stratum} paged {t:.0} s after its drop")),
            None => problems.push(format!("{stratum} never paged")),
        }
    }
    delays.sort_by(f64::total_cmp);
    (problems, delays)
}

#[test]
fn ten_drops_page_within_two_minutes_and_ten_healthy_strata_verbose_or_not_raise_nothing() {
    let data = Data::load().expect("the labelled data reads");
    // The judge stand-in knows every answer's label, and the verbose answers' (the same label).
    let mut labels = data.labels();
    for (pool, label) in [(&data.faithful, true), (&data.unfaithful, false)] {
        labels.extend(pool.iter().map(|t| (verbose(t), label)));
    }
    let judge = JudgeServer::following_labels(labels, 7);
    let data = Arc::new(data);
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let topic = unique("paging");
    broker.create_topic(&topic, 3);

    let declared: Vec<String> = strata().into_iter().map(|(s, _)| s).collect();
    let env = paging_env(&broker.brokers(), &topic, &declared, judge.base_url());
    let rw = Ragwatch::start(&repo().join("config/llm.toml"), &env);
    let changed = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = stream(
        Arc::clone(&data),
        broker.brokers(),
        topic.clone(),
        Arc::clone(&changed),
        Arc::clone(&stop),
    );
    wait_for(
        "ragwatch to receive every stratum and judge a sample",
        Duration::from_secs(60),
        || {
            let m = rw.metrics()?;
            let every = declared
                .iter()
                .all(|s| m.sum("ragwatch_traces_received_total", &[("stratum", s)]) > 0.0);
            (every && m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]) > 0.0)
                .then_some(())
        },
    );
    let (prom, _prom, started) = start_prometheus_on(dir.path(), &rw);
    let seen = watch(prom, started, &changed);
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let (problems, delays) = problems(&seen);
    eprintln!("delays to the page (s): {delays:?}");
    assert!(problems.is_empty(), "{problems:#?}");
}
