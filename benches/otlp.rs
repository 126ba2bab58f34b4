//! OTLP hot path, on OpenInference-shaped traces as the OpenInference OpenAI instrumentor writes
//! them (a CHAIN root, a RETRIEVER with three documents, an LLM span carrying the request and
//! response JSON and messages, an HTTP client span: four spans, about 4.5 KB a trace), 50 spans a
//! message:
//! - `decode`: protobuf bytes to `ExportTraceServiceRequest` (wire span count, then prost);
//! - `decode_assemble`: that plus span assembly, up to built traces (what the 100,000 spans/s aim
//!   is about);
//! - `decode_assemble_json`: the same from OTLP JSON;
//! - `ingest_full`: `SpanIngest` whole: decode, assembly, offsets bookkeeping, and the pipeline
//!   (stratify, offline judge, histograms, windows, sample).
//!
//! Throughput is in spans per second of the benchmark thread's own CPU time (read from
//! `/proc/thread-self/schedstat`), so the figure is per core even on a machine shared with other
//! work; wall-clock time would count the time other processes hold the core.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value::Value as V};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use ragwatch::config::Config;
use ragwatch::pipeline::{Pipeline, Position};
use ragwatch::recorder::Shared;
use ragwatch::source::{Ingest, SpanIngest};
use ragwatch::trace::otlp::build::{self, attr as kv, str_attr as s};
use ragwatch::trace::otlp::config::TraceFormat;
use ragwatch::trace::otlp::{Assembler, decode_request};

/// The calling thread's CPU time in nanoseconds.
struct ThreadCpu;

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

fn trace_spans(t: u64) -> Vec<Span> {
    let mut trace_id = vec![0x5b; 8];
    trace_id.extend_from_slice(&t.to_be_bytes());
    let parent_id = |parent: u64| if parent == 0 { 0 } else { t << 8 | parent };
    let span = |id: u64, parent: u64, name: &str, attributes: Vec<KeyValue>| Span {
        name: name.into(),
        kind: 1,
        start_time_unix_nano: 1_764_410_400_000_000_000 + id,
        end_time_unix_nano: 1_764_410_401_000_000_000 - id,
        ..build::span(&trace_id, t << 8 | id, parent_id(parent), attributes)
    };
    let product = ["Aurora router", "Beacon camera", "Cinder kettle"][(t % 3) as usize];
    let q = format!("How long is the warranty on the {product}?");
    let docs = [
        format!(
            "The {product} comes with a warranty of {} years covering parts and labour.",
            t % 5 + 1
        ),
        format!(
            "The list price of the {product} is {} dollars including tax.",
            20 + t % 900
        ),
        format!(
            "The {product} is assembled in our factory in Lisbon, which was opened by Maria Keller."
        ),
    ];
    let answer = format!(
        "The warranty on the {product} lasts {} years and covers parts and labour [doc_0].",
        t % 5 + 1
    );
    let context: String = docs
        .iter()
        .enumerate()
        .map(|(i, d)| format!("[doc_{i}] {d}\n"))
        .collect();
    let user = format!("Documents:\n{context}\nQuestion: {q}");
    let mut retriever = vec![
        s("openinference.span.kind", "RETRIEVER"),
        s("input.value", &q),
    ];
    for (i, d) in docs.iter().enumerate() {
        retriever.push(s(
            &format!("retrieval.documents.{i}.document.id"),
            &format!("doc_{i}"),
        ));
        retriever.push(s(&format!("retrieval.documents.{i}.document.content"), d));
        retriever.push(kv(
            &format!("retrieval.documents.{i}.document.score"),
            V::DoubleValue(0.9 - 0.1 * i as f64),
        ));
    }
    let request_json = serde_json::json!({"model": "gen-1", "temperature": 0, "messages": [
        {"role": "system", "content": "Answer from the documents; cite them as [id]."},
        {"role": "user", "content": user}]})
    .to_string();
    let response_json = serde_json::json!({"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": answer}}], "usage": {"prompt_tokens": 120, "completion_tokens": 30}})
    .to_string();
    vec![
        span(
            4,
            3,
            "POST /v1/chat/completions",
            vec![
                s("http.request.method", "POST"),
                s("url.full", "http://127.0.0.1:8000/v1/chat/completions"),
                kv("http.response.status_code", V::IntValue(200)),
            ],
        ),
        span(2, 1, "retrieve", retriever),
        span(
            3,
            1,
            "ChatCompletion",
            vec![
                s("llm.system", "openai"),
                s("input.value", &request_json),
                s("input.mime_type", "application/json"),
                s("output.value", &response_json),
                s("output.mime_type", "application/json"),
                s(
                    "llm.invocation_parameters",
                    "{\"model\": \"gen-1\", \"temperature\": 0}",
                ),
                s("llm.input_messages.0.message.role", "system"),
                s(
                    "llm.input_messages.0.message.content",
                    "Answer from the documents; cite them as [id].",
                ),
                s("llm.input_messages.1.message.role", "user"),
                s("llm.input_messages.1.message.content", &user),
                s("llm.model_name", "gen-1-2026-05-01"),
                kv("llm.token_count.prompt", V::IntValue(120)),
                kv("llm.token_count.completion", V::IntValue(30)),
                kv("llm.token_count.total", V::IntValue(150)),
                s("llm.output_messages.0.message.role", "assistant"),
                s("llm.output_messages.0.message.content", &answer),
                s("openinference.span.kind", "LLM"),
            ],
        ),
        span(
            1,
            0,
            "rag",
            vec![
                s("openinference.span.kind", "CHAIN"),
                s("input.value", &q),
                s("input.mime_type", "text/plain"),
                s("output.value", &answer),
                s("output.mime_type", "text/plain"),
                s("metadata", "{\"route\": \"support\"}"),
                s("ragwatch.stratum", ["head", "tail"][(t % 2) as usize]),
            ],
        ),
    ]
}

