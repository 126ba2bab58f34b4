//! Real RAG frameworks, traced by their real instrumentors, into ragwatch: for each framework and
//! instrumentor pair, tests/frameworks_app.py runs a pipeline from PyPI (in-memory vector store,
//! deterministic embeddings, the model answered by a loopback stand-in) and exports its spans with
//! the OpenTelemetry SDK's OTLP/HTTP exporter to a running ragwatch (`source.kind = "otlp"`, no
//! `decode.format`). The app writes what the pipeline itself used (question, retrieved documents,
//! answer) and the same spans as OTLP messages. Checked:
//! - the spans assembled (in-process, from those messages) into traces whose question, contexts
//!   (text in order; ids where the instrumentor keeps them) and answer equal the pipeline's own;
//! - the running receiver counts every trace: queries judged, index building `not_rag`, nothing
//!   rejected or unreadable, received = judged + unjudged;
//! - its scores equal those of the pipeline's own texts fed to ragwatch in its native form;
//! - `ragwatch replay` of the same spans captured as the Collector's file exporter writes them
//!   (length-prefixed protobuf and OTLP JSON lines) gives the same records both ways, and the same
//!   verdicts and counts as the live receiver;
//! - for one pair per instrumentor family, the same spans as Kafka messages on a tansu topic,
//!   consumed with `decode.format = "otlp_proto"`, are assembled, judged and counted as over HTTP.
//!
//! The venv with the pinned frameworks (tests/frameworks-requirements.txt) is made by tests/run.sh;
//! its python is `RAGWATCH_FRAMEWORKS_PYTHON`, else `~/.cache/ragwatch/frameworks-venv/bin/python`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use ragwatch::trace::config::DecodeConfig;
use ragwatch::trace::otlp::config::{AssemblyConfig, Preset, TraceFormat};
use ragwatch::trace::otlp::{Assembler, Completed, Outcome, decode_request};
use serde_json::Value;

/// Queries per pair.
const N: usize = 12;

fn python() -> PathBuf {
    std::env::var_os("RAGWATCH_FRAMEWORKS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap())
                .join(".cache/ragwatch/frameworks-venv/bin/python")
        })
}

/// One framework and instrumentor pair, and what its instrumentor keeps.
struct Pair {
    framework: &'static str,
    instrumentor: &'static str,
    /// The `decode.preset` that reads it.
    preset: &'static str,
    /// Document ids reach the spans.
    ids: bool,
    /// Traces the pipeline makes before the queries (index building).
    setup: usize,
    /// Also deliver its spans through Kafka.
    kafka: bool,
}

/// What the pipeline used for one query.
struct Truth {
    question: String,
    contexts: Vec<(String, String)>,
    answer: String,
}

fn read_truth(path: &Path) -> (HashMap<String, Truth>, usize) {
    let mut truth = HashMap::new();
    let mut setup = None;
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if let Some(n) = v.get("setup_traces") {
            setup = n.as_u64();
            continue;
        }
        let contexts = v["contexts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["id"].as_str().unwrap().to_owned(),
                    c["text"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        truth.insert(
            v["trace_id"].as_str().unwrap().to_owned(),
            Truth {
                question: v["question"].as_str().unwrap().to_owned(),
                contexts,
                answer: v["answer"].as_str().unwrap().to_owned(),
            },
        );
    }
    (truth, setup.unwrap() as usize)
}

/// The app's OTLP messages (a big-endian u32 length before each) assembled under `preset`.
fn assemble(batches: &Path, preset: &str) -> Vec<Completed<u32>> {
    let decode = DecodeConfig {
        preset: serde_json::from_value::<Preset>(Value::from(preset)).unwrap(),
        ..DecodeConfig::default()
    };
    let mut a: Assembler<u32> = Assembler::new(&decode, &AssemblyConfig::default());
    let mut out = Vec::new();
    let data = std::fs::read(batches).unwrap();
    let mut rest = &data[..];
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        let req = decode_request(
            &rest[4..4 + len],
            TraceFormat::OtlpProto,
            decode.max_message_bytes,
            AssemblyConfig::default().max_spans_per_message,
        )
        .unwrap();
        a.add_request(req, None, 0, &mut out);
        rest = &rest[4 + len..];
    }
    a.finish(&mut out);
    out
}

/// The families [`check_counts`] and [`same_scores`] compare: a trace is counted assembled, then
/// received, then judged and scored, one after the other, so they are read once all have stopped
/// moving.
const COUNTED: &[&str] = &[
    "ragwatch_traces_",
    "ragwatch_spans_",
    "ragwatch_source_messages_total",
    "ragwatch_faithfulness_ratio",
    "ragwatch_answer_relevancy_ratio",
    "ragwatch_context_relevance_ratio",
    "ragwatch_no_claims_total",
    "ragwatch_refusals_total",
];

