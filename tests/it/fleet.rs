//! A fleet against a real Prometheus: are the pooled numbers the exact numbers?
//!
//! Three ragwatch replicas in one consumer group on one topic of six partitions, static members
//! (`POD_NAME` is the group instance id), started at different moments: ragwatch-0 and ragwatch-1
//! from the start, ragwatch-2 joining late (after the first batches), and ragwatch-1 restarted
//! (SIGTERM, exit, started again under the same pod name and port, so its counters start again at
//! zero under the same `instance`) while the windows still hold its earlier traffic. The LLM judge
//! runs on a loopback stand-in (`tests/it/common/label_judge.rs`: verdicts that follow the generated
//! traces' labels with noise) on a sample (30 % per trace, 90 % for traces the offline judge is
//! unsure about, every out-of-scope trace), and each replica writes its verdict records to a file.
//! Debian's Prometheus scrapes each replica as its own target (distinct `pod` and `instance`, one
//! `namespace`) every second and evaluates the shipped `deploy/prometheus/rules.yaml`, its ranges
//! generated with the tests' windows (`prometheus::test_rules`: 5m -> 20 s, 1h -> 40 s, 24h -> 300 s).
//!
//! Traffic comes in batches of generated traces over four strata, one batch at the start of each
//! 10-second slot; a batch is over when every replica's counters are flat, every sampled trace is
//! judged or skipped, and Prometheus has scraped every replica twice since. Windows are then read
//! at moments whose edges fall in the quiet time between batches, so "the window" is exactly the
//! batches whose traffic lies inside it. At four moments (after the late joiner's first and second
//! batches, after the restarted replica's first and second batches) the test queries every pooled
//! recording rule that the alerts and the dashboard read, per stratum, and compares it with the
//! figure computed from what the replicas judged in that window:
//! - offline scores of every trace: the library's own pipeline (`Pipeline::evaluate`, the offline
//!   judge ragwatch runs) on the same messages, checked against the replicas' own counters;
//! - LLM verdicts: the replicas' verdict records (`llm.records_path`);
//! - inclusion probabilities: the library's `Sampler` with the replicas' config (no per-window
//!   minimum, so a trace's probability depends only on its stratum and offline verdict), checked
//!   against the traces that have a verdict record;
//! - the combined estimate and its interval: those scores through `EstimateSums`, the estimator the
//!   replicas run (`src/window/estimate.rs`).
//!
//! Tolerance: relative 1e-6 (plus 1e-9 absolute, for figures whose exact value is 0) for every
//! figure, counts, sums, means, variances and intervals alike: the pooled sums are sums of the
//! same numbers, so only floating-point rounding separates an exact rule from the exact figure.
//! A half-width, z times a square root, is compared squared, on its variance's scale: the square
//! root of a variance whose exact value is 0 turns 1e-17 of rounding into 1e-9.
//! A figure with no value (no scores in the window) must be absent (or NaN) in Prometheus too.
//! Every comparison is printed as a table (rule, labels, expected, got) and one assertion lists
//! every mismatch. The accounting is checked too: per stratum, summed over replicas and restarts,
//! traces produced = received = offline-judged, sampled = LLM-judged + skipped (by reason), and the
//! verdict records hold exactly the LLM-judged traces.

use crate::common::label_judge;
use crate::common::prometheus;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;
use label_judge::LabelJudge;
use prometheus::{WINDOWS, query, query_at, start_prometheus, test_rules, unix_secs};
use ragwatch::config::Config;
use ragwatch::dimensions::Quality;
use ragwatch::pipeline::Pipeline;
use ragwatch::recorder::Shared;
use ragwatch::sample::Sampler;
use ragwatch::window::{Accumulate, EstimateSums};
use serde_json::Value;

