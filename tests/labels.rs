//! Human labels through the admin server: ragwatch reads the bundled sample, a reviewer tool posts
//! labels for some of its traces (and some it never saw, some that are not labels), and `/metrics`
//! counts every label by outcome and each judge's agreement per stratum.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use common::*;

fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let code = raw.split(' ').nth(1).unwrap().parse().unwrap();
    (code, raw.split_once("\r\n\r\n").unwrap().1.to_string())
}

#[test]
fn labels_join_recent_traces_and_count_agreement() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sample = std::fs::read_to_string(root.join("config/sample-traces.jsonl")).unwrap();
    let ids: Vec<String> = sample
        .lines()
        .take(5)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["trace_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let rw = Ragwatch::start(
        &root.join("config/ragwatch.toml"),
        &[
            ("RAGWATCH__SOURCE__RATE_PER_SEC", "0".into()),
            ("RAGWATCH__SOURCE__LOOP", "false".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
        ],
    );
    // Every sample trace is read (and remembered) before labels arrive.
    let n = sample.lines().filter(|l| !l.trim().is_empty()).count() as f64;
    wait_for("the sample to be read", Duration::from_secs(30), || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_source_messages_total", &[]) >= n).then_some(())
    });
    let mut body = String::new();
    for (i, id) in ids.iter().enumerate() {
        body.push_str(&format!(
            "{{\"trace_id\": \"{id}\", \"faithful\": {}, \"source\": \"review\"}}\n",
            i % 2 == 0
        ));
    }
    body.push_str("{\"trace_id\": \"never-seen\", \"faithful\": false}\n");
    body.push_str("not json\n\n");
    let (code, reply) = post(rw.addr, "/v1/labels", &body);
    assert_eq!(code, 200, "{reply}");
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["joined"], 5, "{reply}");
    assert_eq!(reply["unknown_trace"], 1, "{reply}");
    assert_eq!(reply["invalid"], 1, "{reply}");
    let m = rw.metrics().unwrap();
    assert_eq!(
        m.sum("ragwatch_labels_total", &[("outcome", "joined")]),
        5.0
    );
    assert_eq!(
        m.sum("ragwatch_labels_total", &[("outcome", "invalid")]),
        1.0
    );
    // Every joined label with an offline score was compared with it (answers without claims have
    // no score to compare).
    let compared = m.sum("ragwatch_label_agreement_total", &[("judge", "offline")]);
    assert!((1.0..=5.0).contains(&compared), "{compared}");
    assert_eq!(
        m.sum("ragwatch_label_agreement_total", &[("judge", "llm")]),
        0.0
    );
    promtool_check_metrics(&rw.scrape().unwrap()).unwrap();
}

#[test]
fn labels_are_refused_when_off() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rw = Ragwatch::start(&root.join("config/ragwatch.toml"), &[]);
    let (code, _) = post(
        rw.addr,
        "/v1/labels",
        "{\"trace_id\": \"x\", \"faithful\": true}\n",
    );
    assert_eq!(code, 404);
}
