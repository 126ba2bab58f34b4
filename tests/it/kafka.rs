//! End-to-end through a real Kafka-protocol broker (tansu): traces produced by a Kafka client arrive
//! with exact per-stratum counts on `/metrics`, poison messages are rejected with their reason without
//! blocking their partition, and SIGTERM then restart accounts for every produced trace.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::common::*;

fn config() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/ragwatch.toml"))
}

fn declared_or_other(stratum: &str) -> &str {
    match stratum {
        "head" | "tail" | "known_failure" | "out_of_scope" => stratum,
        _ => "other",
    }
}

/// Poison of every kind, each with the reason it is rejected for.
fn poison() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("invalid_json", b"{not json".to_vec()),
        (
            "truncated",
            br#"{"trace_id":"x","query":"q","contexts":["#.to_vec(),
        ),
        (
            "wrong_type",
            br#"{"trace_id":"x","query":7,"contexts":[],"answer":"a"}"#.to_vec(),
        ),
        (
            "missing_field",
            br#"{"trace_id":"x","contexts":[],"answer":"a"}"#.to_vec(),
        ),
        (
            "not_utf8",
            b"{\"trace_id\":\"x\",\"query\":\"\xc3\x28\",\"contexts\":[],\"answer\":\"a\"}"
                .to_vec(),
        ),
        ("empty", Vec::new()),
        (
            "too_large",
            format!(
                r#"{{"trace_id":"x","query":"q","contexts":[],"answer":"{}"}}"#,
                "a".repeat(2_000_000)
            )
            .into_bytes(),
        ),
    ]
}

/// 300 generated traces over four declared strata and one undeclared, with poison keyed so it
/// lands between good traces on every partition: the messages, the traces expected per stratum
/// (the undeclared one as `other`) and the rejections expected per reason.
#[allow(clippy::type_complexity)]
fn traffic() -> (
    Vec<(String, Vec<u8>)>,
    HashMap<String, f64>,
    HashMap<&'static str, f64>,
) {
    let mut messages = gen_traces(
        300,
        &[
            "--seed",
            "11",
            "--strata",
            "head,tail,known_failure,out_of_scope,mystery",
        ],
    );
    let mut expected: HashMap<String, f64> = HashMap::new();
    for (_, json) in &messages {
        let v: serde_json::Value = serde_json::from_slice(json).unwrap();
        *expected
            .entry(declared_or_other(v["stratum"].as_str().unwrap()).to_owned())
            .or_default() += 1.0;
    }
    let mut rejects: HashMap<&str, f64> = HashMap::new();
    for (i, (reason, payload)) in poison().into_iter().enumerate() {
        for k in 0..3 {
            messages.insert(
                20 + i * 30 + k,
                (format!("poison-{i}-{k}"), payload.clone()),
            );
            *rejects.entry(reason).or_default() += 1.0;
        }
    }
    (messages, expected, rejects)
}

/// Every decoded trace got an offline verdict; histograms count what was scored; every generated
/// trace carries three scored contexts: one top-rank score each.
fn assert_every_trace_scored(m: &Samples) {
    assert_eq!(
        m.sum("ragwatch_traces_judged_total", &[("judge", "offline")]),
        300.0
    );
    assert_eq!(
        m.sum("ragwatch_retrieval_score_count", &[("rank", "1")]),
        300.0
    );
    assert_eq!(m.sum("ragwatch_contexts_retrieved_sum", &[]), 900.0);
    let scored = m.sum("ragwatch_faithfulness_ratio_count", &[("judge", "offline")]);
    let no_claims = m.sum("ragwatch_no_claims_total", &[("judge", "offline")]);
    assert_eq!(scored + no_claims, 300.0);
}

/// Lag reaches zero on every partition once all is read, and the window gauges come up.
fn wait_lag_zero_and_windows(rw: &Ragwatch) {
    wait_for("lag gauges at zero", Duration::from_secs(30), || {
        let m = rw.metrics()?;
        let lags: Vec<f64> =
            m.0.iter()
                .filter(|s| s.0 == "ragwatch_kafka_consumer_lag_messages")
                .map(|s| s.2)
                .collect();
        (lags.len() == 3 && lags.iter().all(|&l| l == 0.0)).then_some(())
    });
    wait_for("window gauges", Duration::from_secs(10), || {
        let m = rw.metrics()?;
        (m.sum(
            "ragwatch_window_samples",
            &[
                ("metric", "faithfulness"),
                ("stratum", "head"),
                ("window", "5m"),
            ],
        ) > 0.0)
            .then_some(())
    });
}

