//! Human labels through the write listener and in replay: ragwatch reads the bundled sample, a
//! reviewer tool posts labels for some of its traces (and some it never saw, some that are not
//! labels), and `/metrics` counts every label by outcome and each judge's agreement per stratum;
//! labels are refused when off; replay joins a label file. Labels from a Kafka topic are in
//! tests/it/labels_topic.rs, the AUROC rule against Prometheus in tests/it/label_auroc.rs.

use std::path::Path;
use std::time::Duration;

use crate::common::*;

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
    let deadline = Duration::from_secs(30);
    wait_for("the sample to be read", deadline, || {
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
    let (code, reply) = http_post(rw.write_addr(), "/v1/labels", &body);
    assert_eq!(code, 200, "{reply}");
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["joined"], 5, "{reply}");
    assert_eq!(reply["unknown_trace"], 1, "{reply}");
    assert_eq!(reply["invalid"], 1, "{reply}");
    // The counts compared with what the reviewer tool posted, once they stop moving.
    let m = rw.settled_metrics(
        &["ragwatch_labels_total", "ragwatch_label_agreement_total"],
        deadline,
    );
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
    promtool_check_metrics_in_tier(&rw.scrape().unwrap());
}

/// With labels off there is no write listener at all, and the admin port takes no writes.
#[test]
fn labels_are_refused_when_off() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rw = Ragwatch::start(&root.join("config/ragwatch.toml"), &[]);
    let (code, reply) = http_post(
        rw.addr,
        "/v1/labels",
        "{\"trace_id\": \"x\", \"faithful\": true}\n",
    );
    assert_eq!(code, 404);
    assert!(reply.contains("write listener"), "{reply}");
    wait_for("ragwatch to run", Duration::from_secs(20), || {
        rw.log_text().contains("ragwatch running").then_some(())
    });
    assert!(!rw.log_text().contains("write listener listening"));
}

/// `ragwatch replay --labels`: labels in a file, joined to the replayed traces by id, give the same
/// AUROC as the same labels inside the traces, and the summary reports the join and the judge's
/// agreement.
#[test]
fn replay_joins_a_label_file() {
    let dir = tempfile::tempdir().unwrap();
    let traces = gen_traces(200, &["--unfaithful-share", "0.3", "--seed", "12"]);
    let (mut with, mut without, mut labels) = (String::new(), String::new(), String::new());
    for (id, line) in &traces {
        let mut v: serde_json::Value = serde_json::from_slice(line).unwrap();
        with.push_str(&format!("{v}\n"));
        let label = v.as_object_mut().unwrap().remove("label_faithful").unwrap();
        without.push_str(&format!("{v}\n"));
        labels.push_str(&format!(
            "{{\"trace_id\": \"{id}\", \"faithful\": {label}, \"source\": \"review\"}}\n"
        ));
    }
    labels.push_str("{\"trace_id\": \"not-replayed\", \"faithful\": false}\nnot a label\n");
    for (name, text) in [
        ("with.jsonl", &with),
        ("without.jsonl", &without),
        ("labels.jsonl", &labels),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let replay = |file: &str, extra: &[&str]| {
        let summary = dir.path().join(format!("{file}.summary.json"));
        let out = run_ok(
            std::process::Command::new(env!("CARGO_BIN_EXE_ragwatch"))
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .arg("replay")
                .arg(dir.path().join(file))
                .arg("--output")
                .arg(dir.path().join(format!("{file}.out")))
                .arg("--summary")
                .arg(&summary)
                .args(extra),
        );
        let figures: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap();
        (figures, String::from_utf8(out.stderr).unwrap())
    };
    let labels_path = dir.path().join("labels.jsonl");
    let (inline, _) = replay("with.jsonl", &[]);
    let (joined, stderr) = replay(
        "without.jsonl",
        &["--labels", labels_path.to_str().unwrap()],
    );
    let (unlabelled, _) = replay("without.jsonl", &[]);
    assert!(
        stderr.contains("labels file: joined 200, unknown_trace 1, invalid 1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("agreement with the labels: offline "),
        "{stderr}"
    );
    let auroc = joined["all"]["auroc"].as_f64().unwrap();
    assert_eq!(
        Some(auroc),
        inline["all"]["auroc"].as_f64(),
        "{joined} {inline}"
    );
    assert_eq!(joined["all"]["agreement"], inline["all"]["agreement"]);
    assert!(
        joined["all"]["agreement"].as_f64().unwrap() > 0.5,
        "{joined}"
    );
    assert!(unlabelled["all"].get("auroc").is_none(), "{unlabelled}");
    eprintln!(
        "replay --labels: AUROC {auroc:.3}, agreement {}",
        joined["all"]["agreement"]
    );
}
