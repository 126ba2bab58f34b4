//! `replay --summary` then `gate`, end to end on labelled sets the test generates: the baseline passes,
//! a change that breaks retrieval or answers every out-of-scope question fails with exit code 1.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::run_ok;

fn ragwatch() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ragwatch"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

/// Generates a labelled set with `extra` generator flags, replays it, returns the summary path.
fn summary(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let data = dir.join(format!("{name}.jsonl"));
    let out = run_ok(
        Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gen_traces.py"))
            .args(["300", "--gold", "--unfaithful-share", "0.05"])
            .args(extra),
    );
    std::fs::write(&data, out.stdout).unwrap();
    let path = dir.join(format!("{name}.json"));
    run_ok(
        ragwatch()
            .arg("replay")
            .arg(&data)
            .args(["--output", "/dev/null", "--k", "1,3", "--summary"])
            .arg(&path),
    );
    path
}

fn gate(results: &Path, baselines: &[&PathBuf]) -> (i32, String) {
    let mut cmd = ragwatch();
    cmd.arg("gate")
        .arg(results)
        .args(["--gate", "config/gate.toml"]);
    for b in baselines {
        cmd.arg("--baseline").arg(b);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn replay_then_gate_passes_the_baseline_and_fails_regressions() {
    let dir = tempfile::tempdir().unwrap();
    let base = summary(dir.path(), "base", &["--seed", "41"]);
    let base2 = summary(dir.path(), "base2", &["--seed", "42"]);
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    assert_eq!(
        figures["all"]["recall@1"], 1.0,
        "the fact's passage is ranked first"
    );
    assert_eq!(figures["all"]["mrr"], 1.0);
    assert!(figures["out_of_scope"]["refusal_ratio"].as_f64().unwrap() > 0.9);

    let (code, table) = gate(&base2, &[&base]);
    assert_eq!(code, 0, "{table}");
    assert!(table.contains("0 failed"), "{table}");

    // Retrieval ranks the right passage last: recall@3 holds, nDCG@3 drops.
    let bad_retrieval = summary(
        dir.path(),
        "bad_retrieval",
        &["--seed", "43", "--bad-retrieval"],
    );
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&bad_retrieval).unwrap()).unwrap();
    assert_eq!(f["all"]["recall@1"], 0.0);
    assert!((f["all"]["mrr"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
    let (code, table) = gate(&bad_retrieval, &[&base, &base2]);
    assert_eq!(code, 1, "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("all/ndcg@3") && l.ends_with("fail")),
        "{table}"
    );

    // A change that answers everything fails the abstention check.
    let eager = summary(
        dir.path(),
        "eager",
        &["--seed", "44", "--answer-everything"],
    );
    let (code, table) = gate(&eager, &[&base]);
    assert_eq!(code, 1, "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("out_of_scope/refusal_ratio") && l.ends_with("fail")),
        "{table}"
    );

    // A bad gate file is a usage error, exit 2.
    let bad = dir.path().join("gate.toml");
    std::fs::write(&bad, "[[check]]\nmetrik = \"x\"\n").unwrap();
    let out = ragwatch()
        .arg("gate")
        .arg(&base)
        .arg("--gate")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
