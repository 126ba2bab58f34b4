//! The label AUROC's recording rule in a real Prometheus equals the figure ragwatch computes in
//! process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::common::judge::JudgeServer;
use crate::common::prometheus::{Killed, query, start_prometheus, test_rules};
use crate::common::*;

/// Labels per (judge, stratum) of a query's rows and their values.
type ByKey = BTreeMap<(String, String), f64>;

/// 600 generated traces written to a file in `dir`; each with its answer and a label: the
/// unfaithful answers and a share of the faithful ones labelled unfaithful as a reviewer might.
fn traces_and_labels(dir: &Path) -> (PathBuf, Vec<(String, String, bool)>) {
    let traces = gen_traces(
        600,
        &[
            "--seed",
            "11",
            "--unfaithful-share",
            "0.3",
            "--prefix",
            "au",
        ],
    );
    let file = dir.join("traces.jsonl");
    let mut body = Vec::new();
    for (_, line) in &traces {
        body.extend_from_slice(line);
        body.push(b'\n');
    }
    std::fs::write(&file, body).unwrap();
    let labels = traces
        .iter()
        .enumerate()
        .map(|(i, (id, line))| {
            let v: Value = serde_json::from_slice(line).unwrap();
            let answer = v["answer"].as_str().unwrap_or_default().to_owned();
            let contexts = v["contexts"].to_string();
            let restated = answer
                .split(|c: char| !c.is_ascii_digit())
                .filter(|n| !n.is_empty())
                .all(|n| contexts.contains(n));
            (id.clone(), answer, restated && i % 5 != 0)
        })
        .collect();
    (file, labels)
}

/// ragwatch reading `file` once with the shipped LLM config, the LLM judge (at `judge`) reading
/// every trace, nothing skipped for budget or a full queue, labels on.
fn start_ragwatch(file: &Path, judge: &JudgeServer) -> Ragwatch {
    Ragwatch::start(
        &repo().join("config/llm.toml"),
        &[
            ("RAGWATCH__SOURCE__PATH", file.display().to_string()),
            ("RAGWATCH__SOURCE__RATE_PER_SEC", "0".into()),
            ("RAGWATCH__SOURCE__LOOP", "false".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
            ("RAGWATCH__LABELS__AUROC_MIN_PER_CLASS", "20".into()),
            ("RAGWATCH__LLM__BASE_URL", judge.base_url()),
            ("RAGWATCH__SAMPLE__DEFAULT_RATE", "1".into()),
            ("RAGWATCH__SAMPLE__RATES", "{}".into()),
            ("RAGWATCH__BUDGET__REQUESTS_PER_MINUTE", "1000000".into()),
            ("RAGWATCH__BUDGET__TOKENS_PER_MINUTE", "1000000000".into()),
            ("RAGWATCH__BUDGET__TOKENS_PER_DAY", "100000000000".into()),
            ("RAGWATCH__JUDGE__QUEUE_CAPACITY", "4096".into()),
            ("RAGWATCH_LLM_API_KEY", "sk-test".into()),
        ],
    )
}

/// Prometheus scraping `rw` every second with the tests' rules; it has seen the labelled series at
/// zero (three scrapes) when this returns, before any label arrives.
fn start_prometheus_on(dir: &Path, rw: &Ragwatch, rules: &str) -> (u16, Killed) {
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{}\"]\n\
             \x20       labels: {{namespace: labels, pod: ragwatch-0}}\n",
            rw.addr
        ),
    )
    .unwrap();
    std::fs::write(dir.join("rules.yaml"), rules).unwrap();
    let (prom, guard) = start_prometheus(dir, &[]);
    wait_for(
        "three scrapes of the labelled series at zero",
        Duration::from_secs(30),
        || {
            let q = "min(count_over_time(ragwatch_labelled_score_ratio_bucket[1m]))";
            let rows = query(prom, q)?;
            let scrapes: f64 = rows.first()?["value"][1].as_str()?.parse().ok()?;
            (scrapes >= 3.0).then_some(())
        },
    );
    (prom, guard)
}

