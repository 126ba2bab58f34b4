//! One run of the shipped rules at a timescale through the real chain: labelled RAG answers
//! (`../shared/data`, labels used only to build the stream and drive the judge stand-in) streamed
//! per stratum to a tansu topic, ragwatch on the shipped `config/llm.toml` with its windows at the
//! timescale, the label-following judge stand-in, Debian's Prometheus evaluating `ragwatch rules
//! --scale F` and Debian's Alertmanager with the shipped routes posting to a webhook.
//!
//! The drop scan compares each look-back with the baseline before its longest look-back (96 min
//! and 10 min 40 s at 15x): a reference no test can wait for. So the run starts with a healthy
//! history: ragwatch judges `history` worth of healthy traffic at the live rate as fast as it can,
//! and what it counted is backfilled into Prometheus's TSDB as that much steady history ending
//! where Prometheus starts ([`backfill_history`]). Then live traffic: healthy for `healthy`, then
//! the change (each drop stratum to 50 % faithful, each verbose stratum a sentence longer), watched
//! for `watch`. Used by `tests/it/paging.rs` and `benches/page_compressed.rs`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde_json::Value;

use crate::common::alertmanager;
use crate::common::judge::JudgeServer;
use crate::common::prometheus::{
    Killed, Timescale, backfill_history, by_stratum, daemon, load_rules_after_first_scrape, query,
    start_prometheus, unix_secs,
};
use crate::common::ragtruth::Data;
use crate::common::{Broker, Ragwatch, repo, send, stream_traces, unique, wait_for};

/// What a stratum does at the change.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum After {
    /// Drops from 90 % to 50 % faithful answers.
    Drop,
    /// Stays as it is.
    Same,
    /// Every answer a sentence longer, copied from a retrieved context: longer, not less grounded.
    Verbose,
}

/// The pages: the alerts that page on a faithfulness drop.
pub const PAGES: [&str; 2] = [
    "RagwatchFaithfulnessDrift",
    "RagwatchFaithfulnessBelowFloor",
];

/// A run: the strata and what each does at the change, the traffic, the timescale, the phases.
pub struct Plan {
    pub scale: Timescale,
    pub strata: Vec<(String, After)>,
    /// Seeds the traffic and the judge stand-in's noise.
    pub seed: u64,
    /// Traces per second per stratum.
    pub rate_per_sec: u64,
    /// The share of traces sampled for the LLM judge (uncertain ones at three times it).
    pub sample_rate: f64,
    /// The healthy history backfilled before Prometheus starts (at the live rate).
    pub history: Duration,
    /// Live healthy traffic from the rules' load to the change.
    pub healthy: Duration,
    /// How long the change is watched.
    pub watch: Duration,
}

/// What a run saw, in seconds from the change (negative before it).
#[derive(Default, Debug)]
pub struct Outcome {
    /// Every (alert, stratum) seen firing in Prometheus, first time.
    pub firing: BTreeMap<(String, String), f64>,
    /// Every (alert, stratum) Alertmanager posted as firing, first time.
    pub delivered: BTreeMap<(String, String), f64>,
    /// LLM verdicts per stratum in the last short window at the change.
    pub verdicts_at_change: BTreeMap<String, f64>,
    /// LLM verdicts per stratum in the backfilled history.
    pub history_verdicts: f64,
    /// The drop scan's evidence per stratum at the end.
    pub evidence_at_end: BTreeMap<String, f64>,
}

impl Outcome {
    /// A stratum's page: the first of [`PAGES`] at or after the change, in `seen`.
    pub fn page(seen: &BTreeMap<(String, String), f64>, stratum: &str) -> Option<f64> {
        PAGES
            .iter()
            .filter_map(|a| seen.get(&(a.to_string(), stratum.to_owned())))
            .copied()
            .filter(|t| *t >= 0.0)
            .reduce(f64::min)
    }
}