#[test]
fn strata_counts_are_exact_and_poison_never_blocks() {
    let broker = Broker::start();
    let topic = unique("strata");
    broker.create_topic(&topic, 3);
    let (messages, expected, rejects) = traffic();
    produce(&broker.brokers(), &topic, &messages);

    let rw = Ragwatch::start(
        config(),
        &Ragwatch::kafka_env(&broker.brokers(), &topic, &unique("g")),
    );
    let deadline = Duration::from_secs(60);
    wait_for("all traces counted", deadline, || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_traces_received_total", &[]) == 300.0
            && m.sum("ragwatch_traces_rejected_total", &[]) == rejects.values().sum::<f64>())
        .then_some(())
    });
    // A trace is counted received before its contexts, verdict and scores: the last ones may still
    // be counting when the totals are seen.
    let m = rw.settled_metrics(
        &[
            "ragwatch_traces_",
            "ragwatch_retrieval_score",
            "ragwatch_contexts_retrieved",
            "ragwatch_faithfulness_ratio",
            "ragwatch_no_claims_total",
        ],
        deadline,
    );
    assert_eq!(m.sum("ragwatch_traces_received_total", &[]), 300.0);
    for (stratum, n) in &expected {
        assert_eq!(
            m.sum("ragwatch_traces_received_total", &[("stratum", stratum)]),
            *n,
            "stratum {stratum}"
        );
    }
    for (reason, n) in &rejects {
        assert_eq!(
            m.sum("ragwatch_traces_rejected_total", &[("reason", reason)]),
            *n,
            "reason {reason}"
        );
    }
    assert_every_trace_scored(&m);
    // The scrape passes promtool once all is read.
    wait_lag_zero_and_windows(&rw);
    promtool_check_metrics(&rw.scrape().unwrap()).unwrap();
    assert_eq!(http_get(rw.addr, "/livez").unwrap().0, 200);
    assert_eq!(http_get(rw.addr, "/readyz").unwrap().0, 200);
    // Without a sampled judge there are no acks to wait for: SIGTERM drains and exits at once.
    let mut rw = rw;
    rw.sigterm();
    assert!(
        rw.wait_exit(Duration::from_secs(20)).success(),
        "{}",
        rw.log_text()
    );
}

/// The number of messages a stopped ragwatch says it consumed (its last log line about offsets).
fn consumed_from_log(log: &str) -> f64 {
    let line = log
        .lines()
        .rfind(|l| l.contains("offsets committed"))
        .expect("final commit logged");
    let field = line
        .split_whitespace()
        .find_map(|w| strip_ansi(w).strip_prefix("received=").map(str::to_owned))
        .expect("received= field");
    field.parse().unwrap()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in s.chars() {
        match (esc, c) {
            (false, '\u{1b}') => esc = true,
            (true, 'm') => esc = false,
            (false, c) => out.push(c),
            _ => {}
        }
    }
    out
}

#[test]
fn sigterm_mid_stream_then_restart_accounts_for_every_trace() {
    let broker = Broker::start();
    let topic = unique("drain");
    let group = unique("g");
    broker.create_topic(&topic, 3);
    let n = 3000i64;
    // Produced over about six seconds, so the first run is stopped mid-stream however fast it
    // reads (a stream produced up front was read whole before the first scrape could see it).
    let traces = gen_traces(n as usize, &["--seed", "5", "--pad", "1500"]);
    let producer = produce_paced(
        &broker.brokers(),
        &topic,
        traces,
        100,
        Duration::from_millis(200),
    );

    // Every trace goes through the sampled-judge queue too, so offsets wait for its acks.
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &group);
    env.push(("RAGWATCH__JUDGE__SAMPLED", "offline".into()));
    env.push(("RAGWATCH__SAMPLE__DEFAULT_RATE", "1.0".into()));
    env.push(("RAGWATCH__JUDGE__QUEUE_CAPACITY", "100000".into()));
    let accounted = |m: &Samples| {
        m.sum("ragwatch_traces_received_total", &[]) + m.sum("ragwatch_traces_rejected_total", &[])
    };

    let mut first = Ragwatch::start(config(), &env);
    wait_for("part of the stream", Duration::from_secs(60), || {
        let m = first.metrics()?;
        (accounted(&m) >= 200.0).then_some(())
    });
    first.sigterm();
    let status = first.wait_exit(Duration::from_secs(30));
    assert!(
        status.success(),
        "exit after SIGTERM: {status:?}\n{}",
        first.log_text()
    );
    let consumed_first = consumed_from_log(&first.log_text()) as i64;
    let committed_first: i64 = committed(&broker.brokers(), &group, &topic, 3).iter().sum();
    // Committed offsets never run ahead of what was consumed and accounted for.
    assert!(
        committed_first <= consumed_first,
        "committed {committed_first} > consumed {consumed_first}"
    );
    assert!(
        !producer.is_finished() && consumed_first < n,
        "the first run was stopped mid-stream"
    );
    producer.join().expect("the producer thread");

    let mut second = Ragwatch::start(config(), &env);
    wait_for("the rest of the stream", Duration::from_secs(120), || {
        let m = second.metrics()?;
        (accounted(&m) as i64 + consumed_first >= n).then_some(())
    });
    second.sigterm();
    assert!(second.wait_exit(Duration::from_secs(30)).success());
    let consumed_second = consumed_from_log(&second.log_text()) as i64;
    // Every produced message (one offset each) is covered by the committed offsets...
    let committed_end: i64 = committed(&broker.brokers(), &group, &topic, 3).iter().sum();
    assert_eq!(
        committed_end, n,
        "committed offsets cover every produced trace"
    );
    // ...and at-least-once: duplicates are exactly what the first run read but had not committed.
    let duplicates = consumed_first + consumed_second - n;
    assert_eq!(duplicates, consumed_first - committed_first);
    eprintln!(
        "first run consumed {consumed_first}, committed {committed_first}; second consumed {consumed_second}; duplicates {duplicates}"
    );
}

