//! `ragwatch replay --audit` end to end, against LLM judge stand-ins on loopback with a bias built
//! in (tests/it/common/judge/bias.rs): a judge whose score follows answer length shows the
//! correlation inside each label class and no position effect; one whose verdict follows the first
//! context shows the flips. The bootstrap intervals are the same for the same `--seed`, and
//! `ragwatch gate` fails on an audit floor. With the `data` tier, the audit of the label-following
//! stand-in (tests/it/common/judge/labels.rs) and of the offline judge on the development set is
//! printed and gated.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::judge::{Bias, JudgeServer};
use crate::common::run_ok;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

const MARKER: &str = "Evidence";

/// `n` labelled traces, every other one faithful, answers of 5 to 74 words. A faithful trace's
/// first context carries [`MARKER`]; an unfaithful trace's contexts never do.
fn traces(n: usize) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(11);
    let vocabulary = [
        "the", "museum", "opens", "at", "nine", "and", "closes", "late", "on", "fridays",
    ];
    (0..n)
        .map(|i| {
            let faithful = i % 2 == 0;
            let words = rng.random_range(5..75);
            let answer: Vec<&str> = (0..words)
                .map(|_| vocabulary[rng.random_range(0..vocabulary.len())])
                .collect();
            let first = if faithful {
                format!("{MARKER}: the museum opens at nine.")
            } else {
                "The shop sells postcards.".to_owned()
            };
            json!({
                "trace_id": format!("t{i}"), "query": "When does the museum open?",
                "contexts": [first, "Parking is behind the hall.", "Tickets are sold online."],
                "answer": format!("{}.", answer.join(" ")), "stratum": "head",
                "label_faithful": faithful,
            })
            .to_string()
        })
        .collect()
}

/// A config for an LLM judge at `base_url`, budget out of the way.
fn config(dir: &Path, base_url: &str) -> PathBuf {
    let path = dir.join("ragwatch.toml");
    std::fs::write(
        &path,
        format!(
            "[judge]\nsampled = \"llm\"\nworkers = 4\n[llm]\nbase_url = \"{base_url}\"\nchat_model = \"judge-2026-01-01\"\nembedding_model = \"embed-1\"\nstructured_output = \"json_schema\"\nrequest_timeout_ms = 5000\ntrace_deadline_ms = 20000\n[budget]\nrequests_per_minute = 1000000\ntokens_per_minute = 1000000000\ntokens_per_day = 100000000000\n"
        ),
    )
    .unwrap();
    path
}

/// Runs the audit on `input` with `seed`; returns the audit figures and stderr.
fn audit(config: &Path, input: &Path, out: &Path, seed: u64) -> (Value, String) {
    let run = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args([
                "replay",
                "--judge",
                "llm",
                "--output",
                "/dev/null",
                "--config",
            ])
            .arg(config)
            .arg(input)
            .args([
                "--audit",
                "--resamples",
                "1000",
                "--seed",
                &seed.to_string(),
            ])
            .arg("--audit-out")
            .arg(out)
            .env("RAGWATCH_LLM_API_KEY", "sk-test-secret"),
    );
    let figures = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    (figures, String::from_utf8(run.stderr).unwrap())
}

/// Runs `ragwatch gate` on an audit file with the checks in `gate`; returns exit code and table.
fn gate(dir: &Path, audit: &Path, gate: &str) -> (i32, String) {
    let path = dir.join("audit-gate.toml");
    std::fs::write(&path, gate).unwrap();
    gate_file(audit, &path)
}

/// `ragwatch gate` on `audit` with the shipped `config/gate-audit.toml`.
fn shipped_gate(audit: &Path) -> (i32, String) {
    gate_file(
        audit,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("config/gate-audit.toml"),
    )
}