fn requests(traces: u64, per_message: usize) -> (Vec<ExportTraceServiceRequest>, u64) {
    let spans: Vec<Span> = (0..traces).flat_map(trace_spans).collect();
    let n = spans.len() as u64;
    let reqs = spans
        .chunks(per_message)
        .map(|c| ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![s("service.name", "rag-service")],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: c.to_vec(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        })
        .collect();
    (reqs, n)
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let (reqs, spans) = requests(2000, 50);
    let proto: Vec<Vec<u8>> = reqs.iter().map(Message::encode_to_vec).collect();
    let json: Vec<Vec<u8>> = reqs
        .iter()
        .map(|r| serde_json::to_vec(r).unwrap())
        .collect();
    let bytes: usize = proto.iter().map(Vec::len).sum();
    eprintln!(
        "{spans} spans in {} messages, {} bytes of protobuf ({} a span)",
        proto.len(),
        bytes,
        bytes as u64 / spans
    );
    let config =
        Config::from_toml_with_env("[decode]\nformat = \"otlp_proto\"\n", &HashMap::new()).unwrap();
    let (max, max_spans) = (
        config.decode.max_message_bytes,
        config.assembly.max_spans_per_message,
    );

    let mut g = c.benchmark_group("otlp");
    g.throughput(Throughput::Elements(spans));
    g.bench_function("decode", |b| {
        b.iter(|| {
            proto
                .iter()
                .map(|m| {
                    decode_request(m, TraceFormat::OtlpProto, max, max_spans)
                        .unwrap()
                        .resource_spans
                        .len()
                })
                .sum::<usize>()
        })
    });
    let assemble = |msgs: &[Vec<u8>], format: TraceFormat| {
        let mut a: Assembler<Position> = Assembler::new(&config.decode, &config.assembly);
        let mut out = Vec::new();
        let mut built = 0usize;
        for (i, m) in msgs.iter().enumerate() {
            let req = decode_request(m, format, max, max_spans).unwrap();
            let pos = Position {
                stream: 0,
                partition: 0,
                offset: i as i64,
            };
            a.add_request(req, Some(pos), 0, &mut out);
            built += out.len();
            out.clear();
        }
        assert_eq!(built, 2000);
        built
    };
    g.bench_function("decode_assemble", |b| {
        b.iter(|| assemble(&proto, TraceFormat::OtlpProto))
    });
    g.bench_function("decode_assemble_json", |b| {
        b.iter(|| assemble(&json, TraceFormat::OtlpJson))
    });
    g.bench_function("ingest_full", |b| {
        b.iter_batched_ref(
            || {
                SpanIngest::new(
                    &config.decode,
                    &config.assembly,
                    Pipeline::new(
                        &config.decode,
                        &config.sample,
                        Shared::new(config.recorder_setup()),
                        None,
                    ),
                )
            },
            |si| {
                let mut released = Vec::new();
                for (i, m) in proto.iter().enumerate() {
                    let pos = Position {
                        stream: 0,
                        partition: 0,
                        offset: i as i64,
                    };
                    si.message(m, Some(pos), &mut released);
                    released.clear();
                }
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = bench
}
criterion_main!(benches);
