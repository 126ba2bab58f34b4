//! The LLM judge against a real HTTP server on loopback that speaks the OpenAI API
//! (tests/it/common/openai.rs): correct scores on known cases in every structured-output mode, the
//! `auto` fallback chain, partial verdicts, the re-ask of a malformed reply, every embedding shape,
//! 429 with Retry-After, 500s, timeouts, truncated output, replay pacing to the budget and the
//! budget never exceeded at the server, and end-to-end runs through `ragwatch run` with the Kafka
//! source.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::openai::{EmbedFault, EmbedShape, FakeOpenAi, Fault};
use crate::common::*;
use serde_json::{Value, json};

const CTX: &str = "The museum opens at 9 and closes at 5. Entry is free for children.";

fn trace(id: &str, answer: &str) -> String {
    json!({"trace_id": id, "query": "When does the museum open?", "contexts": [CTX], "answer": answer, "stratum": "head"}).to_string()
}

struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
    records: PathBuf,
}

/// A config for `server` with `extra` [llm] keys. Unless `extra` names one, the structured-output
/// mode is fixed to `json_schema`, so scripted faults meet the calls they are meant for (`auto`
/// sends a probe first).
fn setup(server: &FakeOpenAi, extra: &str) -> Setup {
    setup_with(server, 2, extra)
}

fn setup_with(server: &FakeOpenAi, workers: usize, extra: &str) -> Setup {
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
fn replay(setup: &Setup, lines: &[String]) -> (Vec<Value>, String) {
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
fn records_file(setup: &Setup) -> Vec<Value> {
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
    let server = FakeOpenAi::start();
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
        let server = FakeOpenAi::start();
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
    let server = FakeOpenAi::start();
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
    let server = FakeOpenAi::start();
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
    let server = FakeOpenAi::start();
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
    let server = FakeOpenAi::start();
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
    let server = FakeOpenAi::start();
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
    let server = FakeOpenAi::start();
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

fn museum_traces(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            trace(
                &format!("b{i}"),
                &format!("The museum opens at 9. Entry is free for {i} children."),
            )
        })
        .collect()
}

/// Replay waits for the per-minute budget instead of skipping: every trace is judged, and what the
/// server billed stays within the tokens a minute allows over the run. Only the daily budget skips.
#[test]
fn replay_paces_to_the_minute_budget_and_skips_only_on_the_day() {
    let server = FakeOpenAi::start();
    let s = setup(
        &server,
        "max_output_tokens = 100\n[budget]\ntokens_per_minute = 3000\nrequests_per_minute = 1000\ntokens_per_day = 1000000",
    );
    let started = Instant::now();
    let (records, _) = replay(&s, &museum_traces(7));
    let elapsed_min = started.elapsed().as_secs_f64() / 60.0;
    let judged = records.iter().filter(|r| r["status"] == "judged").count();
    assert_eq!(judged, 7, "paced, not skipped: {records:?}");
    let billed = server.tokens_billed() as f64;
    eprintln!(
        "paced: billed {billed} tokens in {:.1} s",
        elapsed_min * 60.0
    );
    assert!(
        billed > 3000.0,
        "the run needed more than a minute's tokens ({billed}), so it had to wait"
    );
    let allowed = 3000.0 * (1.0 + elapsed_min);
    assert!(billed <= allowed, "billed {billed} > allowed {allowed}");
    let waited: u64 = records
        .iter()
        .map(|r| r["details"]["details"]["budget_wait_ms"].as_u64().unwrap())
        .sum();
    assert!(waited > 0);

    // A day's budget for a few traces: the rest are skipped at once, by reason.
    let server = FakeOpenAi::start();
    let s = setup(
        &server,
        "max_output_tokens = 100\n[budget]\ntokens_per_minute = 100000\nrequests_per_minute = 1000\ntokens_per_day = 2500",
    );
    let started = Instant::now();
    let (records, _) = replay(&s, &museum_traces(12));
    let judged = records.iter().filter(|r| r["status"] == "judged").count();
    let budget = records
        .iter()
        .filter(|r| r["reason"] == "budget_exhausted")
        .count();
    assert!(
        judged > 0 && budget > 0,
        "judged {judged}, over budget {budget}"
    );
    assert_eq!(judged + budget, 12, "every trace accounted for");
    assert!(server.tokens_billed() <= 2500);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "no waiting on the day"
    );
}

