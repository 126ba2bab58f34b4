//! User feedback as its own signal, through a real Prometheus with the shipped rules (short
//! windows): ragwatch reads generated traces from a file, some carrying feedback in their metadata
//! (`labels.feedback.trace_field`), and a feedback tool posts thumbs, escalations, regenerations and
//! ratings for the rest. Negative feedback is drawn with a probability that depends on whether the
//! answer is faithful, so the offline judge's score predicts it: the feedback AUROC the recording
//! rule pools equals the one ragwatch computes in process (and the one the scraped buckets give),
//! and none of the feedback counts as a faithfulness label.

use crate::common::prometheus::{Killed, query, start_prometheus, test_rules};
use crate::common::*;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

/// A small deterministic generator (splitmix64), for the feedback draws.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The traffic with its feedback: the traces' lines (every 4th carrying its feedback in its
/// metadata), the feedback posted for the rest, and the counts the test expects.
#[derive(Default)]
struct Feedback {
    body: Vec<u8>,
    posted: String,
    negative: usize,
    positive: usize,
    unfaithful_negative: usize,
    unfaithful: usize,
}

/// A feedback event, negative or not, as a kind or a rating (1-2 negative, 4-5 positive).
fn event(negative: bool, pick: f64) -> Value {
    match (negative, pick) {
        (true, p) if p < 0.4 => json!({"kind": "thumbs_down"}),
        (true, p) if p < 0.55 => json!({"kind": "escalation"}),
        (true, p) if p < 0.7 => json!({"kind": "regenerate"}),
        (true, p) => json!({"kind": "rating", "value": if p < 0.85 { 1 } else { 2 }}),
        (false, p) if p < 0.6 => json!({"kind": "thumbs_up"}),
        (false, p) => json!({"kind": "rating", "value": if p < 0.8 { 4 } else { 5 }}),
    }
}

/// Each trace's feedback: negative with probability 0.75 when the answer restates a number its
/// contexts do not hold (unfaithful), 0.15 otherwise; as a kind, or a rating. Every 4th trace
/// carries it in its metadata, the rest are posted; every 10th also gets an undeclared kind,
/// counted as `other` and left out of the AUROC.
fn feedback(traces: &[(String, Vec<u8>)]) -> Feedback {
    let mut draw = Draw(23);
    let mut f = Feedback::default();
    for (i, (id, line)) in traces.iter().enumerate() {
        let mut v: Value = serde_json::from_slice(line).unwrap();
        let answer = v["answer"].as_str().unwrap_or_default().to_owned();
        let contexts = v["contexts"].to_string();
        let faithful = answer
            .split(|c: char| !c.is_ascii_digit())
            .filter(|n| !n.is_empty())
            .all(|n| contexts.contains(n));
        let neg = draw.next() < if faithful { 0.15 } else { 0.75 };
        let event = event(neg, draw.next());
        if neg {
            f.negative += 1;
        } else {
            f.positive += 1;
        }
        if !faithful {
            f.unfaithful += 1;
            f.unfaithful_negative += usize::from(neg);
        }
        if i % 4 == 0 {
            v["metadata"]["feedback"] = json!([event]);
        } else {
            let mut e = event;
            e["trace_id"] = json!(id);
            // A `faithful` beside a `kind` is ignored: feedback is never a faithfulness label.
            e["faithful"] = json!(true);
            f.posted.push_str(&e.to_string());
            f.posted.push('\n');
        }
        if i % 10 == 0 {
            f.posted.push_str(&format!(
                "{{\"trace_id\": \"{id}\", \"kind\": \"shared\"}}\n"
            ));
        }
        f.body.extend_from_slice(v.to_string().as_bytes());
        f.body.push(b'\n');
    }
    f
}

