//! The command line as a user meets it: check-config (every bundled config, the config shipped to
//! the cluster), a bad config, replay on the bundled sample, and `run` on the bundled sample serving
//! metrics (promtool checks them in the `prometheus` tier), then SIGTERM and exit 0.

use std::process::Command;
use std::time::Duration;

use crate::common::*;

fn ragwatch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ragwatch"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

#[test]
fn check_config_prints_effective_config_with_overrides() {
    let out = run_ok(
        ragwatch()
            .args(["check-config"])
            .env("RAGWATCH__KAFKA__BROKERS", "b1:9092,b2:9092")
            .env("RAGWATCH__KAFKA__PROPERTIES__SASL.USERNAME", "svc-user"),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("brokers = \"b1:9092,b2:9092\""), "{text}");
    assert!(
        !text.contains("svc-user"),
        "identities are redacted: {text}"
    );
}

#[test]
fn bad_config_names_the_field_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[windows]\nshort_secs = 7\n").unwrap();
    let out = ragwatch()
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("windows.short_secs"), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.contains("ragwatch:")).count(),
        1,
        "one message: {err}"
    );

    let out = ragwatch()
        .args(["check-config"])
        .env("RAGWATCH__SAMPLE__DEFAULT_RATE", "2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sample.default_rate"));
}

/// A config that does not name its source is refused: nothing (the demo sample least of all) is
/// read in its place.
#[test]
fn a_config_without_a_source_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("partial.toml");
    std::fs::write(&path, "[kafka]\nbrokers = \"127.0.0.1:9\"\n").unwrap();
    for command in ["run", "check-config"] {
        let out = ragwatch()
            .args([command, "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{command}: {err}");
        assert!(err.contains("source.kind"), "{command}: {err}");
    }
    // Named from the environment, it starts to be checked as a Kafka source.
    let out = ragwatch()
        .args(["check-config", "--config"])
        .arg(&path)
        .env("RAGWATCH__SOURCE__KIND", "kafka")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn replay_writes_one_verdict_per_line_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("verdicts.jsonl");
    let out = run_ok(
        ragwatch()
            .args(["replay", "config/sample-traces.jsonl", "--output"])
            .arg(&out_path),
    );
    let input_lines = std::fs::read_to_string("config/sample-traces.jsonl")
        .unwrap()
        .lines()
        .count();
    let verdicts = std::fs::read_to_string(&out_path).unwrap();
    let records: Vec<serde_json::Value> = verdicts
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), input_lines);
    let rejected = records.iter().filter(|r| r["status"] == "rejected").count();
    assert_eq!(rejected, 4, "the sample carries four malformed lines");
    for r in &records {
        for key in ["faithfulness", "answer_relevancy"] {
            if let Some(v) = r[key].as_f64() {
                assert!((0.0..=1.0).contains(&v), "{r}");
            }
        }
    }
    let summary = String::from_utf8(out.stderr).unwrap();
    for stratum in ["head", "tail", "known_failure", "out_of_scope"] {
        assert!(summary.contains(stratum), "{summary}");
    }
    assert!(summary.contains("auroc"), "{summary}");

    // Deterministic: the same input gives byte-identical output.
    let again = ragwatch()
        .args(["replay", "config/sample-traces.jsonl"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(again.stdout).unwrap(), verdicts);
}

#[test]
fn run_on_the_bundled_sample_serves_metrics_and_drains_on_sigterm() {
    let mut rw = Ragwatch::start(
        std::path::Path::new("config/ragwatch.toml"),
        &[("RAGWATCH__SOURCE__RATE_PER_SEC", "500".into())],
    );
    let m = wait_for("traces on /metrics", Duration::from_secs(20), || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_traces_received_total", &[]) >= 100.0
            && m.sum(
                "ragwatch_window_samples",
                &[("metric", "faithfulness"), ("window", "5m")],
            ) > 0.0)
            .then_some(m)
    });
    assert!(
        m.sum(
            "ragwatch_traces_received_total",
            &[("stratum", "out_of_scope")]
        ) > 0.0
    );
    assert!(m.sum("ragwatch_refusals_total", &[("stratum", "out_of_scope")]) > 0.0);
    assert_eq!(m.sum("ragwatch_build_info", &[]), 1.0);
    promtool_check_metrics_in_tier(&rw.scrape().unwrap());
    rw.sigterm();
    let status = rw.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
}

