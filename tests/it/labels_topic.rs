//! Labels on a Kafka topic (tansu), joined to traces that came on the trace topic.

use std::time::Duration;

use crate::common::*;

/// The label counters' family.
const LABELLED: &str = "ragwatch_labelled_scores_total";

/// One label per trace, from its own `label_faithful`, keyed by trace id; malformed messages first
/// on both partitions (keys chosen to land on each), then between the labels; a label of a trace
/// never seen. Returns the messages and how many traces are labelled faithful.
fn label_messages(traces: &[(String, Vec<u8>)]) -> (Vec<(String, Vec<u8>)>, usize) {
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
    (labels, faithful)
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
    let mut env = Ragwatch::kafka_env(&broker.brokers(), &traces_topic, &group);
    env.extend([
        ("RAGWATCH__LABELS__ENABLED", "true".to_string()),
        ("RAGWATCH__LABELS__TOPIC", labels_topic.clone()),
        ("RAGWATCH__LABELS__GROUP_ID", label_group.clone()),
        ("RAGWATCH__LABELS__AUROC_FLOOR", "0.6".to_string()),
    ]);
    let rw = Ragwatch::start(&repo().join("config/ragwatch.toml"), &env);
    produce(&broker.brokers(), &traces_topic, &traces);
    let deadline = Duration::from_secs(60);
    wait_for("every trace to be judged", deadline, || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_traces_judged_total", &[("judge", "offline")]) >= traces.len() as f64)
            .then_some(())
    });
    // Every trace read once and remembered before its label is produced (one unknown label is
    // expected, no more).
    let read = rw.settled_metrics(&["ragwatch_traces_"], deadline);
    assert_eq!(
        read.sum("ragwatch_traces_received_total", &[]),
        traces.len() as f64
    );

    let (labels, faithful) = label_messages(&traces);
    produce(&broker.brokers(), &labels_topic, &labels);
    let unfaithful = traces.len() - faithful;
    assert!(
        unfaithful >= 20 && faithful >= 20,
        "{faithful} / {unfaithful}"
    );

    wait_for("every label to be joined", deadline, || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_labels_total", &[("outcome", "joined")]) >= traces.len() as f64
            && m.0.iter().any(|s| s.0 == "ragwatch_label_auroc_ratio"))
        .then_some(())
    });
    // A label is counted joined before it is compared and bucketed, and the in-process AUROC is
    // the evaluator's (every second): the counts once they stop moving, then the AUROC once its
    // pass has read them.
    let counts = rw.settled_metrics(
        &[
            "ragwatch_labels_total",
            "ragwatch_label_agreement_total",
            "ragwatch_labelled_score",
        ],
        deadline,
    );
    let m = wait_for(
        "the in-process AUROC of the settled counts",
        deadline,
        || {
            let m = rw.metrics()?;
            let from_counts = counts.auroc(LABELLED, ("human", "faithful"), "offline", "head")?;
            let auroc = m.sum(
                "ragwatch_label_auroc_ratio",
                &[("judge", "offline"), ("stratum", "head")],
            );
            ((auroc - from_counts).abs() < 1e-9).then_some(m)
        },
    );
    // The scrape the AUROC was read from holds the settled counts still.
    for family in [
        "ragwatch_labels_total",
        "ragwatch_label_agreement_total",
        "ragwatch_labelled_scores_total",
        "ragwatch_labelled_score_ratio_count",
    ] {
        assert_eq!(m.sum(family, &[]), counts.sum(family, &[]), "{family}");
    }
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
    let from_counts = m
        .auroc(LABELLED, ("human", "faithful"), "offline", "head")
        .unwrap();
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
