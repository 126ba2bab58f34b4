//! The rollout gates of deploy/kubernetes/components/rollout-gates, live: a real Prometheus scrapes
//! two stand-in replicas serving a synthetic exposition of the `ragwatch_comparison_*` gauges
//! (rewritten as the test goes), runs the shipped rules, and the gates' queries are evaluated the
//! way the controllers evaluate them: Argo Rollouts turns the query's vector into `result`, a list
//! of floats, and evaluates successCondition and failureCondition (the expression forms the
//! template uses, interpreted in tests/it/common/rollout.rs); Flagger takes the one value and fails
//! the check outside the Canary's thresholdRange, or without a value. Prometheus's figures equal a
//! plain reference computed from the replicas' sums.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::common::prometheus::{
    Killed, query, start_prometheus, test_dashboard, test_rules, unix_secs,
};
use crate::common::rollout::{
    ANALYSIS_TEMPLATE, CANARY_METRIC, METRIC_TEMPLATE, Phase, argo_query, assess, flagger_check,
    flagger_query, load, result,
};
use crate::common::wait_for;

/// An HTTP server on loopback answering every request with the exposition it holds now; stopped
/// when dropped.
struct Exposition {
    addr: SocketAddr,
    text: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
}

impl Exposition {
    fn start() -> Exposition {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let text = Arc::new(Mutex::new(String::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (served, stopped) = (Arc::clone(&text), Arc::clone(&stop));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let body = served.lock().unwrap().clone();
                let _ = answer(&mut stream, &body);
            }
        });
        Exposition { addr, text, stop }
    }

    fn set(&self, text: String) {
        *self.text.lock().unwrap() = text;
    }
}

fn answer(stream: &mut TcpStream, body: &str) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

impl Drop for Exposition {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

const STRATA: [&str; 2] = ["head", "tail"];

const METRICS: [&str; 2] = ["faithfulness", "answer_relevancy"];

const ARMS: [&str; 2] = ["candidate", "baseline"];

const TERMS: [&str; 6] = ["n", "w", "wy", "ww", "wwy", "wwyy"];

const PODS: [&str; 2] = ["a", "b"];

/// The sums of `n` scores, `ones` of them 1 and the others 0, each of weight `w`.
fn ones(n: f64, ones: f64, w: f64) -> [f64; 6] {
    [n, n * w, ones * w, n * w * w, ones * w * w, ones * w * w]
}

/// The sums of `n` scores of `y`, each of weight 1.
fn same(n: f64, y: f64) -> [f64; 6] {
    [n, n, n * y, n, n * y, n * y * y]
}

/// What one replica exports about one candidate: per (stratum, arm, metric) the judge identity and
/// the sums, per (stratum, arm) the traces arrived (judged weight the same), and when its comparison
/// started (0: not yet). Anything not listed is exported at 0, as ragwatch creates every series at
/// start.
#[derive(Default, Clone)]
struct Replica {
    terms: BTreeMap<(&'static str, &'static str, &'static str), (&'static str, [f64; 6])>,
    arrived: BTreeMap<(&'static str, &'static str), f64>,
    started: f64,
}

impl Replica {
    /// An arm's faithfulness sums in a stratum, judged by `model`.
    fn sums(
        mut self,
        stratum: &'static str,
        arm: &'static str,
        model: &'static str,
        s: [f64; 6],
    ) -> Self {
        self.terms
            .insert((stratum, arm, "faithfulness"), (model, s));
        self
    }

    /// An arm's sums of another metric in a stratum, judged by m1.
    fn metric_sums(
        mut self,
        stratum: &'static str,
        arm: &'static str,
        metric: &'static str,
        s: [f64; 6],
    ) -> Self {
        self.terms.insert((stratum, arm, metric), ("m1", s));
        self
    }

    /// The traces of an arm that arrived in a stratum; the judged weight is the same (coverage 1).
    fn arrived(mut self, stratum: &'static str, arm: &'static str, n: f64) -> Self {
        self.arrived.insert((stratum, arm), n);
        self
    }

