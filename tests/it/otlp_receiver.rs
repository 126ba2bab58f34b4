//! The OTLP/HTTP receiver: protobuf (gzip too) and OTLP JSON taken, partial success reported for
//! spans it cannot keep (an invalid id, a late span), 415, 413 and 400 for what it cannot take, a
//! million-span request refused from its wire count without decoding it; every outcome counted.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use ragwatch::trace::otlp::build::{self, request, str_attr as kv};

pub(crate) fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Starts ragwatch as an OTLP/HTTP receiver; returns it and the receiver's address.
/// `otlp` holds more `[otlp]` keys, `extra` other sections.
pub(crate) fn start_receiver(
    dir: &Path,
    otlp: &str,
    extra: &str,
    env: &[(&str, String)],
) -> (Ragwatch, SocketAddr) {
    let (rw, addr, _) = start_receivers(dir, otlp, extra, env, false);
    (rw, addr)
}

/// Starts ragwatch as an OTLP receiver: the write listener and, with `grpc`, its second port
/// (`write.grpc_listen`) beside it; returns it and the two addresses.
pub(crate) fn start_receivers(
    dir: &Path,
    otlp: &str,
    extra: &str,
    env: &[(&str, String)],
    grpc: bool,
) -> (Ragwatch, SocketAddr, Option<SocketAddr>) {
    let grpc_port_file = dir.join(format!("otlp-grpc-{}", rand::random::<u32>()));
    let mut env = env.to_vec();
    if grpc {
        env.push(("RAGWATCH__WRITE__GRPC_LISTEN", "127.0.0.1:0".to_owned()));
        env.push((
            "RAGWATCH__WRITE__GRPC_PORT_FILE",
            grpc_port_file.display().to_string(),
        ));
    }
    let config = write_config(
        dir,
        &format!("receiver-{}.toml", rand::random::<u32>()),
        &format!("[source]\nkind = \"otlp\"\n[otlp]\n{otlp}\n{extra}"),
    );
    let rw = Ragwatch::start(&config, &env);
    let addr = rw.write_addr();
    let grpc_addr = grpc.then(|| {
        wait_for("the gRPC port", Duration::from_secs(20), || {
            std::fs::read_to_string(&grpc_port_file).ok()?.parse().ok()
        })
    });
    (rw, addr, grpc_addr)
}

pub(crate) fn id16(trace: u64) -> Vec<u8> {
    let mut v = vec![0xab; 8];
    v.extend_from_slice(&trace.to_be_bytes());
    v
}

/// An OpenInference RAG trace of three spans: retriever, model call, chain root (in end order).
pub(crate) fn rag_spans(trace: u64) -> Vec<Span> {
    let span = |id: u64, parent: u64, attributes: Vec<KeyValue>| Span {
        name: "s".into(),
        start_time_unix_nano: 1_764_410_400_000_000_000 + id,
        end_time_unix_nano: 1_764_410_401_000_000_000 - id,
        ..build::span(&id16(trace), id, parent, attributes)
    };
    let k = trace % 7;
    vec![
        span(
            2,
            1,
            vec![
                kv("openinference.span.kind", "RETRIEVER"),
                kv("retrieval.documents.0.document.id", "doc_0"),
                kv(
                    "retrieval.documents.0.document.content",
                    &format!("The warranty of product {k} lasts {k} years and covers parts."),
                ),
            ],
        ),
        span(
            3,
            1,
            vec![
                kv("openinference.span.kind", "LLM"),
                kv("llm.model_name", "gen-1"),
            ],
        ),
        span(
            1,
            0,
            vec![
                kv("openinference.span.kind", "CHAIN"),
                kv(
                    "input.value",
                    &format!("How long is the warranty of product {k}?"),
                ),
                kv(
                    "output.value",
                    &format!("The warranty of product {k} lasts {k} years."),
                ),
                kv(
                    "ragwatch.stratum",
                    if trace.is_multiple_of(3) {
                        "tail"
                    } else {
                        "head"
                    },
                ),
            ],
        ),
    ]
}

/// A minimal HTTP/1.1 POST; returns status, headers (lowercased) and body.
fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\
         Authorization: Bearer {WRITE_TOKEN}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    // A server may answer (413) before reading all of a large body.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    (code, head, raw[split + 4..].to_vec())
}

const PROTO: [(&str, &str); 1] = [("Content-Type", "application/x-protobuf")];

/// A receiver taking bodies up to a million bytes.
fn receiver(dir: &Path) -> (Ragwatch, SocketAddr) {
    start_receiver(
        dir,
        "max_body_bytes = 1000000",
        "[decode]\nformat = \"otlp_proto\"\n",
        &[],
    )
}

/// The `rejectedSpans` of a partial-success answer.
fn rejected(body: &[u8]) -> String {
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap();
    answer["partialSuccess"]["rejectedSpans"]
        .to_string()
        .trim_matches('"')
        .to_owned()
}