fn committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    committed_and_high(brokers, group, topic, partitions)
        .into_iter()
        .map(|(c, _)| c.max(0))
        .collect()
}

#[test]
fn a_replica_joins_and_leaves_mid_stream_without_losing_a_trace() {
    let broker = Broker::start();
    let topic = unique("rebalance");
    let group = unique("g");
    broker.create_topic(&topic, 4);
    let n = 6000i64;
    let traces = gen_traces(n as usize, &["--seed", "13"]);
    // Produce over about 12 seconds so both replicas see the stream.
    let producer = produce_paced(
        &broker.brokers(),
        &topic,
        traces,
        500,
        Duration::from_millis(1000),
    );
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &group);
    env.push(("RAGWATCH__JUDGE__SAMPLED", "offline".into()));
    env.push(("RAGWATCH__SAMPLE__DEFAULT_RATE", "0.5".into()));
    let accounted = |m: &Samples| {
        m.sum("ragwatch_traces_received_total", &[]) + m.sum("ragwatch_traces_rejected_total", &[])
    };
    let mut a = Ragwatch::start(config(), &env);
    wait_for("a to hold all partitions", Duration::from_secs(30), || {
        (a.metrics()?.sum("ragwatch_kafka_assigned_partitions", &[]) == 4.0).then_some(())
    });
    let mut b = Ragwatch::start(config(), &env);
    // The group rebalances: both hold partitions and each spends its share of the judge budget.
    wait_for(
        "partitions split between a and b",
        Duration::from_secs(60),
        || {
            let (ma, mb) = (a.metrics()?, b.metrics()?);
            let (pa, pb) = (
                ma.sum("ragwatch_kafka_assigned_partitions", &[]),
                mb.sum("ragwatch_kafka_assigned_partitions", &[]),
            );
            (pa > 0.0 && pb > 0.0 && pa + pb == 4.0).then_some(())
        },
    );
    let (sa, sb) = (
        a.metrics().unwrap().sum("ragwatch_budget_share_ratio", &[]),
        b.metrics().unwrap().sum("ragwatch_budget_share_ratio", &[]),
    );
    assert!(
        (sa + sb - 1.0).abs() < 1e-9 && sa > 0.0 && sb > 0.0,
        "budget shares {sa} + {sb}"
    );
    wait_for("b to consume some", Duration::from_secs(30), || {
        (accounted(&b.metrics()?) > 0.0).then_some(())
    });
    b.sigterm();
    assert!(b.wait_exit(Duration::from_secs(30)).success());
    let consumed_b = consumed_from_log(&b.log_text()) as i64;
    producer.join().unwrap();
    // a takes the partitions back and finishes the stream; its share returns to one.
    wait_for("a to take over and finish", Duration::from_secs(90), || {
        let m = a.metrics()?;
        let done = committed(&broker.brokers(), &group, &topic, 4)
            .iter()
            .sum::<i64>()
            == n;
        (m.sum("ragwatch_kafka_assigned_partitions", &[]) == 4.0 && done).then_some(())
    });
    assert_eq!(
        a.metrics().unwrap().sum("ragwatch_budget_share_ratio", &[]),
        1.0
    );
    a.sigterm();
    assert!(a.wait_exit(Duration::from_secs(30)).success());
    let consumed_a = consumed_from_log(&a.log_text()) as i64;
    assert!(
        consumed_a + consumed_b >= n,
        "a {consumed_a} + b {consumed_b} < {n}: a trace was lost"
    );
    assert!(
        b.log_text()
            .contains("partitions revoked: committing stored offsets")
    );
    eprintln!(
        "rebalance: a consumed {consumed_a}, b consumed {consumed_b}, duplicates {}",
        consumed_a + consumed_b - n
    );
}