    /// When this replica's comparison started (Unix seconds).
    fn started(mut self, at: f64) -> Self {
        self.started = at;
        self
    }
}

/// One replica's exposition of every candidate in `candidates`: config gauges and every series.
fn exposition(candidates: &[(&str, Replica)]) -> String {
    let mut out = String::new();
    out.push_str(
        "# TYPE ragwatch_comparison_margin_ratio gauge\nragwatch_comparison_margin_ratio 0.05\n",
    );
    out.push_str(
        "# TYPE ragwatch_comparison_min_judged gauge\nragwatch_comparison_min_judged 30\n",
    );
    out.push_str(
        "# TYPE ragwatch_comparison_deadline_seconds gauge\nragwatch_comparison_deadline_seconds 7200\n",
    );
    out.push_str("# TYPE ragwatch_comparison_started_timestamp_seconds gauge\n");
    for (variant, r) in candidates {
        out.push_str(&format!(
            "ragwatch_comparison_started_timestamp_seconds{{variant=\"{variant}\"}} {}\n",
            r.started
        ));
    }
    out.push_str("# TYPE ragwatch_comparison_traces gauge\n");
    for (variant, r) in candidates {
        for stratum in STRATA {
            for arm in ARMS {
                let n = r.arrived.get(&(stratum, arm)).copied().unwrap_or(0.0);
                for state in ["arrived", "judged_weight"] {
                    out.push_str(&format!(
                        "ragwatch_comparison_traces{{stratum=\"{stratum}\",variant=\"{variant}\",arm=\"{arm}\",state=\"{state}\"}} {n}\n"
                    ));
                }
            }
        }
    }
    out.push_str("# TYPE ragwatch_comparison_terms gauge\n");
    for (variant, r) in candidates {
        for stratum in STRATA {
            for arm in ARMS {
                for metric in METRICS {
                    let (model, sums) = r
                        .terms
                        .get(&(stratum, arm, metric))
                        .copied()
                        .unwrap_or(("m1", [0.0; 6]));
                    for (term, v) in TERMS.iter().zip(sums) {
                        out.push_str(&format!(
                            "ragwatch_comparison_terms{{stratum=\"{stratum}\",variant=\"{variant}\",arm=\"{arm}\",metric=\"{metric}\",judge=\"llm\",judge_model=\"{model}\",term=\"{term}\"}} {v}\n"
                        ));
                    }
                }
            }
        }
    }
    out
}

/// The comparison over all strata, computed from the replicas' sums the way the spec writes it:
/// (difference, lower, upper, judged candidate, judged baseline), or None when no stratum has
/// judged traces in both arms.
fn reference(replicas: &[&Replica], metric: &str) -> Option<(f64, f64, f64, f64, f64)> {
    let pooled = |stratum: &str, arm: &str| -> [f64; 6] {
        let mut s = [0.0; 6];
        for r in replicas {
            if let Some((_, sums)) = r.terms.get(&(stratum, arm, metric)) {
                for (a, b) in s.iter_mut().zip(sums) {
                    *a += b;
                }
            }
        }
        s
    };
    let arm = |s: [f64; 6]| -> Option<(f64, f64)> {
        let [n, w, a, b, c, d] = s;
        (w > 0.0).then(|| {
            let m = a / w;
            (m, (d - 2.0 * m * c + m * m * b + 0.25 * b / n) / (w * w))
        })
    };
    let mut compared = Vec::new();
    for stratum in STRATA {
        let (c, b) = (pooled(stratum, "candidate"), pooled(stratum, "baseline"));
        if let (Some((mc, vc)), Some((mb, vb))) = (arm(c), arm(b)) {
            let t: f64 = replicas
                .iter()
                .flat_map(|r| ARMS.map(|a| r.arrived.get(&(stratum, a)).copied().unwrap_or(0.0)))
                .sum();
            compared.push((mc - mb, vc + vb, t, c[0], b[0]));
        }
    }
    let total: f64 = compared.iter().map(|s| s.2).sum();
    if compared.is_empty() || total <= 0.0 {
        return None;
    }
    let delta: f64 = compared.iter().map(|s| s.2 / total * s.0).sum();
    let v: f64 = compared.iter().map(|s| (s.2 / total).powi(2) * s.1).sum();
    let tau2 = 0.01;
    let h = (2.0 * v * (v + tau2) / tau2 * (((v + tau2) / v).sqrt() / 0.05).ln()).sqrt();
    let nc = compared.iter().map(|s| s.3).sum();
    let nb = compared.iter().map(|s| s.4).sum();
    Some((delta, delta - h, delta + h, nc, nb))
}

const NAMESPACE: &str = "rag";

const JOB: &str = "rw";

fn verdict(prom: u16, variant: &str) -> Option<f64> {
    result(
        prom,
        &format!("ragwatch:comparison_verdict{{variant=\"{variant}\", stratum=\"*\", metric=\"faithfulness\"}}"),
    )
    .first()
    .copied()
}

/// The candidates of the test.
const VARIANTS: [&str; 6] = ["worse", "fine", "thin", "blank", "mixed", "late"];

/// The shipped gates: Argo's AnalysisTemplate and its metric, Flagger's MetricTemplate and the
/// Canary's threshold range.
struct Gates {
    at: Value,
    mt: Value,
    range: Value,
    metric: Value,
}

impl Gates {
    fn shipped() -> Gates {
        let at = load(ANALYSIS_TEMPLATE);
        let metric = at["spec"]["metrics"][0].clone();
        Gates {
            mt: load(METRIC_TEMPLATE),
            range: load(CANARY_METRIC)["thresholdRange"].clone(),
            metric,
            at,
        }
    }