/// `ragwatch gate` on `audit` with the gate file `gate`: its exit code and its table.
fn gate_file(audit: &Path, gate: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ragwatch"))
        .arg("gate")
        .arg(audit)
        .arg("--gate")
        .arg(gate)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

/// Whether the gate table has the check `name` with `verdict`.
fn row(table: &str, name: &str, verdict: &str) -> bool {
    table
        .lines()
        .any(|l| l.starts_with(name) && l.ends_with(verdict))
}

fn f(v: &Value, judge: &str, figure: &str) -> f64 {
    v[judge][figure]
        .as_f64()
        .unwrap_or_else(|| panic!("{judge}/{figure} missing in {v}"))
}

#[test]
fn a_length_biased_judge_shows_the_correlation_within_each_class() {
    let judge = JudgeServer::biased(Bias::Length { full_words: 60 });
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, traces(200).join("\n")).unwrap();
    let config = config(dir.path(), &judge.base_url());
    let out = dir.path().join("audit.json");
    let (a, stderr) = audit(&config, &input, &out, 5);
    eprintln!("{stderr}");
    assert_eq!(f(&a, "llm", "traces"), 200.0, "{a}");
    for class in ["length_spearman_faithful", "length_spearman_unfaithful"] {
        let rho = f(&a, "llm", class);
        assert!(rho > 0.95, "{class} {rho}");
    }
    // Contexts play no part: reversing them changes nothing.
    assert_eq!(f(&a, "llm", "position_traces"), 200.0);
    assert_eq!(f(&a, "llm", "position_flip_share"), 0.0);
    assert_eq!(f(&a, "llm", "position_mean_abs_change"), 0.0);
    assert_eq!(
        judge.faithfulness_requests(),
        400,
        "each labelled trace judged twice"
    );
    assert!(
        stderr.contains("position"),
        "the table is printed: {stderr}"
    );
    assert!(
        a["offline"]["traces"].as_f64().is_some(),
        "both judges audited"
    );

    // Same seed, same intervals; another seed, other resamples.
    let again = dir.path().join("again.json");
    let (b, _) = audit(&config, &input, &again, 5);
    assert_eq!(a, b);
    let (c, _) = audit(&config, &input, &dir.path().join("other.json"), 6);
    assert_eq!(f(&a, "llm", "auroc"), f(&c, "llm", "auroc"));
    assert_ne!(
        (f(&a, "llm", "auroc_low"), f(&a, "llm", "kappa_low")),
        (f(&c, "llm", "auroc_low"), f(&c, "llm", "kappa_low"))
    );
    assert!(f(&a, "llm", "auroc_low") <= f(&a, "llm", "auroc"));
    assert!(f(&a, "llm", "auroc") <= f(&a, "llm", "auroc_high"));

    // The gate fails on the length floor and names it.
    let (code, table) = gate(
        dir.path(),
        &out,
        "[[check]]\njudge = \"llm\"\nmetric = \"length_spearman_faithful\"\nabs = true\nmax = 0.3\n[[check]]\njudge = \"llm\"\nmetric = \"position_flip_share\"\nmax = 0.1\n",
    );
    assert_eq!(code, 1, "{table}");
    assert!(
        row(&table, "|llm/length_spearman_faithful|", "fail"),
        "{table}"
    );
    assert!(row(&table, "llm/position_flip_share", "pass"), "{table}");
}

#[test]
fn an_order_biased_judge_shows_the_flips() {
    let judge = JudgeServer::biased(Bias::Order {
        marker: MARKER.into(),
    });
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, traces(100).join("\n")).unwrap();
    let config = config(dir.path(), &judge.base_url());
    let out = dir.path().join("audit.json");
    let (a, stderr) = audit(&config, &input, &out, 5);
    eprintln!("{stderr}");
    // As retrieved, the marker is first exactly in the faithful half: perfect agreement.
    assert_eq!(f(&a, "llm", "auroc"), 1.0, "{a}");
    assert_eq!(f(&a, "llm", "kappa"), 1.0);
    // Reversed, the faithful half drops from 1.0 to 0.4 and flips; the rest stays at 0.4.
    assert_eq!(f(&a, "llm", "position_traces"), 100.0);
    assert!((f(&a, "llm", "position_flip_share") - 0.5).abs() < 1e-9);
    assert!((f(&a, "llm", "position_mean_abs_change") - 0.3).abs() < 1e-9);
    let (code, table) = gate(
        dir.path(),
        &out,
        "[[check]]\njudge = \"llm\"\nmetric = \"auroc_low\"\nmin = 0.75\n[[check]]\njudge = \"llm\"\nmetric = \"position_flip_share\"\nmax = 0.1\n",
    );
    assert_eq!(code, 1, "{table}");
    assert!(table.contains("llm/auroc_low"), "{table}");
    assert!(row(&table, "llm/position_flip_share", "fail"), "{table}");
    // The shipped audit gate fails it on the same check.
    let (code, table) = shipped_gate(&out);
    assert_eq!(code, 1, "{table}");
    assert!(row(&table, "llm/position_flip_share", "fail"), "{table}");
}

/// The development set: the offline judge, and the LLM judge played by the stand-in that follows
/// the human labels with 10 % disagreement and random scores (so re-judging alone moves them).
/// Built with the `data` tier only.
#[cfg(feature = "data")]
#[test]
fn the_development_set_audit() {
    let data = crate::common::labelled_data("ragtruth_qa_train.jsonl");
    let text = std::fs::read_to_string(&data).unwrap();
    let labels: Vec<(String, bool)> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["answer"].as_str().unwrap().to_owned(),
                v["label_faithful"].as_bool().unwrap(),
            )
        })
        .collect();
    let judge = JudgeServer::following_labels(labels, 7);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &judge.base_url());
    let out = dir.path().join("audit.json");
    let (a, stderr) = audit(&config, &data, &out, 1);
    eprintln!("{stderr}\n{}", serde_json::to_string_pretty(&a).unwrap());
    assert!(f(&a, "llm", "auroc") > 0.8, "{a}");
    // The offline judge passes the shipped audit gate's checks: agreement, and no length bias.
    let (_, table) = shipped_gate(&out);
    for check in [
        "offline/auroc_low",
        "offline/length_spearman_within_max_abs",
        "offline/verbosity_ratio",
    ] {
        assert!(row(&table, check, "pass"), "{check}:\n{table}\n{a}");
    }
}