/// Protobuf gzip-compressed, then OTLP JSON (hex ids, integers as strings) with a span whose trace
/// id is one byte, then a late span of the trace already complete: taken, the two bad spans
/// rejected in partial successes.
fn post_protobuf_and_json(addr: SocketAddr) {
    let body = request(rag_spans(1)).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&body).unwrap();
    let (code, head, _) = post(
        addr,
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "gzip"),
        ],
        &gz.finish().unwrap(),
    );
    assert_eq!(code, 200, "{head}");
    assert!(head.contains("content-type: application/x-protobuf"));
    let json = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "parentSpanId": "eee19b7ec3c1b173",
         "name": "retrieve", "kind": 1, "startTimeUnixNano": "1", "endTimeUnixNano": "2",
         "attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}},
                        {"key": "retrieval.documents.0.document.content", "value": {"stringValue": "Ann wrote the book."}},
                        {"key": "retrieval.documents.0.document.score", "value": {"doubleValue": 0.5}}]},
        {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b173",
         "name": "rag", "startTimeUnixNano": "1", "endTimeUnixNano": "3",
         "attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "CHAIN"}},
                        {"key": "input.value", "value": {"stringValue": "Who wrote the book?"}},
                        {"key": "output.value", "value": {"stringValue": "Ann wrote the book."}}]},
        {"traceId": "00", "spanId": "eee19b7ec3c1b179", "name": "bad id"}]}]}]});
    let (code, head, body) = post(
        addr,
        &[("Content-Type", "application/json")],
        json.to_string().as_bytes(),
    );
    assert_eq!(code, 200, "{head}");
    // The span with a one-byte trace id is not kept.
    assert_eq!(rejected(&body), "1");
    // A span of a trace already complete is late: not kept either.
    let late = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b175", "parentSpanId": "eee19b7ec3c1b173", "name": "late"}]}]}]});
    let (code, _, body) = post(
        addr,
        &[("Content-Type", "application/json")],
        late.to_string().as_bytes(),
    );
    assert_eq!(code, 200);
    assert_eq!(rejected(&body), "1");
}

/// Unsupported type, too large, undecodable: 415, 413, 400 with a google.rpc.Status body.
fn post_what_it_cannot_take(addr: SocketAddr) {
    let (code, _, _) = post(addr, &[("Content-Type", "text/plain")], b"hello");
    assert_eq!(code, 415);
    let (code, _, _) = post(addr, &PROTO, &vec![0u8; 2_000_000]);
    assert_eq!(code, 413);
    let (code, head, body) = post(addr, &PROTO, b"not protobuf at all");
    assert_eq!(code, 400, "{head}");
    assert!(!body.is_empty(), "a google.rpc.Status body");
}

#[test]
fn the_receiver_speaks_otlp_http() {
    let dir = tempfile::tempdir().unwrap();
    let (rw, addr) = receiver(dir.path());
    post_protobuf_and_json(addr);
    post_what_it_cannot_take(addr);
    let deadline = Duration::from_secs(10);
    wait_for("two traces judged", deadline, || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_traces_received_total", &[]) == 2.0).then_some(())
    });
    // The requests and the spans dropped are counted apart from the traces: every count compared
    // with what the client sent, once they stop moving.
    let m = rw.settled_metrics(
        &[
            "ragwatch_traces_",
            "ragwatch_spans_",
            "ragwatch_otlp_requests_total",
        ],
        deadline,
    );
    assert_eq!(m.sum("ragwatch_traces_received_total", &[]), 2.0);
    let requests = |outcome: &str| m.sum("ragwatch_otlp_requests_total", &[("outcome", outcome)]);
    assert_eq!(requests("partial"), 2.0);
    assert_eq!(requests("too_large"), 1.0);
    assert_eq!(requests("unsupported"), 1.0);
    assert_eq!(requests("bad_request"), 1.0);
    assert_eq!(
        m.sum("ragwatch_spans_dropped_total", &[("reason", "late")]),
        1.0
    );
    assert_eq!(
        m.sum("ragwatch_spans_dropped_total", &[("reason", "invalid_id")]),
        1.0
    );
    promtool_check_metrics_in_tier(&rw.scrape().unwrap());
}

/// A request of a million spans, each `span`, as raw protobuf.
fn million_spans(span: &[u8]) -> Vec<u8> {
    let mut scope = Vec::with_capacity(span.len() * 1_000_000 + 64);
    for _ in 0..1_000_000 {
        scope.push(0x12); // ScopeSpans.spans
        prost::encoding::encode_varint(span.len() as u64, &mut scope);
        scope.extend_from_slice(span);
    }
    let wrap = |tag: u8, inner: Vec<u8>| {
        let mut out = vec![tag];
        prost::encoding::encode_varint(inner.len() as u64, &mut out);
        out.extend(inner);
        out
    };
    wrap(0x0a, wrap(0x12, scope))
}

/// A million spans: refused from the wire count, without decoding them.
#[test]
fn a_million_span_request_is_refused_from_its_wire_count() {
    let dir = tempfile::tempdir().unwrap();
    let span = Span {
        trace_id: id16(9),
        span_id: vec![7; 8],
        ..Default::default()
    }
    .encode_to_vec();
    let million = million_spans(&span);
    let (big_rw, big_addr) = start_receiver(
        dir.path(),
        "max_body_bytes = 100000000\nmax_queued_bytes = 300000000",
        "[decode]\nformat = \"otlp_proto\"\n",
        &[],
    );
    let started = std::time::Instant::now();
    let (code, head, _) = post(big_addr, &PROTO, &million);
    assert_eq!(code, 400, "{head}");
    eprintln!(
        "a million-span request ({} MB) refused in {:?}",
        million.len() >> 20,
        started.elapsed()
    );
    // Counted as the request is refused; read once the counts stop moving, as every count
    // compared with what the client saw.
    let m = big_rw.settled_metrics(
        &[
            "ragwatch_traces_",
            "ragwatch_spans_",
            "ragwatch_otlp_requests_total",
        ],
        // As long as the client would have waited for the answer (its read timeout).
        Duration::from_secs(20),
    );
    assert_eq!(
        m.sum(
            "ragwatch_traces_rejected_total",
            &[("reason", "too_many_spans")]
        ),
        1.0
    );
    assert_eq!(m.sum("ragwatch_spans_received_total", &[]), 0.0);
}