/// Replay keeps `judge.workers` traces in flight: a slow trace holds one slot while the other goes
/// on through the rest, rather than batches that each wait for their slowest; output stays in input
/// order.
#[test]
fn replay_keeps_workers_in_flight_not_batches() {
    let server = FakeOpenAi::start();
    // Each slow trace takes two chat calls of 1.5 s.
    *server.state.slow.lock().unwrap() = Some(("sluggish".into(), Duration::from_millis(1500)));
    let s = setup_with(&server, 2, "");
    let mut lines = museum_traces(10);
    for i in [0, 2] {
        lines[i] = trace(
            &format!("b{i}"),
            &format!("The museum opens at 9. A sluggish queue forms at {i}."),
        );
    }
    let (records, _) = replay(&s, &lines);
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r["trace_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    assert_eq!(ids, expected, "input order");
    assert!(records.iter().all(|r| r["status"] == "judged"));
    // In flight: the two slow traces (b0, b2) are served at once. In batches of two they fall in
    // different batches (b0 b1, b2 b3) and never overlap.
    assert_eq!(
        server.state.slow_in_flight_max.load(Ordering::SeqCst),
        2,
        "both slow traces in flight together"
    );
}

/// Seconds the budget needs for `requests` calls at `per_minute` (a minute's burst at once, then
/// one every 60 / per_minute s), for the pacing checks.
fn seconds_allowed(requests: f64, per_minute: f64) -> f64 {
    (requests - per_minute).max(0.0) * 60.0 / per_minute
}

/// The figure: `replay --judge llm --config config/llm.toml` on 200 traces against a fast
/// stand-in judges all 200 (pacing, not skipping), with `judge.workers` calls in flight, in a wall
/// time within 10 % of what the budget allows. The shipped 60 requests a minute make that about
/// nine minutes (600 requests); the test scales the budget (requests and tokens alike) by five.
/// `RAGWATCH_TEST_SHIPPED_BUDGET=1` runs it with the shipped budget untouched.
#[test]
fn replay_with_the_shipped_config_judges_every_trace_at_the_budget_pace() {
    let server = FakeOpenAi::start();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let lines: Vec<String> = gen_traces(200, &["--seed", "41"])
        .into_iter()
        .map(|(_, l)| String::from_utf8(l).unwrap())
        .collect();
    std::fs::write(&input, lines.join("\n")).unwrap();
    let shipped = std::env::var("RAGWATCH_TEST_SHIPPED_BUDGET").is_ok();
    let rpm = if shipped { 60.0 } else { 300.0 };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ragwatch"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["replay", "--judge", "llm", "--config", "config/llm.toml"])
        .arg(&input)
        .env("RAGWATCH_LLM_API_KEY", "sk-test")
        .env("RAGWATCH__LLM__BASE_URL", server.base_url());
    if !shipped {
        cmd.env("RAGWATCH__BUDGET__REQUESTS_PER_MINUTE", "300")
            .env("RAGWATCH__BUDGET__TOKENS_PER_MINUTE", "1000000");
    }
    let started = Instant::now();
    let out = run_ok(&mut cmd);
    let wall = started.elapsed().as_secs_f64();
    let records: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 200);
    let ids: Vec<&str> = records
        .iter()
        .map(|r| r["trace_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["trace_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids, expected, "output in input order");
    let judged = records
        .iter()
        .filter(|r| r["status"] == "judged" || r["status"] == "no_claims")
        .count();
    assert_eq!(
        judged,
        200,
        "every trace judged: {:?}",
        records.iter().find(|r| r["status"] == "skipped")
    );
    let requests = (server.chat_requests() + server.embedding_requests()) as f64;
    let allowed = seconds_allowed(requests, rpm);
    eprintln!(
        "MEASURED pacing: {requests} requests at {rpm}/min: allowed {allowed:.1} s, wall {wall:.1} s ({:+.1} %)",
        (wall / allowed - 1.0) * 100.0
    );
    assert!(
        wall >= allowed * 0.98 && wall <= allowed * 1.10,
        "wall {wall:.1} s against {allowed:.1} s allowed"
    );
}

#[test]
fn run_with_kafka_and_the_llm_judge_end_to_end() {
    let server = FakeOpenAi::start();
    let broker = Broker::start();
    let topic = unique("llm");
    broker.create_topic(&topic, 2);
    let traces = gen_traces(60, &["--seed", "8"]);
    produce(&broker.brokers(), &topic, &traces);
    // Canaries: two labelled right, one mislabelled, so the judge agrees on two of three.
    let canary_dir = tempfile::tempdir().unwrap();
    let canaries = canary_dir.path().join("canaries.jsonl");
    let labelled = |id: &str, answer: &str, label: bool| {
        let mut v: Value = serde_json::from_str(&trace(id, answer)).unwrap();
        v["label_faithful"] = json!(label);
        v.to_string()
    };
    std::fs::write(
        &canaries,
        [
            labelled("c1", "The museum opens at 9 every morning.", true),
            labelled(
                "c2",
                "The museum sells sandwiches and souvenirs daily.",
                false,
            ),
            labelled("c3", "The museum closes at 5 every evening.", false),
        ]
        .join("\n"),
    )
    .unwrap();
    let records_topic = unique("verdicts");
    broker.create_topic(&records_topic, 1);
    // llama-cpp-python's answer to a JSON schema: `auto` settles on json_object with a schema.
    server.refuse_formats(&["json_schema"], 500);
    // A few replies spoiled: a context list numbered from 0, a generated question without its flag.
    fn spoil(mut v: Value) -> Value {
        if let Some(contexts) = v["contexts"].as_array_mut() {
            for c in contexts {
                c["n"] = json!(c["n"].as_i64().unwrap() - 1);
            }
        }
        if let Some(q) = v["questions"].as_array_mut().and_then(|q| q.first_mut()) {
            *q = json!({"question": "what?"});
        }
        v
    }
    server.script(std::iter::repeat_n(Fault::Rewrite(spoil), 6));
    let s = setup(
        &server,
        &format!(
            "canary_path = \"{}\"\nrecords_topic = \"{records_topic}\"\nstructured_output = \"auto\"",
            canaries.display()
        ),
    );
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &unique("g"));
    env.push(("RAGWATCH__SAMPLE__DEFAULT_RATE", "1.0".into()));
    env.push(("RAGWATCH_LLM_API_KEY", "sk-test-secret".into()));
    let mut rw = Ragwatch::start(Path::new(&s.config), &env);
    let m = wait_for("llm verdicts", Duration::from_secs(60), || {
        let m = rw.metrics()?;
        let done = m.sum("ragwatch_judge_requests_total", &[("judge", "llm")]);
        (done >= 60.0).then_some(m)
    });
    let judged = m.sum("ragwatch_judge_requests_total", &[("judge", "llm")]);
    // Five judged in full again (budget skips and partial verdicts are not cached): their
    // verdicts come from the cache, counted as `cached`, not as calls.
    let full: Vec<String> = records_file(&s)
        .iter()
        .filter(|r| {
            r["status"] == "judged" && r["part_failures"].as_array().is_none_or(|p| p.is_empty())
        })
        .filter_map(|r| r["trace_id"].as_str().map(str::to_owned))
        .collect();
    let again: Vec<(String, Vec<u8>)> = traces
        .iter()
        .filter(|(_, payload)| {
            let v: Value = serde_json::from_slice(payload).unwrap();
            full.iter().any(|id| v["trace_id"] == id.as_str())
        })
        .take(5)
        .cloned()
        .collect();
    assert_eq!(again.len(), 5, "{full:?}");
    produce(&broker.brokers(), &topic, &again);
    let after = wait_for("cached verdicts", Duration::from_secs(30), || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_judge_requests_total", &[("outcome", "cached")]) >= 5.0).then_some(m)
    });
    assert_eq!(
        after.sum("ragwatch_judge_requests_total", &[("judge", "llm")])
            - after.sum("ragwatch_judge_requests_total", &[("outcome", "cached")]),
        judged,
        "a cached verdict is not a call"
    );
    assert!(m.sum("ragwatch_faithfulness_ratio_count", &[("judge", "llm")]) > 0.0);
    assert!(
        m.sum(
            "ragwatch_context_relevance_ratio_count",
            &[("judge", "llm")]
        ) > 0.0,
        "the LLM judge's context relevance reaches the histograms"
    );
    assert!(m.sum("ragwatch_judge_tokens_total", &[("judge", "llm")]) > 0.0);
    assert_eq!(
        m.sum("ragwatch_budget_share_ratio", &[]),
        1.0,
        "one replica holds every partition"
    );
    let text = rw.scrape().unwrap();
    assert!(!text.contains("NaN"), "no NaN on /metrics");
    promtool_check_metrics(&text).unwrap();
    // The mode `auto` found is exported, and is the judge identity from the start: no `auto`
    // series on judge_info.
    assert_eq!(
        m.sum(
            "ragwatch_judge_structured_output_info",
            &[("mode", "json_object_schema")]
        ),
        1.0
    );
    let info: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("ragwatch_judge_info{"))
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert!(
        info[0].contains("judge-2026-01-01+embed-1@rw-3/one_call+ctx/json_object_schema\""),
        "{info:?}"
    );
    assert!(
        m.sum("ragwatch_judge_part_failures_total", &[("judge", "llm")]) >= 1.0,
        "spoiled parts are counted, the verdicts kept"
    );
    assert!(
        m.sum(
            "ragwatch_judge_retries_total",
            &[("reason", "format_fallback")]
        ) >= 1.0
    );
    rw.sigterm();
    assert!(rw.wait_exit(Duration::from_secs(30)).success());
    assert!(!rw.log_text().contains("sk-test-secret"));
    // Every verdict record was also published to the records topic, without the key.
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique("reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&records_topic]).unwrap();
    let mut ids = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while ids.len() < 60 && Instant::now() < deadline {
        if let Some(Ok(msg)) = consumer.poll(Duration::from_millis(200)) {
            let text = std::str::from_utf8(msg.payload().unwrap()).unwrap();
            assert!(!text.contains("sk-test-secret"));
            let v: Value = serde_json::from_str(text).unwrap();
            let id = v["trace_id"].as_str().unwrap();
            if !id.starts_with('c') {
                ids.insert(id.to_owned());
            }
        }
    }
    assert_eq!(ids.len(), 60, "a record per judged trace on the topic");
}

