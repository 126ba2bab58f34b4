//! Which release broke it, through a real Prometheus running the shipped rules (tests' windows)
//! and the shipped rollout gates evaluated as their controllers evaluate them.
//!
//! One stratum; baseline (`stable`) and candidate (`canary`) traces interleaved at 90/10 (exactly 10 %
//! and the canary's share unfaithful by their human labels), read from
//! files by ragwatch processes, judged by an LLM stand-in whose verdicts follow the traces' human
//! labels with 10 % of them read the other way:
//!
//! | install (job) | replicas | canary | expected |
//! |---|---|---|---|
//! | rag-worse | 1 | 60 % faithful (stable 90 %) | `RagwatchVariantWorse` for the canary only; Argo Failed; Flagger out of range |
//! | rag-verbose | 1 | 90 % faithful, every answer a sentence longer | never worse |
//! | rag-mixed | 2, judged by two judge models | 60 % faithful | undecided throughout: Inconclusive, inside the range |
//!
//! While an arm has fewer than `variants.min_judged` verdicts the verdict is undecided: Argo
//! Inconclusive, Flagger inside its range.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::judge::JudgeServer;
use crate::common::prometheus::{Killed, WINDOWS, query, query_at, start_prometheus, test_rules};
use crate::common::rollout::{
    ANALYSIS_TEMPLATE, CANARY_METRIC, METRIC_TEMPLATE, Phase, argo_query, assess, flagger_check,
    flagger_query, load, result,
};
use crate::common::{Ragwatch, gen_traces, wait_for};

const MIN_JUDGED: u64 = 60;
const NAMESPACE: &str = "rag";

/// One ragwatch process.
struct Replica {
    job: &'static str,
    /// The canary's share of unfaithful answers (the baseline's is 10 %).
    canary_unfaithful: f64,
    verbose_canary: bool,
    judge_model: &'static str,
    /// Traces a second: the install whose alert the test waits for reads faster.
    rate_per_sec: f64,
}

const REPLICAS: [Replica; 4] = [
    Replica {
        job: "rag-worse",
        canary_unfaithful: 0.4,
        verbose_canary: false,
        rate_per_sec: 60.0,
        judge_model: "judge-a",
    },
    Replica {
        job: "rag-verbose",
        canary_unfaithful: 0.1,
        verbose_canary: true,
        rate_per_sec: 40.0,
        judge_model: "judge-a",
    },
    Replica {
        job: "rag-mixed",
        canary_unfaithful: 0.4,
        verbose_canary: false,
        rate_per_sec: 40.0,
        judge_model: "judge-a",
    },
    Replica {
        job: "rag-mixed",
        canary_unfaithful: 0.4,
        verbose_canary: false,
        rate_per_sec: 40.0,
        judge_model: "judge-b",
    },
];

/// `n` generated traces of stratum `head` with exactly `unfaithful` of them (a share) unfaithful by
/// their human label, spread evenly: the test's truth is the share it names, not a draw around it.
fn exact(n: usize, unfaithful: f64, seed: usize, prefix: &str) -> Vec<Vec<u8>> {
    let share = unfaithful.to_string();
    let seed = seed.to_string();
    let pool = gen_traces(
        2 * n,
        &[
            "--strata",
            "head",
            "--unfaithful-share",
            &share,
            "--seed",
            &seed,
            "--prefix",
            prefix,
        ],
    );
    let label =
        |line: &[u8]| serde_json::from_slice::<Value>(line).unwrap()["label_faithful"] == true;
    let (mut faithful, mut unfaithful_lines): (Vec<_>, Vec<_>) =
        pool.into_iter().map(|(_, l)| l).partition(|l| label(l));
    let mut out = Vec::with_capacity(n);
    let mut owed = 0.0;
    for _ in 0..n {
        owed += unfaithful;
        let line = if owed >= 1.0 {
            owed -= 1.0;
            unfaithful_lines.pop()
        } else {
            faithful.pop()
        };
        out.push(line.expect("twice the traces hold enough of each label"));
    }
    out
}

