//! From a drop in faithfulness to a page, with real components on loopback: ragwatch reads a tansu
//! topic, Debian's Prometheus scrapes it every second and evaluates deploy/prometheus/rules.yaml (with
//! the test's shorter windows substituted), Debian's Alertmanager routes to a webhook receiver run by
//! this test. Healthy strata never alert; the stratum that turns unfaithful does, and recovers.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde_json::Value;

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a Debian-packaged daemon, quiet, killed when dropped.
fn daemon(program: &str, args: &[String]) -> Killed {
    Killed(
        Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{program} is installed by tests/run.sh: {e}")),
    )
}

/// Collects Alertmanager's webhook posts.
fn webhook() -> (u16, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let store = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            if reader.read_exact(&mut body).is_ok()
                && let Ok(v) = serde_json::from_slice::<Value>(&body)
            {
                store.lock().unwrap().push(v);
            }
            let mut s = stream;
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (port, seen)
}

/// The alerts (status, labels, annotations) posted so far.
fn alerts(seen: &Mutex<Vec<Value>>) -> Vec<(String, Value, Value)> {
    seen.lock()
        .unwrap()
        .iter()
        .flat_map(|post| post["alerts"].as_array().cloned().unwrap_or_default())
        .map(|a| {
            (
                a["status"].as_str().unwrap_or_default().to_owned(),
                a["labels"].clone(),
                a["annotations"].clone(),
            )
        })
        .collect()
}