    /// Argo's `result` for `variant`.
    fn argo_result(&self, prom: u16, variant: &str) -> Vec<f64> {
        result(prom, &argo_query(&self.at, NAMESPACE, JOB, variant))
    }

    /// Flagger's value for `variant`, and whether the check passes.
    fn flagger(&self, prom: u16, variant: &str) -> (Option<f64>, bool) {
        flagger_check(
            prom,
            &flagger_query(&self.mt, NAMESPACE, JOB, variant),
            &self.range,
        )
    }
}

/// Prometheus scraping the two stand-in replicas every second, with the shipped rules.
fn start(dir: &std::path::Path, servers: &[Exposition; 2]) -> (u16, Killed) {
    std::fs::write(dir.join("rules.yaml"), test_rules()).unwrap();
    let targets: String = servers
        .iter()
        .zip(PODS)
        .map(|(s, pod)| {
            format!(
                "      - targets: [\"{}\"]\n        labels: {{namespace: {NAMESPACE}, pod: {pod}}}\n",
                s.addr
            )
        })
        .collect();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n{targets}"
        ),
    )
    .unwrap();
    start_prometheus(dir, &[])
}

/// A verdict for every stratum (and "*") x candidate x metric x judge, all 0, none NaN; every
/// candidate inconclusive for Argo and passing Flagger at 0.
fn assert_every_verdict_zero_at_start(prom: u16, gates: &Gates) {
    let all = wait_for("every verdict", Duration::from_secs(60), || {
        let r = query(prom, "ragwatch:comparison_verdict").unwrap_or_default();
        (r.len() == VARIANTS.len() * (STRATA.len() + 1) * METRICS.len()).then_some(r)
    });
    for r in &all {
        assert_eq!(r["value"][1], "0", "{r}");
    }
    for variant in VARIANTS {
        assert_eq!(
            assess(&gates.metric, &gates.argo_result(prom, variant)),
            Phase::Inconclusive,
            "{variant} at start"
        );
        assert_eq!(
            gates.flagger(prom, variant),
            (Some(0.0), true),
            "{variant} at start"
        );
    }
}

/// What each candidate's two replicas export once the traffic arrived.
struct Candidates {
    worse: [Replica; 2],
    mixed: [Replica; 2],
    fine: [Replica; 2],
    thin: [Replica; 2],
    late: [Replica; 2],
}

