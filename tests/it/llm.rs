//! The LLM judge through `ragwatch replay --judge llm` against the judge stand-in on loopback
//! (tests/it/common/judge/): correct scores on known cases in every structured-output mode, the
//! `auto` fallback chain, partial verdicts, the re-ask of a malformed reply, every embedding shape,
//! 429 with Retry-After, 500s, timeouts and truncated output. Pacing to the budget is in
//! tests/it/llm_pacing.rs, the end-to-end runs with the Kafka source in tests/it/llm_live.rs.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::judge::{EmbedFault, EmbedShape, Fault, JudgeServer};
use crate::common::*;
use serde_json::{Value, json};

const CTX: &str = "The museum opens at 9 and closes at 5. Entry is free for children.";

pub(crate) fn trace(id: &str, answer: &str) -> String {
    json!({"trace_id": id, "query": "When does the museum open?", "contexts": [CTX], "answer": answer, "stratum": "head"}).to_string()
}

pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) config: PathBuf,
    records: PathBuf,
}

/// A config for `server` with `extra` [llm] keys. Unless `extra` names one, the structured-output
/// mode is fixed to `json_schema`, so scripted faults meet the calls they are meant for (`auto`
/// sends a probe first).
pub(crate) fn setup(server: &JudgeServer, extra: &str) -> Setup {
    setup_with(server, 2, extra)
}

pub(crate) fn setup_with(server: &JudgeServer, workers: usize, extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let config = dir.path().join("ragwatch.toml");
    let mut keys = String::new();
    if !extra.contains("timeout") {
        keys.push_str("request_timeout_ms = 2000\ntrace_deadline_ms = 10000\n");
    }
    if !extra.contains("structured_output") {
        keys.push_str("structured_output = \"json_schema\"\n");
    }
    std::fs::write(
        &config,
        format!(
            "[judge]\nsampled = \"llm\"\nworkers = {workers}\n[llm]\nbase_url = \"{}\"\nchat_model = \"judge-2026-01-01\"\nembedding_model = \"embed-1\"\n{keys}backoff_base_ms = 20\nrecords_path = \"{}\"\n{extra}\n",
            server.base_url(),
            records.display()
        ),
    )
    .unwrap();
    Setup {
        dir,
        config,
        records,
    }
}

