//! Human labels through the admin server: ragwatch reads the bundled sample, a reviewer tool posts
//! labels for some of its traces (and some it never saw, some that are not labels), and `/metrics`
//! counts every label by outcome and each judge's agreement per stratum.

use crate::common::label_judge;
use crate::common::prometheus;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use label_judge::LabelJudge;

#[test]
fn labels_join_recent_traces_and_count_agreement() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sample = std::fs::read_to_string(root.join("config/sample-traces.jsonl")).unwrap();
    let ids: Vec<String> = sample
        .lines()
        .take(5)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["trace_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let rw = Ragwatch::start(
        &root.join("config/ragwatch.toml"),
        &[
            ("RAGWATCH__SOURCE__RATE_PER_SEC", "0".into()),
            ("RAGWATCH__SOURCE__LOOP", "false".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
        ],
    );
    // Every sample trace is read (and remembered) before labels arrive.
    let n = sample.lines().filter(|l| !l.trim().is_empty()).count() as f64;
    wait_for("the sample to be read", Duration::from_secs(30), || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_source_messages_total", &[]) >= n).then_some(())
    });
    let mut body = String::new();
    for (i, id) in ids.iter().enumerate() {
        body.push_str(&format!(
            "{{\"trace_id\": \"{id}\", \"faithful\": {}, \"source\": \"review\"}}\n",
            i % 2 == 0
        ));
    }
    body.push_str("{\"trace_id\": \"never-seen\", \"faithful\": false}\n");
    body.push_str("not json\n\n");
    let (code, reply) = http_post(rw.write_addr(), "/v1/labels", &body);
    assert_eq!(code, 200, "{reply}");
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["joined"], 5, "{reply}");
    assert_eq!(reply["unknown_trace"], 1, "{reply}");
    assert_eq!(reply["invalid"], 1, "{reply}");
    let m = rw.metrics().unwrap();
    assert_eq!(
        m.sum("ragwatch_labels_total", &[("outcome", "joined")]),
        5.0
    );
    assert_eq!(
        m.sum("ragwatch_labels_total", &[("outcome", "invalid")]),
        1.0
    );
    // Every joined label with an offline score was compared with it (answers without claims have
    // no score to compare).
    let compared = m.sum("ragwatch_label_agreement_total", &[("judge", "offline")]);
    assert!((1.0..=5.0).contains(&compared), "{compared}");
    assert_eq!(
        m.sum("ragwatch_label_agreement_total", &[("judge", "llm")]),
        0.0
    );
    promtool_check_metrics(&rw.scrape().unwrap()).unwrap();
}

/// With labels off there is no write listener at all, and the admin port takes no writes.
#[test]
fn labels_are_refused_when_off() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rw = Ragwatch::start(&root.join("config/ragwatch.toml"), &[]);
    let (code, reply) = http_post(
        rw.addr,
        "/v1/labels",
        "{\"trace_id\": \"x\", \"faithful\": true}\n",
    );
    assert_eq!(code, 404);
    assert!(reply.contains("write listener"), "{reply}");
    wait_for("ragwatch to run", Duration::from_secs(20), || {
        rw.log_text().contains("ragwatch running").then_some(())
    });
    assert!(!rw.log_text().contains("write listener listening"));
}