/// Traces of one replica: every tenth a canary's, the baseline's exactly 10 % unfaithful and the
/// canary's at its share. Returns the file's text and its answers' labels.
fn traces(i: usize, r: &Replica) -> (String, Vec<(String, bool)>) {
    const N: usize = 10000;
    let stable = exact(N - N / 10, 0.1, 100 + 10 * i, "s");
    let canary = exact(N / 10, r.canary_unfaithful, 101 + 10 * i, "c");
    let mut text = String::new();
    let mut labels = Vec::new();
    let (mut stable, mut canary) = (stable.into_iter(), canary.into_iter());
    for k in 0..N {
        let (line, release) = match k % 10 {
            9 => (canary.next().unwrap(), "canary"),
            _ => (stable.next().unwrap(), "stable"),
        };
        let mut v: Value = serde_json::from_slice(&line).unwrap();
        v["trace_id"] = Value::from(format!("{}-{i}-{k}", v["trace_id"].as_str().unwrap()));
        v["metadata"]["release"] = Value::from(release);
        if release == "canary" && r.verbose_canary {
            // One more sentence, copied from a retrieved context: longer, not less grounded.
            let extra = v["contexts"][1]["text"].as_str().unwrap().to_owned();
            let answer = format!("{} {extra}", v["answer"].as_str().unwrap());
            v["answer"] = Value::from(answer);
        }
        labels.push((
            v["answer"].as_str().unwrap().to_owned(),
            v["label_faithful"].as_bool().unwrap(),
        ));
        text.push_str(&v.to_string());
        text.push('\n');
    }
    (text, labels)
}

fn start(dir: &Path, i: usize, r: &Replica, file: &Path, judge: &JudgeServer) -> Ragwatch {
    let config = dir.join(format!("ragwatch-{i}.toml"));
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = \"{}\"\nrate_per_sec = {}\nloop = true\n\
             [strata]\ndeclared = [\"head\"]\n\
             [sample]\ndefault_rate = 0.1\nuncertain_boost = 1.0\n[budget]\nrequests_per_minute = 60000\ntokens_per_minute = 100000000\ntokens_per_day = 10000000000\n\
             [judge]\nsampled = \"llm\"\nworkers = 8\nqueue_capacity = 4096\n\
             [llm]\nbase_url = \"{}\"\nchat_model = \"{}\"\nembedding_model = \"embed-1\"\n\
             request_timeout_ms = 2000\nbackoff_base_ms = 20\n\
             [variants]\ndeclared = [\"stable\", \"canary\"]\nbaseline = \"stable\"\n\
             fields = [\"/release\"]\nmin_judged = {MIN_JUDGED}\ncandidate_boost = 10.0\n",
            file.display(),
            r.rate_per_sec,
            judge.base_url(),
            r.judge_model,
        ),
    )
    .unwrap();
    Ragwatch::start(
        &config,
        &[
            (
                "RAGWATCH__WINDOWS__WINDOW_SECS",
                format!("[{}, {}, {}]", WINDOWS[0], WINDOWS[1], WINDOWS[2]),
            ),
            ("RAGWATCH__WINDOWS__SHORT_SECS", WINDOWS[0].to_string()),
            ("RAGWATCH__WINDOWS__BASELINE_SECS", WINDOWS[2].to_string()),
        ],
    )
}

fn value(r: &Value) -> f64 {
    r["value"][1].as_str().unwrap().parse().unwrap()
}

/// The overall faithfulness verdict of each install's canary.
const VERDICT: &str =
    "ragwatch:comparison_verdict{stratum=\"*\", metric=\"faithfulness\", variant=\"canary\"}";

