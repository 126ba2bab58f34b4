//! `/metrics` in both exposition formats, read by their reference parsers: the Prometheus text
//! format (0.0.4, the default) passes `promtool check metrics`; OpenMetrics 1.0 (when the `Accept`
//! header asks for it, as Prometheus's does) passes the `prometheus_client` Python package's
//! OpenMetrics parser, carries the same series (names and labels; `le` as canonical numbers), and
//! carries exemplars: the score and judge-latency buckets name a trace ragwatch was sent, whose
//! value lies in the bucket.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{Ragwatch, promtool_check_metrics, run_ok, wait_for};
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Scrapes `/metrics` of `addr` with `accept`, parses the body with prometheus_client's parser for
/// that format, and prints the content type, the body and every sample (name, labels, exemplar).
const SCRAPE: &str = r#"
import json, sys, urllib.request
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
from prometheus_client.parser import text_string_to_metric_families as text
addr, accept = sys.argv[1], sys.argv[2]
req = urllib.request.Request(f"http://{addr}/metrics", headers={"Accept": accept} if accept else {})
with urllib.request.urlopen(req) as r:
    ctype, body = r.headers["Content-Type"], r.read().decode()
parse = om if ctype.startswith("application/openmetrics-text") else text
samples = []
for family in parse(body):
    for s in family.samples:
        e = s.exemplar
        samples.append([s.name, s.labels, None if e is None else [e.labels, e.value, None if e.timestamp is None else float(e.timestamp)]])
print(json.dumps({"content_type": ctype, "body": body, "samples": samples}))
"#;

const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

fn scrape(rw: &Ragwatch, accept: &str) -> Value {
    let out = run_ok(
        Command::new("python3")
            .arg("-c")
            .arg(SCRAPE)
            .arg(rw.addr.to_string())
            .arg(accept),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (name, labels with `le` read as a number) of every sample.
fn series(scrape: &Value) -> BTreeSet<String> {
    scrape["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let labels: BTreeMap<String, String> = s[1]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| {
                    let v = v.as_str().unwrap();
                    let v = match (k.as_str(), v.parse::<f64>()) {
                        ("le", Ok(f)) => format!("{f}"),
                        _ => v.to_owned(),
                    };
                    (k.clone(), v)
                })
                .collect();
            format!("{}{labels:?}", s[0].as_str().unwrap())
        })
        .collect()
}

/// The trace ids of the bundled sample (it also holds lines the decoder rejects).
fn sample_ids() -> HashSet<String> {
    std::fs::read_to_string(root().join("config/sample-traces.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            Some(v["trace_id"].as_str()?.to_owned())
        })
        .collect()
}