/// Runs `ragwatch replay --judge llm` on `lines`; returns the verdict records and stderr.
pub(crate) fn replay(setup: &Setup, lines: &[String]) -> (Vec<Value>, String) {
    let input = setup.dir.path().join("in.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["replay", "--judge", "llm", "--config"])
            .arg(&setup.config)
            .arg(&input)
            .env("RAGWATCH_LLM_API_KEY", "sk-test-secret"),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("NaN"), "no NaN in verdicts");
    (
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The verdict records file (one JSON line per judged or failed trace).
pub(crate) fn records_file(setup: &Setup) -> Vec<Value> {
    std::fs::read_to_string(&setup.records)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn by_id<'a>(records: &'a [Value], id: &str) -> &'a Value {
    records.iter().find(|r| r["trace_id"] == id).unwrap()
}

fn known_cases() -> Vec<String> {
    vec![
        trace("all", "The museum opens at 9. The museum closes at 5."),
        trace(
            "half",
            "The museum opens at 9. The museum sells delicious sandwiches daily.",
        ),
        trace("contra", "The museum opens at 10 every day."),
        trace("refusal", "I'm sorry, the documents do not contain that."),
        trace("empty", "Yes."),
        json!({"trace_id": "ranked", "query": "When does the museum open?", "stratum": "head",
            "contexts": ["Parking costs 4 euros per hour.", CTX], "answer": "The museum opens at 9."})
        .to_string(),
    ]
}

fn assert_known_cases(records: &[Value], what: &str) {
    assert_eq!(by_id(records, "all")["faithfulness"], 1.0, "{what}");
    assert_eq!(by_id(records, "half")["faithfulness"], 0.5, "{what}");
    let contra = by_id(records, "contra");
    assert_eq!(contra["faithfulness"], 0.0, "{what}");
    assert_eq!(contra["details"]["details"]["contradicted"], 1, "{what}");
    let refusal = by_id(records, "refusal");
    assert_eq!(refusal["answer_relevancy"], 0.0, "{what}");
    assert_eq!(refusal["details"]["refusal"], true, "{what}");
    let empty = by_id(records, "empty");
    assert_eq!(empty["status"], "no_claims", "{what}");
    assert!(empty["faithfulness"].is_null(), "no claims is not a score");
    // Context relevance, from the same call that judges the claims: a relevant context at rank 1
    // scores 1; behind an irrelevant one, precision@2 = 0.5.
    assert_eq!(by_id(records, "all")["context_relevance"], 1.0, "{what}");
    let ranked = by_id(records, "ranked");
    assert_eq!(ranked["context_relevance"], 0.5, "{what}");
    assert_eq!(ranked["faithfulness"], 1.0, "{what}");
    assert_eq!(
        ranked["details"]["details"]["contexts_relevant"],
        json!([false, true]),
        "{what}"
    );
    // Relevancy: an on-topic answer scores above an off-topic one.
    assert!(
        by_id(records, "all")["answer_relevancy"].as_f64().unwrap() > 0.3,
        "{what}"
    );
}

#[test]
fn known_cases_score_correctly_in_every_mode_and_records_keep_raw_output() {
    let server = JudgeServer::start();
    let mut tokens = Vec::new();
    for (form, mode, sent) in [
        ("one_call", "json_schema", "json_schema"),
        ("two_call", "json_schema", "json_schema"),
        ("one_call", "json_object_schema", "json_object_schema"),
        ("one_call", "json_object", "json_object"),
        ("one_call", "prompt", "none"),
        ("two_call", "prompt", "none"),
    ] {
        let what = format!("{form} {mode}");
        let s = setup(
            &server,
            &format!("faithfulness_mode = \"{form}\"\nstructured_output = \"{mode}\""),
        );
        let before = server.tokens_billed();
        let seen_before = server.formats_seen().len();
        let (records, _) = replay(&s, &known_cases());
        tokens.push((what.clone(), (server.tokens_billed() - before) as f64 / 6.0));
        assert_known_cases(&records, &what);
        assert!(
            server.formats_seen()[seen_before..]
                .iter()
                .all(|k| *k == sent),
            "{what}: every request carries its mode's response_format"
        );
        // Verdict records: raw outputs, usage, model and mode; never the key.
        let rec = std::fs::read_to_string(&s.records).unwrap();
        assert!(rec.contains("\"raw\""), "{what}");
        assert!(
            rec.contains(&format!(
                "judge-2026-01-01+embed-1@rw-3/{form}+ctx/{mode}\""
            )),
            "{what}: the identity names the structured-output mode"
        );
        assert!(!rec.contains("sk-test-secret"));
    }
    // Without a schema in response_format, the reply's shape is described, never the raw schema
    // (which small models echo back).
    let prompt_mode = server
        .recent_chats()
        .into_iter()
        .rev()
        .find(|b| b.get("response_format").is_none())
        .unwrap();
    let system = prompt_mode["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("\"verdict\": \"supported\" | ")
            || system.contains("\"noncommittal\": true | false")
    );
    assert!(!system.contains("additionalProperties"), "{system}");
    assert_eq!(
        server.state.last_auth.lock().unwrap().as_deref(),
        Some("Bearer sk-test-secret")
    );
    eprintln!("tokens per judged trace (server-billed): {tokens:?}");
    assert!(
        tokens[0].1 < tokens[1].1,
        "one call is cheaper than two: {tokens:?}"
    );
}

