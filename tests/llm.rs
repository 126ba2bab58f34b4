//! The LLM judge against a real HTTP server on loopback that speaks the OpenAI API
//! (tests/common/openai.rs): correct scores on known cases, 429 with Retry-After, 500s, timeouts,
//! malformed and truncated output, the budget never exceeded at the server, and one end-to-end run
//! through `ragwatch run` with the Kafka source.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::openai::{FakeOpenAi, Fault};
use common::*;
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

fn setup(server: &FakeOpenAi, extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let config = dir.path().join("ragwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[judge]\nsampled = \"llm\"\nworkers = 2\n[llm]\nbase_url = \"{}\"\nchat_model = \"judge-2026-01-01\"\nembedding_model = \"embed-1\"\n{}backoff_base_ms = 20\nrecords_path = \"{}\"\n{extra}\n",
            server.base_url(),
            if extra.contains("timeout") { "" } else { "request_timeout_ms = 2000\ntrace_deadline_ms = 10000\n" },
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

/// Runs `ragwatch replay --judge llm` on `lines`; returns the verdict records by trace id.
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
    (
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
        String::from_utf8(out.stderr).unwrap(),
    )
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

#[test]
fn known_cases_score_correctly_in_both_forms_and_records_keep_raw_output() {
    let server = FakeOpenAi::start();
    let mut tokens = Vec::new();
    for mode in ["one_call", "two_call", "json_mode"] {
        // JSON mode: servers without structured output get the schema in the prompt.
        let s = setup(
            &server,
            &match mode {
                "json_mode" => "json_schema = false".to_owned(),
                _ => format!("faithfulness_mode = \"{mode}\""),
            },
        );
        let before = server.tokens_billed();
        let (records, _) = replay(&s, &known_cases());
        tokens.push((mode, (server.tokens_billed() - before) as f64 / 6.0));
        assert_eq!(by_id(&records, "all")["faithfulness"], 1.0, "{mode}");
        assert_eq!(by_id(&records, "half")["faithfulness"], 0.5, "{mode}");
        let contra = by_id(&records, "contra");
        assert_eq!(contra["faithfulness"], 0.0);
        assert_eq!(contra["details"]["details"]["contradicted"], 1);
        let refusal = by_id(&records, "refusal");
        assert_eq!(refusal["answer_relevancy"], 0.0);
        assert_eq!(refusal["details"]["refusal"], true);
        let empty = by_id(&records, "empty");
        assert_eq!(empty["status"], "no_claims");
        assert!(empty["faithfulness"].is_null(), "no claims is not a score");
        // Context relevance, from the same call that judges the claims: a relevant context at rank 1
        // scores 1; behind an irrelevant one, precision@2 = 0.5.
        assert_eq!(by_id(&records, "all")["context_relevance"], 1.0, "{mode}");
        let ranked = by_id(&records, "ranked");
        assert_eq!(ranked["context_relevance"], 0.5, "{mode}");
        assert_eq!(ranked["faithfulness"], 1.0, "{mode}");
        assert_eq!(
            ranked["details"]["details"]["contexts_relevant"],
            json!([false, true])
        );
        // Relevancy: an on-topic answer scores above an off-topic one.
        assert!(by_id(&records, "all")["answer_relevancy"].as_f64().unwrap() > 0.3);
        // Verdict records: raw outputs, usage, model; never the key.
        let rec = std::fs::read_to_string(&s.records).unwrap();
        assert!(rec.contains("\"raw\"") && rec.contains("judge-2026-01-01+embed-1@rw-2/"));
        assert!(!rec.contains("sk-test-secret"));
    }
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
}

#[test]
fn failures_are_counted_by_reason_never_scored() {
    let server = FakeOpenAi::start();
    // Malformed JSON: parse_error. Truncated twice: truncated. Truncated once: retried larger, ok.
    let s = setup(&server, "max_attempts = 2\nmax_output_tokens = 100");
    server.script([Fault::Malformed]);
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

#[test]
fn budget_is_never_exceeded_at_the_server() {
    let server = FakeOpenAi::start();
    let s = setup(
        &server,
        "[budget]\ntokens_per_minute = 3000\nrequests_per_minute = 1000\ntokens_per_day = 1000000",
    );
    let lines: Vec<String> = (0..40)
        .map(|i| {
            trace(
                &format!("b{i}"),
                &format!("The museum opens at 9. Entry is free for {i} children."),
            )
        })
        .collect();
    let started = Instant::now();
    let (records, _) = replay(&s, &lines);
    let elapsed_min = started.elapsed().as_secs_f64() / 60.0;
    let judged = records.iter().filter(|r| r["status"] == "judged").count();
    let budget = records
        .iter()
        .filter(|r| r["reason"] == "budget_exhausted")
        .count();
    assert!(
        judged > 0 && budget > 0,
        "judged {judged}, over budget {budget}"
    );
    assert_eq!(judged + budget, 40, "every trace accounted for");
    let allowed = 3000.0 * (1.0 + elapsed_min);
    assert!(
        (server.tokens_billed() as f64) <= allowed,
        "billed {} > allowed {allowed}",
        server.tokens_billed()
    );
}

#[test]
fn run_with_kafka_and_the_llm_judge_end_to_end() {
    let server = FakeOpenAi::start();
    let broker = Broker::start();
    let topic = unique("llm");
    broker.create_topic(&topic, 2);
    produce(&broker.brokers(), &topic, &gen_traces(60, &["--seed", "8"]));
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
    let s = setup(
        &server,
        &format!(
            "canary_path = \"{}\"\nrecords_topic = \"{records_topic}\"",
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

/// Measures (and prints, for the README) tokens per judged trace for both faithfulness forms and
/// ragwatch's own CPU time per judged trace outside the API, on 200 generated ~2 KB traces. Asserts
/// only what must hold: every trace judged, and one call cheaper than two.
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
    for _ in 0..6 {
        std::thread::sleep(Duration::from_secs(10));
        keeps_up("API down");
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
