//! kill -9 at random moments, 20 times, against one topic; then a last run to the end. Every trace
//! ragwatch judges is appended (and flushed) to its verdict records before its offset may be stored,
//! so the records of all runs together show what was accounted for: every produced trace at least
//! once, and the duplicates, which come only from work in flight at a kill.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::openai::FakeOpenAi;
use common::*;
use rand::RngExt;

#[test]
fn kill_9_in_a_loop_loses_nothing() {
    let server = FakeOpenAi::start();
    let broker = Broker::start();
    let topic = unique("crash");
    let group = unique("g");
    broker.create_topic(&topic, 3);
    // Large enough that no trace is skipped for a full queue: every trace is judged and recorded.
    let n = 4000usize;
    let traces = gen_traces(n, &["--seed", "17", "--strata", "head,tail"]);
    let ids: Vec<String> = traces.iter().map(|t| t.0.clone()).collect();
    produce(&broker.brokers(), &topic, &traces);

    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[judge]\nsampled = \"llm\"\nworkers = 8\nqueue_capacity = 100000\n[sample]\ndefault_rate = 1.0\n\
             [llm]\nbase_url = \"{}\"\ncache_capacity = 0\nrecords_path = \"{}\"\n\
             [budget]\nrequests_per_minute = 10000000\ntokens_per_minute = 10000000000\ntokens_per_day = 100000000000\n",
            server.base_url(),
            records.display()
        ),
    )
    .unwrap();
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &group);
    // A killed member never leaves the group: a short session lets the group move on without it.
    env.push((
        "RAGWATCH__KAFKA__PROPERTIES__SESSION.TIMEOUT.MS",
        "6000".into(),
    ));
    env.push((
        "RAGWATCH__KAFKA__PROPERTIES__HEARTBEAT.INTERVAL.MS",
        "500".into(),
    ));
    let mut rng = rand::rng();
    let committed_sum = || -> i64 {
        use rdkafka::config::ClientConfig;
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", broker.brokers())
            .set("group.id", &group)
            .create()
            .unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..3 {
            tpl.add_partition(&topic, p);
        }
        let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
        got.elements()
            .iter()
            .map(|e| e.offset().to_raw().unwrap_or(0).max(0))
            .sum()
    };
    let mut last_committed = 0;
    for run in 0..20 {
        let rw = Ragwatch::start(&config, &env);
        std::thread::sleep(Duration::from_millis(rng.random_range(200..900)));
        drop(rw); // Drop sends SIGKILL.
        let c = committed_sum();
        assert!(
            c >= last_committed,
            "run {run}: committed offsets went back"
        );
        last_committed = c;
    }
    // Let the killed members' sessions expire before the last run joins, then let it finish.
    std::thread::sleep(Duration::from_secs(7));
    let mut last = Ragwatch::start(&config, &env);
    wait_for(
        "the last run to finish the topic",
        Duration::from_secs(120),
        || {
            let m = last.metrics();
            eprintln!(
                "committed {} judged {:?} assigned {:?} lag {:?}",
                committed_sum(),
                m.as_ref()
                    .map(|m| m.sum("ragwatch_judge_requests_total", &[])),
                m.as_ref()
                    .map(|m| m.sum("ragwatch_kafka_assigned_partitions", &[])),
                m.as_ref().map(|m| m
                    .0
                    .iter()
                    .filter(|s| s.0 == "ragwatch_kafka_consumer_lag_messages")
                    .map(|s| s.2)
                    .collect::<Vec<_>>())
            );
            (committed_sum() == n as i64).then_some(())
        },
    );
    last.sigterm();
    assert!(last.wait_exit(Duration::from_secs(30)).success());

    let text = std::fs::read_to_string(&records).unwrap();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for line in text.lines() {
        // A kill can cut the very last line of a run; a cut line's trace was never acked.
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            *seen
                .entry(v["trace_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    let missing: Vec<&String> = ids.iter().filter(|id| !seen.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} traces never judged, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    eprintln!(
        "20 kills: {} judgements for {n} traces, {duplicates} duplicates, committed before the last run {last_committed}",
        seen.values().sum::<usize>()
    );
    // Duplicates are traces judged but not yet committed at a kill: at most what one run consumed
    // beyond its last commit, so together never more than everything the killed runs consumed.
    assert!(duplicates < 20 * n, "duplicates {duplicates}");
}