/// `auto` against servers that take less and less: a 400, 422 or (llama-cpp-python's) 500 naming
/// `response_format` moves the probe to the next mode; the mode found is used for every call, named in the identity of every
/// verdict, and logged.
#[test]
fn auto_falls_back_to_the_first_mode_the_server_takes() {
    for (refused, status, expected, sent) in [
        (vec![], 400, "json_schema", "json_schema"),
        (
            vec!["json_schema"],
            500,
            "json_object_schema",
            "json_object_schema",
        ),
        (
            vec!["json_schema", "json_object_schema"],
            422,
            "json_object",
            "json_object",
        ),
        (
            vec!["json_schema", "json_object_schema", "json_object"],
            400,
            "prompt",
            "none",
        ),
    ] {
        let server = JudgeServer::start();
        server.refuse_formats(&refused, status);
        let s = setup(&server, "structured_output = \"auto\"");
        let (records, stderr) = replay(&s, &known_cases());
        assert_known_cases(&records, expected);
        let seen = server.formats_seen();
        let probes = refused.len() + 1;
        assert_eq!(
            seen[..probes - 1],
            refused[..],
            "one probe per refused mode, in order"
        );
        assert!(
            seen[probes - 1..].iter().all(|k| *k == sent),
            "{expected}: {seen:?}"
        );
        let identity = format!("judge-2026-01-01+embed-1@rw-3/one_call+ctx/{expected}");
        for r in records_file(&s) {
            assert_eq!(r["judge_model"], identity.as_str());
            assert_eq!(r["structured_output"], expected);
        }
        assert!(
            stderr.contains("judge structured output chosen") && stderr.contains(expected),
            "the choice is logged: {stderr}"
        );
    }
    // A fixed mode the server refuses is an http_error for every trace, never a silent fallback.
    let server = JudgeServer::start();
    server.refuse_formats(&["json_schema"], 400);
    let s = setup(&server, "structured_output = \"json_schema\"");
    let (records, stderr) = replay(&s, &[trace("fixed", "The museum opens at 9.")]);
    assert_eq!(records[0]["reason"], "http_error");
    assert!(stderr.contains("refuses llm.structured_output"), "{stderr}");
}

