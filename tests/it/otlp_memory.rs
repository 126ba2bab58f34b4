//! The OTLP receiver's memory bound: the real binary with the shipped `[otlp]` and `[assembly]`
//! defaults, flooded by more concurrent senders of requests at `otlp.max_body_bytes` than the memory
//! budget (`otlp.max_queued_bytes`) covers, half of them gzip-compressed. The process's peak
//! resident memory (VmHWM) stays under the Helm chart's memory limit, the budget refuses some
//! requests with 429 (counted `memory`), every request ends in exactly one outcome that matches the
//! answer its client saw, and every trace of every request taken is accounted for.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use prost::Message;
use ragwatch::trace::otlp::build::{request, span, str_attr as kv};

/// The Helm chart's memory limit (deploy/helm/ragwatch/values.yaml resources.limits.memory).
const CHART_LIMIT_BYTES: u64 = 256 << 20;
/// The shipped `otlp.max_body_bytes`.
const MAX_BODY: usize = 8 << 20;
const SENDERS: usize = 40;
const REQUESTS_PER_SENDER: usize = 3;
const TRACES_PER_REQUEST: u64 = 100;

/// The chart's limit, read from the chart, so the test follows it.
fn chart_limit() -> u64 {
    let values = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/helm/ragwatch/values.yaml"),
    )
    .unwrap();
    let limits = &values[values.find("  limits:").unwrap()..];
    let line = limits
        .lines()
        .find(|l| l.trim_start().starts_with("memory:"))
        .unwrap();
    let mi: u64 = line
        .trim()
        .trim_start_matches("memory:")
        .trim()
        .trim_end_matches("Mi")
        .parse()
        .unwrap();
    mi << 20
}

/// An OTLP request of `TRACES_PER_REQUEST` whole RAG traces (root, retriever and model spans, short
/// texts) whose spans also carry a filler attribute ragwatch does not keep, the whole just under
/// `MAX_BODY` bytes encoded.
fn flood_request(first_trace: u64) -> Vec<u8> {
    let filler_len = MAX_BODY / (3 * TRACES_PER_REQUEST as usize) - 400;
    let filler: String = (0..filler_len)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    let spans = (first_trace..first_trace + TRACES_PER_REQUEST)
        .flat_map(|t| {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&t.to_be_bytes());
            id[8] = 1;
            let k = t % 7;
            let timed = |s: opentelemetry_proto::tonic::trace::v1::Span| {
                opentelemetry_proto::tonic::trace::v1::Span {
                    name: "s".into(),
                    start_time_unix_nano: 1_764_410_400_000_000_000,
                    end_time_unix_nano: 1_764_410_401_000_000_000,
                    ..s
                }
            };
            vec![
                timed(span(
                    &id,
                    2,
                    1,
                    vec![
                        kv("openinference.span.kind", "RETRIEVER"),
                        kv("retrieval.documents.0.document.id", "doc_0"),
                        kv(
                            "retrieval.documents.0.document.content",
                            &format!("The warranty of product {k} lasts {k} years."),
                        ),
                        kv("app.filler", &filler),
                    ],
                )),
                timed(span(
                    &id,
                    3,
                    1,
                    vec![
                        kv("openinference.span.kind", "LLM"),
                        kv("app.filler", &filler),
                    ],
                )),
                timed(span(
                    &id,
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
                        kv("app.filler", &filler),
                    ],
                )),
            ]
        })
        .collect();
    let body = request(spans).encode_to_vec();
    assert!(
        body.len() <= MAX_BODY && body.len() > MAX_BODY - (1 << 20),
        "{}",
        body.len()
    );
    body
}

/// POSTs `body` with `Expect: 100-continue`: the body is sent only once the receiver asks for it,
/// so a request refused before its body is read gets its answer whole. Returns the status code.
fn post(addr: SocketAddr, body: &[u8], gzip: bool) -> u16 {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\
         Authorization: Bearer {WRITE_TOKEN}\r\nContent-Type: application/x-protobuf\r\n{}\
         Expect: 100-continue\r\n\r\n",
        body.len(),
        if gzip {
            "Content-Encoding: gzip\r\n"
        } else {
            ""
        }
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    // The first answer: 100 Continue, or the final one.
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed before an answer");
        raw.extend_from_slice(&buf[..n]);
        if raw.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let code = |raw: &[u8]| -> u16 {
        String::from_utf8_lossy(raw)
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    };
    if code(&raw) != 100 {
        return code(&raw);
    }
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    raw.drain(..end);
    s.write_all(body).unwrap();
    let _ = s.read_to_end(&mut raw);
    code(&raw)
}

/// The process's resident memory now and at its peak, in bytes: VmRSS and VmHWM.
fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib << 10)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

