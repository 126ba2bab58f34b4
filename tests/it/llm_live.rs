//! The LLM judge end to end under `ragwatch run` with the Kafka source, against the judge stand-in
//! (tests/it/common/judge/): canaries, the `auto` mode search, spoiled parts kept, cached verdicts
//! that are not calls, every record on the records topic; and the judge API down for a minute
//! under live traffic.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::judge::{Fault, JudgeServer};
use crate::common::*;
use crate::llm::{records_file, setup, trace};
use serde_json::{Value, json};

/// Canaries: two labelled right, one mislabelled, so the judge agrees on two of three.
fn write_canaries(dir: &Path) -> PathBuf {
    let canaries = dir.join("canaries.jsonl");
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
    canaries
}

/// A spoiled reply: a context list numbered from 0, a generated question without its flag.
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

/// Five traces judged in full produced again (budget skips and partial verdicts are not cached):
/// their verdicts come from the cache, counted as `cached`, not as calls.
fn assert_cached_verdicts_are_not_calls(
    rw: &Ragwatch,
    broker: &Broker,
    topic: &str,
    traces: &[(String, Vec<u8>)],
    full: &[String],
    judged: f64,
) {
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
    produce(&broker.brokers(), topic, &again);
    let deadline = Duration::from_secs(30);
    wait_for("cached verdicts", deadline, || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_judge_requests_total", &[("outcome", "cached")]) >= 5.0).then_some(())
    });
    let after = rw.settled_metrics(&["ragwatch_judge_requests_total"], deadline);
    assert_eq!(
        after.sum("ragwatch_judge_requests_total", &[("judge", "llm")])
            - after.sum("ragwatch_judge_requests_total", &[("outcome", "cached")]),
        judged,
        "a cached verdict is not a call"
    );
}

/// The LLM judge's families after the run: its scores reach the histograms, tokens and the
/// budget share are counted, the mode `auto` found is exported and is the judge identity from the
/// start, spoiled parts are counted and the format fallback is a retry.
fn assert_llm_families(m: &Samples, text: &str) {
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
    assert!(!text.contains("NaN"), "no NaN on /metrics");
    promtool_check_metrics(text).unwrap();
    // No `auto` series on judge_info.
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
}

