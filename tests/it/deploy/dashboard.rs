//! The dashboard against Prometheus: every `combined` number reads a series an alert reads, the
//! judge-change annotation fires on a judge change only (promtool), and every query returns data
//! from a real Prometheus that scrapes ragwatch.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::python;
use crate::common::judge::JudgeServer;
use crate::common::prometheus::{WINDOWS, query, start_prometheus, test_dashboard, test_rules};
use crate::common::{Ragwatch, gen_traces, http_post, wait_for};
use crate::dashboard::{dashboard, exprs};

/// The series names a PromQL expression reads (recording rules and ragwatch's own families).
fn series_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("ragwatch") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        // A series, not a label value such as alertname=~"Ragwatch.*" or a word in a string.
        if name.contains(':') || name.starts_with("ragwatch_") {
            names.push(name.to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// Every `combined` number on the dashboard (headline, band, floor, samples) reads a series that an
/// alert of rules.yaml reads, in its expression or its description's queries: the pooled recording
/// rules, never one replica's `ragwatch_window_*` gauges averaged.
#[test]
fn every_combined_number_on_the_dashboard_is_one_an_alert_reads() {
    let read_by_alerts = python(
        "import yaml\nfor g in yaml.safe_load(open('deploy/prometheus/rules.yaml'))['groups']:\n  for r in g['rules']:\n    if 'alert' in r: print(r['expr']); [print(v) for v in r.get('annotations', {}).values()]",
        &[],
    );
    let alert_series = series_names(&read_by_alerts);
    assert!(
        alert_series
            .iter()
            .any(|s| s == "ragwatch:faithfulness:combined_upper_5m")
    );
    let d = dashboard();
    let mut n = 0;
    for p in d["panels"].as_array().unwrap() {
        for e in exprs(p).into_iter().filter(|e| e.contains("combined")) {
            n += 1;
            assert!(!e.contains("ragwatch_window_"), "{}: {e}", p["title"]);
            for s in series_names(e) {
                assert!(
                    alert_series.contains(&s),
                    "{}: {s} is read by no alert: {e}",
                    p["title"]
                );
            }
        }
    }
    assert!(n >= 6, "{n} combined queries");
}

/// Grafana-only syntax replaced by what the alerts test uses.
fn substitute(expr: &str) -> String {
    expr.replace("$cluster", ".*")
        .replace("$namespace", ".*")
        .replace("$install", ".*")
        .replace("$pod", ".*")
        .replace("$stratum", ".*")
        .replace("$judge", "offline")
        .replace("$__rate_interval", "20s")
}

/// The judge-change annotation: a judge identity new in a namespace that had ragwatch running,
/// never a restart with the same judge nor a first start. (`changes(ragwatch_judge_info[..])` would
/// never fire: the gauge is always 1; a judge change is a new series.) Evaluated by promtool.
#[test]
fn the_judge_change_annotation_fires_on_a_judge_change_only() {
    let d = dashboard();
    let annotation = d["annotations"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "Judge changed")
        .unwrap();
    let expr = substitute(annotation["expr"].as_str().unwrap());
    let info = |pod: &str, judge: &str| {
        format!("ragwatch_judge_info{{namespace=\"ns\", pod=\"{pod}\", model=\"{judge}\"}}")
    };
    let test = format!(
        "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n      - series: '{}'\n        values: '1x20'\n      - series: '{}'\n        values: '_x21 1x20'\n      - series: '{}'\n        values: '_x42 1x20'\n    promql_expr_test:\n{}",
        info("a", "m1"),
        info("b", "m1"),
        info("c", "m2"),
        [
            (2, ""),
            (23, ""),
            (44, "{namespace=\"ns\", model=\"m2\"}"),
            (52, ""),
        ]
        .iter()
        .map(|(at, labels)| {
            let samples = if labels.is_empty() {
                " []".to_owned()
            } else {
                format!("\n          - labels: '{labels}'\n            value: 1")
            };
            format!(
                "      - expr: '{expr}'\n        eval_time: {at}m\n        exp_samples:{samples}\n"
            )
        })
        .collect::<String>()
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("annotation_test.yaml");
    std::fs::write(&file, &test).unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{test}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// 2,000 generated traces over four strata, the tail unfaithful, their contexts from two indexes
/// (for the what-changed source panel), as the lines of a file.
fn dashboard_traces() -> String {
    gen_traces(
        2000,
        &[
            "--strata",
            "head,tail,known_failure,out_of_scope",
            "--unfaithful-share",
            "0",
            "--bad-strata",
            "tail",
            "--seed",
            "31",
        ],
    )
    .into_iter()
    .enumerate()
    .map(|(i, (_, line))| {
        let mut v: Value = serde_json::from_slice(&line).unwrap();
        v["metadata"]["index"] = json!(if i % 3 == 0 { "beta" } else { "alpha" });
        v.to_string() + "\n"
    })
    .collect()
}

/// The config of the run: the traces' file looping at 200 a second, the LLM judge at `base_url`
/// with its records capped at 50 kB in three files and canaries (the first three traces, judged at
/// start, for the canary agreement panel), labels, feedback, what changed and review on.
fn dashboard_config(dir: &Path, traces: &str, base_url: &str, records: &Path) -> PathBuf {
    let trace_file = dir.join("traces.jsonl");
    std::fs::write(&trace_file, traces).unwrap();
    let canaries = dir.join("canaries.jsonl");
    let canary_lines: String = traces
        .lines()
        .take(3)
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v["label_faithful"] = json!(true);
            v.to_string() + "\n"
        })
        .collect();
    std::fs::write(&canaries, canary_lines).unwrap();
    let config = dir.join("ragwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = \"{}\"\nrate_per_sec = 200.0\nloop = true\n\
             [strata]\ndeclared = [\"head\", \"tail\", \"known_failure\", \"out_of_scope\"]\n\
             [sample]\ndefault_rate = 0.2\n[budget]\nrequests_per_minute = 6000\n\
             [judge]\nsampled = \"llm\"\nworkers = 4\n\
             [llm]\nbase_url = \"{}\"\nchat_model = \"judge-2026-01-01\"\nembedding_model = \"embed-1\"\n\
             request_timeout_ms = 2000\nbackoff_base_ms = 20\nrecords_path = \"{}\"\n\
             records_max_bytes = 50000\nrecords_keep_files = 2\ncanary_path = \"{}\"\n\
             [labels]\nenabled = true\nauroc_min_per_class = 5\n\
             [changes]\nmin_traces = 5\n[changes.source]\ndeclared = [\"alpha\", \"beta\"]\n\
             fields = [\"/index\"]\n[changes.coverage]\nlevel = 0.95\n\
             [changes.novelty]\nknown_after_secs = 2\n\
             [review]\nenabled = true\nreviews_per_day = 1000000\n\
             [labels.feedback]\nenabled = true\nauroc_min_per_class = 5\n",
            trace_file.display(),
            base_url,
            records.display(),
            canaries.display()
        ),
    )
    .unwrap();
    config
}

/// A reviewer labels every trace of the file, again every second (the file loops): one in three
/// unfaithful, so every stratum has both classes and the label AUROC panel has data; and a user's
/// thumbs, for the feedback panel. Runs until `labelling` is cleared.
fn reviewer(
    traces: &str,
    addr: std::net::SocketAddr,
    labelling: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let labels: String = traces
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let id = serde_json::from_str::<Value>(l).unwrap()["trace_id"].clone();
            let thumb = if i % 3 == 0 { "thumbs_down" } else { "thumbs_up" };
            format!(
                "{{\"trace_id\": {id}, \"faithful\": {}}}\n{{\"trace_id\": {id}, \"kind\": \"{thumb}\"}}\n",
                i % 3 != 0
            )
        })
        .collect();
    std::thread::spawn(move || {
        while labelling.load(Ordering::Relaxed) {
            // A reviewer's pace: labels keep arriving while the test watches.
            std::thread::sleep(Duration::from_secs(1));
            let _ = std::panic::catch_unwind(|| http_post(addr, "/v1/labels", &labels));
        }
    })
}

