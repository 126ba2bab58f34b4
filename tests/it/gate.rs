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

/// A generated labelled set of `n` traces whose `metadata.release` is `release`.
fn release_set(n: usize, release: &str, extra: &[&str]) -> String {
    let mut out = String::new();
    for (_, line) in crate::common::gen_traces(n, extra) {
        let mut v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        v["metadata"]["release"] = release.into();
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out
}

const VARIANTS: &str = "[variants]\ndeclared = [\"stable\", \"canary\"]\nbaseline = \"stable\"\nfields = [\"/release\"]\nmin_judged = 30\n";

/// Replays `sets` (concatenated) through the offline judge with `[variants]` on; returns the
/// summary path.
fn variant_summary(dir: &Path, name: &str, sets: &[&str]) -> PathBuf {
    let data = dir.join(format!("{name}.jsonl"));
    std::fs::write(&data, sets.concat()).unwrap();
    let config = dir.join("variants.toml");
    std::fs::write(&config, VARIANTS).unwrap();
    let path = dir.join(format!("{name}.json"));
    let out = run_ok(
        ragwatch()
            .arg("replay")
            .arg(&data)
            .arg("--config")
            .arg(&config)
            .args(["--output", "/dev/null", "--summary"])
            .arg(&path),
    );
    let table = String::from_utf8(out.stderr).unwrap();
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("canary") && l.contains(" all ")),
        "{table}"
    );
    path
}

fn compare(summary: &Path, extra: &[&str]) -> (i32, String) {
    let out = ragwatch()
        .arg("gate")
        .arg(summary)
        .args(["--compare", "canary=stable"])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    (out.status.code().unwrap(), format!("{stdout}{stderr}"))
}

/// The verdict of the faithfulness row.
fn verdict(table: &str) -> &str {
    let row = table
        .lines()
        .find(|l| l.starts_with("faithfulness"))
        .unwrap_or_else(|| panic!("{table}"));
    ["not worse", "worse", "undecided"]
        .into_iter()
        .find(|v| row.ends_with(v))
        .unwrap_or_else(|| panic!("{table}"))
}

#[test]
fn gate_compare_fails_a_worse_canary_and_passes_an_equal_one() {
    let dir = tempfile::tempdir().unwrap();
    let stable = release_set(
        400,
        "stable",
        &["--seed", "51", "--unfaithful-share", "0.05"],
    );
    let worse = release_set(
        400,
        "canary",
        &["--seed", "52", "--unfaithful-share", "0.6"],
    );
    let equal = release_set(
        400,
        "canary",
        &["--seed", "53", "--unfaithful-share", "0.05"],
    );

    let worse_summary = variant_summary(dir.path(), "worse", &[&stable, &worse]);
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&worse_summary).unwrap()).unwrap();
    assert_eq!(figures["all"]["variant/canary/traces"], 400.0);
    assert_eq!(figures["all"]["variant/stable/traces"], 400.0);
    let (code, table) = compare(&worse_summary, &[]);
    assert_eq!((code, verdict(&table)), (1, "worse"), "{table}");
    assert!(table.contains("n canary") && table.contains('['), "{table}");

    let equal_summary = variant_summary(dir.path(), "equal", &[&stable, &equal]);
    let (code, table) = compare(&equal_summary, &[]);
    assert_eq!((code, verdict(&table)), (0, "not worse"), "{table}");
    let (code, table) = compare(&equal_summary, &["--require-decided"]);
    assert_eq!(code, 0, "decided: {table}");

    // Too few scores per arm: undecided, which passes with a note unless decisions are required.
    let (code, table) = compare(&worse_summary, &["--min-judged", "1000"]);
    assert_eq!((code, verdict(&table)), (0, "undecided"), "{table}");
    assert!(table.contains("note: faithfulness undecided"), "{table}");
    let (code, _) = compare(
        &worse_summary,
        &["--min-judged", "1000", "--require-decided"],
    );
    assert_eq!(code, 1);

    // A margin from the config's [variants], and a gate file with checks and [compare].
    let wide = dir.path().join("wide.toml");
    std::fs::write(&wide, VARIANTS.replace("min_judged = 30", "margin = 0.9")).unwrap();
    let (code, table) = compare(&worse_summary, &["--config", wide.to_str().unwrap()]);
    assert_eq!((code, verdict(&table)), (0, "not worse"), "{table}");
    let gate_file = dir.path().join("compare.toml");
    std::fs::write(
        &gate_file,
        "[[check]]\nmetric = \"variant/canary/faithfulness\"\nmin = 0.0\n[compare]\nmetrics = [\"faithfulness\", \"answer_relevancy\"]\n",
    )
    .unwrap();
    let (code, table) = compare(&worse_summary, &["--gate", gate_file.to_str().unwrap()]);
    assert_eq!(code, 1, "{table}");
    assert!(table.contains("all/variant/canary/faithfulness"), "{table}");
    assert!(
        table.lines().any(|l| l.starts_with("answer_relevancy")),
        "{table}"
    );

    // A summary without per-variant figures cannot be compared: a usage error.
    let plain = summary(dir.path(), "plain", &["--seed", "41"]);
    let (code, table) = compare(&plain, &[]);
    assert_eq!(code, 2, "{table}");
    assert!(table.contains("[variants]"), "{table}");
}