/// An answer one sentence longer: a retrieved context's text appended.
pub fn verbose(trace: &Value) -> String {
    let contexts = trace["contexts"].as_array().unwrap();
    let extra = contexts[contexts.len().min(2) - 1]["text"]
        .as_str()
        .unwrap();
    format!("{} {extra}", trace["answer"].as_str().unwrap())
}

/// The judge stand-in's labels: every answer's, and every verbose answer's (the same label).
pub fn labels(data: &Data) -> Vec<(String, bool)> {
    let mut labels = data.labels();
    for (pool, label) in [(&data.faithful, true), (&data.unfaithful, false)] {
        labels.extend(pool.iter().map(|t| (verbose(t), label)));
    }
    labels
}

/// The next trace of every stratum: faithful with probability 0.9, or 0.5 for a drop stratum
/// after the change; a verbose stratum's answer a sentence longer after it.
struct Traces {
    data: Arc<Data>,
    strata: Vec<(String, After)>,
    rngs: Vec<StdRng>,
    n: u64,
    prefix: &'static str,
}

impl Traces {
    fn new(data: Arc<Data>, strata: &[(String, After)], seed: u64, prefix: &'static str) -> Traces {
        Traces {
            data,
            strata: strata.to_vec(),
            rngs: (0..strata.len())
                .map(|i| StdRng::seed_from_u64(seed * 1_000 + i as u64))
                .collect(),
            n: 0,
            prefix,
        }
    }

    fn next(&mut self, changed: bool) -> Vec<Value> {
        let mut out = Vec::with_capacity(self.strata.len());
        for ((stratum, after), rng) in self.strata.iter().zip(self.rngs.iter_mut()) {
            let share = if changed && *after == After::Drop {
                0.5
            } else {
                0.9
            };
            let pool = if rng.random::<f64>() < share {
                &self.data.faithful
            } else {
                &self.data.unfaithful
            };
            let mut trace = pool[rng.random_range(0..pool.len())].clone();
            if changed && *after == After::Verbose {
                trace["answer"] = Value::from(verbose(&trace));
            }
            self.n += 1;
            trace["trace_id"] = Value::from(format!("{}{stratum}-{}", self.prefix, self.n));
            trace["stratum"] = Value::from(stratum.as_str());
            out.push(trace);
        }
        out
    }
}

/// ragwatch's environment: the shipped LLM config with every stratum declared, the windows at the
/// timescale, the judge at `base_url`, the sample at the plan's rate and the budget and the judge
/// queue out of the history's way.
fn env(plan: &Plan, brokers: &str, topic: &str, base_url: String) -> Vec<(&'static str, String)> {
    let declared: Vec<&str> = plan.strata.iter().map(|(s, _)| s.as_str()).collect();
    let mut env = Ragwatch::kafka_env(brokers, topic, &unique("g"));
    env.extend(plan.scale.ragwatch_env());
    env.extend([
        ("RAGWATCH__STRATA__DECLARED", declared.join(",")),
        ("RAGWATCH__SAMPLE__RATES", "{}".to_owned()),
        ("RAGWATCH__LLM__BASE_URL", base_url),
        (
            "RAGWATCH__SAMPLE__DEFAULT_RATE",
            plan.sample_rate.to_string(),
        ),
        ("RAGWATCH__JUDGE__WORKERS", "32".to_owned()),
        ("RAGWATCH__JUDGE__QUEUE_CAPACITY", "100000".to_owned()),
        (
            "RAGWATCH__BUDGET__REQUESTS_PER_MINUTE",
            "100000000".to_owned(),
        ),
        (
            "RAGWATCH__BUDGET__TOKENS_PER_MINUTE",
            "100000000000".to_owned(),
        ),
        (
            "RAGWATCH__BUDGET__TOKENS_PER_DAY",
            "100000000000000".to_owned(),
        ),
        ("RAGWATCH_LLM_API_KEY", "sk-test".to_owned()),
    ]);
    env
}

