//! From a real faithfulness drop to a page, with real components on loopback. Real,
//! human-labelled RAG answers from `../shared/data/ragtruth_qa_train.jsonl`
//! (labels used only to build the stream and to drive the judge stand-in; nothing of the file is in
//! the repository) stream to a tansu topic in two strata at 20 traces/s each, both 90 % faithful;
//! then the `degrading` stratum drops to 50 %. ragwatch runs the shipped `config/llm.toml` with only
//! what a test must change (Kafka source, windows shortened as the rules are, the judge's base_url,
//! the two strata declared, half the traces sampled with the budget raised to fit: see
//! `SAMPLE_RATE`); the LLM judge is a stand-in HTTP server whose verdicts follow the human labels
//! with noise (`tests/it/common/label_judge.rs`). Debian's Prometheus scrapes every second and evaluates the
//! shipped `deploy/prometheus/rules.yaml` with its ranges shortened; Debian's Alertmanager runs the
//! shipped `deploy/alertmanager/alertmanager.yml` with its receivers pointed at a webhook in this
//! test.
//!
//! Checked: nothing fires while both strata are healthy; the degrading stratum pages (critical,
//! RagwatchFaithfulnessBelowFloor or RagwatchFaithfulnessDrift, to the pager receiver, with its
//! labels and runbook); the stable stratum never gets any alert; every dashboard query returns data;
//! Prometheus, with exemplar storage on, holds exemplars on the low faithfulness buckets that name
//! traces the test sent, among them answers the human labels call unfaithful.
//! Printed: the time from the drop to the page, and the estimates behind it.