/// The offline judge's figures that must agree between the spans and the pipeline's own texts.
const SCORES: [&str; 6] = [
    "ragwatch_faithfulness_ratio_sum",
    "ragwatch_faithfulness_ratio_count",
    "ragwatch_answer_relevancy_ratio_sum",
    "ragwatch_context_relevance_ratio_sum",
    "ragwatch_no_claims_total",
    "ragwatch_refusals_total",
];

fn run_pair(pair: &Pair) {
    let what = format!("{} + {}", pair.framework, pair.instrumentor);
    let dir = tempfile::tempdir().unwrap();
    // No decode.format: an OTLP source reads OTLP.
    let config = dir.path().join("receiver.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"otlp\"\n[decode]\npreset = \"{}\"\n",
            pair.preset
        ),
    )
    .unwrap();
    let receiver = Ragwatch::start(&config, &[]);
    let addr = receiver.write_addr();

    let (batches, truth_path) = (dir.path().join("batches"), dir.path().join("truth.jsonl"));
    let json_lines = dir.path().join("spans.jsonl");
    let started = std::time::Instant::now();
    run_ok(
        Command::new(python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/frameworks_app.py"))
            .args(["--framework", pair.framework])
            .args(["--instrumentor", pair.instrumentor])
            .args(["--n", &N.to_string()])
            .args(["--endpoint", &format!("http://{addr}/v1/traces")])
            .arg("--batches")
            .arg(&batches)
            .arg("--otlp-json")
            .arg(&json_lines)
            .arg("--truth")
            .arg(&truth_path)
            .env("OTEL_EXPORTER_OTLP_TRACES_HEADERS", otel_auth_header())
            // OpenLLMetry's default, said out loud: the texts go on the spans.
            .env("TRACELOOP_TRACE_CONTENT", "true"),
    );
    eprintln!("{what}: app ran in {:?}", started.elapsed());
    let (truth, setup) = read_truth(&truth_path);
    assert_eq!(truth.len(), N, "{what}: one root span per query");
    assert_eq!(setup, pair.setup, "{what}: traces before the queries");

    // The spans, assembled: the pipeline's own question, contexts and answer.
    let completed = assemble(&batches, pair.preset);
    let mut judged = 0;
    let mut not_rag = 0;
    for c in &completed {
        match &c.outcome {
            Outcome::Trace(t) => {
                let want = truth
                    .get(&c.trace_id)
                    .unwrap_or_else(|| panic!("{what}: trace {} is no query", c.trace_id));
                assert_eq!(t.query, want.question, "{what}: question");
                assert_eq!(t.answer, want.answer, "{what}: answer");
                let got: Vec<(Option<&str>, &str)> = t
                    .contexts
                    .iter()
                    .map(|c| (c.id.as_deref(), c.text.as_str()))
                    .collect();
                let expected: Vec<(Option<&str>, &str)> = want
                    .contexts
                    .iter()
                    .map(|(id, text)| (pair.ids.then_some(id.as_str()), text.as_str()))
                    .collect();
                assert_eq!(got, expected, "{what}: contexts");
                judged += 1;
            }
            Outcome::Unjudged(_, "not_rag") if !truth.contains_key(&c.trace_id) => not_rag += 1,
            o => panic!("{what}: trace {}: {o:?}", c.trace_id),
        }
    }
    assert_eq!((judged, not_rag), (N, pair.setup), "{what}");

    // The running receiver: every trace counted, the queries judged, index building not_rag.
    let total = (N + pair.setup) as f64;
    let deadline = Duration::from_secs(60);
    wait_for(
        &format!("{what}: {total} traces assembled"),
        deadline,
        || {
            let m = receiver.metrics()?;
            (m.sum("ragwatch_traces_assembled_total", &[]) >= total).then_some(())
        },
    );
    let m = receiver.settled_metrics(COUNTED, deadline);
    check_counts(&what, &m, pair);

    // The pipeline's own texts in ragwatch's native form score the same.
    let native = dir.path().join("native.jsonl");
    let mut lines = String::new();
    for (id, t) in &truth {
        let contexts: Vec<Value> = t
            .contexts
            .iter()
            .map(|(id, text)| serde_json::json!({"id": id, "text": text}))
            .collect();
        lines.push_str(
            &serde_json::json!({"trace_id": id, "query": t.question, "contexts": contexts,
                                "answer": t.answer})
            .to_string(),
        );
        lines.push('\n');
    }
    std::fs::write(&native, lines).unwrap();
    let file_config = dir.path().join("native.toml");
    std::fs::write(
        &file_config,
        format!(
            "[source]\nkind = \"file\"\npath = \"{}\"\nrate_per_sec = 0\nloop = false\n",
            native.display()
        ),
    )
    .unwrap();
    let from_file = Ragwatch::start(&file_config, &[]);
    let deadline = Duration::from_secs(30);
    wait_for(&format!("{what}: native traces"), deadline, || {
        let m = from_file.metrics()?;
        (m.sum("ragwatch_traces_received_total", &[]) == N as f64).then_some(())
    });
    // The last trace's scores are recorded after it is counted received.
    let native_m = from_file.settled_metrics(COUNTED, deadline);
    assert_eq!(
        native_m.sum("ragwatch_traces_received_total", &[]),
        N as f64,
        "{what}: native traces"
    );
    same_scores(&format!("{what}: native against spans"), &native_m, &m);
    eprintln!(
        "{what}: {N} queries judged, {} index traces not_rag, {} spans, in {:?}",
        pair.setup,
        m.sum("ragwatch_spans_received_total", &[]),
        started.elapsed()
    );

    let replayed = std::time::Instant::now();
    check_replay(&what, dir.path(), pair, (&batches, &json_lines), &truth, &m);
    eprintln!("{what}: replayed both forms in {:?}", replayed.elapsed());
    if pair.kafka {
        let consumed = std::time::Instant::now();
        check_kafka(&what, dir.path(), pair, &batches, &m);
        eprintln!("{what}: through Kafka in {:?}", consumed.elapsed());
    }
}

