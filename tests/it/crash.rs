//! kill -9, as an OOM kill or a failed liveness probe delivers it. Every trace ragwatch judges is
//! appended (and flushed) to its verdict records before its offset may be stored, so the records
//! of all runs together show what was accounted for: every produced trace at least once, and the
//! duplicates, which come only from work in flight at a kill.
//!
//! Both tests run ragwatch with its default group settings plus a `group_instance_id`, taken from
//! `$POD_NAME` as in Kubernetes, where a restarted container keeps its pod's name: each restart
//! takes its killed predecessor's place in the group instead of waiting out its session.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::judge::{Fault, JudgeServer};
use crate::common::*;
use rand::RngExt;

/// The sum of the group's committed offsets over `partitions` partitions of `topic`.
fn committed_sum(brokers: &str, group: &str, topic: &str, partitions: i32) -> i64 {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c.committed_offsets(tpl, Duration::from_secs(10)).unwrap();
    got.elements()
        .iter()
        .map(|e| e.offset().to_raw().unwrap_or(0).max(0))
        .sum()
}

/// Partitions the process holds now, per its `/metrics` (0 while it cannot be scraped).
fn held(rw: &Ragwatch) -> f64 {
    rw.metrics()
        .map_or(0.0, |m| m.sum("ragwatch_kafka_assigned_partitions", &[]))
}

/// Traces the process has received, per its `/metrics` (0 while it cannot be scraped).
fn received(rw: &Ragwatch) -> f64 {
    rw.metrics()
        .map_or(0.0, |m| m.sum("ragwatch_traces_received_total", &[]))
}

/// Polls until `rw` holds a partition or `deadline` (from `start`) passes; returns when it did.
fn first_assignment(rw: &Ragwatch, start: Instant, deadline: Duration) -> Option<Duration> {
    while start.elapsed() < deadline {
        if held(rw) > 0.0 {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn show(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.1}s", d.as_secs_f64()))
}

#[test]
fn kill_9_in_a_loop_loses_nothing() {
    let server = JudgeServer::start();
    // Every judge call takes 10 ms: about 130 traces a second with 4 workers, so no run of a few
    // seconds finishes the topic and every kill lands mid-stream with judge work in flight.
    server.set_always(Some(Fault::Delay(Duration::from_millis(10))));
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
            "[judge]\nsampled = \"llm\"\nworkers = 4\nqueue_capacity = 100000\n[sample]\ndefault_rate = 1.0\n\
             [llm]\nbase_url = \"{}\"\ncache_capacity = 0\nrecords_path = \"{}\"\n\
             [budget]\nrequests_per_minute = 10000000\ntokens_per_minute = 10000000000\ntokens_per_day = 100000000000\n",
            server.base_url(),
            records.display()
        ),
    )
    .unwrap();
    // ragwatch's own session and heartbeat defaults; only the pod name is added.
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &group);
    env.push(("POD_NAME", "ragwatch-0".into()));
    let committed = || committed_sum(&broker.brokers(), &group, &topic, 3);
    let mut rng = rand::rng();
    let mut last_committed = 0;
    let mut runs = Vec::new();
    for run in 0..10 {
        let start = Instant::now();
        let rw = Ragwatch::start(&config, &env);
        let assigned = first_assignment(&rw, start, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("run {run} was never assigned a partition"));
        // Hold the partitions 1.5 to 4 s, reading and judging, then SIGKILL.
        let hold = Duration::from_millis(rng.random_range(1500..4000));
        let mut read = 0.0;
        while start.elapsed() < assigned + hold {
            read = received(&rw).max(read);
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(rw); // Drop sends SIGKILL.
        let c = committed();
        assert!(
            c >= last_committed,
            "run {run}: committed offsets went back"
        );
        runs.push(format!(
            "assigned after {:.1}s, killed {:.1}s later, read {read}, committed {}",
            assigned.as_secs_f64(),
            hold.as_secs_f64(),
            c - last_committed
        ));
        last_committed = c;
    }
    // The last run starts at once: static membership hands it the partitions its predecessor held.
    let start = Instant::now();
    let mut last = Ragwatch::start(&config, &env);
    let assigned = first_assignment(&last, start, Duration::from_secs(120))
        .expect("the last run is assigned partitions");
    wait_for(
        "the last run to finish the topic",
        Duration::from_secs(120),
        || (committed() == n as i64).then_some(()),
    );
    let finished = start.elapsed();
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
    eprintln!("10 kills:");
    for (i, r) in runs.iter().enumerate() {
        eprintln!("  run {i}: {r}");
    }
    eprintln!(
        "last run: first assignment {:.1}s after its start, topic finished at {:.1}s; \
         {} judgements for {n} traces, {duplicates} duplicates, committed before the last run {last_committed}",
        assigned.as_secs_f64(),
        finished.as_secs_f64(),
        seen.values().sum::<usize>()
    );
    // Killed runs must have held partitions, or the loop tested little.
    let held_some = runs.iter().filter(|r| !r.contains("assigned -")).count();
    assert!(
        held_some >= 8,
        "only {held_some} of 10 runs held partitions"
    );
    // Duplicates are traces judged but not yet committed at a kill: at most what one run consumed
    // beyond its last commit, so together never more than everything the killed runs consumed.
    assert!(duplicates < 10 * n, "duplicates {duplicates}");
}

