//! Installs and clusters stay apart through a real Prometheus running the shipped rules (tests'
//! windows): two installs in one namespace with the same strata, one healthy and one degraded, page
//! only the degraded one; the same install name in two clusters (a `cluster` label added by the
//! scrape, as a global ruler's external labels add it) keeps two estimates; an install that stops
//! fires its own absence alert, and no other.
//!
//! Three ragwatch processes read generated traces from files (looped), judged by an
//! OpenAI-compatible stand-in on loopback whose verdicts follow the traces' facts:
//!
//! | process | cluster | job (install) | head stratum |
//! |---|---|---|---|
//! | healthy | east | rag-a | faithful |
//! | degraded | east | rag-b | unfaithful |
//! | west | west | rag-a | unfaithful |

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::judge::JudgeServer;
use crate::common::prometheus::{WINDOWS, query, start_prometheus, test_rules};
use crate::common::{Ragwatch, gen_traces, wait_for};

const NAMESPACE: &str = "rag";

/// One ragwatch process: its traces (head unfaithful or not) and its scrape labels.
struct Install {
    cluster: &'static str,
    job: &'static str,
    degraded: bool,
}

const INSTALLS: [Install; 3] = [
    Install {
        cluster: "east",
        job: "rag-a",
        degraded: false,
    },
    Install {
        cluster: "east",
        job: "rag-b",
        degraded: true,
    },
    Install {
        cluster: "west",
        job: "rag-a",
        degraded: true,
    },
];

fn start(dir: &Path, i: usize, install: &Install, judge: &JudgeServer) -> Ragwatch {
    let mut args = vec!["--strata", "head,tail", "--unfaithful-share", "0"];
    if install.degraded {
        args.extend(["--bad-strata", "head"]);
    }
    let seed = (41 + i).to_string();
    args.extend(["--seed", seed.as_str()]);
    let traces: String = gen_traces(1000, &args)
        .into_iter()
        .map(|(_, line)| String::from_utf8(line).unwrap() + "\n")
        .collect();
    let trace_file = dir.join(format!("traces-{i}.jsonl"));
    std::fs::write(&trace_file, traces).unwrap();
    let config = dir.join(format!("ragwatch-{i}.toml"));
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = \"{}\"\nrate_per_sec = 100.0\nloop = true\n\
             [strata]\ndeclared = [\"head\", \"tail\"]\n\
             [sample]\ndefault_rate = 0.3\n[budget]\nrequests_per_minute = 6000\n\
             [judge]\nsampled = \"llm\"\nworkers = 4\n\
             [llm]\nbase_url = \"{}\"\nchat_model = \"judge-2026-01-01\"\nembedding_model = \"embed-1\"\n\
             request_timeout_ms = 2000\nbackoff_base_ms = 20\n\
             [drift.rules.faithfulness.combined]\nfloor = 0.15\nmax_drop = 1.0\n",
            trace_file.display(),
            judge.base_url(),
        ),
    )
    .unwrap();
    Ragwatch::start(
        &config,
        &[
            (
                "RAGWATCH__WINDOWS__WINDOW_SECS",
                format!("[{}, {}, {}]", WINDOWS[0], WINDOWS[1], WINDOWS[2]),
            ),
            ("RAGWATCH__WINDOWS__SHORT_SECS", WINDOWS[0].to_string()),
            ("RAGWATCH__WINDOWS__BASELINE_SECS", WINDOWS[2].to_string()),
        ],
    )
}

/// (cluster, job, stratum) of every series `q` returns.
fn keys(prom: u16, q: &str) -> BTreeSet<(String, String, String)> {
    query(prom, q)
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let label = |k: &str| r["metric"][k].as_str().unwrap_or_default().to_owned();
            (label("cluster"), label("job"), label("stratum"))
        })
        .collect()
}

fn value(r: &Value) -> f64 {
    r["value"][1].as_str().unwrap().parse().unwrap()
}

fn key(cluster: &str, job: &str, stratum: &str) -> (String, String, String) {
    (cluster.into(), job.into(), stratum.into())
}

