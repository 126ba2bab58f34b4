//! From a real faithfulness drop to a page, with real components on loopback. Real,
//! human-labelled RAG answers from `../shared/data/ragtruth_qa_train.jsonl`
//! (labels used only to build the stream and to drive the judge stand-in; nothing of the file is in
//! the repository) stream to a tansu topic in two strata at 20 traces/s each, both 90 % faithful;
//! then the `degrading` stratum drops to 50 %. ragwatch runs the shipped `config/llm.toml` with only
//! what a test must change (Kafka source, windows at the rules' timescale, the judge's base_url,
//! the two strata declared, half the traces sampled with the budget raised to fit: see
//! `SAMPLE_RATE`); the LLM judge is a stand-in HTTP server whose verdicts follow the human labels
//! with noise (`tests/it/common/judge/labels.rs`). Debian's Prometheus evaluates the shipped rules
//! at 15x (`ragwatch rules --scale 15`: 5m is 20 s, 24h is 96 min), scraping every second and
//! evaluating every 2 s (30 s divided); the drop scan's reference (the baseline before its longest
//! look-back, 10 min 40 s at 15x) comes from a healthy history ragwatch judges first and the test
//! backfills into Prometheus's TSDB before it starts (`paging/run.rs`). Debian's Alertmanager runs
//! the shipped `deploy/alertmanager/alertmanager.yml` with its receivers pointed at a webhook in
//! this test.
//!
//! Checked: nothing fires while both strata are healthy; the degrading stratum pages (critical,
//! RagwatchFaithfulnessBelowFloor or RagwatchFaithfulnessDrift, to the pager receiver, with its
//! labels and runbook); the stable stratum never gets any alert; every dashboard query returns data;
//! Prometheus, with exemplar storage on, holds exemplars on the low faithfulness buckets that name
//! traces the test sent, among them answers the human labels call unfaithful.
//! Printed: the time from the drop to the page, and the estimates behind it.
//!
//! Its parts: Alertmanager's side (`common/alertmanager.rs`), the traffic and the reviewer (`traffic.rs`), what
//! is read from Prometheus (`prometheus_reads.rs`) and the watch over the chain (`watch.rs`).

mod prometheus_reads;
mod traffic;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::judge::JudgeServer;
use crate::common::prometheus::{
    Killed, SCALE, backfill_history, by_stratum, chain_latency, daemon,
    load_rules_after_first_scrape, simulated_delay, start_prometheus, unix_secs,
};
use crate::common::ragtruth::Data;
use crate::common::*;
use crate::paging::run::{After, judge_history};

use crate::common::alertmanager::{
    Delivered, Post, alertmanager_config, delivered, describe, prom_alerts, webhook,
};
use prometheus_reads::{check_dashboard, estimates, query_exemplars};
use watch::Watch;

/// The share of traces the LLM judge sees (shipped: 5 %, at least 20 a window). The shipped
/// budget gives a 5-minute window about 60 verdicts per stratum; shortened to 20 s, a window at the
/// shipped rate holds about 45, and the drop rule (the 5-minute mean more than max_drop below the
/// baseline, beyond z standard errors of both windows) catches the 90 % -> 50 % drop in a given
/// window about 80 % of the time; how fast the shipped rule pages at the shipped budget is measured
/// by `benches/page_power.rs` (docs/judges.md, the sizing table), but the test's 2 minutes hold
/// only six windows, the first of them judged against a baseline of one minute. Half the traces go
/// to the judge instead (about 200 verdicts a window): this test checks the chain from verdicts to a
/// page; the rule's power at the shipped budget is measured by the simulation and by
/// `benches/page_compressed.rs`.
const SAMPLE_RATE: f64 = 0.5;
/// The sizing table's row the deadline is read at: the budget at or below the test's verdicts
/// per short window.
const VERDICTS_ROW: u32 = 120;
/// The healthy history backfilled before Prometheus starts, per stratum at `RATE_PER_SEC`: the
/// drop scan's horizon (10 min 40 s) and a minute of reference before it.
const HISTORY: Duration = Duration::from_secs(700);
/// Traces per second per stratum.
const RATE_PER_SEC: u64 = 20;
/// Healthy traffic before the drop, from Prometheus's start: over three short windows of live
/// verdicts, with time to spare for every rule to misfire.
const HEALTHY: Duration = Duration::from_secs(70);
/// The degraded phase lasts at least this long.
const DEGRADED_MIN: Duration = Duration::from_secs(60);