/// Measures (and prints, for docs/performance.md) tokens per judged trace for both faithfulness
/// forms and ragwatch's own CPU time per judged trace outside the API, on 200 generated ~2 KB
/// traces. Asserts only what must hold: every trace judged, and one call cheaper than two.
#[test]
fn cost_per_judged_trace_for_both_forms() {
    let server = FakeOpenAi::start();
    let mut figures = Vec::new();
    for mode in ["one_call", "two_call"] {
        let s = setup(
            &server,
            &format!(
                "faithfulness_mode = \"{mode}\"\ncache_capacity = 0\n[budget]\nrequests_per_minute = 1000000\ntokens_per_minute = 1000000000\ntokens_per_day = 10000000000"
            ),
        );
        let input = s.dir.path().join("in.jsonl");
        let lines: Vec<String> = gen_traces(200, &["--seed", "31", "--pad", "1500"])
            .into_iter()
            .map(|(_, l)| String::from_utf8(l).unwrap())
            .collect();
        std::fs::write(&input, lines.join("\n")).unwrap();
        let before = server.tokens_billed();
        let out = run_ok(
            Command::new("python3")
                .args(["-c", "import resource,subprocess,sys\nsubprocess.run(sys.argv[1:],check=True,stdout=open(sys.argv[-1]+'.out','w'),stderr=subprocess.DEVNULL)\nr=resource.getrusage(resource.RUSAGE_CHILDREN)\nprint(r.ru_utime+r.ru_stime)"])
                .arg(env!("CARGO_BIN_EXE_ragwatch"))
                .args(["replay", "--judge", "llm", "--config"])
                .arg(&s.config)
                .arg(&input),
        );
        let cpu: f64 = String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let verdicts = std::fs::read_to_string(format!("{}.out", input.display())).unwrap();
        let judged = verdicts
            .lines()
            .filter(|l| {
                l.contains("\"status\":\"judged\"") || l.contains("\"status\":\"no_claims\"")
            })
            .count();
        assert!(judged >= 190, "{mode}: judged {judged} of 200");
        let tokens = (server.tokens_billed() - before) as f64 / judged as f64;
        figures.push((mode, tokens, cpu * 1000.0 / judged as f64));
    }
    eprintln!("MEASURED tokens/trace and CPU ms/trace: {figures:?}");
    assert!(figures[0].1 < figures[1].1);
}