/// Every verdict record was also published to `records_topic`, without the key.
fn assert_a_record_per_trace_on_the_topic(broker: &Broker, records_topic: &str) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("group.id", unique("reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[records_topic]).unwrap();
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

#[test]
fn run_with_kafka_and_the_llm_judge_end_to_end() {
    let server = JudgeServer::start();
    let broker = Broker::start();
    let topic = unique("llm");
    broker.create_topic(&topic, 2);
    let traces = gen_traces(60, &["--seed", "8"]);
    produce(&broker.brokers(), &topic, &traces);
    let canary_dir = tempfile::tempdir().unwrap();
    let canaries = write_canaries(canary_dir.path());
    let records_topic = unique("verdicts");
    broker.create_topic(&records_topic, 1);
    // llama-cpp-python's answer to a JSON schema: `auto` settles on json_object with a schema.
    server.refuse_formats(&["json_schema"], 500);
    // A few replies spoiled.
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
    let deadline = Duration::from_secs(60);
    wait_for("llm verdicts", deadline, || {
        let m = rw.metrics()?;
        let done = m.sum("ragwatch_judge_requests_total", &[("judge", "llm")]);
        let sampled = m.sum("ragwatch_traces_sampled_total", &[]);
        let settled = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")])
            + m.sum("ragwatch_traces_skipped_total", &[]);
        (done >= 60.0 && sampled >= 60.0 && settled >= sampled).then_some(())
    });
    // The calls made for the 60 traces, once every sampled trace is judged or skipped and the
    // counts stop: the cached verdicts below are compared with this count exactly.
    let m = rw.settled_metrics(
        &[
            "ragwatch_judge_requests_total",
            "ragwatch_traces_",
            "ragwatch_faithfulness_ratio",
        ],
        deadline,
    );
    let judged = m.sum("ragwatch_judge_requests_total", &[("judge", "llm")]);
    let full: Vec<String> = records_file(&s)
        .iter()
        .filter(|r| {
            r["status"] == "judged" && r["part_failures"].as_array().is_none_or(|p| p.is_empty())
        })
        .filter_map(|r| r["trace_id"].as_str().map(str::to_owned))
        .collect();
    assert_cached_verdicts_are_not_calls(&rw, &broker, &topic, &traces, &full, judged);
    assert_llm_families(&m, &rw.scrape().unwrap());
    rw.sigterm();
    assert!(rw.wait_exit(Duration::from_secs(30)).success());
    assert!(!rw.log_text().contains("sk-test-secret"));
    assert_a_record_per_trace_on_the_topic(&broker, &records_topic);
}

/// Steady traffic on a thread of its own: 40 traces a second until stopped.
struct Traffic {
    produced: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Traffic {
    fn start(brokers: String, topic: String) -> Traffic {
        let produced = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (produced, stop) = (Arc::clone(&produced), Arc::clone(&stop));
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
        Traffic {
            produced,
            stop,
            thread,
        }
    }

    fn produced(&self) -> f64 {
        self.produced.load(Ordering::Relaxed) as f64
    }

    /// Stops the traffic; the traces produced in all.
    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.produced.load(Ordering::Relaxed) as f64
    }
}

/// A sum of ragwatch's current scrape (0 when it does not answer).
fn metric(rw: &Ragwatch, name: &str, labels: &[(&str, &str)]) -> f64 {
    rw.metrics().map(|m| m.sum(name, labels)).unwrap_or(0.0)
}

/// The consumer keeps up with the traffic and ragwatch stays live.
fn keeps_up(rw: &Ragwatch, traffic: &Traffic, what: &str) {
    let behind = traffic.produced() - metric(rw, "ragwatch_traces_received_total", &[]);
    assert!(behind < 400.0, "{what}: {behind} traces behind");
    assert_eq!(http_get(rw.addr, "/livez").map(|r| r.0), Some(200));
}

/// Judge calls that failed by HTTP error or timeout.
fn failed_calls(rw: &Ragwatch) -> f64 {
    metric(
        rw,
        "ragwatch_judge_requests_total",
        &[("outcome", "http_error")],
    ) + metric(
        rw,
        "ragwatch_judge_requests_total",
        &[("outcome", "timeout")],
    )
}

/// The API down until its effects are all seen (at most a minute), the consumer checked every
/// second meanwhile: sampled traces are skipped with reason judge_error, connections reset,
/// failures counted by outcome. Returns the LLM verdicts counted when it ends.
fn outage(server: &JudgeServer, rw: &Ragwatch, traffic: &Traffic) -> f64 {
    let skipped = || {
        metric(
            rw,
            "ragwatch_traces_skipped_total",
            &[("reason", "judge_error")],
        )
    };
    let resets = || server.state.connection_resets.load(Ordering::SeqCst);
    server.set_down(true);
    let skipped_before = skipped();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        std::thread::sleep(Duration::from_secs(1));
        keeps_up(rw, traffic, "API down");
        let seen = skipped() > skipped_before + 10.0 && failed_calls(rw) > 10.0 && resets() > 0;
        if seen || Instant::now() > deadline {
            break;
        }
    }
    let judged_down = metric(rw, "ragwatch_traces_judged_total", &[("judge", "llm")]);
    assert!(
        skipped() > skipped_before + 10.0,
        "sampled traces are skipped with reason judge_error while the API is down"
    );
    assert!(resets() > 0);
    let failed = failed_calls(rw);
    assert!(failed > 10.0, "failures counted by outcome: {failed}");
    judged_down
}

/// Every trace read and every sampled trace judged or skipped with a reason: nothing vanished.
fn drained(rw: &Ragwatch, total: f64) -> Samples {
    wait_for("every trace read", Duration::from_secs(60), || {
        (metric(rw, "ragwatch_traces_received_total", &[]) >= total).then_some(())
    });
    wait_for("the judge queue to drain", Duration::from_secs(60), || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_judge_queue_depth", &[]) == 0.0
            && m.sum("ragwatch_traces_sampled_total", &[])
                == m.sum("ragwatch_judge_requests_total", &[("judge", "llm")])
                    + m.sum("ragwatch_traces_skipped_total", &[("reason", "queue_full")]))
        .then_some(m)
    })
}

/// The judge API goes down for a minute under steady Kafka traffic: every connection to it is reset.
/// The consumer keeps up (the offline judge scores everything), every sampled trace is accounted for
/// as judged or skipped with a reason, judging resumes when the API returns, the budget holds, and
/// SIGTERM still exits within the grace period.
#[test]
fn an_api_down_for_a_minute_under_live_traffic() {
    let server = JudgeServer::start();
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
    let traffic = Traffic::start(broker.brokers(), topic.clone());
    let judged = |rw: &Ragwatch| metric(rw, "ragwatch_traces_judged_total", &[("judge", "llm")]);
    wait_for(
        "llm verdicts while healthy",
        Duration::from_secs(60),
        || (judged(&rw) >= 10.0).then_some(()),
    );

    let judged_down = outage(&server, &rw, &traffic);
    server.set_down(false);
    wait_for("judging to resume", Duration::from_secs(60), || {
        (judged(&rw) > judged_down + 10.0).then_some(())
    });
    keeps_up(&rw, &traffic, "API back");
    let total = traffic.stop();
    let m = drained(&rw, total);
    assert!(!rw.scrape().unwrap().contains("NaN"));
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
