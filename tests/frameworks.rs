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
//! - its scores equal those of the pipeline's own texts fed to ragwatch in its native form.
//!
//! The venv with the pinned frameworks (tests/frameworks-requirements.txt) is made by tests/run.sh;
//! its python is `RAGWATCH_FRAMEWORKS_PYTHON`, else `~/.cache/ragwatch/frameworks-venv/bin/python`.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use ragwatch::config::{AssemblyConfig, DecodeConfig, Preset, TraceFormat};
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
    let m = wait_for(
        &format!("{what}: {total} traces assembled"),
        Duration::from_secs(60),
        || {
            let m = receiver.metrics()?;
            (m.sum("ragwatch_traces_assembled_total", &[]) >= total).then_some(m)
        },
    );
    let count = |name: &str, labels: &[(&str, &str)]| m.sum(name, labels);
    assert_eq!(
        count("ragwatch_traces_assembled_total", &[("trigger", "root")]),
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
    let native_m = wait_for(
        &format!("{what}: native traces"),
        Duration::from_secs(30),
        || {
            let m = from_file.metrics()?;
            (m.sum("ragwatch_traces_received_total", &[]) == N as f64).then_some(m)
        },
    );
    for name in SCORES {
        let labels = [("judge", "offline")];
        let (a, b) = (native_m.sum(name, &labels), m.sum(name, &labels));
        assert!(
            (a - b).abs() <= 1e-9 * a.abs().max(1.0),
            "{what}: {name}: native {a}, spans {b}"
        );
    }
    eprintln!(
        "{what}: {N} queries judged, {} index traces not_rag, {} spans, in {:?}",
        pair.setup,
        m.sum("ragwatch_spans_received_total", &[]),
        started.elapsed()
    );
}

#[test]
fn langchain_openllmetry() {
    run_pair(&Pair {
        framework: "langchain",
        instrumentor: "openllmetry",
        preset: "openllmetry",
        ids: false,
        setup: 0,
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
    });
}