/// An invalid context-verdict list costs the context relevance only; one bad generated question
/// costs that question; a failed relevancy call or unusable embeddings cost the relevancy. The
/// faithfulness part is kept every time, and each failure is counted by part and reason.
#[test]
fn an_invalid_auxiliary_part_does_not_discard_the_verdict() {
    fn contexts_from_zero(mut v: Value) -> Value {
        for c in v["contexts"].as_array_mut().unwrap() {
            c["n"] = json!(c["n"].as_i64().unwrap() - 1);
        }
        v
    }
    fn one_bad_question(mut v: Value) -> Value {
        v["questions"][0] = json!({"question": "what?", "noncommittal": "perhaps"});
        v
    }
    let server = JudgeServer::start();
    let s = setup_with(&server, 1, "max_attempts = 1");
    let parts = |r: &Value| -> Vec<(String, String)> {
        r["details"]["details"]["part_failures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["part"].as_str().unwrap().to_owned(),
                    p["reason"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    let answer = "The museum opens at 9. The museum sells delicious sandwiches daily.";

    // Contexts numbered from 0: faithfulness and relevancy stand, context relevance is dropped.
    server.script([Fault::Rewrite(contexts_from_zero)]);
    let (r, _) = replay(&s, &[trace("ctx0", answer)]);
    assert_eq!(r[0]["status"], "judged");
    assert_eq!(r[0]["faithfulness"], 0.5);
    assert!(r[0]["context_relevance"].is_null());
    assert!(r[0]["answer_relevancy"].as_f64().unwrap() > 0.0);
    assert_eq!(
        parts(&r[0]),
        [pair("context_relevance", "contexts_unknown")]
    );

    // One generated question invalid: it is dropped, the others score. (The relevancy call is the
    // trace's second.)
    server.script([
        Fault::Delay(Duration::ZERO),
        Fault::Rewrite(one_bad_question),
    ]);
    let (r, _) = replay(&s, &[trace("badq", answer)]);
    assert_eq!(r[0]["faithfulness"], 0.5);
    assert!(r[0]["answer_relevancy"].as_f64().unwrap() > 0.0);
    assert_eq!(parts(&r[0]), [pair("answer_relevancy", "invalid_question")]);

    // The relevancy call fails (500, one attempt): faithfulness stands.
    server.script([Fault::Delay(Duration::ZERO), Fault::ServerError]);
    let (r, _) = replay(&s, &[trace("relfail", answer)]);
    assert_eq!(r[0]["status"], "judged");
    assert_eq!(r[0]["faithfulness"], 0.5);
    assert_eq!(r[0]["context_relevance"], 1.0);
    assert!(r[0]["answer_relevancy"].is_null());
    assert_eq!(parts(&r[0]), [pair("answer_relevancy", "http_error")]);

    // Embeddings whose dimension changes between two traces, then a NaN: errors with a reason.
    server.script_embeddings([
        EmbedFault::Dimension(64),
        EmbedFault::Dimension(32),
        EmbedFault::NaN,
    ]);
    let (r, _) = replay(
        &s,
        &[
            trace("dim1", answer),
            trace("dim2", "The museum opens at 9."),
            trace("nan", "The museum closes at 5."),
        ],
    );
    assert!(r[0]["answer_relevancy"].as_f64().unwrap() > 0.0);
    assert!(parts(&r[0]).is_empty());
    assert!(r[1]["answer_relevancy"].is_null());
    assert_eq!(r[1]["faithfulness"], 1.0);
    assert_eq!(
        parts(&r[1]),
        [pair("answer_relevancy", "embedding_dimension_changed")]
    );
    assert!(r[2]["answer_relevancy"].is_null());
    assert_eq!(
        parts(&r[2]),
        [pair("answer_relevancy", "embedding_non_finite")]
    );
}

/// A malformed reply is asked again once, showing the model its reply and the error, and counted
/// as a `malformed` retry apart from transport retries; twice malformed, or no attempt left, is a
/// `parse_error`.
#[test]
fn a_malformed_reply_is_asked_again_once() {
    let server = JudgeServer::start();
    let s = setup_with(&server, 1, "max_attempts = 3");
    server.script([Fault::Malformed]);
    let (r, _) = replay(&s, &[trace("m1", "The museum opens at 9.")]);
    assert_eq!(r[0]["faithfulness"], 1.0, "judged after the re-ask");
    assert_eq!(r[0]["details"]["details"]["retries"], json!(["malformed"]));
    let reask = server
        .recent_chats()
        .into_iter()
        .find(|b| b["messages"].as_array().unwrap().len() == 4)
        .expect("a re-ask with the invalid reply and the error");
    assert!(
        reask["messages"][2]["content"]
            .as_str()
            .unwrap()
            .contains("oops")
    );
    assert!(
        reask["messages"][3]["content"]
            .as_str()
            .unwrap()
            .contains("not valid")
    );
    // A transport retry and a re-ask in one call, counted apart.
    server.script([Fault::ServerError, Fault::Malformed]);
    let (r, _) = replay(&s, &[trace("m2", "The museum opens at 9.")]);
    assert_eq!(r[0]["faithfulness"], 1.0);
    assert_eq!(
        r[0]["details"]["details"]["retries"],
        json!(["http_error", "malformed"])
    );
    // Malformed twice: parse_error, after exactly one re-ask.
    let before = server.chat_requests();
    server.script([Fault::Malformed, Fault::Malformed]);
    let (r, _) = replay(&s, &[trace("m3", "The museum opens at 9.")]);
    assert_eq!(r[0]["reason"], "parse_error");
    assert_eq!(server.chat_requests() - before, 2);
    let rec = records_file(&s);
    let failed = rec.iter().find(|r| r["trace_id"] == "m3").unwrap();
    assert_eq!(failed["retries"], json!(["malformed"]));
    assert!(failed["error"].as_str().unwrap().contains("unparseable"));
    // With one attempt per call there is no re-ask.
    let s1 = setup_with(&server, 1, "max_attempts = 1");
    let before = server.chat_requests();
    server.script([Fault::Malformed]);
    let (r, _) = replay(&s1, &[trace("m4", "The museum opens at 9.")]);
    assert_eq!(r[0]["reason"], "parse_error");
    assert_eq!(server.chat_requests() - before, 1);
}

/// Pooled vectors, per-token vectors (mean-pooled) and base64 give the same relevancy; usage
/// missing from a server's answers keeps the estimate charged and counts no tokens.
#[test]
fn every_embedding_shape_gives_the_same_relevancy() {
    let server = JudgeServer::start();
    let cases = known_cases();
    let relevancies = |records: &[Value]| -> Vec<Value> {
        records
            .iter()
            .map(|r| r["answer_relevancy"].clone())
            .collect()
    };
    let (pooled, _) = replay(&setup(&server, "cache_capacity = 0"), &cases);
    server.set_embed_shape(EmbedShape::PerToken);
    let (per_token, _) = replay(&setup(&server, "cache_capacity = 0"), &cases);
    server.set_embed_shape(EmbedShape::Pooled);
    let (base64, _) = replay(
        &setup(
            &server,
            "cache_capacity = 0\nembedding_encoding = \"base64\"",
        ),
        &cases,
    );
    assert!(
        server
            .state
            .encodings_seen
            .lock()
            .unwrap()
            .contains(&"base64".to_owned())
    );
    let close = |a: &[Value], b: &[Value]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => (x - y).abs() < 1e-6,
                _ => x == y,
            })
    };
    let p = relevancies(&pooled);
    assert!(p.iter().filter(|v| v.is_number()).count() >= 5, "{p:?}");
    assert!(
        close(&p, &relevancies(&per_token)),
        "{p:?} vs {:?}",
        relevancies(&per_token)
    );
    assert!(
        close(&p, &relevancies(&base64)),
        "{p:?} vs {:?}",
        relevancies(&base64)
    );
    assert_known_cases(&per_token, "per-token embeddings");
    assert_known_cases(&base64, "base64 embeddings");
}