/// The AUROC of the counts on `/metrics`: `sum_b pos_b * (neg_cum_b - neg_b / 2) / (pos * neg)`
/// from the per-bucket counters (the recording rule's formula, written again here).
fn auroc_from_scrape(m: &Samples, judge: &str, stratum: &str) -> Option<f64> {
    let mut buckets: Vec<(f64, f64, f64)> = Vec::new();
    for (name, labels, v) in &m.0 {
        if name != "ragwatch_labelled_scores_total"
            || labels["judge"] != judge
            || labels["stratum"] != stratum
        {
            continue;
        }
        let le: f64 = labels["bucket"].parse().unwrap();
        let at = match buckets.iter().position(|b| b.0 == le) {
            Some(i) => i,
            None => {
                buckets.push((le, 0.0, 0.0));
                buckets.len() - 1
            }
        };
        if labels["human"] == "faithful" {
            buckets[at].1 += v;
        } else {
            buckets[at].2 += v;
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (pos, neg): (f64, f64) = buckets
        .iter()
        .fold((0.0, 0.0), |a, b| (a.0 + b.1, a.1 + b.2));
    let mut cum = 0.0;
    let mut u = 0.0;
    for (_, p, n) in &buckets {
        cum += n;
        u += p * (cum - n / 2.0);
    }
    (pos > 0.0 && neg > 0.0).then(|| u / (pos * neg))
}

/// Labels on a Kafka topic (tansu), joined to traces that came on the trace topic: every label is
/// applied and counted, malformed ones do not hold up their partition, the agreement counters and
/// the AUROC move, and the label group's offsets are committed to the end of the topic.
#[test]
fn labels_from_a_kafka_topic_join_traces_and_move_the_auroc() {
    let broker = Broker::start();
    let (traces_topic, labels_topic) = (unique("traces"), unique("labels"));
    broker.create_topic(&traces_topic, 3);
    broker.create_topic(&labels_topic, 2);
    let group = unique("g");
    let label_group = unique("lg");
    let traces = gen_traces(
        300,
        &[
            "--strata",
            "head",
            "--unfaithful-share",
            "0.3",
            "--seed",
            "11",
        ],
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &traces_topic, &group);
    env.extend([
        ("RAGWATCH__LABELS__ENABLED", "true".to_string()),
        ("RAGWATCH__LABELS__TOPIC", labels_topic.clone()),
        ("RAGWATCH__LABELS__GROUP_ID", label_group.clone()),
        ("RAGWATCH__LABELS__AUROC_FLOOR", "0.6".to_string()),
    ]);
    let rw = Ragwatch::start(&root.join("config/ragwatch.toml"), &env);
    produce(&broker.brokers(), &traces_topic, &traces);
    wait_for("every trace to be read", Duration::from_secs(60), || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_traces_received_total", &[]) >= traces.len() as f64).then_some(())
    });

    // One label per trace, from its own `label_faithful`, keyed by trace id; malformed messages
    // first on both partitions (keys chosen to land on each), then between the labels.
    let mut labels: Vec<(String, Vec<u8>)> = Vec::new();
    for key in ["bad-0", "bad-1", "bad-2", "bad-3"] {
        labels.push((key.to_string(), b"not json".to_vec()));
        labels.push((key.to_string(), Vec::new()));
    }
    let mut faithful = 0usize;
    for (i, (id, line)) in traces.iter().enumerate() {
        let label = serde_json::from_slice::<serde_json::Value>(line).unwrap()["label_faithful"]
            .as_bool()
            .unwrap();
        faithful += usize::from(label);
        // Booleans and scores both: a score of 0.9 or 0.1 is a verdict of faithful or not.
        let value = if i % 3 == 0 {
            if label { "0.9" } else { "0.1" }.to_string()
        } else {
            label.to_string()
        };
        labels.push((
            id.clone(),
            format!("{{\"trace_id\": \"{id}\", \"faithful\": {value}, \"source\": \"review\"}}")
                .into_bytes(),
        ));
        if i % 50 == 0 {
            labels.push((id.clone(), br#"{"trace_id": "x", "faithful": 7}"#.to_vec()));
        }
    }
    labels.push((
        "never".into(),
        br#"{"trace_id": "never-seen", "faithful": true}"#.to_vec(),
    ));
    produce(&broker.brokers(), &labels_topic, &labels);
    let unfaithful = traces.len() - faithful;
    assert!(
        unfaithful >= 20 && faithful >= 20,
        "{faithful} / {unfaithful}"
    );

    let m = wait_for("every label to be joined", Duration::from_secs(60), || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_labels_total", &[("outcome", "joined")]) >= traces.len() as f64
            && m.0.iter().any(|s| s.0 == "ragwatch_label_auroc_ratio"))
        .then_some(m)
    });
    assert_eq!(
        m.sum("ragwatch_labels_total", &[("outcome", "joined")]),
        traces.len() as f64
    );
    // 8 malformed up front and one `faithful: 7` every 50 labels.
    assert_eq!(
        m.sum("ragwatch_labels_total", &[("outcome", "invalid")]),
        8.0 + 6.0
    );
    assert_eq!(
        m.sum("ragwatch_labels_total", &[("outcome", "unknown_trace")]),
        1.0
    );
    // Every joined label with an offline score was compared and bucketed.
    let compared = m.sum("ragwatch_label_agreement_total", &[("judge", "offline")]);
    let bucketed = m.sum("ragwatch_labelled_scores_total", &[("judge", "offline")]);
    let histogram = m.sum(
        "ragwatch_labelled_score_ratio_count",
        &[("judge", "offline")],
    );
    assert!(compared >= 0.9 * traces.len() as f64, "{compared}");
    assert_eq!((bucketed, histogram), (compared, compared));
    // The in-process AUROC is the one the exported counts give (one replica).
    let auroc = m.sum(
        "ragwatch_label_auroc_ratio",
        &[("judge", "offline"), ("stratum", "head")],
    );
    let from_counts = auroc_from_scrape(&m, "offline", "head").unwrap();
    assert!(
        (auroc - from_counts).abs() < 1e-9,
        "{auroc} vs {from_counts}"
    );
    eprintln!(
        "offline judge vs labels: AUROC {auroc:.3} over {compared} labels, agreement {:.3}",
        m.sum(
            "ragwatch_label_agreement_total",
            &[("judge", "offline"), ("agree", "true")]
        ) / compared
    );
    assert!(
        auroc > 0.6,
        "the offline judge separates the synthetic labels: {auroc}"
    );
    assert_eq!(
        m.sum(
            "ragwatch_label_auroc_below_floor",
            &[("judge", "offline"), ("stratum", "head")]
        ),
        0.0
    );
    promtool_check_metrics(&rw.scrape().unwrap()).unwrap();

    // Offsets: the label group committed up to the end of both partitions.
    wait_for("label offsets committed", Duration::from_secs(20), || {
        let offsets = committed_and_high(&broker.brokers(), &label_group, &labels_topic, 2);
        offsets.iter().all(|(c, h)| c == h && *h > 0).then_some(())
    });
    rw.sigterm();
}

/// `ragwatch replay --labels`: labels in a file, joined to the replayed traces by id, give the same
/// AUROC as the same labels inside the traces, and the summary reports the join and the judge's
/// agreement.
#[test]
fn replay_joins_a_label_file() {
    let dir = tempfile::tempdir().unwrap();
    let traces = gen_traces(200, &["--unfaithful-share", "0.3", "--seed", "12"]);
    let (mut with, mut without, mut labels) = (String::new(), String::new(), String::new());
    for (id, line) in &traces {
        let mut v: serde_json::Value = serde_json::from_slice(line).unwrap();
        with.push_str(&format!("{v}\n"));
        let label = v.as_object_mut().unwrap().remove("label_faithful").unwrap();
        without.push_str(&format!("{v}\n"));
        labels.push_str(&format!(
            "{{\"trace_id\": \"{id}\", \"faithful\": {label}, \"source\": \"review\"}}\n"
        ));
    }
    labels.push_str("{\"trace_id\": \"not-replayed\", \"faithful\": false}\nnot a label\n");
    for (name, text) in [
        ("with.jsonl", &with),
        ("without.jsonl", &without),
        ("labels.jsonl", &labels),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let replay = |file: &str, extra: &[&str]| {
        let summary = dir.path().join(format!("{file}.summary.json"));
        let out = run_ok(
            std::process::Command::new(env!("CARGO_BIN_EXE_ragwatch"))
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .arg("replay")
                .arg(dir.path().join(file))
                .arg("--output")
                .arg(dir.path().join(format!("{file}.out")))
                .arg("--summary")
                .arg(&summary)
                .args(extra),
        );
        let figures: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap();
        (figures, String::from_utf8(out.stderr).unwrap())
    };
    let labels_path = dir.path().join("labels.jsonl");
    let (inline, _) = replay("with.jsonl", &[]);
    let (joined, stderr) = replay(
        "without.jsonl",
        &["--labels", labels_path.to_str().unwrap()],
    );
    let (unlabelled, _) = replay("without.jsonl", &[]);
    assert!(
        stderr.contains("labels file: joined 200, unknown_trace 1, invalid 1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("agreement with the labels: offline "),
        "{stderr}"
    );
    let auroc = joined["all"]["auroc"].as_f64().unwrap();
    assert_eq!(
        Some(auroc),
        inline["all"]["auroc"].as_f64(),
        "{joined} {inline}"
    );
    assert_eq!(joined["all"]["agreement"], inline["all"]["agreement"]);
    assert!(
        joined["all"]["agreement"].as_f64().unwrap() > 0.5,
        "{joined}"
    );
    assert!(unlabelled["all"].get("auroc").is_none(), "{unlabelled}");
    eprintln!(
        "replay --labels: AUROC {auroc:.3}, agreement {}",
        joined["all"]["agreement"]
    );
}

/// The label AUROC recording rule in a real Prometheus (2.42, which scrapes OpenMetrics, so the
/// histogram's top bound arrives as `le="1.0"` while the per-bucket counter says `bucket="1"`)
/// equals the AUROC ragwatch computes in process from the same buckets, for the offline judge and
/// for the LLM judge (a stand-in on loopback that reads every trace, [`LabelJudge`]). The stand-in
/// scores most answers it reads as faithful exactly 1, so the top bucket holds scores whatever the
/// offline judge's range: a rule that joined the two labels as text would lose it.
#[test]
fn the_label_auroc_rule_in_prometheus_equals_the_in_process_figure() {
    use prometheus::{query, start_prometheus, test_rules};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
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
    let file = dir.path().join("traces.jsonl");
    let mut body = Vec::new();
    for (_, line) in &traces {
        body.extend_from_slice(line);
        body.push(b'\n');
    }
    std::fs::write(&file, body).unwrap();
    // Labels for every trace: the unfaithful answers and a share of the faithful ones labelled
    // unfaithful as a reviewer might. The LLM stand-in's verdicts follow them, with its noise.
    let labels: Vec<(String, String, bool)> = traces
        .iter()
        .enumerate()
        .map(|(i, (id, line))| {
            let v: serde_json::Value = serde_json::from_slice(line).unwrap();
            let answer = v["answer"].as_str().unwrap_or_default().to_owned();
            let contexts = v["contexts"].to_string();
            let restated = answer
                .split(|c: char| !c.is_ascii_digit())
                .filter(|n| !n.is_empty())
                .all(|n| contexts.contains(n));
            (id.clone(), answer, restated && i % 5 != 0)
        })
        .collect();
    let judge = LabelJudge::start(labels.iter().map(|(_, a, f)| (a.clone(), *f)), 11);
    let rw = Ragwatch::start(
        &root.join("config/llm.toml"),
        &[
            ("RAGWATCH__SOURCE__PATH", file.display().to_string()),
            ("RAGWATCH__SOURCE__RATE_PER_SEC", "0".into()),
            ("RAGWATCH__SOURCE__LOOP", "false".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
            ("RAGWATCH__LABELS__AUROC_MIN_PER_CLASS", "20".into()),
            ("RAGWATCH__LLM__BASE_URL", judge.base_url()),
            // The LLM judge reads every trace, nothing skipped for budget or a full queue.
            ("RAGWATCH__SAMPLE__DEFAULT_RATE", "1".into()),
            ("RAGWATCH__SAMPLE__RATES", "{}".into()),
            ("RAGWATCH__BUDGET__REQUESTS_PER_MINUTE", "1000000".into()),
            ("RAGWATCH__BUDGET__TOKENS_PER_MINUTE", "1000000000".into()),
            ("RAGWATCH__BUDGET__TOKENS_PER_DAY", "100000000000".into()),
            ("RAGWATCH__JUDGE__QUEUE_CAPACITY", "4096".into()),
            ("RAGWATCH_LLM_API_KEY", "sk-test".into()),
        ],
    );
    wait_for(
        "the traces to be read and judged",
        Duration::from_secs(60),
        || {
            let m = rw.metrics()?;
            let judged = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")]);
            (m.sum("ragwatch_source_messages_total", &[]) >= traces.len() as f64
                && judged >= traces.len() as f64)
                .then_some(())
        },
    );
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{}\"]\n\
             \x20       labels: {{namespace: labels, pod: ragwatch-0}}\n",
            rw.addr
        ),
    )
    .unwrap();
    let rules = test_rules();
    std::fs::write(dir.path().join("rules.yaml"), &rules).unwrap();
    let (prom, _prom) = start_prometheus(dir.path(), &[]);
    // Prometheus has seen the labelled series at zero (three scrapes) before any label arrives.
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
    let mut body = String::new();
    for (id, _, faithful) in &labels {
        body.push_str(&format!(
            "{{\"trace_id\": \"{id}\", \"faithful\": {faithful}}}\n"
        ));
    }
    let (code, reply) = http_post(rw.write_addr(), "/v1/labels", &body);
    assert_eq!(code, 200, "{reply}");
    // The in-process figures by (judge, stratum), and the rule's once Prometheus has scraped the
    // labels twice.
    let in_process = |m: &Samples| -> BTreeMap<(String, String), f64> {
        m.0.iter()
            .filter(|(n, _, _)| n == "ragwatch_label_auroc_ratio")
            .map(|(_, l, v)| ((l["judge"].clone(), l["stratum"].clone()), *v))
            .collect()
    };
    let expected = wait_for("the in-process AUROC", Duration::from_secs(10), || {
        let e = in_process(&rw.metrics()?);
        let judges: Vec<&str> = e.keys().map(|k| k.0.as_str()).collect();
        (judges.contains(&"offline") && judges.contains(&"llm")).then_some(e)
    });
    let top = auroc_from_scrape(&rw.metrics().unwrap(), "offline", "head");
    let by_key = |rows: Vec<serde_json::Value>| -> BTreeMap<(String, String), f64> {
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
    };
    // The rule once Prometheus has scraped the labels and evaluated it on them: polled until it
    // agrees with the in-process figures or 30 s pass; the assertions below say what differs.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let from_rule = loop {
        let rule = by_key(query(prom, "ragwatch:label_auroc:ratio_1h").unwrap());
        let agrees = rule.len() == expected.len()
            && expected
                .iter()
                .all(|(k, want)| rule.get(k).is_some_and(|got| (got - want).abs() < 0.005));
        if agrees || std::time::Instant::now() > deadline {
            break rule;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // The scrape was OpenMetrics: the top bound arrived as 1.0.
    let om = query(prom, "ragwatch_labelled_score_ratio_bucket{le=\"1.0\"}").unwrap();
    assert!(!om.is_empty(), "Prometheus did not scrape OpenMetrics");
    let in_top = query(
        prom,
        "sum by (judge) (ragwatch_labelled_scores_total{bucket=\"1\"}) / sum by (judge) (ragwatch_labelled_scores_total)",
    )
    .unwrap();
    let top_share: BTreeMap<String, f64> = in_top
        .iter()
        .map(|r| {
            (
                r["metric"]["judge"].as_str().unwrap().to_owned(),
                r["value"][1].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    eprintln!(
        "in process {expected:?}, rule {from_rule:?}, scrape formula (offline, head) {top:?}, top-bucket share by judge {top_share:?}"
    );
    let llm_top = top_share.get("llm").copied().unwrap_or_default();
    assert!(llm_top > 0.1, "the LLM judge's top bucket holds {llm_top}");
    // The same rule joining `le` as text (the bound "1.0" never meets "1") reads these buckets
    // differently: the comparison below can tell a rule that drops the top bucket.
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