/// ragwatch reading `file` once, feedback on (from the metadata and posted), and Prometheus
/// scraping it every second with the tests' rules.
fn start(dir: &Path, file: &Path) -> (Ragwatch, u16, Killed) {
    let rw = Ragwatch::start(
        &repo().join("config/ragwatch.toml"),
        &[
            ("RAGWATCH__SOURCE__PATH", file.display().to_string()),
            ("RAGWATCH__SOURCE__RATE_PER_SEC", "0".into()),
            ("RAGWATCH__SOURCE__LOOP", "false".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
            ("RAGWATCH__LABELS__FEEDBACK__ENABLED", "true".into()),
            (
                "RAGWATCH__LABELS__FEEDBACK__TRACE_FIELD",
                "/feedback".into(),
            ),
            (
                "RAGWATCH__LABELS__FEEDBACK__RATING",
                "{ min = 1, max = 5, negative_below = 3 }".into(),
            ),
            // Every stratum's figure in process, however few events it has (the rule has no
            // minimum: the alert has).
            (
                "RAGWATCH__LABELS__FEEDBACK__AUROC_MIN_PER_CLASS",
                "1".into(),
            ),
        ],
    );
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{}\"]\n\
             \x20       labels: {{namespace: feedback, pod: ragwatch-0}}\n",
            rw.addr
        ),
    )
    .unwrap();
    std::fs::write(dir.join("rules.yaml"), test_rules()).unwrap();
    let (prom, guard) = start_prometheus(dir, &[]);
    (rw, prom, guard)
}

/// Feedback is not a label: no label was joined or compared with a judge; the polarities and the
/// undeclared kinds are counted.
fn assert_feedback_counted(m: &Samples, f: &Feedback, traces: usize) {
    assert_eq!(m.sum("ragwatch_labels_total", &[]), 0.0);
    assert_eq!(m.sum("ragwatch_label_agreement_total", &[]), 0.0);
    let polarity = |p: &str| m.sum("ragwatch_feedback_polarity_total", &[("polarity", p)]);
    assert_eq!(polarity("negative"), f.negative as f64);
    assert_eq!(polarity("positive"), f.positive as f64);
    assert_eq!(
        m.sum("ragwatch_feedback_total", &[("kind", "other")]),
        traces.div_ceil(10) as f64
    );
}

/// The AUROC of every stratum with feedback of both polarities, from the scraped buckets.
fn scraped_auroc(m: &Samples) -> BTreeMap<String, f64> {
    let strata: std::collections::BTreeSet<String> =
        m.0.iter()
            .filter(|(n, _, v)| n == "ragwatch_feedback_scores_total" && *v > 0.0)
            .map(|(_, l, _)| l["stratum"].clone())
            .collect();
    strata
        .into_iter()
        .filter_map(|s| {
            let auroc = m.auroc(
                "ragwatch_feedback_scores_total",
                ("feedback", "positive"),
                "offline",
                &s,
            )?;
            Some((s, auroc))
        })
        .collect()
}

/// The in-process figures by stratum, once they equal the scraped buckets' (at the evaluator's
/// next pass, every second).
fn in_process_auroc(rw: &Ragwatch, scraped: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    wait_for("the in-process AUROC", Duration::from_secs(10), || {
        let e: BTreeMap<String, f64> = rw
            .metrics()?
            .0
            .iter()
            .filter(|(n, l, _)| n == "ragwatch_feedback_auroc_ratio" && l["judge"] == "offline")
            .map(|(_, l, v)| (l["stratum"].clone(), *v))
            .collect();
        (e.len() == scraped.len()
            && scraped
                .iter()
                .all(|(k, want)| e.get(k).is_some_and(|got| (got - want).abs() < 1e-9)))
        .then_some(e)
    })
}