/// A ragwatch's counts after the pair's traces: every trace assembled at its root and received,
/// the queries judged, index building `not_rag`, nothing else unjudged, rejected or dropped.
fn check_counts(what: &str, m: &Samples, pair: &Pair) {
    let total = (N + pair.setup) as f64;
    let count = |name: &str, labels: &[(&str, &str)]| m.sum(name, labels);
    assert_eq!(
        count("ragwatch_traces_assembled_total", &[("trigger", "root")]),
        total,
        "{what}"
    );
    assert_eq!(
        count("ragwatch_traces_assembled_total", &[]),
        total,
        "{what}"
    );
    assert_eq!(
        count("ragwatch_traces_received_total", &[]),
        total,
        "{what}"
    );
    assert_eq!(
        count("ragwatch_faithfulness_ratio_count", &[("judge", "offline")]),
        N as f64,
        "{what}: judged"
    );
    assert_eq!(
        count("ragwatch_traces_unjudged_total", &[("reason", "not_rag")]),
        pair.setup as f64,
        "{what}"
    );
    assert_eq!(
        count("ragwatch_traces_unjudged_total", &[]),
        pair.setup as f64,
        "{what}: nothing else unjudged"
    );
    assert_eq!(count("ragwatch_traces_rejected_total", &[]), 0.0, "{what}");
    assert_eq!(count("ragwatch_spans_dropped_total", &[]), 0.0, "{what}");
}

/// The offline judge's figures in `a` and `b` agree.
fn same_scores(what: &str, a: &Samples, b: &Samples) {
    for name in SCORES {
        let labels = [("judge", "offline")];
        let (x, y) = (a.sum(name, &labels), b.sum(name, &labels));
        assert!(
            (x - y).abs() <= 1e-9 * x.abs().max(1.0),
            "{what}: {name}: {x} against {y}"
        );
    }
}

/// `ragwatch replay` of the captured spans, length-prefixed protobuf and OTLP JSON lines: the same
/// records from both; per trace, the queries judged and index building `not_rag`; summed, the
/// receiver's figures (`live`).
fn check_replay(
    what: &str,
    dir: &Path,
    pair: &Pair,
    (proto, json): (&Path, &Path),
    truth: &HashMap<String, Truth>,
    live: &Samples,
) {
    // The configured format is OTLP; which one does not matter, each file's first byte tells.
    let config = dir.join("replay.toml");
    std::fs::write(
        &config,
        format!(
            "[decode]\nformat = \"otlp_json\"\npreset = \"{}\"\n",
            pair.preset
        ),
    )
    .unwrap();
    let replay = |file: &Path, extra: &[&str]| -> String {
        let out = dir.join("records.jsonl");
        run_ok(
            Command::new(env!("CARGO_BIN_EXE_ragwatch"))
                .arg("replay")
                .arg("--config")
                .arg(&config)
                .args(extra)
                .arg("--output")
                .arg(&out)
                .arg(file),
        );
        std::fs::read_to_string(&out).unwrap()
    };
    let from_proto = replay(proto, &[]);
    let from_json = replay(json, &["--format", "otlp_proto"]);
    assert_eq!(from_proto, from_json, "{what}: the two forms replay alike");

    let records: Vec<Value> = from_proto
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), N + pair.setup, "{what}: one record a trace");
    let (mut sums, mut no_claims, mut refusals) = ([0.0; 3], 0.0, 0.0);
    for r in &records {
        let id = r["trace_id"].as_str().unwrap();
        match (r["status"].as_str().unwrap(), r["reason"].as_str()) {
            ("judged" | "no_claims", reason) => {
                assert!(truth.contains_key(id), "{what}: {id} judged, no query");
                for (sum, key) in
                    sums.iter_mut()
                        .zip(["faithfulness", "answer_relevancy", "context_relevance"])
                {
                    *sum += r[key].as_f64().unwrap_or(0.0);
                }
                no_claims += f64::from(r["status"] == "no_claims");
                refusals += f64::from(reason == Some("refusal"));
            }
            ("unjudged", Some("not_rag")) => {
                assert!(!truth.contains_key(id), "{what}: query {id} not judged")
            }
            other => panic!("{what}: {id}: {other:?}"),
        }
    }
    let want = [
        "ragwatch_faithfulness_ratio_sum",
        "ragwatch_answer_relevancy_ratio_sum",
        "ragwatch_context_relevance_ratio_sum",
        "ragwatch_no_claims_total",
        "ragwatch_refusals_total",
    ];
    let got = [sums[0], sums[1], sums[2], no_claims, refusals];
    for (name, got) in want.into_iter().zip(got) {
        let live = live.sum(name, &[("judge", "offline")]);
        assert!(
            (live - got).abs() <= 1e-9 * live.abs().max(1.0),
            "{what}: {name}: receiver {live}, replay {got}"
        );
    }
}