/// The fewer judged faithfulness verdicts of the canary's two arms.
const THINNEST_ARM: &str = "min without (arm) (ragwatch:comparison_judged:sum{stratum=\"head\", metric=\"faithfulness\", variant=\"canary\"})";

/// The overall faithfulness verdict of each install's canary, by job.
fn verdicts(prom: u16) -> BTreeMap<String, f64> {
    query(prom, VERDICT)
        .unwrap_or_default()
        .iter()
        .map(|r| (r["metric"]["job"].as_str().unwrap().to_owned(), value(r)))
        .collect()
}

/// The fewer judged faithfulness verdicts of the canary's two arms, by job.
fn thinnest_arm(prom: u16) -> BTreeMap<String, f64> {
    query(prom, THINNEST_ARM)
        .unwrap_or_default()
        .iter()
        .map(|r| (r["metric"]["job"].as_str().unwrap().to_owned(), value(r)))
        .collect()
}

/// Each second since `since` at which Prometheus held both a verdict for `job`'s canary and a
/// thinnest arm under `MIN_JUDGED`: (seconds since `since`, that arm's verdicts, the verdict).
fn thin_history(prom: u16, job: &str, since: Instant) -> Vec<(u64, f64, f64)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let elapsed = since.elapsed().as_secs();
    let one = |q: &str, t: f64| {
        query_at(prom, q, t)
            .unwrap_or_default()
            .iter()
            .find(|r| r["metric"]["job"] == job)
            .map(value)
    };
    (0..=elapsed)
        .filter_map(|s| {
            let t = now - (elapsed - s) as f64;
            let n = one(THINNEST_ARM, t)?;
            let v = one(VERDICT, t)?;
            ((n as u64) < MIN_JUDGED).then_some((s, n, v))
        })
        .collect()
}

/// The shipped gates, read from their files, asking this test's Prometheus.
struct Gates {
    prom: u16,
    analysis: Value,
    metric: Value,
    range: Value,
}

impl Gates {
    fn shipped(prom: u16) -> Gates {
        Gates {
            prom,
            analysis: load(ANALYSIS_TEMPLATE),
            metric: load(METRIC_TEMPLATE),
            range: load(CANARY_METRIC)["thresholdRange"].clone(),
        }
    }

    /// The phase Argo Rollouts gives a measurement of `job`'s `variant` now.
    fn argo(&self, job: &str, variant: &str) -> Phase {
        let q = argo_query(&self.analysis, NAMESPACE, job, variant);
        assess(&self.analysis["spec"]["metrics"][0], &result(self.prom, &q))
    }

    /// Whether Flagger's check of `job`'s `variant` passes now.
    fn flagger_passes(&self, job: &str, variant: &str) -> bool {
        let q = flagger_query(&self.metric, NAMESPACE, job, variant);
        flagger_check(self.prom, &q, &self.range).1
    }
}

/// `ragwatch:comparison_<name>:ratio` over all strata, faithfulness, by job.
fn bound(prom: u16, name: &str) -> BTreeMap<String, f64> {
    query(
        prom,
        &format!("ragwatch:comparison_{name}:ratio{{stratum=\"*\", metric=\"faithfulness\"}}"),
    )
    .unwrap_or_default()
    .iter()
    .map(|r| (r["metric"]["job"].as_str().unwrap().to_owned(), value(r)))
    .collect()
}

/// The firing variant alerts, as (alertname, job, variant).
fn variant_alerts(prom: u16) -> BTreeSet<(String, String, String)> {
    query(prom, "ALERTS{alertstate=\"firing\"}")
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let label = |k: &str| r["metric"][k].as_str().unwrap_or_default().to_owned();
            (label("alertname"), label("job"), label("variant"))
        })
        .collect()
}

/// The jobs, one per install.
const JOBS: [&str; 3] = ["rag-worse", "rag-verbose", "rag-mixed"];

