//! A fleet against a real Prometheus: are the pooled numbers the exact numbers?
//!
//! Three ragwatch replicas in one consumer group on one topic of six partitions, static members
//! (`POD_NAME` is the group instance id), started at different moments: ragwatch-0 and ragwatch-1
//! from the start, ragwatch-2 joining late (after the first batches), and ragwatch-1 restarted
//! (SIGTERM, exit, started again under the same pod name and port, so its counters start again at
//! zero under the same `instance`) while the windows still hold its earlier traffic. The LLM judge
//! runs on a loopback stand-in (`tests/it/common/judge/labels.rs`: verdicts that follow the generated
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
//!
//! Its parts: the replicas and the waits that settle a batch (`replicas.rs`), batches and windows
//! (`windows.rs`), the exact figures (`exact.rs`), the accounting (`accounting.rs`) and the
//! comparison table (`table.rs`).

mod accounting;
mod exact;
mod replicas;
mod table;
mod windows;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::judge::JudgeServer;
use crate::common::prometheus::{Killed, WINDOWS, start_prometheus, test_rules, unix_secs};
use crate::common::*;
use ragwatch::config::Config;
use ragwatch::dimensions::Quality;
use ragwatch::pipeline::Pipeline;
use ragwatch::recorder::Shared;
use ragwatch::sample::Sampler;
use serde_json::Value;

use accounting::{Records, accounting, check_records};
use exact::{Exact, TraceInfo, expected};
use replicas::{Replica, fleet_samples, settle, wait_assigned, wait_committed};
use table::Row;
use windows::{Batch, Moment, find_moments, longest_interval, sleep_until, window};

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
/// The batches, in the order produced.
const PLAN: [&str; 7] = ["b0", "b1", "b2", "b3", "b4", "b5", "b6"];

/// Every batch's generated traces: (trace id, JSON).
type Traffic = Vec<Vec<(String, Vec<u8>)>>;

/// The traffic, generated up front: batch b has ids "b{b}-..." and its own seed.
fn generate() -> Traffic {
    let strata_arg = STRATA.join(",");
    PLAN.iter()
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
        .collect()
}

