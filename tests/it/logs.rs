//! ragwatch's logs in a pod, where stderr is a pipe: JSON lines with `log.format = "json"`, plain
//! text without ANSI colour codes otherwise, and a bad config one plain line before logging starts.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::{Ragwatch, repo, wait_for};

fn start_on_sample(env: &[(&str, String)]) -> Ragwatch {
    let rw = Ragwatch::start(&repo().join("config/ragwatch.toml"), env);
    wait_for("a scrape", Duration::from_secs(20), || rw.scrape());
    rw
}

/// In a pod stderr is a pipe: logs are JSON lines with `log.format = "json"`, plain text without
/// ANSI colour codes otherwise; a bad config is one plain line before logging starts.
#[test]
fn logs_are_plain_text_or_json_when_stderr_is_not_a_terminal() {
    let mut rw = start_on_sample(&[("RAGWATCH__LOG__FORMAT", "json".into())]);
    rw.sigterm();
    assert!(rw.wait_exit(Duration::from_secs(30)).success());
    let log = rw.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for line in &lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }

    let mut rw = start_on_sample(&[]);
    rw.sigterm();
    assert!(rw.wait_exit(Duration::from_secs(30)).success());
    let log = rw.log_text();
    assert!(log.contains("INFO"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI codes in a piped log: {log:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[log]\nformat = \"json\"\n[sample]\ndefault_rate = 1.5\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ragwatch"))
        .args(["run", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("ragwatch: "), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains("\"level\""),
        "{stderr}"
    );
}