use crate::common::label_judge;
use crate::common::prometheus;
use crate::common::ragtruth::Data;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use label_judge::LabelJudge;
use prometheus::{
    WINDOWS, by_stratum, daemon, query, start_prometheus, test_dashboard, test_rules, unix_secs,
    urlencode,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde_json::Value;

/// The share of traces the LLM judge sees (shipped: 5 %, at least 20 a window). The shipped
/// budget gives a 5-minute window about 60 verdicts per stratum; shortened to 20 s, a window at the
/// shipped rate holds about 45, and the drop rule (the 5-minute mean more than max_drop below the
/// baseline, beyond z standard errors of both windows) catches the 90 % -> 50 % drop in a given
/// window about 80 % of the time; how fast the shipped rule pages at the shipped budget is measured
/// by `benches/page_power.rs` (docs/judges.md, the sizing table), but the test's 2 minutes hold
/// only six windows, the first of them judged against a baseline of one minute. Half the traces go
/// to the judge instead (about 200 verdicts a window): this test checks the chain from verdicts to a
/// page; the rule's power at the shipped budget is measured by the simulation.
const SAMPLE_RATE: f64 = 0.5;
/// Traces per second per stratum.
const RATE_PER_SEC: u64 = 20;
/// Healthy traffic before the drop, from Prometheus's start: the drop rule's baseline holds over
/// three short windows of verdicts, with time to spare for every rule to misfire on a young one.
const HEALTHY: Duration = Duration::from_secs(70);
/// The degraded phase lasts at least this long, and the page must arrive within `PAGE_DEADLINE` of
/// the drop.
const DEGRADED_MIN: Duration = Duration::from_secs(60);
const PAGE_DEADLINE: Duration = Duration::from_secs(120);
const PAGES: [&str; 2] = [
    "RagwatchFaithfulnessBelowFloor",
    "RagwatchFaithfulnessDrift",
];
const NAMESPACE: &str = "rag-test";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One webhook post: when it arrived, the path (the receiver), the body.
type Post = (Instant, String, Value);

/// Collects Alertmanager's webhook posts.
fn webhook() -> (u16, Arc<Mutex<Vec<Post>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let store = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            let mut path = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if path.is_empty() {
                    path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            if reader.read_exact(&mut body).is_ok()
                && let Ok(v) = serde_json::from_slice::<Value>(&body)
            {
                store.lock().unwrap().push((Instant::now(), path, v));
            }
            let mut s = stream;
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (port, seen)
}

/// One alert as delivered: arrival, receiver path, status, labels, annotations.
struct Delivered {
    at: Instant,
    receiver: String,
    status: String,
    labels: Value,
    annotations: Value,
}

fn delivered(seen: &Mutex<Vec<Post>>) -> Vec<Delivered> {
    seen.lock()
        .unwrap()
        .iter()
        .flat_map(|(at, path, post)| {
            post["alerts"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|a| Delivered {
                    at: *at,
                    receiver: path.trim_matches('/').to_owned(),
                    status: a["status"].as_str().unwrap_or_default().to_owned(),
                    labels: a["labels"].clone(),
                    annotations: a["annotations"].clone(),
                })
        })
        .collect()
}

/// The shipped Alertmanager config with every receiver's URL pointed at the test's webhook, under a
/// path naming the receiver, and its waits shortened with the rules' `for:` (a shipped 10 s
/// `group_wait` would swallow alerts the shortened rules hold for a few seconds). Routes and inhibit
/// rules stay as shipped.
fn alertmanager_config(hook_port: u16) -> String {
    let shipped =
        std::fs::read_to_string(repo().join("deploy/alertmanager/alertmanager.yml")).unwrap();
    let mut receiver = String::new();
    let mut out = String::new();
    for line in shipped.lines() {
        let t = line.trim_start();
        if let Some(name) = t.strip_prefix("- name:") {
            receiver = name.trim().trim_matches('"').to_owned();
        }
        if let Some(key) = ["group_wait:", "group_interval:"]
            .into_iter()
            .find(|k| t.starts_with(k))
        {
            let indent = &line[..line.len() - t.len()];
            out.push_str(&format!("{indent}{key} 1s\n"));
            continue;
        }
        if let Some(url) = t.strip_prefix("- url:").or_else(|| t.strip_prefix("url:")) {
            assert!(url.contains("REPLACE-ME"), "a placeholder URL: {line}");
            let indent = &line[..line.len() - t.len()];
            let key = if t.starts_with('-') { "- url:" } else { "url:" };
            out.push_str(&format!(
                "{indent}{key} http://127.0.0.1:{hook_port}/{receiver}\n"
            ));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(
        out.contains("/ragwatch-pager"),
        "the shipped config has a ragwatch-pager receiver"
    );
    out
}

/// The exemplars Prometheus holds for `q` between `start` and `end` (Unix seconds): the series'
/// labels, the exemplar's trace id and value.
fn query_exemplars(prom: u16, q: &str, start: f64, end: f64) -> Vec<(Value, String, f64)> {
    let Some((200, body)) = http_get(
        ([127, 0, 0, 1], prom).into(),
        &format!(
            "/api/v1/query_exemplars?query={}&start={start:.3}&end={end:.3}",
            urlencode(q)
        ),
    ) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    let mut out = Vec::new();
    for series in v["data"].as_array().into_iter().flatten() {
        for e in series["exemplars"].as_array().into_iter().flatten() {
            out.push((
                series["seriesLabels"].clone(),
                e["labels"]["trace_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["value"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN),
            ));
        }
    }
    out
}

/// The alerts Prometheus holds in `state` (firing or pending), as label sets.
fn prom_alerts(prom: u16, state: &str) -> Vec<Value> {
    query(prom, &format!("ALERTS{{alertstate=\"{state}\"}}"))
        .unwrap_or_default()
        .into_iter()
        .map(|r| r["metric"].clone())
        .collect()
}

fn describe(labels: &Value) -> String {
    format!(
        "{}{{stratum={}, severity={}}}",
        labels["alertname"].as_str().unwrap_or("?"),
        labels["stratum"].as_str().unwrap_or("-"),
        labels["severity"].as_str().unwrap_or("-")
    )
}

/// A reviewer: every 2 s, labels one trace in four of those sent before the previous round (so
/// ragwatch has seen them) with the answer's human label, through `POST /v1/labels`. The label
/// agreement and AUROC panels then have data from real human labels.
fn review(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<HashMap<String, bool>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut seen = std::collections::HashSet::new();
        let mut due: Vec<(String, bool)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_secs(2));
            let body: String = due
                .drain(..)
                .map(|(id, faithful)| {
                    format!(
                        "{{\"trace_id\":\"{id}\",\"faithful\":{faithful},\"source\":\"review\"}}\n"
                    )
                })
                .collect();
            if !body.is_empty() {
                let _ = std::panic::catch_unwind(|| http_post(addr, "/v1/labels", &body));
            }
            for (id, faithful) in sent.lock().unwrap().iter() {
                let every_fourth = id
                    .rsplit('-')
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .is_some_and(|n| n % 4 == 0);
                if every_fourth && seen.insert(id.clone()) {
                    due.push((id.clone(), *faithful));
                }
            }
        }
    })
}

/// Produces both strata at `RATE_PER_SEC` each, evenly spaced, until `stop`: each trace a random
/// faithful answer with probability 0.9, else a random unfaithful one; 0.5 for `degrading` once
/// `degraded` is set. Each trace id sent goes into `labels` with its answer's human label.
fn stream(
    data: Data,
    brokers: String,
    topic: String,
    degraded: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    labels: Arc<Mutex<HashMap<String, bool>>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("linger.ms", "5")
            .set("batch.num.messages", "1")
            .create()
            .unwrap();
        let mut rng = StdRng::seed_from_u64(12);
        let tick = Duration::from_millis(1000 / RATE_PER_SEC);
        let mut next = Instant::now();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for stratum in ["stable", "degrading"] {
                let share = if stratum == "degrading" && degraded.load(Ordering::Relaxed) {
                    0.5
                } else {
                    0.9
                };
                let faithful = rng.random::<f64>() < share;
                let pool = if faithful {
                    &data.faithful
                } else {
                    &data.unfaithful
                };
                let mut trace = pool[rng.random_range(0..pool.len())].clone();
                n += 1;
                let id = format!("{stratum}-{n}");
                trace["trace_id"] = Value::from(id.as_str());
                labels.lock().unwrap().insert(id.clone(), faithful);
                trace["stratum"] = Value::from(stratum);
                let payload = serde_json::to_vec(&trace).unwrap();
                let mut record = BaseRecord::to(&topic).key(&id).payload(&payload);
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((_, r)) => {
                            record = r;
                            producer.poll(Duration::from_millis(5));
                        }
                    }
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            next += tick;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        producer.flush(Duration::from_secs(5)).unwrap();
    })
}