/// Each replica's traces written to a file in `dir`: the files, and every answer's label.
fn write_traces(dir: &Path) -> (Vec<PathBuf>, Vec<(String, bool)>) {
    let mut labels = Vec::new();
    let mut files = Vec::new();
    for (i, r) in REPLICAS.iter().enumerate() {
        let (text, l) = traces(i, r);
        let file = dir.join(format!("traces-{i}.jsonl"));
        std::fs::write(&file, text).unwrap();
        labels.extend(l);
        files.push(file);
    }
    (files, labels)
}

/// Prometheus first, its targets found in files written once the replicas listen: it scrapes each
/// replica from its first second, so the rules see the arms while they are thin.
fn start_prometheus_first(dir: &Path) -> (u16, Killed) {
    let mut jobs = String::new();
    for job in JOBS {
        jobs.push_str(&format!(
            "  - job_name: {job}\n    file_sd_configs:\n      - files: [\"targets-{job}.json\"]\n        refresh_interval: 1s\n"
        ));
    }
    std::fs::write(dir.join("rules.yaml"), test_rules()).unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n{jobs}"
        ),
    )
    .unwrap();
    start_prometheus(dir, &[])
}

/// Each job's targets file, written whole (renamed into place) now that its replicas listen.
fn write_targets(dir: &Path, replicas: &[Ragwatch]) {
    for job in JOBS {
        let targets: Vec<String> = REPLICAS
            .iter()
            .zip(replicas)
            .filter(|(r, _)| r.job == job)
            .map(|(_, p)| p.addr.to_string())
            .collect();
        let groups = serde_json::json!([{"targets": targets, "labels": {"namespace": NAMESPACE}}]);
        let tmp = dir.join(format!(".targets-{job}.json"));
        std::fs::write(&tmp, groups.to_string()).unwrap();
        std::fs::rename(&tmp, dir.join(format!("targets-{job}.json"))).unwrap();
    }
}

/// Until the worse canary's verdict is in: whatever is thin is undecided, and gated as such.
/// Returns the installs seen thin and undecided.
fn until_the_worse_canary_fires(prom: u16, gates: &Gates, started: Instant) -> BTreeSet<String> {
    let mut thin_seen = BTreeSet::new();
    let mut reported = Instant::now();
    wait_for("the worse canary's alert", Duration::from_secs(600), || {
        let verdicts = verdicts(prom);
        if reported.elapsed() > Duration::from_secs(30) {
            eprintln!(
                "{:.0} s: verdicts {verdicts:?}, the arms' fewer verdicts {:?}, differences {:?}",
                started.elapsed().as_secs_f64(),
                thinnest_arm(prom),
                bound(prom, "difference"),
            );
            reported = Instant::now();
        }
        for (job, n) in thinnest_arm(prom) {
            if (n as u64) < MIN_JUDGED && verdicts.contains_key(&job) {
                assert_eq!(verdicts[&job], 0.0, "{job}: an arm of {n} verdicts decides");
                assert_eq!(gates.argo(&job, "canary"), Phase::Inconclusive, "{job}");
                assert!(gates.flagger_passes(&job, "canary"), "{job}");
                thin_seen.insert(job);
            }
        }
        let alerts = variant_alerts(prom);
        let fired = alerts
            .iter()
            .any(|(a, j, v)| a == "RagwatchVariantWorse" && j == "rag-worse" && v == "canary");
        fired.then_some(())
    });
    thin_seen
}