/// The judge API goes down for a minute under steady Kafka traffic: every connection to it is reset.
/// The consumer keeps up (the offline judge scores everything), every sampled trace is accounted for
/// as judged or skipped with a reason, judging resumes when the API returns, the budget holds, and
/// SIGTERM still exits within the grace period.
#[test]
fn an_api_down_for_a_minute_under_live_traffic() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let server = FakeOpenAi::start();
    let broker = Broker::start();
    let topic = unique("outage");
    broker.create_topic(&topic, 2);
    let s = setup(
        &server,
        "max_attempts = 3\nbackoff_max_ms = 500\n[budget]\ntokens_per_minute = 60000\nrequests_per_minute = 600",
    );
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &unique("g"));
    env.push(("RAGWATCH__SAMPLE__DEFAULT_RATE", "0.05".into()));
    env.push(("RAGWATCH__JUDGE__QUEUE_CAPACITY", "16".into()));
    env.push(("RAGWATCH__SHUTDOWN__GRACE_SECS", "5".into()));
    env.push(("RAGWATCH_LLM_API_KEY", "sk-test".into()));
    let mut rw = Ragwatch::start(Path::new(&s.config), &env);
    let started = Instant::now();

    // Steady traffic: 40 traces a second until told to stop.
    let produced = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (produced, stop, brokers, topic) = (
            Arc::clone(&produced),
            Arc::clone(&stop),
            broker.brokers(),
            topic.clone(),
        );
        std::thread::spawn(move || {
            let traces = gen_traces(6000, &["--seed", "51"]);
            for chunk in traces.chunks(20) {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                produce(&brokers, &topic, chunk);
                produced.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                // The stream's pace: traces keep arriving through the outage.
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let metric = |name: &str, labels: &[(&str, &str)]| {
        rw.metrics().map(|m| m.sum(name, labels)).unwrap_or(0.0)
    };
    let keeps_up = |what: &str| {
        let behind =
            produced.load(Ordering::Relaxed) as f64 - metric("ragwatch_traces_received_total", &[]);
        assert!(behind < 400.0, "{what}: {behind} traces behind");
        assert_eq!(http_get(rw.addr, "/livez").map(|r| r.0), Some(200));
    };
    wait_for(
        "llm verdicts while healthy",
        Duration::from_secs(60),
        || (metric("ragwatch_traces_judged_total", &[("judge", "llm")]) >= 10.0).then_some(()),
    );

    server.set_down(true);
    let skipped_before = metric(
        "ragwatch_traces_skipped_total",
        &[("reason", "judge_error")],
    );
    // The outage lasts until its effects are all seen (at most a minute), the consumer checked
    // every second meanwhile.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        std::thread::sleep(Duration::from_secs(1));
        keeps_up("API down");
        let skipped = metric(
            "ragwatch_traces_skipped_total",
            &[("reason", "judge_error")],
        );
        let failed = metric(
            "ragwatch_judge_requests_total",
            &[("outcome", "http_error")],
        ) + metric("ragwatch_judge_requests_total", &[("outcome", "timeout")]);
        let resets = server.state.connection_resets.load(Ordering::SeqCst);
        if (skipped > skipped_before + 10.0 && failed > 10.0 && resets > 0)
            || std::time::Instant::now() > deadline
        {
            break;
        }
    }
    let judged_down = metric("ragwatch_traces_judged_total", &[("judge", "llm")]);
    let skipped_down = metric(
        "ragwatch_traces_skipped_total",
        &[("reason", "judge_error")],
    );
    assert!(
        skipped_down > skipped_before + 10.0,
        "sampled traces are skipped with reason judge_error while the API is down"
    );
    assert!(server.state.connection_resets.load(Ordering::SeqCst) > 0);
    let failed = metric(
        "ragwatch_judge_requests_total",
        &[("outcome", "http_error")],
    ) + metric("ragwatch_judge_requests_total", &[("outcome", "timeout")]);
    assert!(failed > 10.0, "failures counted by outcome: {failed}");

    server.set_down(false);
    wait_for("judging to resume", Duration::from_secs(60), || {
        (metric("ragwatch_traces_judged_total", &[("judge", "llm")]) > judged_down + 10.0)
            .then_some(())
    });
    keeps_up("API back");
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let total = produced.load(Ordering::Relaxed) as f64;
    wait_for("every trace read", Duration::from_secs(60), || {
        (metric("ragwatch_traces_received_total", &[]) >= total).then_some(())
    });
    // Every sampled trace was judged or skipped with a reason: nothing vanished.
    let m = wait_for("the judge queue to drain", Duration::from_secs(60), || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_judge_queue_depth", &[]) == 0.0
            && m.sum("ragwatch_traces_sampled_total", &[])
                == m.sum("ragwatch_judge_requests_total", &[("judge", "llm")])
                    + m.sum("ragwatch_traces_skipped_total", &[("reason", "queue_full")]))
        .then_some(m)
    });
    let text = rw.scrape().unwrap();
    assert!(!text.contains("NaN"));
    // The budget held at the server: 60,000 tokens a minute, plus one minute's burst.
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    assert!(
        server.tokens_billed() as f64 <= 60_000.0 * (minutes + 1.0),
        "billed {} over {minutes:.1} min",
        server.tokens_billed()
    );
    eprintln!(
        "MEASURED outage: {total} traces, sampled {}, judged {}, skipped {:?}, resets {}",
        m.sum("ragwatch_traces_sampled_total", &[]),
        m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]),
        ["judge_error", "queue_full", "budget"]
            .map(|r| m.sum("ragwatch_traces_skipped_total", &[("reason", r)])),
        server.state.connection_resets.load(Ordering::SeqCst)
    );
    let t = Instant::now();
    rw.sigterm();
    assert!(rw.wait_exit(Duration::from_secs(15)).success());
    eprintln!("exited {:?} after SIGTERM", t.elapsed());
}
