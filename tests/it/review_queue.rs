//! The review queue through the binary: ragwatch judges a file of traces with an LLM stand-in and
//! picks some for review; `GET /v1/review` on the write listener hands them out once, behind a
//! token, with nothing redaction removes; `ragwatch review sheet` turns the queue's file into a
//! sheet, and `ragwatch review post` sends the filled sheet back as labels, which join the picks
//! and enter the reviewer estimate.

use std::time::Duration;

use crate::common::judge::JudgeServer;
use crate::common::{Ragwatch, WRITE_TOKEN, gen_traces, http_request_as, run_ok, wait_for};
use serde_json::Value;

#[test]
fn picked_traces_are_pulled_once_sheeted_and_their_labels_join() {
    let dir = tempfile::tempdir().unwrap();
    // Generated traces with a card number in every question: it must never leave redacted.
    let traces: String = gen_traces(300, &["--strata", "head", "--seed", "5"])
        .into_iter()
        .map(|(_, line)| {
            let mut v: Value = serde_json::from_slice(&line).unwrap();
            let q = v["query"].as_str().unwrap().to_owned();
            v["query"] = format!("{q} (card 4111 1111 1111 1111)").into();
            v.to_string() + "\n"
        })
        .collect();
    let trace_file = dir.path().join("traces.jsonl");
    std::fs::write(&trace_file, traces).unwrap();
    let queue = dir.path().join("queue.jsonl");
    let server = JudgeServer::start();
    let config = dir.path().join("ragwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = {:?}\n[strata]\ndeclared = [\"head\"]\nout_of_scope = []\n\
             [sample]\ndefault_rate = 1.0\n[budget]\nrequests_per_minute = 60000\n\
             [judge]\nsampled = \"llm\"\nworkers = 4\n\
             [llm]\nbase_url = \"{}\"\nchat_model = \"judge-1\"\nembedding_model = \"embed-1\"\n\
             [labels]\nenabled = true\n\
             [review]\nenabled = true\nreviews_per_day = 1000000\npull_buffer = 1000\npath = {:?}\n",
            trace_file.display(),
            server.base_url(),
            queue.display()
        ),
    )
    .unwrap();
    let rw = Ragwatch::start(&config, &[("RAGWATCH_LLM_API_KEY", "unused".into())]);
    // Every trace judged by the LLM judge or skipped, then the picks once they stop growing.
    let deadline = Duration::from_secs(90);
    wait_for("every trace judged", deadline, || {
        let m = rw.metrics()?;
        let done = m.sum("ragwatch_traces_judged_total", &[("judge", "llm")])
            + m.sum("ragwatch_traces_skipped_total", &[]);
        (done >= 300.0).then_some(())
    });
    let m = rw.settled_metrics(&["ragwatch_traces_", "ragwatch_review_"], deadline);
    let picks = m.sum("ragwatch_review_picked_total", &[("stratum", "head")]);
    assert!(picks >= 20.0, "{picks} picks");
    // One line a pick in the file (a pick with several reasons counts under each in the metric).
    let picked = std::fs::read_to_string(&queue).unwrap().lines().count();
    let write = rw.write_addr();
    // Without a token: refused.
    let (code, _) = http_request_as(write, "GET", "/v1/review", None).unwrap();
    assert_eq!(code, 401);
    let pull = |max: usize| {
        let path = format!("/v1/review?max={max}");
        let (code, body) = http_request_as(write, "GET", &path, Some(WRITE_TOKEN)).unwrap();
        assert_eq!(code, 200, "{body}");
        body
    };
    let first = pull(5);
    let items: Vec<Value> = first
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(items.len(), 5, "{first}");
    assert!(!first.contains("4111"), "a card number left: {first}");
    for item in &items {
        let p = item["inclusion_probability"].as_f64().unwrap();
        assert!(p > 0.0 && p <= 1.0, "{item}");
        assert!(
            item["verdicts"]["llm"]["faithfulness"].is_number(),
            "{item}"
        );
    }
    // Handed out once: the next pulls start after them, 100 at most each, until none is left.
    let mut rest = Vec::new();
    loop {
        let batch = pull(1000);
        assert!(batch.lines().count() <= 100);
        if batch.is_empty() {
            break;
        }
        rest.extend(batch.lines().map(str::to_owned));
    }
    assert!(!rest.iter().any(|l| first.contains(l.as_str())));
    assert_eq!(first.lines().count() + rest.len(), picked);
    // The file holds every pick, redacted too; a sheet of it, filled, posted back.
    let file = std::fs::read_to_string(&queue).unwrap();
    assert!(!file.contains("4111"));
    let sheet = dir.path().join("sheet.csv");
    run_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["review", "sheet"])
            .arg(&queue)
            .arg("--out")
            .arg(&sheet),
    );
    let text = std::fs::read_to_string(&sheet).unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record(reader.headers().unwrap()).unwrap();
    let mut rows = 0;
    for record in reader.records() {
        let mut cells: Vec<String> = record.unwrap().iter().map(str::to_owned).collect();
        *cells.last_mut().unwrap() = if rows % 2 == 0 { "yes" } else { "no" }.into();
        writer.write_record(&cells).unwrap();
        rows += 1;
    }
    assert_eq!(rows, picked);
    std::fs::write(&sheet, writer.into_inner().unwrap()).unwrap();
    let out = run_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["review", "post"])
            .arg(&sheet)
            .args(["--url", &format!("http://{write}/v1/labels")])
            .env("RAGWATCH_LABELS_TOKEN", WRITE_TOKEN),
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&format!("\"joined\":{rows}")), "{said}");
    // The labels joined as `review post` was told, once the counts stop moving.
    let m = rw.settled_metrics(&["ragwatch_review_", "ragwatch_labels_total"], deadline);
    let labelled = m.sum(
        "ragwatch_review_terms_total",
        &[("stratum", "head"), ("phase", "review"), ("term", "n")],
    );
    assert_eq!(labelled, rows as f64);
}