/// Sends `traces` to the topic as fast as the broker takes them, batched.
fn send_all(brokers: &str, topic: &str, traces: &[Value]) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("message.max.bytes", "10000000")
        .create()
        .unwrap();
    for trace in traces {
        let id = trace["trace_id"].as_str().unwrap_or_default().to_owned();
        let payload = serde_json::to_vec(trace).unwrap();
        send(&producer, BaseRecord::to(topic).key(&id).payload(&payload));
    }
    producer.flush(Duration::from_secs(60)).unwrap();
}

/// The history: `history` worth of healthy traces of every stratum at `rate_per_sec`, sent in
/// rounds ragwatch keeps up with, until it has received and judged them all. Returns the LLM
/// verdicts.
#[allow(clippy::too_many_arguments)]
pub fn judge_history(
    strata: &[(String, After)],
    seed: u64,
    rate_per_sec: u64,
    history: Duration,
    data: &Arc<Data>,
    rw: &Ragwatch,
    brokers: &str,
    topic: &str,
) -> f64 {
    let ticks = rate_per_sec * history.as_secs();
    let mut traces = Traces::new(Arc::clone(data), strata, seed, "h-");
    let total = ticks * strata.len() as u64;
    let started = Instant::now();
    let round = 4_000 / strata.len() as u64 + 1;
    let mut sent = 0u64;
    while sent < total {
        let batch: Vec<Value> = (0..round.min((total - sent) / strata.len() as u64))
            .flat_map(|_| traces.next(false))
            .collect();
        sent += batch.len() as u64;
        send_all(brokers, topic, &batch);
        // Keep the judge's queue short: the next round once it is mostly through this one.
        wait_for(
            "ragwatch to keep up with the history",
            Duration::from_secs(300),
            || {
                let m = rw.metrics()?;
                let received = m.sum("ragwatch_traces_received_total", &[]);
                let queued = m.sum("ragwatch_judge_queue_depth", &[]);
                (received >= sent as f64 && queued < 2_000.0).then_some(())
            },
        );
    }
    let m = rw.settled_metrics(
        &[
            "ragwatch_traces_judged_total",
            "ragwatch_traces_received_total",
        ],
        Duration::from_secs(120),
    );
    let verdicts = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]);
    eprintln!(
        "history: {sent} traces ({:.0} s of traffic per stratum) judged in {:.0} s, {verdicts:.0} LLM verdicts",
        history.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    verdicts
}