#[test]
fn installs_and_clusters_pool_page_and_go_absent_apart() {
    let dir = tempfile::tempdir().unwrap();
    let judge = JudgeServer::start();
    let mut processes: Vec<Option<Ragwatch>> = INSTALLS
        .iter()
        .enumerate()
        .map(|(i, install)| Some(start(dir.path(), i, install, &judge)))
        .collect();

    // One scrape job per install name; the cluster is a target label, as an external label or a
    // relabelling adds it. rag-a runs in both clusters.
    let mut jobs = String::new();
    for job in ["rag-a", "rag-b"] {
        jobs.push_str(&format!("  - job_name: {job}\n    static_configs:\n"));
        for (install, p) in INSTALLS.iter().zip(&processes) {
            if install.job == job {
                jobs.push_str(&format!(
                    "      - targets: [\"{}\"]\n        labels: {{namespace: {NAMESPACE}, cluster: {}}}\n",
                    p.as_ref().unwrap().addr,
                    install.cluster
                ));
            }
        }
    }
    std::fs::write(dir.path().join("rules.yaml"), test_rules()).unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n{jobs}"
        ),
    )
    .unwrap();
    let (prom, _prom) = start_prometheus(dir.path(), &[]);

    // The degraded head strata page, each under its own install and cluster.
    let pages = "ALERTS{alertstate=\"firing\", severity=\"critical\"}";
    let degraded = BTreeSet::from([key("east", "rag-b", "head"), key("west", "rag-a", "head")]);
    let started = Instant::now();
    wait_for(
        "both degraded installs to page",
        Duration::from_secs(180),
        || degraded.is_subset(&keys(prom, pages)).then_some(()),
    );
    eprintln!(
        "both degraded installs paged {:.0} s after start",
        started.elapsed().as_secs_f64()
    );

    // For a short window more: the healthy install never pages, and each (cluster, install) keeps
    // its own estimate.
    let watch = Instant::now();
    let mut estimates = Vec::new();
    while watch.elapsed() < Duration::from_secs(WINDOWS[0]) {
        let firing = keys(prom, pages);
        assert!(
            firing.iter().all(|k| degraded.contains(k)),
            "only the degraded installs page: {:?}",
            query(prom, pages)
        );
        estimates = query(
            prom,
            "ragwatch:faithfulness:combined_mean_5m{stratum=\"head\"}",
        )
        .unwrap_or_default();
        std::thread::sleep(Duration::from_secs(2));
    }
    let mean = |cluster: &str, job: &str| {
        estimates
            .iter()
            .find(|r| r["metric"]["cluster"] == cluster && r["metric"]["job"] == job)
            .map(value)
    };
    eprintln!(
        "head combined means: east/rag-a {:?}, east/rag-b {:?}, west/rag-a {:?}",
        mean("east", "rag-a"),
        mean("east", "rag-b"),
        mean("west", "rag-a")
    );
    assert_eq!(
        estimates.len(),
        3,
        "one estimate per cluster and install: {estimates:?}"
    );
    let healthy = mean("east", "rag-a").unwrap();
    for (cluster, job) in [("east", "rag-b"), ("west", "rag-a")] {
        let low = mean(cluster, job).unwrap();
        assert!(
            healthy - low > 0.2,
            "{cluster}/{job}'s head ({low:.3}) is not pooled into east/rag-a's ({healthy:.3})"
        );
    }

    // The degraded install in east stops: its absence alert fires, alone.
    processes[1] = None;
    let absent = "ALERTS{alertstate=\"firing\", alertname=\"RagwatchAbsent\"}";
    let fired = wait_for(
        "RagwatchAbsent for the stopped install",
        Duration::from_secs(60),
        || {
            let k = keys(prom, absent);
            (!k.is_empty()).then_some(k)
        },
    );
    assert_eq!(fired, BTreeSet::from([key("east", "rag-b", "")]));
    // A few evaluations more: still that one alone, and nothing says every ragwatch is gone.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        keys(prom, absent),
        BTreeSet::from([key("east", "rag-b", "")])
    );
    assert!(
        keys(prom, "ALERTS{alertname=\"RagwatchAbsentEverywhere\"}").is_empty(),
        "two installs still run"
    );
    assert!(processes[0].is_some() && processes[2].is_some());
}
