//! Export targets that are down or slow: judging's counts and pace stay those of a run without
//! export, and every verdict event is counted as sent or dropped.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::sink::Sink;
use crate::common::*;
use serde_json::Value;

/// A run of generated native traces through the file source, with the given `[export]` section:
/// the seconds until every trace was received and judged, and the final metrics.
fn file_run(dir: &Path, traces: &Path, n: usize, export: &str) -> (f64, Samples) {
    let config = dir.join(format!("c-{}.toml", unique("x")));
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = \"{}\"\nrate_per_sec = 0\nloop = false\n{export}",
            traces.display()
        ),
    )
    .unwrap();
    let started = Instant::now();
    let r = Ragwatch::start(&config, &[]);
    let deadline = Duration::from_secs(120);
    wait_for("every trace judged", deadline, || {
        let m = r.metrics()?;
        (m.sum("ragwatch_traces_judged_total", &[("judge", "offline")]) >= n as f64).then_some(())
    });
    let took = started.elapsed().as_secs_f64();
    // A trace is counted received just before its offline verdict is recorded, and its scores
    // after the verdict count: the counts compared between runs are read once they stop moving.
    let m = r.settled_metrics(
        &["ragwatch_traces_", "ragwatch_faithfulness_ratio"],
        deadline,
    );
    assert_eq!(m.sum("ragwatch_traces_received_total", &[]), n as f64);
    r.sigterm();
    let mut r = r;
    r.wait_exit(Duration::from_secs(30));
    (took, m)
}

/// With the OpenTelemetry target down (nothing listens) and Phoenix answering each request after
/// two seconds, the file source's traces are judged in the time a run without export takes, with
/// the same counts, and the verdict events are counted: accepted, failed or dropped, none lost.
#[test]
fn a_down_or_slow_target_changes_no_count_and_its_drops_are_counted() {
    let n = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces.jsonl");
    let mut text = String::new();
    for (id, json) in gen_traces(n, &["--seed", "5"]) {
        // A W3C trace id and a span id in the metadata: every verdict has its span.
        let mut v: Value = serde_json::from_slice(&json).unwrap();
        let h = fnv(&id);
        v["trace_id"] = Value::from(format!("{h:032x}"));
        v["metadata"]["otel_span_id"] = Value::from(format!("{:016x}", (h as u64) | 1));
        text.push_str(&v.to_string());
        text.push('\n');
    }
    std::fs::write(&traces, text).unwrap();
    let slow = Sink::start(Duration::from_secs(2));
    let down = free_port();
    let export = format!(
        "[export]\nspan_id_field = \"/otel_span_id\"\nqueue_capacity = 512\nbatch_max = 64\nflush_timeout_ms = 1000\nbackoff_max_ms = 500\n\
         [export.otlp]\nendpoint = \"http://127.0.0.1:{down}\"\ntimeout_ms = 500\n\
         [export.phoenix]\nbase_url = \"http://{}\"\n",
        slow.addr
    );
    let (plain_secs, plain) = file_run(dir.path(), &traces, n, "");
    let (export_secs, exported) = file_run(dir.path(), &traces, n, &export);
    eprintln!(
        "{n} traces: {plain_secs:.2} s without export, {export_secs:.2} s with a down and a slow target"
    );
    for (family, labels) in [
        ("ragwatch_traces_received_total", vec![]),
        (
            "ragwatch_faithfulness_ratio_count",
            vec![("judge", "offline")],
        ),
        (
            "ragwatch_faithfulness_ratio_sum",
            vec![("judge", "offline")],
        ),
        ("ragwatch_traces_rejected_total", vec![]),
    ] {
        assert_eq!(
            plain.sum(family, &labels),
            exported.sum(family, &labels),
            "{family}"
        );
    }
    // Judging that waited for the slow target would take minutes (two seconds a batch of 64 of
    // about 15,000 events); the bound leaves room for a loaded machine's noise, not for waiting.
    assert!(
        export_secs < plain_secs * 2.0 + 2.0,
        "judging slowed down: {export_secs:.2} s against {plain_secs:.2} s"
    );
    // Drops are counted while the run goes on (the final scrape is before the flush).
    for t in ["otlp", "phoenix"] {
        let dropped = exported.sum(
            "ragwatch_export_dropped_total",
            &[("target", t), ("reason", "queue_full")],
        );
        assert!(dropped > 0.0, "{t}: queue_full drops counted");
        assert_eq!(
            exported.sum(
                "ragwatch_export_dropped_total",
                &[("target", t), ("reason", "no_span")]
            ),
            0.0
        );
    }
    assert_eq!(
        exported.sum(
            "ragwatch_export_sent_total",
            &[("target", "otlp"), ("outcome", "ok")]
        ),
        0.0,
        "nothing listens"
    );
}

/// FNV-1a, widened: a W3C-shaped id from a generated trace's own id.
pub(crate) fn fnv(s: &str) -> u128 {
    let mut h: u128 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h = (h ^ u128::from(b)).wrapping_mul(0x100000001b3);
    }
    h.max(1)
}