/// tansu 0.6 holds every JoinGroup and every SyncGroup of a static member for 3 s (`PAUSE_MS` in
/// tansu-broker's group administrator), so on this broker any client's static member is admitted
/// about 6 s after it asks: tests/it/restart_stall.rs measured 6.1 s for a plain rdkafka consumer and
/// 6.8 s for aiokafka. A Kafka broker answers at once.
const TANSU_STATIC_JOIN: Duration = Duration::from_secs(6);

#[test]
fn a_killed_static_member_resumes_within_5_s_of_its_restart() {
    let broker = Broker::start();
    let topic = unique("restart");
    let group = unique("g");
    broker.create_topic(&topic, 3);
    let traces = gen_traces(600, &["--seed", "19"]);
    produce(&broker.brokers(), &topic, &traces[..300]);
    let config = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config/ragwatch.toml"));
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &group);
    env.push(("POD_NAME", "ragwatch-0".into()));

    let first = Ragwatch::start(config, &env);
    wait_for("the first run to read 300", Duration::from_secs(60), || {
        (received(&first) >= 300.0 && held(&first) == 3.0).then_some(())
    });
    drop(first); // SIGKILL: the member never leaves the group.
    produce(&broker.brokers(), &topic, &traces[300..]);

    let start = Instant::now();
    let second = Ragwatch::start(config, &env);
    let assigned = first_assignment(&second, start, Duration::from_secs(60));
    let resumed = wait_for("the restart to read", Duration::from_secs(60), || {
        (received(&second) > 0.0).then(|| start.elapsed())
    });
    let m = second.metrics().unwrap();
    eprintln!(
        "restart: assigned {} after its start, first trace read after {:.1}s \
         ({:.1}s beyond tansu's static-join pause); assignment age {}s",
        show(assigned),
        resumed.as_secs_f64(),
        resumed.saturating_sub(TANSU_STATIC_JOIN).as_secs_f64(),
        m.sum("ragwatch_kafka_assignment_age_seconds", &[]),
    );
    assert!(
        resumed <= TANSU_STATIC_JOIN + Duration::from_secs(5),
        "a restarted static member took {resumed:?} to resume"
    );
    wait_for("every trace read", Duration::from_secs(60), || {
        (received(&second) >= 300.0).then_some(())
    });
    let m = second.metrics().unwrap();
    assert_eq!(m.sum("ragwatch_kafka_assigned_partitions", &[]), 3.0);
    assert_eq!(m.sum("ragwatch_kafka_without_partitions", &[]), 0.0);
    assert_eq!(m.sum("ragwatch_kafka_topic_partitions", &[]), 3.0);
    assert_eq!(m.sum("ragwatch_kafka_session_timeout_seconds", &[]), 30.0);
}