/// Debian's Alertmanager with the shipped routes, posting to a webhook of the run.
fn start_alertmanager(dir: &Path) -> (u16, Killed, Arc<std::sync::Mutex<Vec<alertmanager::Post>>>) {
    let (hook_port, seen) = alertmanager::webhook();
    std::fs::write(
        dir.join("am.yml"),
        alertmanager::alertmanager_config(hook_port),
    )
    .unwrap();
    let (am_port, am) = daemon(
        "prometheus-alertmanager",
        |port| {
            vec![
                format!("--config.file={}", dir.join("am.yml").display()),
                format!("--storage.path={}", dir.join("am").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
                "--cluster.listen-address=".into(),
            ]
        },
        &dir.join("am.log"),
    );
    (am_port, am, seen)
}

/// Runs `plan` on the labelled `data`.
/// Traces per second per stratum in the paging test and the compressed-page benchmark.
pub const RATE_PER_SEC: u64 = 5;
/// About 60 LLM verdicts per stratum per compressed short window (20 s, 100 traces at 5/s): the
/// shipped `sample.min_per_window` (20) guaranteed, then 80 traces at this rate, the offline
/// judge's uncertain ones at three times it (measured: 59 per window over a compressed day,
/// `benches/page_compressed.rs`'s "history" line).
pub const SAMPLE_RATE: f64 = 0.47;
/// The budget the sizing table is read at: LLM verdicts per stratum per short window.
pub const VERDICTS_PER_SHORT: u32 = 60;

pub fn run(plan: &Plan, data: &Arc<Data>) -> Outcome {
    let judge = JudgeServer::following_labels(labels(data), plan.seed);
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let topic = unique("paging");
    broker.create_topic(&topic, 3);
    let rw = Ragwatch::start(
        &repo().join("config/llm.toml"),
        &env(plan, &broker.brokers(), &topic, judge.base_url()),
    );
    let mut out = Outcome {
        history_verdicts: judge_history(
            &plan.strata,
            plan.seed,
            plan.rate_per_sec,
            plan.history,
            data,
            &rw,
            &broker.brokers(),
            &topic,
        ),
        ..Outcome::default()
    };
    let rules = plan.scale.rules();
    let target = rw.addr.to_string();
    let series = backfill_history(
        dir.path(),
        &rules,
        &rw.scrape().expect("ragwatch answers /metrics"),
        &target,
        unix_secs() - 1.0,
        plan.history,
        plan.scale.evaluation(),
    );
    eprintln!(
        "backfilled {series} series over {:.0} s",
        plan.history.as_secs_f64()
    );
    let changed = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut live = Traces::new(Arc::clone(data), &plan.strata, plan.seed + 7_919, "");
    let flag = Arc::clone(&changed);
    let producer = stream_traces(
        broker.brokers(),
        topic.clone(),
        plan.rate_per_sec,
        Arc::clone(&stop),
        move || live.next(flag.load(Ordering::Relaxed)),
    );
    let (am, _am, seen) = start_alertmanager(dir.path());
    std::fs::write(dir.path().join("rules.yaml"), "groups: []\n").unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        plan.scale.prometheus_yml(&target, Some(am)),
    )
    .unwrap();
    let (prom, prom_child) = start_prometheus(dir.path(), &["--rules.alert.resend-delay=1s"]);
    load_rules_after_first_scrape(
        dir.path(),
        prom,
        &prom_child,
        &rules,
        "RagwatchFaithfulnessDrift",
    );
    let change_at = Instant::now() + plan.healthy;
    let end = change_at + plan.watch;
    let mut last_log = Instant::now();
    while Instant::now() < end {
        let now = Instant::now();
        if !changed.load(Ordering::Relaxed) && now >= change_at {
            out.verdicts_at_change = by_stratum(prom, "ragwatch:faithfulness:combined_samples_5m");
            changed.store(true, Ordering::Relaxed);
            eprintln!(
                "the change; LLM verdicts per stratum in the last short window: {:?}",
                out.verdicts_at_change
            );
        }
        let t = if now >= change_at {
            (now - change_at).as_secs_f64()
        } else {
            -(change_at - now).as_secs_f64()
        };
        for r in query(prom, "ALERTS{alertstate=\"firing\"}").unwrap_or_default() {
            let l = &r["metric"];
            let key = (
                l["alertname"].as_str().unwrap_or("?").to_owned(),
                l["stratum"].as_str().unwrap_or("").to_owned(),
            );
            out.firing.entry(key).or_insert(t);
        }
        for a in alertmanager::delivered(&seen) {
            if a.status != "firing" {
                continue;
            }
            let at = if a.at >= change_at {
                (a.at - change_at).as_secs_f64()
            } else {
                -(change_at - a.at).as_secs_f64()
            };
            let key = (
                a.labels["alertname"].as_str().unwrap_or("?").to_owned(),
                a.labels["stratum"].as_str().unwrap_or("").to_owned(),
            );
            out.delivered.entry(key).or_insert(at);
        }
        if last_log.elapsed() >= Duration::from_secs(10) {
            last_log = Instant::now();
            eprintln!(
                "{t:+6.0} s: drop evidence {:?}",
                by_stratum(prom, "round(ragwatch:faithfulness:combined_drop_llr, 0.1)")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    out.evidence_at_end = by_stratum(prom, "round(ragwatch:faithfulness:combined_drop_llr, 0.1)");
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    out
}