/// For a short window, as the controllers read it: Argo's run for the worse canary has failed
/// (failureLimit 0: its first failed measurement ends it) and Flagger's check fails or has failed;
/// the worse canary is never found not worse; the verbose one is never worse; the mixed-judge
/// install stays undecided; no alert names another install or the baseline. Returns the last
/// verdicts.
fn watch_a_short_window(prom: u16, gates: &Gates) -> BTreeMap<String, f64> {
    let mut argo_failed = gates.argo("rag-worse", "canary") == Phase::Failed;
    let mut flagger_failed = !gates.flagger_passes("rag-worse", "canary");
    let watch = Instant::now();
    let mut last = BTreeMap::new();
    while watch.elapsed() < Duration::from_secs(WINDOWS[0]) {
        let v = verdicts(prom);
        assert_ne!(v.get("rag-worse"), Some(&1.0), "{v:?}");
        assert_ne!(v.get("rag-verbose"), Some(&-1.0), "{v:?}");
        assert_eq!(v.get("rag-mixed"), Some(&0.0), "judges mixed: {v:?}");
        argo_failed |= gates.argo("rag-worse", "canary") == Phase::Failed;
        flagger_failed |= !gates.flagger_passes("rag-worse", "canary");
        assert_ne!(gates.argo("rag-verbose", "canary"), Phase::Failed);
        assert!(gates.flagger_passes("rag-verbose", "canary"));
        assert_eq!(gates.argo("rag-mixed", "canary"), Phase::Inconclusive);
        assert!(gates.flagger_passes("rag-mixed", "canary"));
        for (alert, job, variant) in variant_alerts(prom) {
            if alert.starts_with("RagwatchVariant") {
                assert_eq!(
                    (alert.as_str(), job.as_str(), variant.as_str()),
                    ("RagwatchVariantWorse", "rag-worse", "canary"),
                );
            }
            assert_ne!(variant, "stable", "{alert} blames the baseline");
        }
        last = v;
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(
        argo_failed && flagger_failed,
        "the worse canary passed a gate"
    );
    last
}

#[test]
fn a_worse_canary_fails_its_gates_and_only_it() {
    let dir = tempfile::tempdir().unwrap();
    let (files, labels) = write_traces(dir.path());
    let (prom, _prom) = start_prometheus_first(dir.path());
    let judge = JudgeServer::following_labels(labels, 17);
    let started = Instant::now();
    let replicas: Vec<Ragwatch> = REPLICAS
        .iter()
        .enumerate()
        .map(|(i, r)| start(dir.path(), i, r, &files[i], &judge))
        .collect();
    write_targets(dir.path(), &replicas);
    let gates = Gates::shipped(prom);

    let thin_seen = until_the_worse_canary_fires(prom, &gates, started);
    eprintln!(
        "(RagwatchVariantWorse, rag-worse, canary) fired {:.0} s after start, the arms' fewer verdicts {:?}; thin installs seen undecided: {thin_seen:?}",
        started.elapsed().as_secs_f64(),
        thinnest_arm(prom),
    );
    // The worse canary's thin start as Prometheus recorded it, second by second: the polls above
    // may all come after it on a loaded machine, the rules' history does not.
    let history = thin_history(prom, "rag-worse", started);
    eprintln!("rag-worse's thin start as recorded (s, fewer verdicts, verdict): {history:?}");
    assert!(
        !history.is_empty() || thin_seen.contains("rag-worse"),
        "the worse canary's thin start was never recorded"
    );
    for (t, n, v) in &history {
        assert_eq!(
            *v, 0.0,
            "rag-worse at {t} s: an arm of {n} verdicts decides"
        );
    }
    let last = watch_a_short_window(prom, &gates);
    // Nothing was skipped: a skip that falls more on one arm is a sample ratio mismatch, which the
    // rules answer with an undecided verdict and a warning.
    let skipped = query(
        prom,
        "sum by (job, reason) (ragwatch_traces_skipped_total) > 0",
    )
    .unwrap_or_default();
    assert!(skipped.is_empty(), "{skipped:?}");
    eprintln!(
        "verdicts {last:?}; difference {:?}, lower {:?}, upper {:?}",
        bound(prom, "difference"),
        bound(prom, "lower"),
        bound(prom, "upper")
    );
    // Nothing reached the stand-in that it had no label for.
    assert_eq!(
        judge
            .label_counts()
            .unknown_answers
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    drop(replicas);
}