/// The same spans as Kafka messages (one OTLP request each, as the Collector's Kafka exporter
/// writes them) on a tansu topic, consumed by a ragwatch with `decode.format = "otlp_proto"`:
/// counted and scored as the receiver did (`live`).
fn check_kafka(what: &str, dir: &Path, pair: &Pair, batches: &Path, live: &Samples) {
    let broker = Broker::start();
    let topic = unique("fw-spans");
    broker.create_topic(&topic, 1);
    let data = std::fs::read(batches).unwrap();
    let mut messages = Vec::new();
    let mut rest = &data[..];
    while rest.len() >= 4 {
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        messages.push((String::new(), rest[4..4 + len].to_vec()));
        rest = &rest[4 + len..];
    }
    produce(&broker.brokers(), &topic, &messages);
    let config = dir.join("kafka.toml");
    std::fs::write(
        &config,
        format!(
            "[decode]\nformat = \"otlp_proto\"\npreset = \"{}\"\n",
            pair.preset
        ),
    )
    .unwrap();
    let env = Ragwatch::kafka_env(&broker.brokers(), &topic, &unique("g"));
    let consumer = Ragwatch::start(&config, &env);
    let total = (N + pair.setup) as f64;
    let deadline = Duration::from_secs(60);
    wait_for(
        &format!("{what}: {total} traces from Kafka"),
        deadline,
        || {
            let m = consumer.metrics()?;
            (m.sum("ragwatch_traces_assembled_total", &[]) >= total
                && m.sum("ragwatch_traces_received_total", &[]) >= total)
                .then_some(())
        },
    );
    let m = consumer.settled_metrics(COUNTED, deadline);
    check_counts(&format!("{what} (Kafka)"), &m, pair);
    assert_eq!(
        m.sum("ragwatch_source_messages_total", &[]),
        messages.len() as f64,
        "{what}: every message read once"
    );
    same_scores(&format!("{what} (Kafka)"), live, &m);
}

#[test]
fn langchain_openllmetry() {
    run_pair(&Pair {
        framework: "langchain",
        instrumentor: "openllmetry",
        preset: "openllmetry",
        ids: false,
        setup: 0,
        kafka: true,
    });
}

#[test]
fn langchain_openinference() {
    run_pair(&Pair {
        framework: "langchain",
        instrumentor: "openinference",
        preset: "openinference",
        ids: false,
        setup: 0,
        kafka: false,
    });
}

#[test]
fn llamaindex_openllmetry() {
    run_pair(&Pair {
        framework: "llamaindex",
        instrumentor: "openllmetry",
        preset: "openllmetry",
        ids: true,
        setup: 1,
        kafka: false,
    });
}

#[test]
fn llamaindex_openinference() {
    run_pair(&Pair {
        framework: "llamaindex",
        instrumentor: "openinference",
        preset: "openinference",
        ids: true,
        setup: 1,
        kafka: true,
    });
}

#[test]
fn haystack_openinference() {
    run_pair(&Pair {
        framework: "haystack",
        instrumentor: "openinference",
        preset: "openinference",
        ids: true,
        setup: 0,
        kafka: false,
    });
}

#[test]
fn dspy_openinference() {
    run_pair(&Pair {
        framework: "dspy",
        instrumentor: "openinference",
        preset: "openinference",
        ids: false,
        setup: 0,
        kafka: false,
    });
}