/// Each stratum's faithfulness as Prometheus has it, for the log: the combined estimate with its
/// interval, judged pairs and 24h (here 60 s) baseline, and its parts; the raw LLM and offline
/// means; the offline shift rule's z.
fn estimates(prom: u16) -> String {
    let get = |q: &str| by_stratum(prom, q);
    let (yhat, fhat, fbar, lambda) = (
        get("ragwatch:estimate:yhat_5m{metric=\"faithfulness\"}"),
        get("ragwatch:estimate:fhat_5m{metric=\"faithfulness\"}"),
        get("ragwatch:estimate:fbar_5m{metric=\"faithfulness\"}"),
        get("ragwatch:estimate:lambda_5m{metric=\"faithfulness\"}"),
    );
    let (mean, lower, upper, k, base, llm, offline, z) = (
        get("ragwatch:faithfulness:combined_mean_5m"),
        get("ragwatch:faithfulness:combined_lower_5m"),
        get("ragwatch:faithfulness:combined_upper_5m"),
        get("ragwatch:faithfulness:combined_samples_5m"),
        get("ragwatch:faithfulness:combined_mean_24h"),
        get("ragwatch:faithfulness:mean_5m{judge=\"llm\"}"),
        get("ragwatch:faithfulness:mean_5m{judge=\"offline\"}"),
        get("ragwatch:shift:z_5m{metric=\"faithfulness\", judge=\"offline\"}"),
    );
    ["stable", "degrading"]
        .iter()
        .map(|s| {
            let f = |m: &BTreeMap<String, f64>| m.get(*s).copied().unwrap_or(f64::NAN);
            format!(
                "{s} {:.3} [{:.3}, {:.3}] k={:.0} base {:.3} (Yh {:.3} + lambda {:.2} x (fbar {:.3} - Fh {:.3}); llm {:.3}, offline {:.3} z {:.1})",
                f(&mean),
                f(&lower),
                f(&upper),
                f(&k),
                f(&base),
                f(&yhat),
                f(&lambda),
                f(&fbar),
                f(&fhat),
                f(&llm),
                f(&offline),
                f(&z)
            )
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Every target expression of the dashboard's panels, rows' nested panels included.
fn panel_queries(panels: &Value, out: &mut Vec<(String, String)>) {
    for panel in panels.as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                out.push((title.clone(), expr.to_owned()));
            }
        }
        panel_queries(&panel["panels"], out);
    }
}