/// The build and the judge are two families: a new image with the same judge is no judge change.
fn assert_build_and_judge_apart(text_body: &str) {
    let build: Vec<&str> = text_body
        .lines()
        .filter(|l| l.starts_with("ragwatch_build_info{"))
        .collect();
    assert_eq!(
        build,
        [format!(
            "ragwatch_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )]
    );
    let judge: Vec<&str> = text_body
        .lines()
        .filter(|l| l.starts_with("ragwatch_judge_info{"))
        .collect();
    assert_eq!(judge.len(), 1, "{judge:?}");
    assert!(
        judge[0].starts_with("ragwatch_judge_info{model=\"offline-"),
        "{judge:?}"
    );
    assert!(judge[0].ends_with("\"} 1"), "{judge:?}");
}

/// The process families, read from /proc, in the scrape of `family` format.
fn assert_process_families(family: &str, scrape: &Value) {
    // The parser read the sample; its value from the body (the parsed samples carry none).
    let value = |name: &str| -> f64 {
        assert!(
            scrape["samples"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s[0] == name),
            "{family}: no {name}"
        );
        let body = scrape["body"].as_str().unwrap();
        let line = body
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap();
        line.split(' ').nth(1).unwrap().parse().unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1e6, "{family}");
    // Whole seconds: the client library's resolution.
    assert!(value("process_cpu_seconds_total") >= 0.0, "{family}");
    assert!(value("process_open_fds") >= 3.0, "{family}");
    assert!(value("process_start_time_seconds") > 1.7e9, "{family}");
}

/// Every exemplar of the OpenMetrics scrape names a trace that was `sent`, lies in its bucket and
/// carries a Unix timestamp; exemplars are on the four traced histograms only.
fn assert_exemplars(om: &Value, sent: &HashSet<String>) {
    let mut families = BTreeMap::<&str, usize>::new();
    for s in om["samples"].as_array().unwrap() {
        let Some(e) = s[2].as_array() else { continue };
        let name = s[0].as_str().unwrap();
        let labels = e[0].as_object().unwrap();
        assert_eq!(labels.len(), 1, "{s}");
        let id = labels["trace_id"].as_str().unwrap();
        assert!(sent.contains(id), "exemplar of a trace never sent: {s}");
        let value = e[1].as_f64().unwrap();
        let le: f64 = s[1]["le"].as_str().unwrap().parse().unwrap();
        assert!(value <= le, "exemplar above its bucket: {s}");
        assert!(e[2].as_f64().unwrap() > 1.7e9, "a Unix timestamp: {s}");
        *families.entry(name).or_default() += 1;
    }
    eprintln!("exemplars by bucket family: {families:?}");
    for name in [
        "ragwatch_faithfulness_ratio_bucket",
        "ragwatch_answer_relevancy_ratio_bucket",
        "ragwatch_context_relevance_ratio_bucket",
        "ragwatch_judge_duration_seconds_bucket",
    ] {
        assert!(families.get(name).is_some_and(|n| *n > 0), "{name}");
    }
    assert_eq!(families.len(), 4, "exemplars only on the traced histograms");
}

#[test]
fn both_formats_pass_their_parsers_with_the_same_series_and_openmetrics_carries_exemplars() {
    // The sampled judge runs the offline judge again off the ingest path: judge latency observed.
    let rw = Ragwatch::start(
        &root().join("config/ragwatch.toml"),
        &[("RAGWATCH__JUDGE__SAMPLED", "offline".into())],
    );
    let sent = sample_ids();
    // Both formats list the same series once the traffic has touched every series it will touch
    // (the sample file loops; a new series may appear between two scrapes at first).
    let (text, om) = wait_for(
        "the same series in both formats, with judge latency observed",
        Duration::from_secs(60),
        || {
            let text = scrape(&rw, "");
            let om = scrape(&rw, PROMETHEUS_ACCEPT);
            let judged = om["body"]
                .as_str()?
                .contains("ragwatch_judge_duration_seconds_count{judge=\"offline\"} ");
            (judged && series(&text) == series(&om)).then_some((text, om))
        },
    );
    assert!(
        text["content_type"]
            .as_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    assert!(
        om["content_type"]
            .as_str()
            .unwrap()
            .starts_with("application/openmetrics-text; version=1.0.0")
    );
    promtool_check_metrics(text["body"].as_str().unwrap()).unwrap();
    let body = om["body"].as_str().unwrap();
    assert!(body.ends_with("# EOF\n"));
    assert_build_and_judge_apart(text["body"].as_str().unwrap());
    assert_process_families("text", &text);
    assert_process_families("om", &om);
    assert!(body.contains("# TYPE process_cpu_seconds counter\n"));
    // Counters keep `_total` on their samples; the family is announced without it.
    assert!(body.contains("# TYPE ragwatch_traces_received counter\n"));
    assert!(body.contains("\nragwatch_traces_received_total{stratum=\"head\"} "));
    assert_exemplars(&om, &sent);
    eprintln!(
        "/metrics: text {} bytes, OpenMetrics {} bytes",
        text["body"].as_str().unwrap().len(),
        body.len()
    );
}