impl Candidates {
    /// `worse` and `mixed` carry the promtool test's worse faithfulness (head -0.4, tail -0.1)
    /// split over the two replicas; in `mixed`, replica b judged with another model.
    fn worse(now: f64, model_b: &'static str) -> [Replica; 2] {
        [
            Replica::default()
                .sums("head", "candidate", "m1", ones(300.0, 150.0, 1.0))
                .sums("head", "baseline", "m1", ones(500.0, 450.0, 1.0))
                .sums("tail", "candidate", "m1", ones(200.0, 150.0, 1.0))
                .arrived("head", "candidate", 300.0)
                .arrived("head", "baseline", 500.0)
                .arrived("tail", "candidate", 200.0)
                .started(now - 600.0),
            Replica::default()
                .sums("head", "candidate", model_b, ones(200.0, 100.0, 2.0))
                .sums("head", "baseline", model_b, ones(500.0, 450.0, 1.0))
                .sums("tail", "baseline", model_b, ones(400.0, 340.0, 1.0))
                .arrived("head", "candidate", 400.0)
                .arrived("head", "baseline", 500.0)
                .arrived("tail", "baseline", 400.0)
                .started(now - 590.0),
        ]
    }

    /// `fine`: faithfulness 0.88 against 0.9 in 400 scores each, answer relevancy 0.8 in both arms:
    /// not worse.
    fn fine(now: f64) -> [Replica; 2] {
        [
            Replica::default()
                .sums("head", "candidate", "m1", same(200.0, 0.88))
                .sums("head", "baseline", "m1", same(200.0, 0.9))
                .metric_sums("head", "candidate", "answer_relevancy", same(100.0, 0.8))
                .metric_sums("head", "baseline", "answer_relevancy", same(100.0, 0.8))
                .arrived("head", "candidate", 200.0)
                .arrived("head", "baseline", 200.0)
                .started(now - 300.0),
            Replica::default()
                .sums("head", "candidate", "m1", same(200.0, 0.88))
                .sums("head", "baseline", "m1", same(200.0, 0.9))
                .arrived("head", "candidate", 200.0)
                .arrived("head", "baseline", 200.0)
                .started(now - 300.0),
        ]
    }

    fn new(now: f64) -> Candidates {
        Candidates {
            worse: Self::worse(now, "m1"),
            mixed: Self::worse(now, "m2"),
            fine: Self::fine(now),
            // `thin`: the baseline is judged, the candidate not yet (its mean is 0/0).
            thin: [
                Replica::default()
                    .sums("head", "baseline", "m1", same(400.0, 0.9))
                    .arrived("head", "candidate", 3.0)
                    .arrived("head", "baseline", 400.0)
                    .started(now - 60.0),
                Replica::default().started(now - 60.0),
            ],
            // `late`: the promtool test's undecided tail (-0.1 in [-0.208, 0.008]), three hours
            // after the comparison started: past the 7200 s deadline.
            late: [
                Replica::default()
                    .sums("tail", "candidate", "m1", ones(200.0, 150.0, 1.0))
                    .sums("tail", "baseline", "m1", ones(400.0, 340.0, 1.0))
                    .arrived("tail", "candidate", 200.0)
                    .arrived("tail", "baseline", 400.0)
                    .started(now - 3.0 * 3600.0),
                Replica::default().started(now - 3.0 * 3600.0 + 30.0),
            ],
        }
    }

    /// Replica `i`'s exposition of every candidate.
    fn exposition(&self, i: usize) -> String {
        exposition(&[
            ("worse", self.worse[i].clone()),
            ("fine", self.fine[i].clone()),
            ("thin", self.thin[i].clone()),
            ("blank", Replica::default()),
            ("mixed", self.mixed[i].clone()),
            ("late", self.late[i].clone()),
        ])
    }
}

