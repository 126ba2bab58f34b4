//! `/metrics` in both exposition formats, read by their reference parsers: the Prometheus text
//! format (0.0.4, the default) passes `promtool check metrics`; OpenMetrics 1.0 (when the `Accept`
//! header asks for it, as Prometheus's does) passes the `prometheus_client` Python package's
//! OpenMetrics parser, carries the same series (names and labels; `le` as canonical numbers), and
//! carries exemplars: the score and judge-latency buckets name a trace ragwatch was sent, whose
//! value lies in the bucket.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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

#[test]
fn both_formats_pass_their_parsers_with_the_same_series_and_openmetrics_carries_exemplars() {
    // The sampled judge runs the offline judge again off the ingest path: judge latency observed.
    let rw = Ragwatch::start(
        &root().join("config/ragwatch.toml"),
        &[("RAGWATCH__JUDGE__SAMPLED", "offline".into())],
    );
    let sent: HashSet<String> = std::fs::read_to_string(root().join("config/sample-traces.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        // The sample also holds lines the decoder rejects.
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            Some(v["trace_id"].as_str()?.to_owned())
        })
        .collect();
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
    // The build and the judge are two families: a new image with the same judge is no judge change.
    let text_body = text["body"].as_str().unwrap();
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
    // The process families, read from /proc, in both formats.
    for family in ["text", "om"] {
        let scrape = if family == "text" { &text } else { &om };
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
    assert!(body.contains("# TYPE process_cpu_seconds counter\n"));
    // Counters keep `_total` on their samples; the family is announced without it.
    assert!(body.contains("# TYPE ragwatch_traces_received counter\n"));
    assert!(body.contains("\nragwatch_traces_received_total{stratum=\"head\"} "));

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
    eprintln!(
        "/metrics: text {} bytes, OpenMetrics {} bytes",
        text["body"].as_str().unwrap().len(),
        body.len()
    );
}

/// The raw families (`ragwatch_...`, not recorded `ragwatch:...`) that `rules.yaml` reads.
fn families_read_by_rules() -> BTreeSet<String> {
    let rules = std::fs::read_to_string(root().join("deploy/prometheus/rules.yaml")).unwrap();
    let mut found = BTreeSet::new();
    let bytes = rules.as_bytes();
    let mut i = 0;
    while let Some(at) = rules[i..].find("ragwatch_") {
        let start = i + at;
        let preceded =
            start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b':');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if !preceded {
            found.insert(rules[start..end].to_owned());
        }
        i = end;
    }
    found
}