/// The OpenTelemetry resource attribute `service.version` names a trace's variant: span assembly
/// copies it into the trace's metadata, where `[variants].attributes` reads it.
#[test]
fn an_otlp_resource_attribute_names_the_variant_in_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let request = |trace: &str, version: &str| {
        serde_json::json!({"resourceSpans": [{
            "resource": {"attributes": [{"key": "service.version", "value": {"stringValue": version}}]},
            "scopeSpans": [{"spans": [
                {"traceId": trace, "spanId": "eee19b7ec3c1b174", "parentSpanId": "eee19b7ec3c1b173",
                 "name": "retrieve", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                 "attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}},
                                {"key": "retrieval.documents.0.document.content", "value": {"stringValue": "Ann wrote the book."}}]},
                {"traceId": trace, "spanId": "eee19b7ec3c1b173", "name": "rag",
                 "startTimeUnixNano": "1", "endTimeUnixNano": "3",
                 "attributes": [{"key": "openinference.span.kind", "value": {"stringValue": "CHAIN"}},
                                {"key": "input.value", "value": {"stringValue": "Who wrote the book?"}},
                                {"key": "output.value", "value": {"stringValue": "Ann wrote the book."}}]}]}]}]})
        .to_string()
    };
    let spans = dir.path().join("spans.json");
    std::fs::write(
        &spans,
        [
            request("5b8efff798038103d269b633813fc60c", "v1.5.0"),
            request("5b8efff798038103d269b633813fc60d", "v1.4.2"),
            request("5b8efff798038103d269b633813fc60e", "v1.5.0"),
        ]
        .join("\n"),
    )
    .unwrap();
    let config = dir.path().join("otlp.toml");
    std::fs::write(
        &config,
        "[decode]\nformat = \"otlp_json\"\n[variants]\ndeclared = [\"stable\", \"canary\"]\nbaseline = \"stable\"\nattributes = [\"service.version\"]\nmap = { \"v1.4.2\" = \"stable\", \"v1.5.0\" = \"canary\" }\n",
    )
    .unwrap();
    let summary = dir.path().join("summary.json");
    run_ok(
        ragwatch()
            .arg("replay")
            .arg(&spans)
            .arg("--config")
            .arg(&config)
            .args(["--output", "/dev/null", "--summary"])
            .arg(&summary),
    );
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(f["all"]["variant/canary/traces"], 2.0, "{f}");
    assert_eq!(f["all"]["variant/stable/traces"], 1.0, "{f}");
}