#[test]
fn retries_429_with_retry_after_and_500s() {
    let server = JudgeServer::start();
    let s = setup(&server, "");
    server.script([
        Fault::RateLimited {
            retry_after_secs: 1,
        },
        Fault::ServerError,
    ]);
    let started = Instant::now();
    let (records, _) = replay(&s, &[trace("a", "The museum opens at 9.")]);
    assert_eq!(records[0]["faithfulness"], 1.0);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After honoured"
    );
    assert_eq!(
        server.chat_requests(),
        2 + 2,
        "two faulty attempts, then faithfulness and relevancy"
    );
    assert_eq!(
        records[0]["details"]["details"]["retries"],
        json!(["rate_limited", "http_error"])
    );
}

#[test]
fn failures_are_counted_by_reason_never_scored() {
    let server = JudgeServer::start();
    // Malformed twice: parse_error. Truncated twice: truncated. Truncated once: retried larger, ok.
    let s = setup(&server, "max_attempts = 2\nmax_output_tokens = 100");
    server.script([Fault::Malformed, Fault::Malformed]);
    let (r, _) = replay(&s, &[trace("m", "The museum opens at 9.")]);
    assert_eq!(
        (r[0]["status"].as_str(), r[0]["reason"].as_str()),
        (Some("skipped"), Some("parse_error"))
    );
    server.script([Fault::Truncated, Fault::Truncated]);
    let (r, _) = replay(&s, &[trace("t2", "The museum opens at 9.")]);
    assert_eq!(r[0]["reason"], "truncated");
    server.state.max_tokens_seen.lock().unwrap().clear();
    server.script([Fault::Truncated]);
    let (r, _) = replay(&s, &[trace("t1", "The museum opens at 9.")]);
    assert_eq!(r[0]["faithfulness"], 1.0);
    assert_eq!(
        server.state.max_tokens_seen.lock().unwrap()[..2],
        [100, 200]
    );
    // A long answer truncated: the retry is sized to the answer, up to 8x the configured limit.
    server.state.max_tokens_seen.lock().unwrap().clear();
    server.script([Fault::Truncated]);
    let long = "The museum opens at 9. ".repeat(130);
    let (r, _) = replay(&s, &[trace("long", &long)]);
    assert_eq!(r[0]["faithfulness"], 1.0);
    assert_eq!(
        server.state.max_tokens_seen.lock().unwrap()[..2],
        [100, 800]
    );
    // 500 on every attempt: http_error. A server slower than the timeout: timeout, and no hang.
    server.set_always(Some(Fault::ServerError));
    let (r, _) = replay(&s, &[trace("e", "The museum opens at 9.")]);
    assert_eq!(r[0]["reason"], "http_error");
    server.set_always(Some(Fault::Delay(Duration::from_secs(5))));
    let s = setup(
        &server,
        "max_attempts = 2\nrequest_timeout_ms = 200\ntrace_deadline_ms = 1000",
    );
    let started = Instant::now();
    let (r, _) = replay(&s, &[trace("slow", "The museum opens at 9.")]);
    assert_eq!(r[0]["reason"], "timeout");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the trace deadline bounds the wait"
    );
    server.set_always(None);
}