/// Before the first trace, every counter and histogram series a rule reads exists at zero, for
/// every label value it can take: each stratum (declared, `default`, `other`: the set is bounded,
/// so no stratum appears later), judge, metric, estimate term, length term, score bucket and
/// reason. A series born at its first increment would be first scraped already non-zero, and
/// Prometheus could not count what came before that scrape.
#[test]
fn every_series_a_rule_reads_exists_at_zero_before_the_first_trace() {
    use ragwatch::dimensions::Quality;
    // A consumer pointed at a closed port: running, and no trace ever arrives.
    let rw = Ragwatch::start(
        &root().join("config/llm.toml"),
        &[
            ("RAGWATCH__SOURCE__KIND", "kafka".into()),
            ("RAGWATCH__KAFKA__BROKERS", "127.0.0.1:1".into()),
            ("RAGWATCH__KAFKA__TOPICS", "nothing".into()),
            ("RAGWATCH__KAFKA__GROUP_ID", "nothing".into()),
            ("RAGWATCH__LLM__BASE_URL", "http://127.0.0.1:1/v1".into()),
            ("RAGWATCH_LLM_API_KEY", "unused".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
            ("RAGWATCH__LABELS__FEEDBACK__ENABLED", "true".into()),
            // Variants on, with a declared share: the comparison's families exist only then.
            (
                "RAGWATCH__VARIANTS__DECLARED",
                "[\"stable\", \"canary\"]".into(),
            ),
            ("RAGWATCH__VARIANTS__BASELINE", "stable".into()),
            ("RAGWATCH__VARIANTS__FIELDS", "[\"/release\"]".into()),
            ("RAGWATCH__VARIANTS__SHARE", "{ canary = 0.1 }".into()),
            // Sources and a coverage level: their what-changed families exist only then.
            ("RAGWATCH__CHANGES__SOURCE__DECLARED", "[\"wiki\"]".into()),
            ("RAGWATCH__CHANGES__SOURCE__ID_PATTERN", "^([^/]+)/".into()),
            ("RAGWATCH__CHANGES__COVERAGE__LEVEL", "0.5".into()),
            ("RAGWATCH__REVIEW__ENABLED", "true".into()),
        ],
    );
    // The thresholds are exported by the evaluator's first pass, a second after start.
    let text = wait_for(
        "the evaluator's first pass",
        Duration::from_secs(10),
        || {
            rw.scrape()
                .filter(|t| t.contains("ragwatch_threshold_ratio{"))
        },
    );
    // Family types from the TYPE lines; a histogram's series carry its name plus a suffix.
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_owned(), kind.to_owned());
        }
    }
    let family_of = |series: &str| -> Option<String> {
        if types.contains_key(series) {
            return Some(series.to_owned());
        }
        ["_bucket", "_count", "_sum"].iter().find_map(|suffix| {
            let base = series.strip_suffix(suffix)?;
            (types.get(base).map(String::as_str) == Some("histogram")).then(|| base.to_owned())
        })
    };
    let samples = crate::common::Samples::parse(&text);
    let strata: BTreeSet<String> = [
        "head",
        "tail",
        "known_failure",
        "out_of_scope",
        "default",
        "other",
    ]
    .map(String::from)
    .into();
    // The judges this config runs (config/llm.toml: the offline and the LLM judge).
    let judges: BTreeSet<String> = ragwatch::judge::config::SampledJudge::Llm
        .verdict_judges()
        .iter()
        .map(|j| j.name().to_owned())
        .collect();
    let metrics: BTreeSet<String> = Quality::ALL.iter().map(|m| m.name().to_owned()).collect();
    let buckets: BTreeSet<String> = ragwatch::eval::LABEL_SCORE_BOUNDS
        .iter()
        .map(|b| b.to_string())
        .collect();
    let mut problems = Vec::new();
    let mut checked = 0;
    for series_name in families_read_by_rules() {
        // A gauge per assigned partition: none while the consumer holds no partition.
        if series_name == "ragwatch_kafka_consumer_lag_messages" {
            continue;
        }
        // The canary agreement: none before the first canary run, rather than a made-up value.
        if series_name == "ragwatch_judge_canary_agreement_ratio" {
            continue;
        }
        let Some(family) = family_of(&series_name) else {
            problems.push(format!(
                "{series_name}: read by a rule, not exported before the first trace"
            ));
            continue;
        };
        if !matches!(types[&family].as_str(), "counter" | "histogram") {
            continue;
        }
        checked += 1;
        let rows: Vec<&HashMap<String, String>> = samples
            .0
            .iter()
            .filter(|(n, _, _)| *n == series_name)
            .map(|(_, l, _)| l)
            .collect();
        for (n, l, v) in samples.0.iter().filter(|(n, _, _)| *n == series_name) {
            if *v != 0.0 {
                problems.push(format!("{n}{l:?} = {v} before any trace"));
            }
        }
        // Every label's values seen, and every combination of them present.
        let mut values: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for l in &rows {
            for (k, v) in *l {
                values.entry(k.clone()).or_default().insert(v.clone());
            }
        }
        let combinations: usize = values.values().map(BTreeSet::len).product();
        let distinct: BTreeSet<Vec<(&String, &String)>> = rows
            .iter()
            .map(|l| l.iter().collect::<BTreeMap<_, _>>().into_iter().collect())
            .collect();
        if distinct.len() != combinations {
            problems.push(format!(
                "{series_name}: {} series, not every combination of {values:?} ({combinations})",
                distinct.len()
            ));
        }
        let mut expect = |label: &str, want: &BTreeSet<String>| {
            if let Some(have) = values.get(label)
                && !want.is_subset(have)
            {
                problems.push(format!(
                    "{series_name}: {label} {have:?}, wants all of {want:?}"
                ));
            }
        };
        expect("stratum", &strata);
        expect("metric", &metrics);
        expect("bucket", &buckets);
        if !series_name.starts_with("ragwatch_judge_") {
            expect("judge", &judges);
        }
        if series_name == "ragwatch_estimate_terms_total" {
            let terms = ragwatch::window::EstimateSums::TERMS
                .map(String::from)
                .into();
            expect("term", &terms);
        }
    }
    assert!(
        checked >= 15,
        "only {checked} counter and histogram families found in the rules"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