/// A query's rows by (judge, stratum).
fn by_key(rows: Vec<Value>) -> ByKey {
    rows.iter()
        .map(|r| {
            (
                (
                    r["metric"]["judge"].as_str().unwrap().to_owned(),
                    r["metric"]["stratum"].as_str().unwrap().to_owned(),
                ),
                r["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// The in-process AUROC by (judge, stratum), once both judges have one.
fn in_process(rw: &Ragwatch) -> ByKey {
    wait_for("the in-process AUROC", Duration::from_secs(10), || {
        let e: ByKey = rw
            .metrics()?
            .0
            .iter()
            .filter(|(n, _, _)| n == "ragwatch_label_auroc_ratio")
            .map(|(_, l, v)| ((l["judge"].clone(), l["stratum"].clone()), *v))
            .collect();
        let judges: Vec<&str> = e.keys().map(|k| k.0.as_str()).collect();
        (judges.contains(&"offline") && judges.contains(&"llm")).then_some(e)
    })
}

/// The rule once Prometheus has scraped the labels and evaluated it on them: polled until it
/// agrees with the in-process figures or 30 s pass; the test's assertions say what differs.
fn rule_when_settled(prom: u16, expected: &ByKey) -> ByKey {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rule = by_key(query(prom, "ragwatch:label_auroc:ratio_1h").unwrap());
        let agrees = rule.len() == expected.len()
            && expected
                .iter()
                .all(|(k, want)| rule.get(k).is_some_and(|got| (got - want).abs() < 0.005));
        if agrees || std::time::Instant::now() > deadline {
            return rule;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The share of each judge's labelled scores in the top bucket.
fn top_bucket_share(prom: u16) -> BTreeMap<String, f64> {
    let in_top = query(
        prom,
        "sum by (judge) (ragwatch_labelled_scores_total{bucket=\"1\"}) / sum by (judge) (ragwatch_labelled_scores_total)",
    )
    .unwrap();
    in_top
        .iter()
        .map(|r| {
            (
                r["metric"]["judge"].as_str().unwrap().to_owned(),
                r["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

/// The same rule joining `le` as text (the bound "1.0" never meets "1"): it reads these buckets
/// differently, so the comparison can tell a rule that drops the top bucket.
fn assert_a_text_join_would_differ(prom: u16, rules: &str, expected: &ByKey) {
    let start = rules.find("record: ragwatch:label_auroc:ratio_1h").unwrap();
    let block = &rules[start..];
    let block = &block[block.find("expr: |").unwrap() + "expr: |".len()..];
    let rule: String = block
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("          "))
        .collect::<Vec<_>>()
        .join("\n");
    let as_text = rule.replace(r#""le", "(.*?)(?:\\.0+)?""#, r#""le", "(.*)""#);
    assert_ne!(
        as_text, rule,
        "the rule's le normalisation is not where the test looks"
    );
    let text_join = by_key(query(prom, &as_text).unwrap());
    eprintln!("joined as text: {text_join:?}");
    let off = text_join
        .iter()
        .any(|(k, v)| expected.get(k).is_some_and(|want| (v - want).abs() > 0.01));
    assert!(off, "a text join would read the same");
}

/// The label AUROC recording rule in a real Prometheus (2.42, which scrapes OpenMetrics, so the
/// histogram's top bound arrives as `le="1.0"` while the per-bucket counter says `bucket="1"`)
/// equals the AUROC ragwatch computes in process from the same buckets, for the offline judge and
/// for the LLM judge (a stand-in on loopback that reads every trace, [`JudgeServer`]). The stand-in
/// scores most answers it reads as faithful exactly 1, so the top bucket holds scores whatever the
/// offline judge's range: a rule that joined the two labels as text would lose it.
#[test]
fn the_label_auroc_rule_in_prometheus_equals_the_in_process_figure() {
    let dir = tempfile::tempdir().unwrap();
    let (file, labels) = traces_and_labels(dir.path());
    // The LLM stand-in's verdicts follow the labels, with its noise.
    let judge = JudgeServer::following_labels(labels.iter().map(|(_, a, f)| (a.clone(), *f)), 11);
    let rw = start_ragwatch(&file, &judge);
    wait_for(
        "the traces to be read and judged",
        Duration::from_secs(60),
        || {
            let m = rw.metrics()?;
            let judged = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]);
            (m.sum("ragwatch_source_messages_total", &[]) >= labels.len() as f64
                && judged >= labels.len() as f64)
                .then_some(())
        },
    );
    let rules = test_rules();
    let (prom, _prom) = start_prometheus_on(dir.path(), &rw, &rules);
    let body: String = labels
        .iter()
        .map(|(id, _, faithful)| format!("{{\"trace_id\": \"{id}\", \"faithful\": {faithful}}}\n"))
        .collect();
    let (code, reply) = http_post(rw.write_addr(), "/v1/labels", &body);
    assert_eq!(code, 200, "{reply}");
    let expected = in_process(&rw);
    let top = rw.metrics().unwrap().auroc(
        "ragwatch_labelled_scores_total",
        ("human", "faithful"),
        "offline",
        "head",
    );
    let from_rule = rule_when_settled(prom, &expected);
    // The scrape was OpenMetrics: the top bound arrived as 1.0.
    let om = query(prom, "ragwatch_labelled_score_ratio_bucket{le=\"1.0\"}").unwrap();
    assert!(!om.is_empty(), "Prometheus did not scrape OpenMetrics");
    let top_share = top_bucket_share(prom);
    eprintln!(
        "in process {expected:?}, rule {from_rule:?}, scrape formula (offline, head) {top:?}, top-bucket share by judge {top_share:?}"
    );
    let llm_top = top_share.get("llm").copied().unwrap_or_default();
    assert!(llm_top > 0.1, "the LLM judge's top bucket holds {llm_top}");
    assert_a_text_join_would_differ(prom, &rules, &expected);
    assert_eq!(
        from_rule.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (key, want) in &expected {
        let got = from_rule[key];
        assert!(
            (got - want).abs() < 0.005,
            "{key:?}: rule {got}, in process {want}"
        );
    }
}