fn shorten_windows(rules: &str) -> String {
    let mut s = rules.to_owned();
    for (from, to) in [
        ("[5m]", "[20s]"),
        ("[1h]", "[40s]"),
        ("[24h]", "[60s]"),
        ("[10m]", "[20s]"),
        ("[15m]", "[20s]"),
    ] {
        s = s.replace(from, to);
    }
    for d in ["5m", "10m", "15m"] {
        s = s.replace(&format!("for: {d}"), "for: 3s");
    }
    s
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn query(prom: u16, q: &str) -> Option<Vec<Value>> {
    let (code, body) = http_get(
        ([127, 0, 0, 1], prom).into(),
        &format!("/api/v1/query?query={}", urlencode(q)),
    )?;
    if code != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"].as_array().cloned()
}

#[test]
fn a_faithfulness_drop_in_one_stratum_pages_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let topic = unique("alerts");
    broker.create_topic(&topic, 3);

    // Healthy traffic in four strata; the same with every tail answer unfaithful.
    let strata = [
        "--strata",
        "head,tail,known_failure,out_of_scope",
        "--unfaithful-share",
        "0",
    ];
    let healthy = gen_traces(3000, &[&strata[..], &["--seed", "21"]].concat());
    let bad_tail = gen_traces(
        3000,
        &[&strata[..], &["--seed", "22", "--bad-strata", "tail"]].concat(),
    );
    let unfaithful = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let producer_thread = {
        let (brokers, topic, unfaithful, stop) = (
            broker.brokers(),
            topic.clone(),
            Arc::clone(&unfaithful),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
                .set("bootstrap.servers", &brokers)
                .set("linger.ms", "5")
                .set("batch.num.messages", "1")
                .create()
                .unwrap();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let pool = if unfaithful.load(Ordering::Relaxed) {
                    &bad_tail
                } else {
                    &healthy
                };
                for _ in 0..20 {
                    let (key, payload) = &pool[i % pool.len()];
                    let _ = producer.send(
                        BaseRecord::to(&topic)
                            .key(key.as_str())
                            .payload(payload.as_slice()),
                    );
                    i += 1;
                }
                producer.poll(Duration::from_millis(0));
                std::thread::sleep(Duration::from_millis(100));
            }
            producer.flush(Duration::from_secs(5)).unwrap();
        })
    };

    // ragwatch with a floor of 0.8 for every stratum and a small sample minimum.
    let config = dir.path().join("ragwatch.toml");
    std::fs::write(
        &config,
        "[strata]\ndeclared = [\"head\", \"tail\", \"known_failure\", \"out_of_scope\"]\n[judge]\nsampled = \"offline\"\n\
         [drift.faithfulness]\nfloor = 0.8\nmax_drop = 0.1\nmin_samples = 10\n[drift.answer_relevancy]\nfloor = 0.5\nmax_drop = 0.3\nmin_samples = 10\n",
    )
    .unwrap();
    let rw = Ragwatch::start(
        &config,
        &Ragwatch::kafka_env(&broker.brokers(), &topic, &unique("g")),
    );

    let (hook_port, seen) = webhook();
    let am_port = free_port();
    std::fs::write(
        dir.path().join("am.yml"),
        format!("route:\n  receiver: hook\n  group_by: [alertname, stratum]\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: hook\n    webhook_configs:\n      - url: http://127.0.0.1:{hook_port}/\n        send_resolved: true\n"),
    )
    .unwrap();
    let _am = daemon(
        "prometheus-alertmanager",
        &[
            format!("--config.file={}", dir.path().join("am.yml").display()),
            format!("--storage.path={}", dir.path().join("am").display()),
            format!("--web.listen-address=127.0.0.1:{am_port}"),
            "--cluster.listen-address=".into(),
        ],
    );
    let rules = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus/rules.yaml"),
    )
    .unwrap();
    std::fs::write(dir.path().join("rules.yaml"), shorten_windows(&rules)).unwrap();
    let prom_port = free_port();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\nalerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [\"127.0.0.1:{am_port}\"]\nscrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{}\"]\n", rw.addr),
    )
    .unwrap();
    let _prom = daemon(
        "prometheus",
        &[
            format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ),
            format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()),
            format!("--web.listen-address=127.0.0.1:{prom_port}"),
            "--rules.alert.resend-delay=1s".into(),
        ],
    );

    // Healthy phase: the recording rules fill in, and nothing pages.
    wait_for(
        "pooled faithfulness per stratum",
        Duration::from_secs(60),
        || {
            let r = query(
                prom_port,
                "ragwatch:faithfulness:samples_5m{judge=\"offline\"} > 10",
            )?;
            (r.len() >= 3).then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(10));
    let early: Vec<_> = alerts(&seen)
        .into_iter()
        .filter(|a| a.1["metric"] == "faithfulness")
        .collect();
    assert!(early.is_empty(), "healthy traffic paged: {early:?}");

    // Tail turns unfaithful: its floor alert arrives, with its labels and runbook.
    unfaithful.store(true, Ordering::Relaxed);
    let fired = wait_for(
        "the tail faithfulness alert at the webhook",
        Duration::from_secs(90),
        || {
            alerts(&seen).into_iter().find(|(status, labels, _)| {
                status == "firing"
                    && labels["alertname"] == "RagwatchFaithfulnessBelowFloor"
                    && labels["stratum"] == "tail"
            })
        },
    );
    // The diagnosis points at generation: the contexts are still relevant, the answers are not grounded.
    wait_for(
        "the diagnosis to blame generation for tail",
        Duration::from_secs(30),
        || {
            let m = rw.metrics()?;
            let at = |stage: &str| {
                m.sum(
                    "ragwatch_diagnosis",
                    &[("stratum", "tail"), ("judge", "offline"), ("stage", stage)],
                )
            };
            (at("generation") == 1.0 && at("retrieval") == 0.0).then_some(())
        },
    );
    assert_eq!(
        rw.metrics()
            .unwrap()
            .sum("ragwatch_diagnosis", &[("stratum", "head")]),
        0.0
    );
    // ... and the diagnosis alert carries the stage to the receiver.
    wait_for(
        "the diagnosis alert naming generation for tail",
        Duration::from_secs(60),
        || {
            alerts(&seen).into_iter().find(|(status, labels, _)| {
                status == "firing"
                    && labels["alertname"] == "RagwatchDiagnosis"
                    && labels["stratum"] == "tail"
                    && labels["stage"] == "generation"
            })
        },
    );
    assert_eq!(fired.1["metric"], "faithfulness");
    assert_eq!(fired.1["severity"], "page");
    assert!(
        fired.2["runbook_url"]
            .as_str()
            .unwrap()
            .contains("#ragwatchfaithfulnessbelowfloor")
    );

    // Every dashboard panel's query returns data from this Prometheus.
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/ragwatch-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for panel in dash["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let q = target["expr"]
                .as_str()
                .unwrap()
                .replace("$namespace", ".*")
                .replace("$pod", ".*")
                .replace("$stratum", ".*")
                .replace("$__rate_interval", "20s");
            let q = shorten_windows(&q);
            let result = wait_for(
                &format!("data for panel {}", panel["title"]),
                Duration::from_secs(30),
                || query(prom_port, &q).filter(|r| !r.is_empty()),
            );
            assert!(!result.is_empty());
        }
    }

    // Recovery: the alert resolves.
    unfaithful.store(false, Ordering::Relaxed);
    wait_for(
        "the tail alert to resolve",
        Duration::from_secs(120),
        || {
            alerts(&seen)
                .into_iter()
                .any(|(status, labels, _)| {
                    status == "resolved"
                        && labels["alertname"] == "RagwatchFaithfulnessBelowFloor"
                        && labels["stratum"] == "tail"
                })
                .then_some(())
        },
    );
    stop.store(true, Ordering::Relaxed);
    producer_thread.join().unwrap();

    // The healthy strata never alerted, for any metric.
    let wrong: Vec<_> = alerts(&seen)
        .into_iter()
        .filter(|(_, l, _)| l["stratum"].is_string() && l["stratum"] != "tail")
        .collect();
    assert!(wrong.is_empty(), "healthy strata alerted: {wrong:?}");
}