/// A dashboard query as Grafana would send it here: template variables at "All" (`.*`), Grafana's
/// interval variables. The dashboard is generated with the test's windows.
fn dashboard_query(expr: &str, variables: &[String]) -> String {
    let mut q = expr
        .replace("$__rate_interval", "20s")
        .replace("$__interval", "20s")
        .replace("$__range", "60s")
        // A single-value variable (the judges do not share a scale): one of its values.
        .replace("judge=\"$judge\"", "judge=\"offline\"");
    let mut variables = variables.to_vec();
    // Longest first, so that `$name` never eats the start of `$namespace`.
    variables.sort_by_key(|v| std::cmp::Reverse(v.len()));
    for v in &variables {
        q = q
            .replace(&format!("${{{v}}}"), ".*")
            .replace(&format!("${v}"), ".*");
    }
    q
}

#[test]
// With the windows shortened (5m -> 20s, 24h -> 300s) the baseline holds ~50 s of verdicts when the
// drop comes; the drop rule is two-sample (the difference of the two means against both windows'
// noise), so that young baseline's own noise does not flip the stable stratum.
fn a_real_faithfulness_drop_in_one_stratum_pages_and_the_stable_one_stays_quiet() {
    let data = Data::load().expect("the labelled data reads");
    eprintln!(
        "data: {} faithful and {} unfaithful answers",
        data.faithful.len(),
        data.unfaithful.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start();
    let topic = unique("alerts");
    broker.create_topic(&topic, 3);
    let judge = LabelJudge::start(data.labels(), 7);

    // ragwatch: the shipped LLM config, with what a test must change.
    let shipped: PathBuf = repo().join("config/llm.toml");
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &topic, &unique("g"));
    env.extend([
        ("RAGWATCH__STRATA__DECLARED", "stable,degrading".to_owned()),
        // The shipped per-stratum rate is for its own out_of_scope stratum, which is not declared here.
        ("RAGWATCH__SAMPLE__RATES", "{}".to_owned()),
        (
            "RAGWATCH__WINDOWS__WINDOW_SECS",
            format!("[{}, {}, {}]", WINDOWS[0], WINDOWS[1], WINDOWS[2]),
        ),
        ("RAGWATCH__WINDOWS__SHORT_SECS", WINDOWS[0].to_string()),
        ("RAGWATCH__WINDOWS__BASELINE_SECS", WINDOWS[2].to_string()),
        ("RAGWATCH__LLM__BASE_URL", judge.base_url()),
        // The sample: see SAMPLE_RATE. The budget is raised to fit it (about 2.5 requests and
        // 2,500 tokens a trace), so that nothing is skipped for budget.
        ("RAGWATCH__SAMPLE__DEFAULT_RATE", SAMPLE_RATE.to_string()),
        ("RAGWATCH__BUDGET__REQUESTS_PER_MINUTE", "12000".to_owned()),
        ("RAGWATCH__BUDGET__TOKENS_PER_MINUTE", "20000000".to_owned()),
        ("RAGWATCH__BUDGET__TOKENS_PER_DAY", "1000000000".to_owned()),
        ("RAGWATCH_LLM_API_KEY", "sk-test".to_owned()),
        // A reviewer posts human labels (below), as a team's review tool would.
        ("RAGWATCH__LABELS__ENABLED", "true".to_owned()),
    ]);
    let rw = Ragwatch::start(&shipped, &env);

    let degraded = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sent_labels = Arc::new(Mutex::new(HashMap::new()));
    let producer = stream(
        data,
        broker.brokers(),
        topic.clone(),
        Arc::clone(&degraded),
        Arc::clone(&stop),
        Arc::clone(&sent),
        Arc::clone(&sent_labels),
    );
    let reviewer = review(rw.write_addr(), Arc::clone(&stop), Arc::clone(&sent_labels));
    // Both strata arrive and the stand-in judges them, before anything watches.
    wait_for(
        "ragwatch to receive both strata and judge a sample",
        Duration::from_secs(30),
        || {
            let m = rw.metrics()?;
            let received = |s| m.sum("ragwatch_traces_received_total", &[("stratum", s)]);
            (received("stable") > 0.0
                && received("degrading") > 0.0
                && m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]) > 0.0)
                .then_some(())
        },
    );

    let (hook_port, seen) = webhook();
    std::fs::write(dir.path().join("am.yml"), alertmanager_config(hook_port)).unwrap();
    let (am_port, _am) = daemon(
        "prometheus-alertmanager",
        |port| {
            vec![
                format!("--config.file={}", dir.path().join("am.yml").display()),
                format!("--storage.path={}", dir.path().join("am").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
                "--cluster.listen-address=".into(),
            ]
        },
        &dir.path().join("am.log"),
    );
    // The rules are loaded once Prometheus scrapes ragwatch, as in a cluster where Prometheus has
    // been running: right after its start, Prometheus evaluates rules for up to 5 s before service
    // discovery hands it its first target, and RagwatchAbsent (`for` shortened to 3 s) would fire.
    std::fs::write(dir.path().join("rules.yaml"), "groups: []\n").unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: [\"127.0.0.1:{am_port}\"]\n\
             scrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{}\"]\n\
             \x20       labels: {{namespace: {NAMESPACE}, pod: ragwatch-0}}\n",
            rw.addr
        ),
    )
    .unwrap();
    let started = Instant::now();
    let started_unix = unix_secs();
    // Exemplars are kept only with exemplar storage on, as the deployment docs ship it.
    let (prom_port, _prom) = start_prometheus(
        dir.path(),
        &[
            "--rules.alert.resend-delay=1s",
            "--enable-feature=exemplar-storage",
        ],
    );

    wait_for(
        "Prometheus to scrape ragwatch",
        Duration::from_secs(30),
        || {
            let up = query(prom_port, "up{job=\"ragwatch\"} == 1")?;
            (!up.is_empty()).then_some(())
        },
    );
    std::fs::write(dir.path().join("rules.yaml"), test_rules()).unwrap();
    // SIGHUP: Prometheus reloads its configuration and rule files.
    let hup = Command::new("kill")
        .args(["-HUP", &_prom.0.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    wait_for(
        "Prometheus to load the rules",
        Duration::from_secs(30),
        || {
            let (code, body) = http_get(([127, 0, 0, 1], prom_port).into(), "/api/v1/rules")?;
            (code == 200 && body.contains("RagwatchFaithfulnessDrift")).then_some(())
        },
    );

    // Healthy phase: the combined estimate of both strata comes up, and nothing fires until HEALTHY.
    wait_for(
        "the combined faithfulness estimate of both strata in Prometheus",
        Duration::from_secs(40),
        || {
            let k = by_stratum(prom_port, "ragwatch:faithfulness:combined_upper_5m");
            (k.contains_key("stable") && k.contains_key("degrading")).then_some(())
        },
    );
    eprintln!(
        "+{:>3}s after Prometheus's start, estimates up: {}",
        started.elapsed().as_secs(),
        estimates(prom_port)
    );
    let mut watch = Watch::default();
    let mut last_log = Instant::now();
    let drop_at = started + HEALTHY;
    while Instant::now() < drop_at {
        let t = -(drop_at - Instant::now()).as_secs_f64();
        watch.poll(prom_port, am_port, &rw, t);
        let firing = prom_alerts(prom_port, "firing");
        let posts = delivered(&seen);
        if !firing.is_empty() || !posts.is_empty() {
            stop.store(true, Ordering::Relaxed);
            panic!(
                "healthy traffic fired {:?} and notified {:?}, {t:.0} s before the drop; {}; {}",
                firing.iter().map(describe).collect::<Vec<_>>(),
                posts
                    .iter()
                    .map(|a| describe(&a.labels))
                    .collect::<Vec<_>>(),
                estimates(prom_port),
                watch.report()
            );
        }
        if last_log.elapsed() >= Duration::from_secs(10) {
            eprintln!("{t:>5.0}s healthy: {}", estimates(prom_port));
            last_log = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let healthy_figures = estimates(prom_port);

    // The drop: degrading goes from 90 % to 50 % faithful answers. The page must come; the stable
    // stratum must stay quiet throughout.
    degraded.store(true, Ordering::Relaxed);
    let drop = Instant::now();
    let mut page: Option<Delivered> = None;
    let mut figures_at_page = String::new();
    let mut last_log = Instant::now() - Duration::from_secs(10);
    let mut stable_alerts: Vec<String> = Vec::new();
    while page.is_none() || drop.elapsed() < DEGRADED_MIN {
        let t = drop.elapsed().as_secs_f64();
        watch.poll(prom_port, am_port, &rw, t);
        let posts = delivered(&seen);
        stable_alerts.extend(
            prom_alerts(prom_port, "firing")
                .iter()
                .filter(|l| l["stratum"] == "stable")
                .map(|l| {
                    format!(
                        "{} firing in Prometheus {t:.0} s after the drop",
                        describe(l)
                    )
                }),
        );
        stable_alerts.extend(
            posts
                .iter()
                .filter(|a| a.labels["stratum"] == "stable")
                .map(|a| format!("{} delivered to {}", describe(&a.labels), a.receiver)),
        );
        if !stable_alerts.is_empty() {
            break;
        }
        if page.is_none()
            && let Some(a) = posts.into_iter().find(|a| {
                a.status == "firing"
                    && a.labels["stratum"] == "degrading"
                    && PAGES.iter().any(|p| a.labels["alertname"] == *p)
            })
        {
            eprintln!(
                "{:>5.1}s after the drop: {} delivered to {}",
                a.at.duration_since(drop).as_secs_f64(),
                describe(&a.labels),
                a.receiver
            );
            figures_at_page = estimates(prom_port);
            page = Some(a);
            // Every dashboard query returns data from the same live Prometheus while the incident
            // is on (the diagnosis panel only has data then); Alertmanager keeps collecting.
            check_dashboard(prom_port);
        }
        if last_log.elapsed() >= Duration::from_secs(5) {
            eprintln!("{t:>5.0}s after the drop: {}", estimates(prom_port));
            last_log = Instant::now();
        }
        if page.is_none() && drop.elapsed() >= PAGE_DEADLINE {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }

    // Exemplars: the low faithfulness buckets of the degrading stratum link to traces that were
    // sent, scored in that bucket; some are answers the human labels call unfaithful.
    let low = query_exemplars(
        prom_port,
        &format!(
            "ragwatch_faithfulness_ratio_bucket{{namespace=\"{NAMESPACE}\", stratum=\"degrading\", le=~\"0.1|0.2|0.3|0.4|0.5\"}}"
        ),
        started_unix,
        unix_secs() + 1.0,
    );
    let latency = query_exemplars(
        prom_port,
        "ragwatch_judge_duration_seconds_bucket{judge=\"llm\"}",
        started_unix,
        unix_secs() + 1.0,
    );
    let labels_sent = sent_labels.lock().unwrap().clone();
    let mut low_by_label: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    let mut exemplar_problems = Vec::new();
    for (series, id, value) in &low {
        let judge = series["judge"].as_str().unwrap_or("?").to_owned();
        let le: f64 = series["le"]
            .as_str()
            .unwrap_or("NaN")
            .parse()
            .unwrap_or(f64::NAN);
        if value.is_nan() || le.is_nan() || *value > le {
            exemplar_problems.push(format!("{id} value {value} above le {le}"));
        }
        match labels_sent.get(id) {
            Some(true) => low_by_label.entry(judge).or_default().0 += 1,
            Some(false) => low_by_label.entry(judge).or_default().1 += 1,
            None => exemplar_problems.push(format!("{id}: never sent")),
        }
    }
    for (_, id, _) in &latency {
        if !labels_sent.contains_key(id) {
            exemplar_problems.push(format!("judge latency exemplar {id}: never sent"));
        }
    }
    let unfaithful_low = low_by_label.values().map(|c| c.1).sum::<u32>();

    let m = rw.metrics().unwrap();
    let skipped: Vec<String> = ["budget", "budget_reserve", "queue_full", "judge_error"]
        .iter()
        .map(|r| {
            format!(
                "{r} {}",
                m.sum("ragwatch_traces_skipped_total", &[("reason", r)])
            )
        })
        .collect();
    let c = &judge.counts;
    eprintln!("---- figures");
    match &page {
        Some(p) => eprintln!(
            "drop -> page delivered ({}): {:.1} s",
            p.labels["alertname"].as_str().unwrap_or_default(),
            p.at.duration_since(drop).as_secs_f64()
        ),
        None => eprintln!("drop -> page: none within {PAGE_DEADLINE:?}"),
    }
    eprintln!("{}", watch.report());
    eprintln!(
        "exemplars in Prometheus: {} on the degrading stratum's faithfulness buckets le <= 0.5 (by judge: (human-labelled faithful, unfaithful) {low_by_label:?}), {} on the LLM judge's latency buckets",
        low.len(),
        latency.len()
    );
    eprintln!("combined faithfulness at the end of the healthy phase: {healthy_figures}");
    eprintln!("combined faithfulness when the page arrived: {figures_at_page}");
    eprintln!(
        "traces sent {}, received {}; sampled {}; LLM-judged {} (stable {}, degrading {}); skipped: {}",
        sent.load(Ordering::Relaxed),
        m.sum("ragwatch_traces_received_total", &[]),
        m.sum("ragwatch_traces_sampled_total", &[]),
        m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]),
        m.sum(
            "ragwatch_traces_judged_total",
            &[("judge", "llm"), ("stratum", "stable")]
        ),
        m.sum(
            "ragwatch_traces_judged_total",
            &[("judge", "llm"), ("stratum", "degrading")]
        ),
        skipped.join(", ")
    );
    eprintln!(
        "stand-in: {} chat and {} embedding requests; faithfulness asked for {} faithful and {} unfaithful answers (human labels), {} read against the label",
        c.chat_requests.load(Ordering::SeqCst),
        c.embedding_requests.load(Ordering::SeqCst),
        c.labelled_faithful.load(Ordering::SeqCst),
        c.labelled_unfaithful.load(Ordering::SeqCst),
        c.disagreements.load(Ordering::SeqCst)
    );
    if page.is_none() || !stable_alerts.is_empty() {
        stop.store(true, Ordering::Relaxed);
    }
    assert!(
        stable_alerts.is_empty(),
        "the stable stratum got alerts: {stable_alerts:?}"
    );
    let Some(page) = page else {
        panic!("no page for the degrading stratum within {PAGE_DEADLINE:?} of the drop");
    };

    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    reviewer.join().unwrap();

    // The page: critical, to the pager, with what a responder needs.
    let name = page.labels["alertname"].as_str().unwrap();
    assert_eq!(page.labels["severity"], "critical");
    assert_eq!(page.labels["metric"], "faithfulness");
    assert_eq!(page.labels["judge"], "combined");
    assert_eq!(page.labels["namespace"], NAMESPACE);
    assert_eq!(page.receiver, "ragwatch-pager");
    let runbook = page.annotations["runbook_url"].as_str().unwrap();
    assert!(
        runbook.starts_with("https://") && runbook.ends_with(&format!("#{}", name.to_lowercase())),
        "{runbook}"
    );
    for key in ["summary", "description"] {
        let text = page.annotations[key].as_str().unwrap_or_default();
        assert!(
            !text.is_empty() && !text.contains("<no value>") && !text.contains("%!"),
            "{key}: {text:?}"
        );
    }
    eprintln!("page description: {}", page.annotations["description"]);
    assert!(
        exemplar_problems.is_empty(),
        "exemplars: {exemplar_problems:?}"
    );
    assert!(
        unfaithful_low > 0,
        "no exemplar of an unfaithful answer on a low faithfulness bucket: {low_by_label:?}"
    );
    assert!(
        !latency.is_empty(),
        "no exemplar on the judge latency buckets"
    );
    // Nothing about the stable stratum arrived while the dashboard was checked either.
    let late: Vec<String> = delivered(&seen)
        .iter()
        .filter(|a| a.labels["stratum"] == "stable")
        .map(|a| describe(&a.labels))
        .collect();
    assert!(late.is_empty(), "the stable stratum was notified: {late:?}");
    assert_eq!(
        c.unknown_answers.load(Ordering::SeqCst),
        0,
        "every judged answer is found in the labels"
    );
    eprintln!(
        "wall time from Prometheus's start: {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

/// What was seen, and when (seconds from the drop; negative before it): the intervals each alert
/// was firing in Prometheus, when each was first pending there, when Alertmanager first held it
/// (and in which state), and when ragwatch first raised its own drift flags.
#[derive(Default)]
struct Watch {
    last: Option<f64>,
    firing: BTreeMap<String, Vec<(f64, f64)>>,
    pending: BTreeMap<String, f64>,
    alertmanager: BTreeMap<String, f64>,
    flags: BTreeMap<String, f64>,
}

impl Watch {
    fn poll(&mut self, prom: u16, am: u16, rw: &Ragwatch, t: f64) {
        let firing: std::collections::BTreeSet<String> =
            prom_alerts(prom, "firing").iter().map(describe).collect();
        for key in firing {
            let runs = self.firing.entry(key).or_default();
            match runs.last_mut() {
                Some(run) if Some(run.1) == self.last => run.1 = t,
                _ => runs.push((t, t)),
            }
        }
        self.last = Some(t);
        for labels in prom_alerts(prom, "pending") {
            self.pending.entry(describe(&labels)).or_insert(t);
        }
        if let Some((200, body)) = http_get(([127, 0, 0, 1], am).into(), "/api/v2/alerts")
            && let Ok(Value::Array(alerts)) = serde_json::from_str::<Value>(&body)
        {
            for a in alerts {
                let key = format!(
                    "{} {}",
                    describe(&a["labels"]),
                    a["status"]["state"].as_str().unwrap_or("?")
                );
                self.alertmanager.entry(key).or_insert(t);
            }
        }
        if let Some(m) = rw.metrics() {
            for (name, labels, v) in &m.0 {
                if name == "ragwatch_drift_active" && *v > 0.0 {
                    let key = format!(
                        "{} {} {}/{}",
                        labels["stratum"], labels["metric"], labels["judge"], labels["rule"]
                    );
                    self.flags.entry(key).or_insert(t);
                }
            }
        }
    }

    fn report(&self) -> String {
        let first = |m: &BTreeMap<String, f64>| {
            m.iter()
                .map(|(k, t)| format!("{k} at {t:+.0} s"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let firing = self
            .firing
            .iter()
            .map(|(k, runs)| {
                let runs: Vec<String> = runs
                    .iter()
                    .map(|(a, b)| format!("{a:+.0}..{b:+.0} s"))
                    .collect();
                format!("{k} {}", runs.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            "firing in Prometheus: [{firing}]\nfirst pending in Prometheus: [{}]\nfirst held by Alertmanager: [{}]\nragwatch's own drift flags, first raised: [{}]",
            first(&self.pending),
            first(&self.alertmanager),
            first(&self.flags)
        )
    }
}

/// Every dashboard panel's query returns data from this Prometheus.
fn check_dashboard(prom: u16) {
    let dash = test_dashboard();
    let variables: Vec<String> = dash["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect();
    let mut queries = Vec::new();
    panel_queries(&dash["panels"], &mut queries);
    assert!(!queries.is_empty(), "the dashboard has queries");
    // The variant comparison's panels need [variants]: tests/it/rollout_gates.rs checks those.
    // What changed needs sources, a coverage level and scored contexts, the reviewers' panel the
    // review queue, the feedback panel user feedback, the OTLP, write-listener, redaction and
    // label panels their own inputs: tests/it/deploy.rs checks those. The container's memory limit is the
    // kubelet's (cAdvisor), which no test scrapes.
    queries.retain(|(_, expr)| {
        !expr.contains("comparison")
            && ![
                "container_spec_",
                "ragwatch_otlp_",
                "ragwatch_spans_",
                "ragwatch_write_",
                "ragwatch_labels_total",
                "ragwatch_redactions_total",
                "canary_agreement",
                "source_lift",
                "question_",
                "retrieval_uncovered",
                "retrieval_shift",
                "changes_threshold",
                "review_",
                "feedback",
            ]
            .iter()
            .any(|t| expr.contains(t))
    });
    for (title, expr) in &queries {
        let q = dashboard_query(expr, &variables);
        wait_for(
            &format!("data for panel {title:?}: {q}"),
            Duration::from_secs(30),
            || query(prom, &q).filter(|r| !r.is_empty()),
        );
    }
    eprintln!("dashboard: {} queries return data", queries.len());
}