#[test]
fn a_flood_of_large_otlp_requests_stays_under_the_charts_memory_limit() {
    assert_eq!(chart_limit(), CHART_LIMIT_BYTES, "the chart's limit moved");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("receiver.toml");
    // The shipped defaults: no [otlp] or [assembly] key set.
    std::fs::write(
        &config,
        "[source]\nkind = \"otlp\"\n[decode]\nformat = \"otlp_proto\"\n",
    )
    .unwrap();
    let rw = Ragwatch::start(&config, &[]);
    let addr = rw.write_addr();
    let pid = rw.child.id();
    let (idle_rss, _) = rss(pid).unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !done.load(Ordering::SeqCst) {
                if let Some((now, _)) = rss(pid) {
                    samples.push(now);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            samples
        })
    };
    let codes = Arc::new(Mutex::new(Vec::new()));
    let senders: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let codes = Arc::clone(&codes);
            std::thread::spawn(move || {
                let gzip = sender % 2 == 1;
                for i in 0..REQUESTS_PER_SENDER {
                    let first = ((sender * REQUESTS_PER_SENDER + i) as u64) * TRACES_PER_REQUEST;
                    let mut body = flood_request(first);
                    if gzip {
                        let mut gz =
                            flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                        gz.write_all(&body).unwrap();
                        body = gz.finish().unwrap();
                    }
                    let code = post(addr, &body, gzip);
                    codes.lock().unwrap().push(code);
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let codes = codes.lock().unwrap().clone();
    let taken = codes.iter().filter(|&&c| c == 200).count() as f64;
    let refused = codes.iter().filter(|&&c| c == 429).count() as f64;
    assert_eq!(
        taken + refused,
        codes.len() as f64,
        "only 200 and 429: {codes:?}"
    );
    assert!(taken > 0.0, "{codes:?}");

    // Every trace of every request taken is received and judged or counted as not judged.
    let expected = taken * TRACES_PER_REQUEST as f64;
    wait_for(
        "every trace taken accounted for",
        Duration::from_secs(120),
        || {
            let m = rw.metrics()?;
            let received = m.sum("ragwatch_traces_received_total", &[]);
            let settled = m.sum("ragwatch_traces_judged_total", &[("judge", "offline")])
                + m.sum("ragwatch_traces_unjudged_total", &[])
                + m.sum("ragwatch_traces_rejected_total", &[]);
            (received == expected && settled == expected).then_some(())
        },
    );
    done.store(true, Ordering::SeqCst);
    let samples = sampler.join().unwrap();
    let (_, hwm) = rss(pid).unwrap();
    let sampled_peak = samples.iter().copied().max().unwrap_or(0);
    let peak = hwm.max(sampled_peak);
    eprintln!(
        "OTLP flood: {} requests of {:.1} MiB from {SENDERS} senders (half gzip): {taken} taken, \
         {refused} refused (429); RSS idle {:.1} MiB, peak {:.1} MiB (VmHWM; sampled every 10 ms: \
         {:.1} MiB over {} samples), the chart's limit {} MiB",
        codes.len(),
        MAX_BODY as f64 / f64::from(1 << 20),
        idle_rss as f64 / f64::from(1 << 20),
        hwm as f64 / f64::from(1 << 20),
        sampled_peak as f64 / f64::from(1 << 20),
        samples.len(),
        CHART_LIMIT_BYTES >> 20
    );
    assert!(
        peak < CHART_LIMIT_BYTES,
        "peak RSS {peak} over the chart's limit {CHART_LIMIT_BYTES}"
    );
    assert!(refused > 0.0, "the budget refused nothing: {codes:?}");
    // Every request in exactly one outcome, read once the counters have settled: a refusal is
    // the budget's (`memory`), the queue's (`throttled`) or the per-client rate limit's
    // (`rate_limited`: forty senders share one address, and a refused sender asks again at once).
    let m = rw.settled_metrics(&["ragwatch_otlp_requests_total"], Duration::from_secs(30));
    let outcome = |o: &str| {
        m.sum(
            "ragwatch_otlp_requests_total",
            &[("protocol", "http"), ("outcome", o)],
        )
    };
    eprintln!(
        "OTLP flood outcomes: ok {}, partial {}, memory {}, throttled {}, rate_limited {}",
        outcome("ok"),
        outcome("partial"),
        outcome("memory"),
        outcome("throttled"),
        outcome("rate_limited")
    );
    assert_eq!(
        outcome("memory") + outcome("throttled") + outcome("rate_limited"),
        refused
    );
    assert!(outcome("memory") > 0.0, "no refusal counted as memory");
    assert_eq!(outcome("ok") + outcome("partial"), taken);
    assert_eq!(
        m.sum("ragwatch_otlp_requests_total", &[]),
        codes.len() as f64,
        "every request in exactly one outcome"
    );
    assert_eq!(m.sum("ragwatch_spans_dropped_total", &[]), 0.0);
}