/// Every generated answer and its label, for the label-following stand-in.
fn labels_of(generated: &Traffic) -> Vec<(String, bool)> {
    generated
        .iter()
        .flatten()
        .map(|(_, json)| {
            let v: Value = serde_json::from_slice(json).unwrap();
            (
                v["answer"].as_str().unwrap().to_owned(),
                v["label_faithful"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The replicas' config: its file, its text and the environment every replica gets.
struct Setup {
    path: PathBuf,
    text: String,
    env: Vec<(&'static str, String)>,
}

impl Setup {
    /// The shipped LLM config, with what the test must change. The drift rules' min_samples (20 by
    /// default for the combined estimate) must fit the per-window minimum, which is off here: every
    /// inclusion probability is then the stratum's (boosted) rate.
    fn new(dir: &Path, brokers: &str, topic: &str, group: &str, judge: &JudgeServer) -> Setup {
        let mut text = std::fs::read_to_string(repo().join("config/llm.toml")).unwrap();
        for m in Quality::ALL {
            text.push_str(&format!(
                "\n[drift.rules.{}.combined]\nmin_samples = 1\n",
                m.name()
            ));
        }
        let path = dir.join("ragwatch.toml");
        std::fs::write(&path, &text).unwrap();
        let mut env = Ragwatch::kafka_env(brokers, topic, group);
        env.extend([
            ("RAGWATCH__STRATA__DECLARED", STRATA.join(",")),
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
        Setup { path, text, env }
    }
}

/// The library's view of the same traffic, with the same config: every trace as the replicas'
/// own code judges it offline and samples it; and the config's z.
fn library_view(setup: &Setup, generated: &Traffic) -> (BTreeMap<String, TraceInfo>, f64) {
    let overrides: std::collections::HashMap<String, String> = setup
        .env
        .iter()
        .filter(|(k, _)| k.starts_with("RAGWATCH__"))
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let config = Config::from_toml_with_env(&setup.text, &overrides).unwrap();
    let shared = Shared::new(config.recorder_setup());
    let pipeline = Pipeline::new(&config.decode, &config.sample, shared.clone(), None);
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
    (traces, config.windows.z)
}

/// A replica not started yet, on a port of its own, writing its verdict records into `dir`.
fn replica(pod: &str, dir: &Path) -> Replica {
    Replica {
        pod: pod.to_owned(),
        port: free_port(),
        records: dir.join(format!("verdicts-{pod}.jsonl")),
        process: None,
        retired: Vec::new(),
    }
}

/// The rules Prometheus evaluates. RAGWATCH_FLEET_RULES names another rules file (an earlier
/// version, to compare), written with the tests' windows (`ragwatch rules --short 20s --middle 40s
/// --baseline 300s --health 20s --pending 3s`); by default the shipped rules, generated with those
/// windows.
fn rules() -> String {
    match std::env::var_os("RAGWATCH_FLEET_RULES").map(PathBuf::from) {
        Some(path) => {
            eprintln!("rules: {}", path.display());
            std::fs::read_to_string(&path).unwrap()
        }
        None => test_rules(),
    }
}

/// Prometheus first, as in a cluster: it scrapes each replica as its own target from the start
/// (the late joiner's target is down until it starts), the lone replica under its own namespace.
fn prometheus(dir: &Path, rules: &str, replicas: &[Replica], solo: &Replica) -> (u16, Killed) {
    std::fs::write(dir.join("rules.yaml"), rules).unwrap();
    let mut targets = String::new();
    for (namespace, r) in replicas
        .iter()
        .map(|r| (NAMESPACE, r))
        .chain([(SOLO, solo)])
    {
        write!(
            targets,
            "      - targets: [\"127.0.0.1:{}\"]\n        labels: {{namespace: {namespace}, pod: {}}}\n",
            r.port, r.pod
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: ragwatch\n    static_configs:\n{targets}"
        ),
    )
    .unwrap();
    let (prom, guard) = start_prometheus(dir, &[]);
    wait_for(
        "Prometheus to load the rules",
        Duration::from_secs(30),
        || {
            let (code, body) = http_get(([127, 0, 0, 1], prom).into(), "/api/v1/rules")?;
            (code == 200 && body.contains("ragwatch:estimate:half_width_5m")).then_some(())
        },
    );
    (prom, guard)
}

/// The run of the batches: when it started (`t0`), the slot the next batch takes, the batches so
/// far, the traces produced per stratum, what happened to the fleet.
struct Run<'a> {
    brokers: String,
    topic: &'a str,
    generated: &'a Traffic,
    traces: &'a BTreeMap<String, TraceInfo>,
    prom: u16,
    t0: f64,
    slot: usize,
    batches: Vec<Batch>,
    produced: BTreeMap<String, f64>,
    events: Vec<String>,
}

impl Run<'_> {
    /// Produces batch `b` at the start of its slot and waits until the fleet and the lone replica
    /// settle.
    fn batch(&mut self, b: usize, replicas: &[Replica], solo: &Replica) {
        sleep_until(self.t0 + self.slot as f64 * SLOT);
        let start = unix_secs();
        produce(&self.brokers, self.topic, &self.generated[b]);
        for (id, _) in &self.generated[b] {
            *self.produced.get_mut(&self.traces[id].stratum).unwrap() += 1.0;
        }
        let settled = settle(replicas, &self.produced, self.prom);
        let settled = settled.max(settle(
            std::slice::from_ref(solo),
            &self.produced,
            self.prom,
        ));
        self.batches.push(Batch {
            label: PLAN[b].to_owned(),
            ids: self.generated[b].iter().map(|t| t.0.clone()).collect(),
            start,
            settled,
        });
        eprintln!(
            "{}: slot {} at {:+.1} s, over {:.1} s after it started",
            PLAN[b],
            self.slot,
            start - self.t0,
            settled - start
        );
        // The next slot, or the first one after this batch settled where it ran past its own (a
        // loaded machine): batches never overlap, so every window edge can fall in quiet time.
        let after = ((settled + 0.5 - self.t0) / SLOT).ceil().max(0.0) as usize;
        self.slot = (self.slot + 1).max(after);
    }

    /// The next batch takes the first slot that starts after now.
    fn next_slot(&mut self) {
        self.slot = ((unix_secs() + 0.5 - self.t0) / SLOT).ceil() as usize;
    }
}

/// ragwatch-2 joins in the quiet after b2.
fn join_late(run: &mut Run, replicas: &mut [Replica], setup: &Setup, group: &str) {
    wait_committed(&run.brokers, group, run.topic);
    let join = unix_secs();
    replicas[2].start(&setup.path, &setup.env);
    wait_assigned(replicas);
    run.events.push(format!(
        "ragwatch-2 started at {:+.1} s, all three held partitions {:.1} s later",
        join - run.t0,
        unix_secs() - join
    ));
    run.next_slot();
}

/// ragwatch-1 restarts in the quiet after b4: same pod name, same port.
fn restart(run: &mut Run, replicas: &mut [Replica], setup: &Setup, group: &str) {
    wait_committed(&run.brokers, group, run.topic);
    let stop = unix_secs();
    replicas[1].stop();
    let exited = unix_secs();
    replicas[1].start(&setup.path, &setup.env);
    wait_assigned(replicas);
    run.events.push(format!(
        "ragwatch-1 got SIGTERM at {:+.1} s, exited {:.1} s later, started again and all three held partitions {:.1} s after the exit",
        stop - run.t0,
        exited - stop,
        unix_secs() - exited
    ));
    run.next_slot();
}

/// Every pooled rule at every moment, for the fleet and for the lone replica, against the exact
/// figures of the batches inside its windows; and each moment described.
#[allow(clippy::too_many_arguments)]
fn moment_rows(
    prom: u16,
    run: &Run,
    moments: &[Moment],
    fleet: &Records,
    solo: &Records,
    z: f64,
    lag: f64,
    problems: &mut Vec<String>,
) -> (Vec<Row>, Vec<String>) {
    let (w_short, w_mid, w_long) = (window("5m"), window("1h"), window("24h"));
    let mut rows = Vec::new();
    let mut described = Vec::new();
    for Moment {
        name,
        t,
        what,
        sets,
    } in moments
    {
        let names = |set: &BTreeSet<usize>| {
            set.iter()
                .map(|b| run.batches[*b].label.clone())
                .collect::<Vec<_>>()
                .join(",")
        };
        let [a, m, l, rest] = sets;
        described.push(format!(
            "{name} at {:+.1} s, after {what}: {w_short} s window {{{}}}, {w_mid} s {{{}}}, {w_long} s {{{}}}, baseline without the short window {{{}}}",
            t - run.t0,
            names(a),
            names(m),
            names(l),
            names(rest)
        ));
        for (namespace, records) in [(NAMESPACE, fleet), (SOLO, solo)] {
            let exact = |set: &BTreeSet<usize>| Exact::of(set, run.traces, &records.verdicts);
            let want = expected(&exact(a), &exact(m), &exact(l), &exact(rest), z);
            rows.extend(table::compare(
                prom, namespace, name, *t, lag, &want, problems,
            ));
        }
    }
    (rows, described)
}

/// Prints the run: the table, the accounting, the stand-in's requests, the batches and moments.
fn print_run(rows: &[Row], accounting: &str, records: &Records, judge: &JudgeServer, run: &Run) {
    table::print(rows);
    eprintln!("---- accounting (summed over replicas and restarts)\n{accounting}");
    eprintln!("verdict records by status: {:?}", records.by_status);
    eprintln!(
        "stand-in: {} chat and {} embedding requests",
        judge.chat_requests(),
        judge.embedding_requests()
    );
    for b in &run.batches {
        eprintln!(
            "{}: {} traces, {:+.1}..{:+.1} s",
            b.label,
            b.ids.len(),
            b.start - run.t0,
            b.settled - run.t0
        );
    }
}

#[test]
fn pooled_recording_rules_equal_the_exact_figures_across_a_changing_fleet() {
    let wall = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let generated = generate();
    let broker = Broker::start();
    let topic = unique("fleet");
    let group = unique("g");
    broker.create_topic(&topic, PARTITIONS as u32);
    let judge = JudgeServer::following_labels(labels_of(&generated), 5);
    let setup = Setup::new(dir.path(), &broker.brokers(), &topic, &group, &judge);
    let (traces, z) = library_view(&setup, &generated);

    let mut replicas: Vec<Replica> = (0..3)
        .map(|i| replica(&format!("ragwatch-{i}"), dir.path()))
        .collect();
    let mut solo = replica("ragwatch-solo", dir.path());
    let rules = rules();
    let lag = longest_interval(&rules);
    let (prom, _prom) = prometheus(dir.path(), &rules, &replicas, &solo);
    replicas[0].start(&setup.path, &setup.env);
    replicas[1].start(&setup.path, &setup.env);
    let mut solo_env = setup.env.clone();
    solo_env.push(("RAGWATCH__KAFKA__GROUP_ID", format!("{group}-solo")));
    solo.start(&setup.path, &solo_env);
    wait_assigned(&replicas);
    wait_assigned(std::slice::from_ref(&solo));
    let setup_secs = wall.elapsed().as_secs_f64();

    let mut run = Run {
        brokers: broker.brokers(),
        topic: &topic,
        generated: &generated,
        traces: &traces,
        prom,
        t0: unix_secs().ceil() + 0.5,
        slot: 0,
        batches: Vec::new(),
        produced: STRATA.iter().map(|s| (s.to_string(), 0.0)).collect(),
        events: Vec::new(),
    };
    // Only ragwatch-0 and -1, then ragwatch-2 joins, then ragwatch-1 restarts.
    for b in 0..3 {
        run.batch(b, &replicas, &solo);
    }
    join_late(&mut run, &mut replicas, &setup, &group);
    for b in 3..5 {
        run.batch(b, &replicas, &solo);
    }
    restart(&mut run, &mut replicas, &setup, &group);
    for b in 5..7 {
        run.batch(b, &replicas, &solo);
    }
    for e in &run.events {
        eprintln!("{e}");
    }

    let mut problems: Vec<String> = Vec::new();
    let moments = find_moments(&run.batches, lag, &mut problems);
    let last = moments.iter().map(|m| m.t).fold(0.0, f64::max);
    sleep_until(last + lag + 1.0);

    // What the replicas judged: verdict records, and every incarnation's counters.
    let records = Records::read(&replicas.iter().collect::<Vec<_>>());
    let solo_records = Records::read(&[&solo]);
    let fleet = fleet_samples(&replicas);
    let accounting = accounting(
        &fleet,
        &run.produced,
        &traces,
        &records.verdicts,
        &mut problems,
    );
    check_records(&records, &solo_records, &traces, &mut problems);
    let everything: BTreeSet<usize> = (0..run.batches.len()).collect();
    let all = Exact::of(&everything, &traces, &records.verdicts);
    let mut rows = table::exposition_rows(&all, &fleet);
    let (at_moments, described) = moment_rows(
        prom,
        &run,
        &moments,
        &records,
        &solo_records,
        z,
        lag,
        &mut problems,
    );
    rows.extend(at_moments);

    print_run(&rows, &accounting, &records, &judge, &run);
    for d in &described {
        eprintln!("{d}");
    }
    eprintln!(
        "setup {setup_secs:.0} s, whole test {:.0} s, longest rule group interval {lag} s",
        wall.elapsed().as_secs_f64()
    );
    let mismatches: Vec<String> = rows.iter().filter(|r| !r.ok()).map(Row::line).collect();
    assert!(
        problems.is_empty() && mismatches.is_empty(),
        "{} of {} comparisons off by more than relative {REL_TOL:e} (+ {ABS_TOL:e}); {} other problems:\n{}\n{}\n{}",
        mismatches.len(),
        rows.len(),
        problems.len(),
        problems.join("\n"),
        table::header(),
        mismatches.join("\n")
    );
}