/// The rule by stratum, polled until it agrees with `expected` or 30 s pass.
fn rule_auroc(prom: u16, expected: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rule: BTreeMap<String, f64> =
            query(prom, "ragwatch:feedback_auroc:ratio_1h{judge=\"offline\"}")
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["metric"]["stratum"].as_str().unwrap().to_owned(),
                        r["value"][1].as_str().unwrap().parse().unwrap(),
                    )
                })
                .collect();
        let agrees = rule.len() == expected.len()
            && expected
                .iter()
                .all(|(k, want)| rule.get(k).is_some_and(|got| (got - want).abs() < 0.01));
        if agrees || std::time::Instant::now() > deadline {
            return rule;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_feedback_auroc_rule_in_prometheus_equals_the_in_process_figure() {
    let dir = tempfile::tempdir().unwrap();
    let traces = gen_traces(
        600,
        &[
            "--seed",
            "23",
            "--unfaithful-share",
            "0.35",
            "--prefix",
            "fb",
        ],
    );
    let f = feedback(&traces);
    assert!(f.unfaithful > 100, "{} unfaithful answers", f.unfaithful);
    let file = dir.path().join("traces.jsonl");
    std::fs::write(&file, &f.body).unwrap();
    let (rw, prom, _prom) = start(dir.path(), &file);
    let deadline = Duration::from_secs(60);
    wait_for("the traces to be judged", deadline, || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_traces_judged_total", &[("judge", "offline")]) >= traces.len() as f64)
            .then_some(())
    });
    let read = rw.settled_metrics(
        &["ragwatch_traces_", "ragwatch_source_messages_total"],
        deadline,
    );
    assert_eq!(
        read.sum("ragwatch_traces_received_total", &[]),
        traces.len() as f64,
        "every trace read once"
    );
    wait_for(
        "three scrapes of the feedback series",
        Duration::from_secs(30),
        || {
            let q = "min(count_over_time(ragwatch_feedback_score_ratio_bucket[1m]))";
            let rows = query(prom, q)?;
            let scrapes: f64 = rows.first()?["value"][1].as_str()?.parse().ok()?;
            (scrapes >= 3.0).then_some(())
        },
    );
    let (code, reply) = http_post(rw.write_addr(), "/v1/labels", &f.posted);
    assert_eq!(code, 200, "{reply}");
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["invalid"], 0, "{reply}");
    assert_eq!(reply["unknown_trace"], 0, "{reply}");
    // Counted before the POST's answer; read settled all the same, as every count compared with
    // what the feedback tool sent.
    let m = rw.settled_metrics(
        &[
            "ragwatch_feedback_polarity_total",
            "ragwatch_feedback_total",
            "ragwatch_feedback_scores_total",
            "ragwatch_labels_total",
            "ragwatch_label_agreement_total",
        ],
        deadline,
    );
    assert_feedback_counted(&m, &f, traces.len());
    // The scraped buckets' AUROC is final once the POST returned.
    let scraped = scraped_auroc(&m);
    let expected = in_process_auroc(&rw, &scraped);
    let from_rule = rule_auroc(prom, &expected);
    let negative_rate = query(prom, "ragwatch:feedback_negative:ratio_1h").unwrap();
    eprintln!(
        "feedback AUROC (offline judge): in process {expected:?}, rule {from_rule:?}; \
         {} negative, {} positive, {} of {} unfaithful answers negative; \
         negative per trace {:?}",
        f.negative,
        f.positive,
        f.unfaithful_negative,
        f.unfaithful,
        negative_rate
            .iter()
            .map(|r| (r["metric"]["stratum"].clone(), r["value"][1].clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        from_rule.len(),
        expected.len(),
        "{from_rule:?} vs {expected:?}"
    );
    for (stratum, want) in &expected {
        let got = from_rule[stratum];
        assert!(
            (got - want).abs() < 0.01,
            "{stratum}: rule {got}, in process {want}"
        );
        // Negative feedback follows unfaithful answers, so the judge's score predicts it.
        assert!(*want > 0.55, "{stratum}: AUROC {want}");
    }
    assert!(!negative_rate.is_empty());
}