/// Prometheus's numbers are the plain reference's, to rounding.
fn assert_prometheus_is_the_reference(prom: u16, c: &Candidates) {
    for (variant, pair) in [
        ("worse", [&c.worse[0], &c.worse[1]]),
        ("fine", [&c.fine[0], &c.fine[1]]),
    ] {
        let (delta, lower, upper, nc, nb) = reference(&pair, "faithfulness").unwrap();
        for (record, expected) in [("difference", delta), ("lower", lower), ("upper", upper)] {
            let got = result(
                prom,
                &format!(
                    "ragwatch:comparison_{record}:ratio{{variant=\"{variant}\", stratum=\"*\", metric=\"faithfulness\"}}"
                ),
            );
            assert_eq!(got.len(), 1, "{variant} {record}");
            assert!(
                (got[0] - expected).abs() < 1e-9,
                "{variant} {record}: Prometheus {} against {expected}",
                got[0]
            );
        }
        for (arm, n) in [("candidate", nc), ("baseline", nb)] {
            let got = result(
                prom,
                &format!(
                    "ragwatch:comparison_judged:sum{{variant=\"{variant}\", stratum=\"*\", arm=\"{arm}\", metric=\"faithfulness\"}}"
                ),
            );
            assert_eq!(got, vec![n], "{variant} {arm}");
        }
        eprintln!(
            "{variant}: difference {delta:.4} in [{lower:.4}, {upper:.4}], {nc} and {nb} judged"
        );
    }
    assert!(reference(&[&c.thin[0], &c.thin[1]], "faithfulness").is_none());
}

/// Each candidate through both gates: its verdict, Argo's result and phase, Flagger's value and
/// check; no NaN among the records.
fn assert_each_candidate_through_both_gates(prom: u16, gates: &Gates) {
    let cases = [
        // (candidate, verdict, Argo's phase, Flagger's value, Flagger passes)
        ("worse", -1.0, Phase::Failed, -1.0, false),
        ("fine", 1.0, Phase::Successful, 1.0, true),
        // No judged candidate trace yet: undecided, inside the range before the deadline.
        ("thin", 0.0, Phase::Inconclusive, 0.0, true),
        // Nothing judged in either arm, every mean 0/0: 0, not NaN.
        ("blank", 0.0, Phase::Inconclusive, 0.0, true),
        // Two judge identities in the sums: undecided, however worse it looks.
        ("mixed", 0.0, Phase::Inconclusive, 0.0, true),
        // Undecided past the deadline: Argo waits (its own count ends the run), Flagger fails it.
        ("late", 0.0, Phase::Inconclusive, -1.0, false),
    ];
    for (variant, expected, phase, value, passes) in cases {
        // The verdict is a chain of records across groups Prometheus evaluates concurrently: on a
        // busy machine its latest evaluation may trail the sums by a round.
        let settled = wait_for(
            &format!("{variant}'s verdict"),
            Duration::from_secs(30),
            || {
                let v = verdict(prom, variant)?;
                (v == expected).then_some(v)
            },
        );
        assert_eq!(Some(settled), Some(expected), "{variant}");
        let r = gates.argo_result(prom, variant);
        assert_eq!(r, vec![expected], "{variant}: Argo's result");
        assert_eq!(assess(&gates.metric, &r), phase, "{variant}: Argo");
        assert_eq!(
            gates.flagger(prom, variant),
            (Some(value), passes),
            "{variant}: Flagger"
        );
    }
    let nan = "label_replace({__name__=~\"ragwatch:comparison_.+\"}, \"record\", \"$1\", \"__name__\", \"(.+)\") != label_replace({__name__=~\"ragwatch:comparison_.+\"}, \"record\", \"$1\", \"__name__\", \"(.+)\")";
    assert_eq!(query(prom, nan), Some(vec![]), "a NaN among the records");
}

/// A candidate Prometheus has no series of (ragwatch not scraped, [variants] off, a typo): the
/// query still answers one value, so Argo measures Inconclusive, never Error; an empty answer
/// would be Inconclusive too. Flagger has nothing that judges the canary: a failed check.
fn assert_an_absent_candidate_is_not_passed(prom: u16, gates: &Gates) {
    let absent = gates.argo_result(prom, "absent");
    assert_eq!(absent, vec![0.0]);
    assert_eq!(assess(&gates.metric, &absent), Phase::Inconclusive);
    assert_eq!(assess(&gates.metric, &[]), Phase::Inconclusive);
    assert_eq!(gates.flagger(prom, "absent"), (Some(-1.0), false));
}