/// Every panel's query returns data from the Prometheus on `prom_port`.
fn assert_every_panel_has_data(prom_port: u16) {
    let d = test_dashboard();
    for panel in d["panels"].as_array().unwrap() {
        // Kafka's series need a broker: tests/it/alerts/ checks those panels over a real one.
        // The variant comparison's need [variants]: tests/it/rollout_gates_live.rs checks those.
        // The container's memory limit is the kubelet's (cAdvisor), which no test scrapes.
        for expr in exprs(panel).into_iter().filter(|e| {
            !e.contains("ragwatch_kafka_")
                && !e.contains("comparison")
                && !e.contains("container_spec_")
        }) {
            let q = substitute(expr);
            wait_for(
                &format!("data for panel {}: {q}", panel["title"]),
                Duration::from_secs(90),
                || query(prom_port, &q).filter(|r| !r.is_empty()),
            );
        }
    }
}

/// Every dashboard query returns data from a real Prometheus that scrapes ragwatch (with the LLM
/// judge, so the LLM and combined panels have data too) and evaluates deploy/prometheus/rules.yaml
/// with shortened windows; the traces come from a file, so the Kafka panels are left to
/// tests/it/alerts/. The tail stratum is unfaithful, so the diagnosis panel has data. On the
/// way, the verdict records rotate at their cap and keep the configured number of files.
#[test]
fn every_dashboard_query_returns_data_and_records_stay_capped() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dashboard_traces();
    let server = JudgeServer::start();
    let records = dir.path().join("verdicts.jsonl");
    let config = dashboard_config(dir.path(), &traces, &server.base_url(), &records);
    // ragwatch, the rules and the dashboard share the tests' windows.
    let rw = Ragwatch::start(
        &config,
        &[
            (
                "RAGWATCH__WINDOWS__WINDOW_SECS",
                format!("[{}, {}, {}]", WINDOWS[0], WINDOWS[1], WINDOWS[2]),
            ),
            ("RAGWATCH__WINDOWS__SHORT_SECS", WINDOWS[0].to_string()),
            ("RAGWATCH__WINDOWS__BASELINE_SECS", WINDOWS[2].to_string()),
        ],
    );
    let labelling = Arc::new(AtomicBool::new(true));
    let reviewer = reviewer(&traces, rw.write_addr(), Arc::clone(&labelling));

    std::fs::write(dir.path().join("rules.yaml"), test_rules()).unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\nscrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{}\"]\n",
            rw.addr
        ),
    )
    .unwrap();
    let (prom_port, _prom) = start_prometheus(dir.path(), &[]);
    assert_every_panel_has_data(prom_port);
    labelling.store(false, Ordering::Relaxed);
    reviewer.join().unwrap();

    // The records rotated at their cap: the live file and two rotated ones, none above the cap.
    wait_for(
        "the records to rotate twice",
        Duration::from_secs(60),
        || std::fs::metadata(PathBuf::from(format!("{}.2", records.display()))).ok(),
    );
    for n in ["", ".1", ".2"] {
        let len = std::fs::metadata(format!("{}{n}", records.display()))
            .unwrap()
            .len();
        assert!(len <= 50_000, "verdicts.jsonl{n}: {len} bytes");
    }
    assert!(!Path::new(&format!("{}.3", records.display())).exists());
}