const NAMESPACE: &str = "rag-fleet";
/// A lone replica in a consumer group of its own on the same topic, scraped under this namespace:
/// the same rules must give it the same exact figures.
const SOLO: &str = "rag-solo";
const PARTITIONS: i32 = 6;
const STRATA: [&str; 4] = ["head", "tail", "known_failure", "out_of_scope"];
/// Traces per batch: about 230 head and 57 of each other stratum (gen_traces.py weighs head 8:2).
const BATCH: usize = 400;
/// The sample: 30 % of each trace, 90 % (3x, the shipped boost) of those the offline judge is
/// unsure about, every out-of-scope trace (the shipped rate). A 20-second window (two batches) then
/// holds 40 or more judged pairs per stratum, and over 30 randomly sampled ones, so the combined
/// estimate tunes its lambda.
const DEFAULT_RATE: f64 = 0.3;
/// One batch starts at the start of each slot; 20 s and 40 s windows are whole slots, so a moment
/// at the same point of a later slot has its edges at that point of earlier slots.
const SLOT: f64 = 10.0;
/// A window edge must be this far (seconds) from any batch's traffic.
const MARGIN: f64 = 0.5;
/// The tolerance of every comparison: |got - expected| <= REL_TOL * |expected| + ABS_TOL.
const REL_TOL: f64 = 1e-6;
const ABS_TOL: f64 = 1e-9;
const JUDGES: [&str; 2] = ["offline", "llm"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One generated trace as the replicas' own code judges it offline, and its inclusion probability
/// when the sampler takes it.
struct TraceInfo {
    batch: usize,
    stratum: String,
    offline: [Option<f64>; 3],
    sampled: Option<f64>,
}

/// A batch: its traces, when it was produced and when it was over (Unix seconds).
struct Batch {
    label: String,
    ids: Vec<String>,
    start: f64,
    settled: f64,
}

/// One replica (a pod): its incarnations, the final scrapes of those that exited.
struct Replica {
    pod: String,
    port: u16,
    records: PathBuf,
    process: Option<Ragwatch>,
    retired: Vec<Samples>,
}

impl Replica {
    fn start(&mut self, config: &Path, env: &[(&'static str, String)]) {
        let mut env = env.to_vec();
        env.push(("POD_NAME", self.pod.clone()));
        env.push(("RAGWATCH__HTTP__LISTEN", format!("127.0.0.1:{}", self.port)));
        env.push((
            "RAGWATCH__LLM__RECORDS_PATH",
            self.records.display().to_string(),
        ));
        self.process = Some(Ragwatch::start(config, &env));
    }

    /// SIGTERM, wait for the exit, keep the last scrape (taken while settled, just before).
    fn stop(&mut self) {
        let mut rw = self.process.take().unwrap();
        self.retired.push(rw.metrics().unwrap());
        rw.sigterm();
        let status = rw.wait_exit(Duration::from_secs(60));
        assert!(
            status.success(),
            "{} exited with {status}: {}",
            self.pod,
            rw.log_text()
        );
    }
}

/// What the fleet has counted: every incarnation's last scrape (live ones scraped now).
fn fleet_samples(replicas: &[Replica]) -> Vec<Samples> {
    let mut out = Vec::new();
    for r in replicas {
        for s in &r.retired {
            out.push(Samples(s.0.clone()));
        }
        if let Some(p) = &r.process {
            out.push(p.metrics().expect("a live replica answers /metrics"));
        }
    }
    out
}

fn total(samples: &[Samples], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples.iter().map(|s| s.sum(name, labels)).sum()
}

/// Counters that must not move while the fleet is quiet.
fn signature(samples: &[Samples]) -> Vec<f64> {
    let mut v = Vec::new();
    for name in [
        "ragwatch_traces_received_total",
        "ragwatch_traces_sampled_total",
        "ragwatch_traces_judged_total",
        "ragwatch_traces_skipped_total",
        "ragwatch_faithfulness_ratio_sum",
        "ragwatch_answer_relevancy_ratio_sum",
        "ragwatch_score_squares_total",
        "ragwatch_estimate_terms_total",
    ] {
        v.extend(samples.iter().map(|s| s.sum(name, &[])));
    }
    v
}

/// Waits until the fleet has received everything produced so far, every sampled trace is judged or
/// skipped, the counters are flat, and Prometheus has scraped every live replica twice since they
/// went flat. Returns when (Unix seconds).
fn settle(replicas: &[Replica], produced: &BTreeMap<String, f64>, prom: u16) -> f64 {
    let flat_since = wait_for(
        "the fleet to take in the batch and go quiet",
        Duration::from_secs(60),
        || {
            let before = unix_secs();
            let first = fleet_samples(replicas);
            for (s, n) in produced {
                if total(&first, "ragwatch_traces_received_total", &[("stratum", s)]) != *n {
                    return None;
                }
            }
            for r in replicas.iter().filter_map(|r| r.process.as_ref()) {
                let m = r.metrics()?;
                let sampled = m.sum("ragwatch_traces_sampled_total", &[]);
                let done = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")])
                    + m.sum("ragwatch_traces_skipped_total", &[]);
                if sampled != done || m.sum("ragwatch_judge_queue_depth", &[]) != 0.0 {
                    return None;
                }
            }
            // Quiet means unchanged over 300 ms: the pause is the stability check itself.
            std::thread::sleep(Duration::from_millis(300));
            (signature(&first) == signature(&fleet_samples(replicas))).then_some(before)
        },
    );
    let live: Vec<&Replica> = replicas.iter().filter(|r| r.process.is_some()).collect();
    wait_for(
        "Prometheus to scrape every replica twice after the batch",
        Duration::from_secs(30),
        || {
            for r in &live {
                let q = format!("timestamp(up{{job=\"ragwatch\", pod=\"{}\"}})", r.pod);
                let t: f64 = query(prom, &q)?.first()?["value"][1]
                    .as_str()?
                    .parse()
                    .ok()?;
                if t < flat_since + 1.0 {
                    return None;
                }
                // The value Prometheus holds is the one the replica shows.
                let q = format!(
                    "sum(ragwatch_traces_received_total{{job=\"ragwatch\", pod=\"{}\"}})",
                    r.pod
                );
                let got: f64 = query(prom, &q)?.first()?["value"][1]
                    .as_str()?
                    .parse()
                    .ok()?;
                let m = r.process.as_ref()?.metrics()?;
                if got != m.sum("ragwatch_traces_received_total", &[]) {
                    return None;
                }
            }
            Some(())
        },
    );
    unix_secs()
}

/// Waits until every live replica holds partitions and together they hold all of them, twice in a
/// row a second apart.
fn wait_assigned(replicas: &[Replica]) {
    let held = || -> Option<Vec<f64>> {
        replicas
            .iter()
            .filter_map(|r| r.process.as_ref())
            .map(|p| {
                p.metrics()
                    .map(|m| m.sum("ragwatch_kafka_assigned_partitions", &[]))
            })
            .collect()
    };
    let mut last: Option<Vec<f64>> = None;
    wait_for(
        "every live replica to hold partitions",
        Duration::from_secs(90),
        || {
            let h = held()?;
            let ok = h.iter().all(|n| *n > 0.0) && h.iter().sum::<f64>() == PARTITIONS as f64;
            let stable = ok && last.as_ref() == Some(&h);
            last = ok.then_some(h);
            if !stable {
                // Stable means the same over two looks about a second apart.
                std::thread::sleep(Duration::from_millis(900));
            }
            stable.then_some(())
        },
    );
}

/// Waits until the group has committed every partition to its end (before a member joins or
/// leaves: nothing is redelivered).
fn wait_committed(brokers: &str, group: &str, topic: &str) {
    wait_for(
        "the group to commit to the end of the log",
        Duration::from_secs(30),
        || {
            committed_and_high(brokers, group, topic, PARTITIONS)
                .iter()
                .all(|(c, h)| c == h)
                .then_some(())
        },
    );
}

fn sleep_until(t: f64) {
    let now = unix_secs();
    if t > now {
        std::thread::sleep(Duration::from_secs_f64(t - now));
    }
}

/// "20s" -> 20.0 (Prometheus duration units: ms, s, m, h, d).
fn seconds(range: &str) -> f64 {
    let mut total = 0.0;
    let mut number = String::new();
    let mut chars = range.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = if c == 'm' && chars.peek() == Some(&'s') {
            chars.next();
            0.001
        } else {
            match c {
                's' => 1.0,
                'm' => 60.0,
                'h' => 3600.0,
                'd' => 86400.0,
                _ => panic!("unknown unit in {range:?}"),
            }
        };
        total += number.parse::<f64>().unwrap() * unit;
        number.clear();
    }
    total
}

/// The test's length of a shipped window (5m, 1h, 24h) in seconds.
fn window(shipped: &str) -> f64 {
    let i = ["5m", "1h", "24h"]
        .iter()
        .position(|w| *w == shipped)
        .unwrap_or_else(|| panic!("{shipped} is not a scoring window"));
    WINDOWS[i] as f64
}

/// The longest evaluation interval of any rule group in `rules` (1 s, the global one, if none
/// says more): a batch's counts reach a recorded series at most this long after the scrape.
fn longest_interval(rules: &str) -> f64 {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("interval:"))
        .map(|v| seconds(v.trim().trim_matches('"')))
        .fold(1.0, f64::max)
}

/// Which batches lie inside the window ending at a moment `t` (any evaluation in `[t - lag, t]`):
/// `Err` when a batch's traffic (from its start to `lag` after it settled) meets a window edge.
fn inside(batches: &[Batch], t: f64, w: f64, lag: f64) -> Result<BTreeSet<usize>, String> {
    let mut set = BTreeSet::new();
    for (i, b) in batches.iter().enumerate() {
        let (s, e) = (b.start, b.settled + lag);
        if s > t - w + MARGIN && e < t - lag - MARGIN {
            set.insert(i);
        } else if e < t - lag - w - MARGIN || s > t + MARGIN {
        } else {
            return Err(format!(
                "batch {} ({:.1}..{:.1} s) meets an edge of the {w} s window ending at {:.1} s",
                b.label, s, e, t
            ));
        }
    }
    Ok(set)
}

/// Exact figures of a set of batches: every score per (stratum, metric, judge), verdicts per
/// (stratum, judge), the combined estimate's sums per (stratum, metric).
#[derive(Default)]
struct Exact {
    scores: BTreeMap<(String, usize, &'static str), Vec<f64>>,
    judged: BTreeMap<(String, &'static str), f64>,
    sums: BTreeMap<(String, usize), EstimateSums>,
}

impl Exact {
    fn of(
        batches: &BTreeSet<usize>,
        traces: &BTreeMap<String, TraceInfo>,
        verdicts: &HashMap<String, [Option<f64>; 3]>,
    ) -> Exact {
        let mut x = Exact::default();
        for s in STRATA {
            for j in JUDGES {
                x.judged.insert((s.to_owned(), j), 0.0);
                for m in 0..3 {
                    x.scores.insert((s.to_owned(), m, j), Vec::new());
                }
            }
            for m in 0..3 {
                x.sums.insert((s.to_owned(), m), EstimateSums::default());
            }
        }
        for (id, t) in traces {
            if !batches.contains(&t.batch) {
                continue;
            }
            let s = t.stratum.clone();
            *x.judged.get_mut(&(s.clone(), "offline")).unwrap() += 1.0;
            for (m, f) in t.offline.iter().enumerate() {
                if let Some(f) = f {
                    x.scores
                        .get_mut(&(s.clone(), m, "offline"))
                        .unwrap()
                        .push(*f);
                    x.sums
                        .get_mut(&(s.clone(), m))
                        .unwrap()
                        .merge(&EstimateSums::population(*f));
                }
            }
            let Some(y) = verdicts.get(id) else { continue };
            *x.judged.get_mut(&(s.clone(), "llm")).unwrap() += 1.0;
            for (m, y) in y.iter().enumerate() {
                if let Some(y) = y {
                    x.scores.get_mut(&(s.clone(), m, "llm")).unwrap().push(*y);
                    if let (Some(f), Some(pi)) = (t.offline[m], t.sampled) {
                        x.sums
                            .get_mut(&(s.clone(), m))
                            .unwrap()
                            .merge(&EstimateSums::pair(*y, f, pi));
                    }
                }
            }
        }
        x
    }

    fn values(&self, s: &str, m: usize, j: &'static str) -> &[f64] {
        &self.scores[&(s.to_owned(), m, j)]
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The sample variance (n - 1), two-pass.
fn variance(v: &[f64]) -> Option<f64> {
    let m = mean(v)?;
    (v.len() > 1).then(|| v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64)
}

/// A series as the rules label it: (rule, stratum, metric label, judge label).
type Key = (String, String, String, String);

fn key(rule: &str, stratum: &str, metric: &str, judge: &str) -> Key {
    (rule.into(), stratum.into(), metric.into(), judge.into())
}

/// Every figure the test reads from Prometheus at one moment, computed exactly: short window
/// (`short`), middle window (`mid`), the whole baseline range (`long`) and the baseline without the
/// short window (`rest`).
fn expected(
    short: &Exact,
    mid: &Exact,
    long: &Exact,
    rest: &Exact,
    z: f64,
) -> BTreeMap<Key, Option<f64>> {
    let mut e = BTreeMap::new();
    for s in STRATA {
        for (mi, m) in Quality::ALL.iter().enumerate() {
            let name = m.name();
            for j in JUDGES {
                let (v20, v40, vlong, vrest) = (
                    short.values(s, mi, j),
                    mid.values(s, mi, j),
                    long.values(s, mi, j),
                    rest.values(s, mi, j),
                );
                e.insert(
                    key(&format!("ragwatch:{name}:mean_5m"), s, "", j),
                    mean(v20),
                );
                e.insert(
                    key(&format!("ragwatch:{name}:samples_5m"), s, "", j),
                    Some(v20.len() as f64),
                );
                if *m != Quality::ContextRelevance {
                    e.insert(
                        key(&format!("ragwatch:{name}:mean_1h"), s, "", j),
                        mean(v40),
                    );
                    e.insert(
                        key(&format!("ragwatch:{name}:mean_24h"), s, "", j),
                        mean(vlong),
                    );
                }
                e.insert(
                    key("ragwatch:score_count:increase5m", s, name, j),
                    Some(v20.len() as f64),
                );
                e.insert(key("ragwatch:shift:short_mean_5m", s, name, j), mean(v20));
                e.insert(
                    key("ragwatch:shift:short_variance_5m", s, name, j),
                    variance(v20),
                );
                e.insert(
                    key("ragwatch:shift:baseline_count_24h", s, name, j),
                    Some(vrest.len() as f64),
                );
                e.insert(
                    key("ragwatch:shift:baseline_mean_24h", s, name, j),
                    mean(vrest),
                );
                e.insert(
                    key("ragwatch:shift:baseline_variance_24h", s, name, j),
                    variance(vrest),
                );
            }
            let now = short.sums[&(s.to_owned(), mi)];
            let base = rest.sums[&(s.to_owned(), mi)];
            // The short window's lambda is its baseline's (cross-fitted), 0 without a baseline.
            let lambda = base.estimate(z).map_or(0.0, |e| e.lambda);
            let est = now.estimate_with_lambda(z, lambda);
            let var = now
                .estimate_with_lambda(1.0, lambda)
                .map(|e| e.half_width * e.half_width);
            e.insert(
                key("ragwatch:estimate:mean_5m", s, name, ""),
                est.map(|e| e.mean),
            );
            e.insert(key("ragwatch:estimate:variance_5m", s, name, ""), var);
            e.insert(
                key("ragwatch:estimate:half_width_5m", s, name, ""),
                est.map(|e| e.half_width),
            );
            let base_est = base.estimate(z);
            e.insert(
                key("ragwatch:estimate:mean_24h", s, name, ""),
                base_est.map(|e| e.mean),
            );
            e.insert(
                key("ragwatch:estimate:variance_24h", s, name, ""),
                base.estimate(1.0).map(|e| e.half_width * e.half_width),
            );
            let combined = |r: &str| format!("ragwatch:{name}:combined_{r}");
            e.insert(
                key(&combined("mean_5m"), s, "", "combined"),
                est.map(|e| e.mean),
            );
            e.insert(
                key(&combined("upper_5m"), s, "", "combined"),
                est.map(|e| e.upper),
            );
            e.insert(
                key(&combined("lower_5m"), s, "", "combined"),
                est.map(|e| e.lower),
            );
            e.insert(key(&combined("samples_5m"), s, "", "combined"), Some(now.k));
            e.insert(
                key(&combined("mean_24h"), s, "", "combined"),
                base_est.map(|e| e.mean),
            );
        }
        for j in JUDGES {
            e.insert(
                key("ragwatch:judged:samples_1h", s, "", j),
                Some(mid.judged[&(s.to_owned(), j)]),
            );
        }
    }
    e
}

/// One comparison of the table.
struct Row {
    moment: String,
    key: Key,
    expected: Option<f64>,
    got: Option<f64>,
}

impl Row {
    fn ok(&self) -> bool {
        match (self.expected, self.got) {
            (None, None) => true,
            // A half-width is z * sqrt(variance): it is compared on the variance's scale, where
            // rounding is additive. Near 0 a square root turns 1e-17 of rounding into 1e-9.
            (Some(e), Some(g)) if self.key.0.contains("half_width") => {
                (g * g - e * e).abs() <= REL_TOL * e * e + ABS_TOL
            }
            (Some(e), Some(g)) => (g - e).abs() <= REL_TOL * e.abs() + ABS_TOL,
            _ => false,
        }
    }

    fn relative(&self) -> Option<f64> {
        let (e, g) = (self.expected?, self.got?);
        Some(if e == 0.0 {
            (g - e).abs()
        } else {
            ((g - e) / e).abs()
        })
    }

    fn line(&self) -> String {
        let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.9}"));
        let (rule, s, m, j) = &self.key;
        format!(
            "{:<4} {:<40} {:<13} {:<17} {:<8} {:>18} {:>18} {:>10} {}",
            self.moment,
            rule,
            s,
            m,
            j,
            f(self.expected),
            f(self.got),
            self.relative().map_or("-".into(), |r| format!("{r:.2e}")),
            if self.ok() { "ok" } else { "MISMATCH" }
        )
    }
}

/// Queries every rule of `expected` at `t`; returns the rows and any evaluation timestamps outside
/// `[t - lag, t]`.
fn compare(
    prom: u16,
    namespace: &str,
    moment: &str,
    t: f64,
    lag: f64,
    expected: &BTreeMap<Key, Option<f64>>,
    problems: &mut Vec<String>,
) -> Vec<Row> {
    let rules: BTreeSet<&String> = expected.keys().map(|k| &k.0).collect();
    let mut got: BTreeMap<Key, Option<f64>> = BTreeMap::new();
    for rule in rules {
        let selector = format!("{rule}{{namespace=\"{namespace}\"}}");
        let results = query_at(prom, &selector, t)
            .unwrap_or_else(|| panic!("Prometheus answers {selector} at {t}"));
        let stamps = query_at(prom, &format!("timestamp({selector})"), t).unwrap_or_default();
        for r in stamps {
            let at: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
            if at < t - lag - 0.01 || at > t + 0.01 {
                problems.push(format!(
                    "{moment}: {rule} was last evaluated at {at:.3}, outside [{:.3}, {t:.3}]",
                    t - lag
                ));
                break;
            }
        }
        for r in results {
            let l = &r["metric"];
            let label = |n: &str| l[n].as_str().unwrap_or_default().to_owned();
            let stratum = label("stratum");
            if !STRATA.contains(&stratum.as_str()) {
                continue;
            }
            let v: f64 = r["value"][1].as_str().unwrap().parse().unwrap();
            got.insert(
                (rule.clone(), stratum, label("metric"), label("judge")),
                (!v.is_nan()).then_some(v),
            );
        }
    }
    // Rows of the lone replica are marked with an `s` after the moment.
    let moment = &format!("{moment}{}", if namespace == SOLO { "s" } else { "" });
    let mut rows: Vec<Row> = expected
        .iter()
        .map(|(k, e)| Row {
            moment: moment.to_owned(),
            key: k.clone(),
            expected: *e,
            got: got.get(k).copied().flatten(),
        })
        .collect();
    for (k, g) in &got {
        if !expected.contains_key(k) && g.is_some() {
            rows.push(Row {
                moment: moment.to_owned(),
                key: k.clone(),
                expected: None,
                got: *g,
            });
        }
    }
    rows
}

#[test]
fn pooled_recording_rules_equal_the_exact_figures_across_a_changing_fleet() {
    let wall = Instant::now();
    let dir = tempfile::tempdir().unwrap();

    // The traffic, generated up front: batch b has ids "b{b}-..." and its own seed.
    let plan: [&str; 7] = ["b0", "b1", "b2", "b3", "b4", "b5", "b6"];
    let strata_arg = STRATA.join(",");
    let generated: Vec<Vec<(String, Vec<u8>)>> = plan
        .iter()
        .enumerate()
        .map(|(i, label)| {
            let seed = (100 + i).to_string();
            let prefix = format!("{label}-");
            gen_traces(
                BATCH,
                &[
                    "--seed",
                    &seed,
                    "--prefix",
                    &prefix,
                    "--strata",
                    &strata_arg,
                    "--unfaithful-share",
                    "0.25",
                ],
            )
        })
        .collect();
    let labels: Vec<(String, bool)> = generated
        .iter()
        .flatten()
        .map(|(_, json)| {
            let v: Value = serde_json::from_slice(json).unwrap();
            (
                v["answer"].as_str().unwrap().to_owned(),
                v["label_faithful"].as_bool().unwrap(),
            )
        })
        .collect();

    let broker = Broker::start();
    let topic = unique("fleet");
    let group = unique("g");
    broker.create_topic(&topic, PARTITIONS as u32);
    let judge = LabelJudge::start(labels, 5);

    // The replicas' config: the shipped LLM config, with what the test must change. The drift rules'
    // min_samples (20 by default for the combined estimate) must fit the per-window minimum, which is
    // off here: every inclusion probability is then the stratum's (boosted) rate.
    let shipped = std::fs::read_to_string(repo().join("config/llm.toml")).unwrap();
    let mut config_text = shipped.clone();
    for m in Quality::ALL {
        config_text.push_str(&format!(
            "\n[drift.rules.{}.combined]\nmin_samples = 1\n",
            m.name()
        ));
    }
    let config_path = dir.path().join("ragwatch.toml");
    std::fs::write(&config_path, &config_text).unwrap();
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &group);
    env.extend([
        ("RAGWATCH__STRATA__DECLARED", strata_arg.clone()),
        (
            "RAGWATCH__WINDOWS__WINDOW_SECS",
            format!("[{}, {}, {}]", WINDOWS[0], WINDOWS[1], WINDOWS[2]),
        ),
        ("RAGWATCH__WINDOWS__SHORT_SECS", WINDOWS[0].to_string()),
        ("RAGWATCH__WINDOWS__BASELINE_SECS", WINDOWS[2].to_string()),
        ("RAGWATCH__LLM__BASE_URL", judge.base_url()),
        ("RAGWATCH__SAMPLE__DEFAULT_RATE", DEFAULT_RATE.to_string()),
        ("RAGWATCH__SAMPLE__MIN_PER_WINDOW", "0".to_owned()),
        (
            "RAGWATCH__BUDGET__REQUESTS_PER_MINUTE",
            "1000000".to_owned(),
        ),
        (
            "RAGWATCH__BUDGET__TOKENS_PER_MINUTE",
            "1000000000".to_owned(),
        ),
        (
            "RAGWATCH__BUDGET__TOKENS_PER_DAY",
            "100000000000".to_owned(),
        ),
        // Every sampled trace reaches the judge and gets a verdict record.
        ("RAGWATCH__LLM__CACHE_CAPACITY", "0".to_owned()),
        ("RAGWATCH__LLM__RECORDS_MAX_BYTES", "1000000000".to_owned()),
        ("RAGWATCH__JUDGE__QUEUE_CAPACITY", "4096".to_owned()),
        ("RAGWATCH_LLM_API_KEY", "sk-test".to_owned()),
    ]);

    // The library's view of the same traffic, with the same config.
    let overrides: HashMap<String, String> = env
        .iter()
        .filter(|(k, _)| k.starts_with("RAGWATCH__"))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let config = Config::from_toml_with_env(&config_text, &overrides).unwrap();
    let z = config.windows.z;
    let shared = Shared::new(&config);
    let pipeline = Pipeline::new(&config, shared.clone(), None);
    let mut sampler = Sampler::new(
        &config.sample,
        config.sample.min_window_secs(&config.windows),
        shared.stratifier.names(),
    );
    let mut traces: BTreeMap<String, TraceInfo> = BTreeMap::new();
    for (b, batch) in generated.iter().enumerate() {
        for (id, json) in batch {
            let (eval, _) = pipeline.evaluate(json);
            let verdict = eval.verdict.unwrap();
            let (decision, pi) =
                sampler.decide_with_probability(eval.stratum, id, 0, verdict.uncertain);
            let offline = [0, 1, 2].map(|i| verdict.score(Quality::ALL[i]));
            traces.insert(
                id.clone(),
                TraceInfo {
                    batch: b,
                    stratum: shared.stratifier.name(eval.stratum).to_owned(),
                    offline,
                    sampled: decision.sampled().then_some(pi),
                },
            );
        }
    }

    // Prometheus first, as in a cluster: it scrapes each replica as its own target from the start
    // (the late joiner's target is down until it starts).
    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| Replica {
            pod: format!("ragwatch-{i}"),
            port: free_port(),
            records: dir.path().join(format!("verdicts-ragwatch-{i}.jsonl")),
            process: None,
            retired: Vec::new(),
        })
        .collect();
    let mut solo = Replica {
        pod: "ragwatch-solo".to_owned(),
        port: free_port(),
        records: dir.path().join("verdicts-ragwatch-solo.jsonl"),
        process: None,
        retired: Vec::new(),
    };
    // RAGWATCH_FLEET_RULES names another rules file (an earlier version, to compare), written
    // with the tests' windows (`ragwatch rules --short 20s --middle 40s --baseline 300s --health
    // 20s --pending 3s`); by default the shipped rules, generated with those windows.
    let rules = match std::env::var_os("RAGWATCH_FLEET_RULES").map(PathBuf::from) {
        Some(path) => {
            eprintln!("rules: {}", path.display());
            std::fs::read_to_string(&path).unwrap()
        }
        None => test_rules(),
    };
    let lag = longest_interval(&rules);
    std::fs::write(dir.path().join("rules.yaml"), &rules).unwrap();
    let mut targets = String::new();
    for r in &replicas {
        write!(
            targets,
            "      - targets: [\"127.0.0.1:{}\"]\n        labels: {{namespace: {NAMESPACE}, pod: {}}}\n",
            r.port, r.pod
        )
        .unwrap();
    }
    write!(
        targets,
        "      - targets: [\"127.0.0.1:{}\"]\n        labels: {{namespace: {SOLO}, pod: {}}}\n",
        solo.port, solo.pod
    )
    .unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: ragwatch\n    static_configs:\n{targets}"
        ),
    )
    .unwrap();
    let (prom, _prom) = start_prometheus(dir.path(), &[]);
    wait_for(
        "Prometheus to load the rules",
        Duration::from_secs(30),
        || {
            let (code, body) = http_get(([127, 0, 0, 1], prom).into(), "/api/v1/rules")?;
            (code == 200 && body.contains("ragwatch:estimate:half_width_5m")).then_some(())
        },
    );

    replicas[0].start(&config_path, &env);
    replicas[1].start(&config_path, &env);
    let mut solo_env = env.clone();
    solo_env.push(("RAGWATCH__KAFKA__GROUP_ID", format!("{group}-solo")));
    solo.start(&config_path, &solo_env);
    wait_assigned(&replicas);
    wait_assigned(std::slice::from_ref(&solo));
    let setup = wall.elapsed().as_secs_f64();

    let mut batches: Vec<Batch> = Vec::new();
    let mut produced: BTreeMap<String, f64> = STRATA.iter().map(|s| (s.to_string(), 0.0)).collect();
    let mut events: Vec<String> = Vec::new();
    let t0 = unix_secs().ceil() + 0.5;
    let mut slot = 0usize;
    let run_batch = |b: usize,
                     slot: &mut usize,
                     replicas: &[Replica],
                     batches: &mut Vec<Batch>,
                     produced: &mut BTreeMap<String, f64>| {
        let at = t0 + *slot as f64 * SLOT;
        sleep_until(at);
        let start = unix_secs();
        produce(&broker.brokers(), &topic, &generated[b]);
        for (id, _) in &generated[b] {
            *produced.get_mut(&traces[id].stratum).unwrap() += 1.0;
        }
        let settled = settle(replicas, produced, prom);
        let settled = settled.max(settle(std::slice::from_ref(&solo), produced, prom));
        batches.push(Batch {
            label: plan[b].to_owned(),
            ids: generated[b].iter().map(|t| t.0.clone()).collect(),
            start,
            settled,
        });
        eprintln!(
            "{}: slot {} at {:+.1} s, over {:.1} s after it started",
            plan[b],
            slot,
            start - t0,
            settled - start
        );
        *slot += 1;
    };
    // Only ragwatch-0 and -1.
    for b in 0..3 {
        run_batch(b, &mut slot, &replicas, &mut batches, &mut produced);
    }
    // ragwatch-2 joins in the quiet after b2.
    wait_committed(&broker.brokers(), &group, &topic);
    let join = unix_secs();
    replicas[2].start(&config_path, &env);
    wait_assigned(&replicas);
    events.push(format!(
        "ragwatch-2 started at {:+.1} s, all three held partitions {:.1} s later",
        join - t0,
        unix_secs() - join
    ));
    slot = ((unix_secs() + 0.5 - t0) / SLOT).ceil() as usize;
    for b in 3..5 {
        run_batch(b, &mut slot, &replicas, &mut batches, &mut produced);
    }
    // ragwatch-1 restarts in the quiet after b4: same pod name, same port.
    wait_committed(&broker.brokers(), &group, &topic);
    let stop = unix_secs();
    replicas[1].stop();
    let exited = unix_secs();
    replicas[1].start(&config_path, &env);
    wait_assigned(&replicas);
    events.push(format!(
        "ragwatch-1 got SIGTERM at {:+.1} s, exited {:.1} s later, started again and all three held partitions {:.1} s after the exit",
        stop - t0,
        exited - stop,
        unix_secs() - exited
    ));
    slot = ((unix_secs() + 0.5 - t0) / SLOT).ceil() as usize;
    for b in 5..7 {
        run_batch(b, &mut slot, &replicas, &mut batches, &mut produced);
    }
    for e in &events {
        eprintln!("{e}");
    }

    // The moments: the first quiet instant after each anchor batch whose windows' edges all fall
    // in quiet time (at the same point of its slot as the edges' slots, by the cadence).
    let (w_short, w_mid, w_long) = (window("5m"), window("1h"), window("24h"));
    let anchors = [
        ("M1", 3usize, "ragwatch-2's first batch (b3)"),
        ("M2", 4, "ragwatch-2's second batch (b4)"),
        ("M3", 5, "ragwatch-1's first batch after its restart (b5)"),
        ("M4", 6, "ragwatch-1's second batch after its restart (b6)"),
    ];
    let mut problems: Vec<String> = Vec::new();
    let mut moments: Vec<(String, f64, String, [BTreeSet<usize>; 4])> = Vec::new();
    for (name, b, what) in anchors {
        let from = batches[b].settled + lag + MARGIN + lag;
        let until = batches.get(b + 1).map_or(from + SLOT, |n| n.start - MARGIN);
        let mut t = from;
        let mut found = None;
        let mut last_err = String::new();
        while t <= until {
            let sets = (
                inside(&batches, t, w_short, lag),
                inside(&batches, t, w_mid, lag),
                inside(&batches, t, w_long, lag),
            );
            match sets {
                (Ok(a), Ok(m), Ok(l)) => {
                    found = Some((a, m, l));
                    break;
                }
                (a, m, l) => {
                    last_err = [a.err(), m.err(), l.err()]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join("; ")
                }
            }
            t += 0.25;
        }
        match found {
            Some((a, m, l)) => {
                let rest: BTreeSet<usize> = l.difference(&a).copied().collect();
                moments.push((name.to_owned(), t, what.to_owned(), [a, m, l, rest]));
            }
            None => problems.push(format!(
                "{name} ({what}): no moment whose window edges all fall in quiet time ({last_err})"
            )),
        }
    }
    let last = moments.iter().map(|m| m.1).fold(0.0, f64::max);
    sleep_until(last + lag + 1.0);

    // What the replicas judged: verdict records, and every incarnation's counters.
    type Verdicts = HashMap<String, [Option<f64>; 3]>;
    let read_records = |replicas: &[&Replica]| -> (Verdicts, BTreeMap<String, u64>, Vec<String>) {
        let mut verdicts: Verdicts = HashMap::new();
        let mut record_status: BTreeMap<String, u64> = BTreeMap::new();
        let mut duplicates = Vec::new();
        for r in replicas {
            let text = std::fs::read_to_string(&r.records).unwrap_or_default();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let v: Value = serde_json::from_str(line).unwrap();
                let status = v["status"].as_str().unwrap_or("?").to_owned();
                *record_status.entry(status.clone()).or_default() += 1;
                if status != "judged" {
                    continue;
                }
                let id = v["trace_id"].as_str().unwrap().to_owned();
                let scores = [0, 1, 2].map(|i| v[Quality::ALL[i].name()].as_f64());
                if verdicts.insert(id.clone(), scores).is_some() {
                    duplicates.push(id);
                }
            }
        }
        (verdicts, record_status, duplicates)
    };
    let (verdicts, record_status, mut duplicates) =
        read_records(&replicas.iter().collect::<Vec<_>>());
    // The lone replica judged the same sample; the stand-in's noise follows the order of its
    // calls, so its verdicts are its own.
    let (solo_verdicts, _, solo_duplicates) = read_records(&[&solo]);
    duplicates.extend(solo_duplicates);
    let (fleet_ids, solo_ids): (BTreeSet<&String>, BTreeSet<&String>) =
        (verdicts.keys().collect(), solo_verdicts.keys().collect());
    if fleet_ids != solo_ids {
        problems.push(format!(
            "the lone replica judged {} traces, the fleet {}; {} differ",
            solo_ids.len(),
            fleet_ids.len(),
            fleet_ids.symmetric_difference(&solo_ids).count()
        ));
    }
    let fleet = fleet_samples(&replicas);

    // Accounting, per stratum, over every replica and incarnation.
    let mut accounting = String::from(
        "stratum        produced received off-judged  sampled(exp) llm-judged records  skipped rejected\n",
    );
    let rejected = total(&fleet, "ragwatch_traces_rejected_total", &[]);
    for s in STRATA {
        let of = |name: &str, extra: &[(&str, &str)]| {
            let mut l = vec![("stratum", s)];
            l.extend_from_slice(extra);
            total(&fleet, name, &l)
        };
        let produced_s = produced[s];
        let received = of("ragwatch_traces_received_total", &[]);
        let offline = of("ragwatch_traces_judged_total", &[("judge", "offline")]);
        let sampled = of("ragwatch_traces_sampled_total", &[]);
        let llm = of("ragwatch_traces_judged_total", &[("judge", "llm")]);
        let skipped = of("ragwatch_traces_skipped_total", &[]);
        let expected_sampled = traces
            .values()
            .filter(|t| t.stratum == s && t.sampled.is_some())
            .count() as f64;
        let records = verdicts
            .keys()
            .filter(|id| traces.get(*id).is_some_and(|t| t.stratum == s))
            .count() as f64;
        writeln!(
            accounting,
            "{s:<14} {produced_s:>8} {received:>8} {offline:>10} {sampled:>7}({expected_sampled:>4}) {llm:>10} {records:>7} {skipped:>8} {rejected:>8}"
        )
        .unwrap();
        let mut check = |what: &str, a: f64, b: f64| {
            if a != b {
                problems.push(format!("accounting {s}: {what}: {a} != {b}"));
            }
        };
        check("received = produced", received, produced_s);
        check("offline-judged = received", offline, received);
        check("sampled = the sampler's choice", sampled, expected_sampled);
        check("LLM-judged + skipped = sampled", llm + skipped, sampled);
        check("verdict records = LLM-judged", records, llm);
        if skipped > 0.0 {
            let reasons: Vec<String> = fleet
                .iter()
                .flat_map(|m| m.0.iter())
                .filter(|(n, l, v)| {
                    n == "ragwatch_traces_skipped_total"
                        && l.get("stratum").map(String::as_str) == Some(s)
                        && *v > 0.0
                })
                .map(|(_, l, v)| format!("{} {v}", l["reason"]))
                .collect();
            eprintln!("skipped in {s}: {}", reasons.join(", "));
        }
    }
    if rejected != 0.0 {
        problems.push(format!("{rejected} messages rejected"));
    }
    if !duplicates.is_empty() {
        problems.push(format!(
            "{} traces with two verdict records: {:?}",
            duplicates.len(),
            &duplicates[..duplicates.len().min(5)]
        ));
    }
    let not_sampled: Vec<&String> = verdicts
        .keys()
        .filter(|id| traces.get(*id).is_none_or(|t| t.sampled.is_none()))
        .collect();
    if !not_sampled.is_empty() {
        problems.push(format!(
            "{} verdict records of traces the sampler would not take: {:?}",
            not_sampled.len(),
            &not_sampled[..not_sampled.len().min(5)]
        ));
    }

    // The replicas' own sums over all the traffic against the exact ones: the exposition is exact,
    // so a mismatch below is in the rules, not in the figures the test expects.
    let everything: BTreeSet<usize> = (0..batches.len()).collect();
    let all = Exact::of(&everything, &traces, &verdicts);
    let mut rows: Vec<Row> = Vec::new();
    for s in STRATA {
        for (mi, m) in Quality::ALL.iter().enumerate() {
            let hist = m.spec().histogram;
            for j in JUDGES {
                let v = all.values(s, mi, j);
                let labels = [("stratum", s), ("judge", j)];
                for (name, exact) in [
                    (format!("{hist}_count"), v.len() as f64),
                    (format!("{hist}_sum"), v.iter().sum::<f64>()),
                ] {
                    rows.push(Row {
                        moment: "all".into(),
                        key: key(&format!("/metrics {name}"), s, "", j),
                        expected: Some(exact),
                        got: Some(total(&fleet, &name, &labels)),
                    });
                }
                rows.push(Row {
                    moment: "all".into(),
                    key: key("/metrics ragwatch_score_squares_total", s, m.name(), j),
                    expected: Some(v.iter().map(|x| x * x).sum()),
                    got: Some(total(
                        &fleet,
                        "ragwatch_score_squares_total",
                        &[("stratum", s), ("judge", j), ("metric", m.name())],
                    )),
                });
            }
            let sums = all.sums[&(s.to_owned(), mi)];
            for (term, exact) in EstimateSums::TERMS.iter().zip(sums.terms()) {
                rows.push(Row {
                    moment: "all".into(),
                    key: key(
                        &format!("/metrics ragwatch_estimate_terms_total{{term={term}}}"),
                        s,
                        m.name(),
                        "",
                    ),
                    expected: Some(exact),
                    got: Some(total(
                        &fleet,
                        "ragwatch_estimate_terms_total",
                        &[("stratum", s), ("metric", m.name()), ("term", term)],
                    )),
                });
            }
        }
    }

    // Every pooled rule at every moment.
    let mut described = Vec::new();
    for (name, t, what, sets) in &moments {
        let [a, m, l, rest] = sets;
        let names = |set: &BTreeSet<usize>| {
            set.iter()
                .map(|b| batches[*b].label.clone())
                .collect::<Vec<_>>()
                .join(",")
        };
        described.push(format!(
            "{name} at {:+.1} s, after {what}: {w_short} s window {{{}}}, {w_mid} s {{{}}}, {w_long} s {{{}}}, baseline without the short window {{{}}}",
            t - t0,
            names(a),
            names(m),
            names(l),
            names(rest)
        ));
        let exact = |set: &BTreeSet<usize>| Exact::of(set, &traces, &verdicts);
        let want = expected(&exact(a), &exact(m), &exact(l), &exact(rest), z);
        rows.extend(compare(
            prom,
            NAMESPACE,
            name,
            *t,
            lag,
            &want,
            &mut problems,
        ));
        let exact_solo = |set: &BTreeSet<usize>| Exact::of(set, &traces, &solo_verdicts);
        let want_solo = expected(
            &exact_solo(a),
            &exact_solo(m),
            &exact_solo(l),
            &exact_solo(rest),
            z,
        );
        rows.extend(compare(
            prom,
            SOLO,
            name,
            *t,
            lag,
            &want_solo,
            &mut problems,
        ));
    }

    let header = format!(
        "{:<4} {:<40} {:<13} {:<17} {:<8} {:>18} {:>18} {:>10} result",
        "at", "rule", "stratum", "metric", "judge", "expected", "got", "rel.err"
    );
    eprintln!("---- every comparison (tolerance: relative {REL_TOL:e}, absolute {ABS_TOL:e})");
    eprintln!("{header}");
    for r in &rows {
        eprintln!("{}", r.line());
    }
    // Per rule and moment: comparisons, mismatches, the largest relative error.
    let mut summary: BTreeMap<(String, String), (usize, usize, f64)> = BTreeMap::new();
    for r in &rows {
        let e = summary
            .entry((r.key.0.clone(), r.moment.clone()))
            .or_insert((0, 0, 0.0));
        e.0 += 1;
        if !r.ok() {
            e.1 += 1;
        }
        e.2 = e.2.max(
            r.relative()
                .unwrap_or(if r.ok() { 0.0 } else { f64::INFINITY }),
        );
    }
    eprintln!("---- per rule and moment: comparisons, mismatches, largest relative error");
    for ((rule, moment), (n, bad, worst)) in &summary {
        eprintln!("{rule:<62} {moment:<4} {n:>4} {bad:>4} {worst:>10.2e}");
    }
    eprintln!("---- accounting (summed over replicas and restarts)\n{accounting}");
    eprintln!("verdict records by status: {record_status:?}");
    eprintln!(
        "stand-in: {} chat and {} embedding requests",
        judge
            .counts
            .chat_requests
            .load(std::sync::atomic::Ordering::SeqCst),
        judge
            .counts
            .embedding_requests
            .load(std::sync::atomic::Ordering::SeqCst)
    );
    for b in &batches {
        eprintln!(
            "{}: {} traces, {:+.1}..{:+.1} s",
            b.label,
            b.ids.len(),
            b.start - t0,
            b.settled - t0
        );
    }
    for d in &described {
        eprintln!("{d}");
    }
    eprintln!(
        "setup {setup:.0} s, whole test {:.0} s, longest rule group interval {lag} s",
        wall.elapsed().as_secs_f64()
    );

    let mismatches: Vec<String> = rows.iter().filter(|r| !r.ok()).map(Row::line).collect();
    assert!(
        problems.is_empty() && mismatches.is_empty(),
        "{} of {} comparisons off by more than relative {REL_TOL:e} (+ {ABS_TOL:e}); {} other problems:\n{}\n{header}\n{}",
        mismatches.len(),
        rows.len(),
        problems.len(),
        problems.join("\n"),
        mismatches.join("\n")
    );
}