/// The page is for the worse candidate alone.
fn assert_the_page_is_for_the_worse_candidate(prom: u16) {
    let firing = wait_for("RagwatchVariantWorse", Duration::from_secs(30), || {
        let r = query(
            prom,
            "ALERTS{alertname=\"RagwatchVariantWorse\", alertstate=\"firing\"}",
        )
        .unwrap_or_default();
        (!r.is_empty()).then_some(r)
    });
    let paged: Vec<(&str, &str)> = firing
        .iter()
        .map(|r| {
            (
                r["metric"]["variant"].as_str().unwrap(),
                r["metric"]["metric"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(paged, vec![("worse", "faithfulness")]);
}

/// The dashboard's Variants row has data.
fn assert_the_variants_row_has_data(prom: u16) {
    let d = test_dashboard();
    let mut checked = 0;
    for panel in d["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().unwrap();
            if !e.contains("comparison") || e.contains("mismatch") {
                continue;
            }
            let q = e
                .replace("$cluster", ".*")
                .replace("$namespace", ".*")
                .replace("$install", ".*")
                .replace("$variant", "worse");
            assert!(
                !result(prom, &q).is_empty(),
                "no data for panel {}: {q}",
                panel["title"]
            );
            checked += 1;
        }
    }
    assert!(checked >= 6, "{checked} queries");
}

/// Replica b restarts: its sums start again from 0. The interval widens; the verdict of the worse
/// candidate stays trustworthy either way (here replica a's half alone is still worse).
fn restart_replica_b(
    prom: u16,
    server_b: &Exposition,
    fresh: &[(&str, Replica)],
    worse_a: &Replica,
) {
    server_b.set(exposition(fresh));
    let (_, lower, upper, _, _) = reference(&[worse_a], "faithfulness").unwrap();
    wait_for(
        "the pool without replica b",
        Duration::from_secs(30),
        || {
            let got = result(
                prom,
                "ragwatch:comparison_upper:ratio{variant=\"worse\", stratum=\"*\", metric=\"faithfulness\"}",
            );
            (got.len() == 1 && (got[0] - upper).abs() < 1e-9).then_some(())
        },
    );
    let got = result(
        prom,
        "ragwatch:comparison_lower:ratio{variant=\"worse\", stratum=\"*\", metric=\"faithfulness\"}",
    );
    assert!((got[0] - lower).abs() < 1e-9, "{got:?} against {lower}");
    let expected = if upper < -0.05 { -1.0 } else { 0.0 };
    wait_for(
        "the verdict without replica b",
        Duration::from_secs(30),
        || (verdict(prom, "worse") == Some(expected)).then_some(()),
    );
}

#[test]
fn the_gates_read_the_verdicts_of_a_real_prometheus() {
    let gates = Gates::shipped();
    let servers = [Exposition::start(), Exposition::start()];
    let dir = tempfile::tempdir().unwrap();
    // At start, every candidate's series are at 0: nothing judged, nothing started.
    let fresh: Vec<(&str, Replica)> = VARIANTS.iter().map(|v| (*v, Replica::default())).collect();
    for s in &servers {
        s.set(exposition(&fresh));
    }
    let (prom, _prom) = start(dir.path(), &servers);
    assert_every_verdict_zero_at_start(prom, &gates);

    // The traffic arrives.
    let candidates = Candidates::new(unix_secs());
    for (i, s) in servers.iter().enumerate() {
        s.set(candidates.exposition(i));
    }
    // Both replicas' new sums are in once the worse candidate's baseline count over all strata
    // holds replica a's head and replica b's head and tail.
    wait_for("both replicas' sums", Duration::from_secs(60), || {
        let judged = result(
            prom,
            "ragwatch:comparison_judged:sum{variant=\"worse\", stratum=\"*\", arm=\"baseline\", metric=\"faithfulness\"}",
        );
        (judged == vec![1400.0]).then_some(())
    });
    assert_prometheus_is_the_reference(prom, &candidates);
    assert_each_candidate_through_both_gates(prom, &gates);
    assert_an_absent_candidate_is_not_passed(prom, &gates);
    assert_the_page_is_for_the_worse_candidate(prom);
    assert_the_variants_row_has_data(prom);
    restart_replica_b(prom, &servers[1], &fresh, &candidates.worse[0]);
}