/// The page must arrive within this of the drop: the sizing table's first delay within which
/// every simulated drop at the test's budget paged, divided by the scale, and the chain's own
/// latency.
fn page_deadline() -> Duration {
    let (minutes, _) = simulated_delay(VERDICTS_ROW, "all");
    SCALE.of(Duration::from_secs_f64(minutes * 60.0)) + chain_latency(SCALE)
}
const PAGES: [&str; 2] = [
    "RagwatchFaithfulnessBelowFloor",
    "RagwatchFaithfulnessDrift",
];
const NAMESPACE: &str = "rag-test";

/// ragwatch's environment: the shipped LLM config, with what a test must change.
fn ragwatch_env(brokers: &str, topic: &str, judge: &JudgeServer) -> Vec<(&'static str, String)> {
    let mut env = Ragwatch::kafka_env(brokers, topic, &unique("g"));
    env.extend(SCALE.ragwatch_env());
    env.extend([
        ("RAGWATCH__STRATA__DECLARED", "stable,degrading".to_owned()),
        // The shipped per-stratum rate is for its own out_of_scope stratum, which is not declared here.
        ("RAGWATCH__SAMPLE__RATES", "{}".to_owned()),
        ("RAGWATCH__LLM__BASE_URL", judge.base_url()),
        // The sample: see SAMPLE_RATE. The budget is raised to fit it and the history judged as
        // fast as it goes (about 2.5 requests and 2,500 tokens a trace), so that nothing is
        // skipped for budget, and the judge's queue to hold a round of the history.
        ("RAGWATCH__SAMPLE__DEFAULT_RATE", SAMPLE_RATE.to_string()),
        ("RAGWATCH__JUDGE__WORKERS", "32".to_owned()),
        ("RAGWATCH__JUDGE__QUEUE_CAPACITY", "100000".to_owned()),
        (
            "RAGWATCH__BUDGET__REQUESTS_PER_MINUTE",
            "100000000".to_owned(),
        ),
        (
            "RAGWATCH__BUDGET__TOKENS_PER_MINUTE",
            "100000000000".to_owned(),
        ),
        (
            "RAGWATCH__BUDGET__TOKENS_PER_DAY",
            "100000000000000".to_owned(),
        ),
        ("RAGWATCH_LLM_API_KEY", "sk-test".to_owned()),
        // A reviewer posts human labels (below), as a team's review tool would.
        ("RAGWATCH__LABELS__ENABLED", "true".to_owned()),
    ]);
    env
}

/// The traffic under way: both strata streamed, a reviewer labelling; `degraded` turns the drop
/// on, `stop` ends both threads.
struct Traffic {
    degraded: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    labels: Arc<Mutex<HashMap<String, bool>>>,
    threads: [JoinHandle<()>; 2],
}

impl Traffic {
    fn start(data: Data, brokers: String, topic: String, rw: &Ragwatch) -> Traffic {
        let degraded = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let labels = Arc::new(Mutex::new(HashMap::new()));
        let producer = traffic::stream(
            data,
            brokers,
            topic,
            Arc::clone(&degraded),
            Arc::clone(&stop),
            Arc::clone(&sent),
            Arc::clone(&labels),
        );
        let reviewer = traffic::review(rw.write_addr(), Arc::clone(&stop), Arc::clone(&labels));
        Traffic {
            degraded,
            stop,
            sent,
            labels,
            threads: [producer, reviewer],
        }
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn join(self) {
        self.stop();
        for t in self.threads {
            t.join().unwrap();
        }
    }
}

/// Both strata arrive and the stand-in judges them, before anything watches.
fn wait_both_strata_judged(rw: &Ragwatch) {
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
}

/// The chain's daemons: Alertmanager posting to the webhook, Prometheus scraping ragwatch and
/// sending its alerts there; when Prometheus started.
struct Chain {
    prom: u16,
    am: u16,
    seen: Arc<Mutex<Vec<Post>>>,
    started: Instant,
    started_unix: f64,
    _daemons: [Killed; 2],
}

/// Debian's Alertmanager with the shipped config pointed at a webhook of the test.
fn start_alertmanager(dir: &Path) -> (u16, Killed, Arc<Mutex<Vec<Post>>>) {
    let (hook_port, seen) = webhook();
    std::fs::write(dir.join("am.yml"), alertmanager_config(hook_port)).unwrap();
    let (am_port, am) = daemon(
        "prometheus-alertmanager",
        |port| {
            vec![
                format!("--config.file={}", dir.join("am.yml").display()),
                format!("--storage.path={}", dir.join("am").display()),
                format!("--web.listen-address=127.0.0.1:{port}"),
                "--cluster.listen-address=".into(),
            ]
        },
        &dir.join("am.log"),
    );
    (am_port, am, seen)
}

/// Prometheus, its rules loaded once it scrapes ragwatch (RagwatchAbsent, `for` 40 s at 15x, would
/// fire before its first scrape), sending its alerts to Alertmanager; its TSDB already holds the
/// backfilled history.
fn start_chain(dir: &Path, rw: &Ragwatch) -> Chain {
    let (am_port, am, seen) = start_alertmanager(dir);
    std::fs::write(dir.join("rules.yaml"), "groups: []\n").unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        SCALE.prometheus_yml(&rw.addr.to_string(), Some(am_port)),
    )
    .unwrap();
    let started = Instant::now();
    let started_unix = unix_secs();
    // Exemplars are kept only with exemplar storage on, as the deployment docs ship it.
    let (prom_port, prom) = start_prometheus(
        dir,
        &[
            "--rules.alert.resend-delay=1s",
            "--enable-feature=exemplar-storage",
        ],
    );
    load_rules_after_first_scrape(
        dir,
        prom_port,
        &prom,
        &SCALE.rules(),
        "RagwatchFaithfulnessDrift",
    );
    Chain {
        prom: prom_port,
        am: am_port,
        seen,
        started,
        started_unix,
        _daemons: [am, prom],
    }
}

