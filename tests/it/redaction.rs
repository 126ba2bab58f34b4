//! Redaction: traces carrying an e-mail address, a card number and an API key reach the LLM judge's
//! API (a real HTTP server standing in for it) and the verdict records masked, counted per pattern,
//! while the offline judge scores the original text: its figures equal those of a run without
//! redaction, and differ from what the masked text would score.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::judge::JudgeServer;
use crate::common::*;
use serde_json::json;

const EMAIL: &str = "jane.doe@example.com";
const CARD: &str = "4111 1111 1111 1111";
const KEY: &str = "sk-proj-Zq8fT2mW9xLr4Kp7Vn3Bc6Hd";

fn traces() -> Vec<String> {
    (0..6)
        .map(|i| {
            json!({
                "trace_id": format!("pii-{i}"),
                "query": format!("Which card did {EMAIL} use for order {i}?"),
                "contexts": [
                    format!("Order {i} was paid on 2024-03-0{} by the customer {EMAIL}.", i + 1),
                    format!("The payment service authenticates with the key {KEY}."),
                ],
                "answer": format!("{EMAIL} paid order {i} with the card {CARD}, charged through key {KEY}."),
                "stratum": "head",
            })
            .to_string()
        })
        .collect()
}

struct Run {
    metrics: Samples,
    records: String,
    log: String,
}

/// Runs ragwatch over `lines` with every trace sent to the LLM judge and `builtins` on.
fn run(server: &JudgeServer, lines: &[String], builtins: &str) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("traces.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let records = dir.path().join("records.jsonl");
    let config = dir.path().join("ragwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = \"{}\"\nrate_per_sec = 0.0\nloop = false\n\
             [sample]\ndefault_rate = 1.0\n[judge]\nsampled = \"llm\"\n\
             [llm]\nbase_url = \"{}\"\nchat_model = \"judge-2026-01-01\"\nembedding_model = \"embed-1\"\n\
             structured_output = \"json_schema\"\nrecords_path = \"{}\"\n\
             [redact]\nbuiltins = {builtins}\n",
            input.display(),
            server.base_url(),
            records.display()
        ),
    )
    .unwrap();
    let rw = Ragwatch::start(&config, &[("RAGWATCH_LLM_API_KEY", "sk-test".into())]);
    let deadline = Duration::from_secs(60);
    wait_for("every trace judged by both judges", deadline, || {
        let m = rw.metrics()?;
        let llm = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]);
        let offline = m.sum("ragwatch_traces_judged_total", &[("judge", "offline")]);
        (llm >= lines.len() as f64 && offline >= lines.len() as f64).then_some(())
    });
    // A verdict is counted before its scores reach the histograms, and the redactions apart: the
    // counts compared exactly, read once they stop moving.
    let metrics = rw.settled_metrics(
        &[
            "ragwatch_traces_",
            "ragwatch_redactions_total",
            "ragwatch_faithfulness_ratio",
            "ragwatch_answer_relevancy_ratio",
            "ragwatch_context_relevance_ratio",
        ],
        deadline,
    );
    promtool_check_metrics_in_tier(&rw.scrape().unwrap());
    Run {
        metrics,
        records: std::fs::read_to_string(&records).unwrap(),
        log: rw.log_text(),
    }
}

/// The offline judge's figures on `/metrics`: each score family's sum and count.
fn offline_figures(m: &Samples) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> =
        m.0.iter()
            .filter(|(n, l, _)| {
                n.starts_with("ragwatch_")
                    && (n.ends_with("_ratio_sum") || n.ends_with("_ratio_count"))
                    && l.get("judge").map(String::as_str) == Some("offline")
            })
            .map(|(n, l, v)| (format!("{n}{{{}}}", l.get("stratum").unwrap()), *v))
            .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The offline judge's faithfulness of each line, through `ragwatch replay`.
fn replay_offline(lines: &[String]) -> Vec<f64> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["replay", "--judge", "offline", "--config"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/ragwatch.toml"))
            .arg(&input),
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["faithfulness"]
                .as_f64()
                .unwrap()
        })
        .collect()
}

#[test]
fn the_judge_api_and_the_records_see_masks_and_the_offline_judge_the_original() {
    let lines = traces();
    let server = JudgeServer::start();
    let redacted = run(&server, &lines, r#"["email", "card", "secret"]"#);
    let sent: String = server
        .recent_chats()
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert!(server.chat_requests() >= lines.len() as u64);
    for (what, text) in [
        ("the API", &sent),
        ("the records", &redacted.records),
        ("the log", &redacted.log),
    ] {
        for secret in [EMAIL, CARD, KEY] {
            assert!(!text.contains(secret), "{secret} reached {what}");
        }
    }
    for mask in ["[REDACTED:email]", "[REDACTED:card]", "[REDACTED:secret]"] {
        assert!(sent.contains(mask), "{mask} not in what the judge was sent");
        assert!(redacted.records.contains(mask), "{mask} not in the records");
    }
    // Per trace: the e-mail address twice in the question and contexts and once in the answer,
    // the key once in a context and once in the answer, the card once.
    let count = |p: &str| {
        redacted
            .metrics
            .sum("ragwatch_redactions_total", &[("pattern", p)])
    };
    let n = lines.len() as f64;
    assert_eq!(count("email"), 3.0 * n);
    assert_eq!(count("secret"), 2.0 * n);
    assert_eq!(count("card"), n);

    // Without redaction the judge gets the original (so the comparison below is of one thing).
    let server_plain = JudgeServer::start();
    let plain = run(&server_plain, &lines, "[]");
    let sent_plain: String = server_plain
        .recent_chats()
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert!(sent_plain.contains(EMAIL) && sent_plain.contains(CARD));
    assert_eq!(plain.metrics.sum("ragwatch_redactions_total", &[]), 0.0);

    // The offline judge read the original text both times.
    let with = offline_figures(&redacted.metrics);
    assert!(!with.is_empty());
    assert_eq!(with, offline_figures(&plain.metrics));
    // And the masked text would have scored otherwise: the comparison can fail.
    let masked: Vec<String> = lines
        .iter()
        .map(|l| {
            l.replace(EMAIL, "[REDACTED:email]")
                .replace(CARD, "[REDACTED:card]")
                .replace(KEY, "[REDACTED:secret]")
        })
        .collect();
    assert_ne!(replay_offline(&lines), replay_offline(&masked));
}