#[test]
fn every_bundled_config_passes_check_config() {
    let mut n = 0;
    for entry in std::fs::read_dir("config").unwrap() {
        let path = entry.unwrap().path();
        // gate.toml and gate-audit.toml configure `ragwatch gate`, not the monitor.
        let gate = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("gate"));
        if path.extension().is_some_and(|e| e == "toml") && !gate {
            let out = ragwatch()
                .args(["check-config", "--config"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            n += 1;
        }
    }
    assert!(n >= 4, "{n} configs checked");
}

/// `ragwatch_retrieval_score`'s buckets follow the declared score scale: BM25-like scores (2.5 and
/// 12.5) land in the `+Inf` bucket on the default 0-1 scale, and in their own buckets with
/// `metrics.retrieval_score_scale = "unbounded"`.
#[test]
fn retrieval_score_buckets_follow_the_declared_scale() {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("bm25.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|i| {
            serde_json::json!({
                "trace_id": format!("bm25-{i}"),
                "query": "What does the warranty cover?",
                "contexts": [
                    {"id": "a", "text": "The warranty covers parts and labour for two years.", "score": 12.5},
                    {"id": "b", "text": "Shipping takes five days.", "score": 2.5},
                ],
                "answer": "Parts and labour for two years.",
                "stratum": "head",
            })
            .to_string()
        })
        .collect();
    std::fs::write(&traces, lines.join("\n") + "\n").unwrap();
    let bucket = |m: &Samples, rank: &str, le: &str| {
        m.sum(
            "ragwatch_retrieval_score_bucket",
            &[("stratum", "head"), ("rank", rank), ("le", le)],
        )
    };
    for scale in ["unit", "unbounded"] {
        let rw = Ragwatch::start(
            std::path::Path::new("config/ragwatch.toml"),
            &[
                ("RAGWATCH__SOURCE__PATH", traces.display().to_string()),
                ("RAGWATCH__SOURCE__LOOP", "false".into()),
                ("RAGWATCH__METRICS__RETRIEVAL_SCORE_SCALE", scale.into()),
            ],
        );
        let deadline = Duration::from_secs(20);
        wait_for("the traces counted", deadline, || {
            let m = rw.metrics()?;
            (bucket(&m, "1", "+Inf") >= 20.0).then_some(())
        });
        // A trace's ranks are observed one after the other: the last trace's rank 2-3 may still be
        // counting when its top rank is seen.
        let m = rw.settled_metrics(&["ragwatch_retrieval_score"], deadline);
        assert_eq!(bucket(&m, "1", "+Inf"), 20.0, "{scale}");
        assert_eq!(bucket(&m, "2-3", "+Inf"), 20.0, "{scale}");
        if scale == "unit" {
            assert_eq!(bucket(&m, "1", "1"), 0.0, "12.5 is above the unit scale");
            assert_eq!(bucket(&m, "2-3", "1"), 0.0);
        } else {
            assert_eq!(bucket(&m, "1", "8"), 0.0);
            assert_eq!(bucket(&m, "1", "16"), 20.0);
            assert_eq!(bucket(&m, "2-3", "2"), 0.0);
            assert_eq!(bucket(&m, "2-3", "4"), 20.0);
        }
        promtool_check_metrics_in_tier(&rw.scrape().unwrap());
    }
}

#[test]
fn the_config_shipped_to_the_cluster_is_accepted_by_ragwatch() {
    let path = repo().join("deploy/kubernetes/base/ragwatch.toml");
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["check-config", "--config"])
            .arg(&path)
            .env("RAGWATCH__KAFKA__BROKERS", "kafka:9092"),
    );
    let effective = String::from_utf8_lossy(&out.stdout);
    assert!(effective.contains("sampled = \"llm\""), "{effective}");
    assert!(effective.contains("format = \"json\""), "{effective}");
}