/// Healthy phase: the combined estimate of both strata comes up, and nothing fires until
/// `HEALTHY` after Prometheus's start. Returns the estimates at its end.
fn healthy_phase(chain: &Chain, rw: &Ragwatch, traffic: &Traffic, watch: &mut Watch) -> String {
    wait_for(
        "the combined faithfulness estimate of both strata in Prometheus",
        Duration::from_secs(40),
        || {
            let k = by_stratum(chain.prom, "ragwatch:faithfulness:combined_upper_5m");
            (k.contains_key("stable") && k.contains_key("degrading")).then_some(())
        },
    );
    eprintln!(
        "+{:>3}s after Prometheus's start, estimates up: {}",
        chain.started.elapsed().as_secs(),
        estimates(chain.prom)
    );
    let mut last_log = Instant::now();
    let drop_at = chain.started + HEALTHY;
    while Instant::now() < drop_at {
        let t = -(drop_at - Instant::now()).as_secs_f64();
        watch.poll(chain.prom, chain.am, rw, t);
        let firing = prom_alerts(chain.prom, "firing");
        let posts = delivered(&chain.seen);
        if !firing.is_empty() || !posts.is_empty() {
            traffic.stop();
            panic!(
                "healthy traffic fired {:?} and notified {:?}, {t:.0} s before the drop; {}; {}",
                firing.iter().map(describe).collect::<Vec<_>>(),
                posts
                    .iter()
                    .map(|a| describe(&a.labels))
                    .collect::<Vec<_>>(),
                estimates(chain.prom),
                watch.report()
            );
        }
        if last_log.elapsed() >= Duration::from_secs(10) {
            eprintln!("{t:>5.0}s healthy: {}", estimates(chain.prom));
            last_log = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    estimates(chain.prom)
}

/// What the drop brought: the page (if any), the estimates when it arrived, the alerts about the
/// stable stratum.
struct Outcome {
    drop: Instant,
    page: Option<Delivered>,
    figures_at_page: String,
    stable_alerts: Vec<String>,
}

/// Alerts about the stable stratum: firing in Prometheus, or delivered.
fn stable_alerts(prom: u16, posts: &[Delivered], t: f64) -> Vec<String> {
    let firing = prom_alerts(prom, "firing");
    let firing = firing.iter().filter(|l| l["stratum"] == "stable").map(|l| {
        format!(
            "{} firing in Prometheus {t:.0} s after the drop",
            describe(l)
        )
    });
    let posted = posts
        .iter()
        .filter(|a| a.labels["stratum"] == "stable")
        .map(|a| format!("{} delivered to {}", describe(&a.labels), a.receiver));
    firing.chain(posted).collect()
}

/// The drop: degrading goes from 90 % to 50 % faithful answers. The page must come within
/// [`page_deadline`]; the stable stratum must stay quiet throughout, for at least `DEGRADED_MIN`.
fn drop_phase(chain: &Chain, rw: &Ragwatch, traffic: &Traffic, watch: &mut Watch) -> Outcome {
    traffic.degraded.store(true, Ordering::Relaxed);
    let drop = Instant::now();
    let mut out = Outcome {
        drop,
        page: None,
        figures_at_page: String::new(),
        stable_alerts: Vec::new(),
    };
    let mut last_log = Instant::now() - Duration::from_secs(10);
    while out.page.is_none() || drop.elapsed() < DEGRADED_MIN {
        let t = drop.elapsed().as_secs_f64();
        watch.poll(chain.prom, chain.am, rw, t);
        let posts = delivered(&chain.seen);
        out.stable_alerts
            .extend(stable_alerts(chain.prom, &posts, t));
        if !out.stable_alerts.is_empty() {
            break;
        }
        if out.page.is_none()
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
            out.figures_at_page = estimates(chain.prom);
            out.page = Some(a);
            // Every dashboard query returns data from the same live Prometheus while the incident
            // is on (the diagnosis panel only has data then); Alertmanager keeps collecting.
            check_dashboard(chain.prom);
        }
        if last_log.elapsed() >= Duration::from_secs(5) {
            eprintln!("{t:>5.0}s after the drop: {}", estimates(chain.prom));
            last_log = Instant::now();
        }
        if out.page.is_none() && drop.elapsed() >= page_deadline() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    out
}

/// The exemplars Prometheus holds: on the degrading stratum's low faithfulness buckets, counted by
/// judge and the human label of their answer; on the LLM judge's latency buckets; and what is wrong
/// with them (a value above its bucket, a trace never sent).
struct Exemplars {
    low: usize,
    latency: usize,
    low_by_label: BTreeMap<String, (u32, u32)>,
    problems: Vec<String>,
}

impl Exemplars {
    /// The low faithfulness buckets of the degrading stratum link to traces that were sent, scored
    /// in that bucket; some are answers the human labels call unfaithful.
    fn read(chain: &Chain, sent: &HashMap<String, bool>) -> Exemplars {
        let low = query_exemplars(
            chain.prom,
            &format!(
                "ragwatch_faithfulness_ratio_bucket{{namespace=\"{NAMESPACE}\", stratum=\"degrading\", le=~\"0.1|0.2|0.3|0.4|0.5\"}}"
            ),
            chain.started_unix,
            unix_secs() + 1.0,
        );
        let latency = query_exemplars(
            chain.prom,
            "ragwatch_judge_duration_seconds_bucket{judge=\"llm\"}",
            chain.started_unix,
            unix_secs() + 1.0,
        );
        let mut low_by_label: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        let mut problems = Vec::new();
        for (series, id, value) in &low {
            let judge = series["judge"].as_str().unwrap_or("?").to_owned();
            let le: f64 = series["le"]
                .as_str()
                .unwrap_or("NaN")
                .parse()
                .unwrap_or(f64::NAN);
            if value.is_nan() || le.is_nan() || *value > le {
                problems.push(format!("{id} value {value} above le {le}"));
            }
            match sent.get(id) {
                Some(true) => low_by_label.entry(judge).or_default().0 += 1,
                Some(false) => low_by_label.entry(judge).or_default().1 += 1,
                None => problems.push(format!("{id}: never sent")),
            }
        }
        for (_, id, _) in &latency {
            if !sent.contains_key(id) {
                problems.push(format!("judge latency exemplar {id}: never sent"));
            }
        }
        Exemplars {
            low: low.len(),
            latency: latency.len(),
            low_by_label,
            problems,
        }
    }
}

/// Prints the figures of the run: the time to the page, the watch, the exemplars, the estimates,
/// the traffic and the stand-in's requests.
fn print_figures(
    out: &Outcome,
    watch: &Watch,
    exemplars: &Exemplars,
    healthy_figures: &str,
    m: &Samples,
    traffic: &Traffic,
    judge: &JudgeServer,
) {
    let skipped: Vec<String> = ["budget", "budget_reserve", "queue_full", "judge_error"]
        .iter()
        .map(|r| {
            format!(
                "{r} {}",
                m.sum("ragwatch_traces_skipped_total", &[("reason", r)])
            )
        })
        .collect();
    eprintln!("---- figures");
    match &out.page {
        Some(p) => eprintln!(
            "drop -> page delivered ({}): {:.1} s",
            p.labels["alertname"].as_str().unwrap_or_default(),
            p.at.duration_since(out.drop).as_secs_f64()
        ),
        None => eprintln!("drop -> page: none within {:?}", page_deadline()),
    }
    eprintln!("{}", watch.report());
    eprintln!(
        "exemplars in Prometheus: {} on the degrading stratum's faithfulness buckets le <= 0.5 (by judge: (human-labelled faithful, unfaithful) {:?}), {} on the LLM judge's latency buckets",
        exemplars.low, exemplars.low_by_label, exemplars.latency
    );
    eprintln!("combined faithfulness at the end of the healthy phase: {healthy_figures}");
    eprintln!(
        "combined faithfulness when the page arrived: {}",
        out.figures_at_page
    );
    let judged = |stratum: &str| {
        let mut labels = vec![("judge", "llm")];
        labels.extend((!stratum.is_empty()).then_some(("stratum", stratum)));
        m.sum("ragwatch_traces_judged_total", &labels)
    };
    eprintln!(
        "traces sent {}, received {}; sampled {}; LLM-judged {} (stable {}, degrading {}); skipped: {}",
        traffic.sent.load(Ordering::Relaxed),
        m.sum("ragwatch_traces_received_total", &[]),
        m.sum("ragwatch_traces_sampled_total", &[]),
        judged(""),
        judged("stable"),
        judged("degrading"),
        skipped.join(", ")
    );
    let c = judge.label_counts();
    eprintln!(
        "stand-in: {} chat and {} embedding requests; faithfulness asked for {} faithful and {} unfaithful answers (human labels), {} read against the label",
        judge.chat_requests(),
        judge.embedding_requests(),
        c.labelled_faithful.load(Ordering::SeqCst),
        c.labelled_unfaithful.load(Ordering::SeqCst),
        c.disagreements.load(Ordering::SeqCst)
    );
}

/// The page: critical, to the pager, with what a responder needs.
fn assert_page(page: &Delivered) {
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
}

#[test]
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
    let judge = JudgeServer::following_labels(data.labels(), 7);
    let rw = Ragwatch::start(
        &repo().join("config/llm.toml"),
        &ragwatch_env(&broker.brokers(), &topic, &judge),
    );
    // The healthy history: judged by ragwatch, then backfilled as Prometheus's past.
    let strata = [
        ("stable".to_owned(), After::Same),
        ("degrading".to_owned(), After::Same),
    ];
    let shared = std::sync::Arc::new(data);
    judge_history(
        &strata,
        12,
        RATE_PER_SEC,
        HISTORY,
        &shared,
        &rw,
        &broker.brokers(),
        &topic,
    );
    let series = backfill_history(
        dir.path(),
        &SCALE.rules(),
        &rw.scrape().unwrap(),
        &rw.addr.to_string(),
        unix_secs() - 1.0,
        HISTORY,
        SCALE.evaluation(),
    );
    eprintln!("backfilled {series} series of healthy history");
    let data = std::sync::Arc::try_unwrap(shared).ok().unwrap();
    let traffic = Traffic::start(data, broker.brokers(), topic.clone(), &rw);
    wait_both_strata_judged(&rw);
    let chain = start_chain(dir.path(), &rw);
    let mut watch = Watch::default();
    let healthy_figures = healthy_phase(&chain, &rw, &traffic, &mut watch);
    let out = drop_phase(&chain, &rw, &traffic, &mut watch);
    let labels_sent = traffic.labels.lock().unwrap().clone();
    let exemplars = Exemplars::read(&chain, &labels_sent);
    let m = rw.metrics().unwrap();
    print_figures(
        &out,
        &watch,
        &exemplars,
        &healthy_figures,
        &m,
        &traffic,
        &judge,
    );
    if out.page.is_none() || !out.stable_alerts.is_empty() {
        traffic.stop();
    }
    assert!(
        out.stable_alerts.is_empty(),
        "the stable stratum got alerts: {:?}",
        out.stable_alerts
    );
    let Some(page) = &out.page else {
        panic!(
            "no page for the degrading stratum within {:?} of the drop",
            page_deadline()
        );
    };
    traffic.join();
    assert_page(page);
    assert!(
        exemplars.problems.is_empty(),
        "exemplars: {:?}",
        exemplars.problems
    );
    let unfaithful_low = exemplars.low_by_label.values().map(|c| c.1).sum::<u32>();
    assert!(
        unfaithful_low > 0,
        "no exemplar of an unfaithful answer on a low faithfulness bucket: {:?}",
        exemplars.low_by_label
    );
    assert!(
        exemplars.latency > 0,
        "no exemplar on the judge latency buckets"
    );
    // Nothing about the stable stratum arrived while the dashboard was checked either.
    let late: Vec<String> = delivered(&chain.seen)
        .iter()
        .filter(|a| a.labels["stratum"] == "stable")
        .map(|a| describe(&a.labels))
        .collect();
    assert!(late.is_empty(), "the stable stratum was notified: {late:?}");
    assert_eq!(
        judge.label_counts().unknown_answers.load(Ordering::SeqCst),
        0,
        "every judged answer is found in the labels"
    );
    eprintln!(
        "wall time from Prometheus's start: {:.0} s",
        chain.started.elapsed().as_secs_f64()
    );
}
