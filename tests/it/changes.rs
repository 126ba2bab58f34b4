//! What changed, on real answers: traces built from the human-labelled RAG answers in
//! `../shared/data` (labels used only to build the stream), judged by the offline judge through
//! the real pipeline.
//!
//! - A corrupted document: one document of the stratum's index is replaced by unrelated text and
//!   the answers of the traces that retrieve it (5 % of them) are ones people marked unfaithful;
//!   a popular healthy document is retrieved into 30 % of the traces. Through the binary,
//!   `GET /v1/suspects` ranks the corrupted document first with a lift interval above 1 and does
//!   not list the popular one; replay lists the same.
//! - Six healthy half-hours in simulated time, with the popular document and a spread of others:
//!   of the 36 short windows, read every five minutes, at most two list a change (each read holds
//!   the family-wise error of a listed rise to 2.5 %).
//! - A knowledge base (each question brings back its own passages, each passage under one id; a
//!   popular document in 25 % of the traces; questions asked by a Zipf law): a document in 3 % of
//!   the traces goes bad (its answers ones people marked unfaithful). Ten seeded streams in replay
//!   against a baseline set and ten live at the shipped windows in simulated time: it is the first
//!   change with an interval above 1 in at least nine; in ten streams where nothing changed
//!   nothing is listed as changed; the documents of hard questions are listed apart, as chronic.
//! - Question novelty in simulated time: a new topic at 30 % of the stratum's questions raises the
//!   share of new questions and the question-mix distance past their thresholds; a reshuffle
//!   among the known questions raises neither.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{Ragwatch, Samples, http_get, labelled_data, run_ok, wait_for};
use ragwatch::config::Config;
use ragwatch::dimensions::JudgeKind;
use ragwatch::pipeline::Pipeline;
use ragwatch::recorder::Shared;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

const CORRUPTED: &str = "kb/handbook/corrupted";
const POPULAR: &str = "kb/faq/popular";

struct Data {
    all: Vec<Value>,
    unfaithful: Vec<Value>,
}

fn data() -> Data {
    let text = std::fs::read_to_string(labelled_data("ragtruth_qa_train.jsonl")).unwrap();
    let all: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let unfaithful = all
        .iter()
        .filter(|v| v["label_faithful"] == json!(false))
        .cloned()
        .collect();
    Data { all, unfaithful }
}

/// A document id for a passage: stable, unique per text.
fn passage_id(text: &str) -> String {
    format!("kb/p/{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// An answer's retrieved passages as contexts, each under its passage id.
fn passages(item: &Value) -> Vec<Value> {
    item["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = c.as_str().unwrap();
            json!({"id": passage_id(text), "text": text})
        })
        .collect()
}

/// Builds the stream: `corrupted_share` of the traces retrieve the corrupted document in place
/// of their first passage and carry an unfaithful answer; 30 % of the others also retrieve the
/// popular document; `spread` more shared documents are each retrieved into 1 in `spread` of them.
struct Stream<'a> {
    data: &'a Data,
    rng: StdRng,
    corrupted_share: f64,
    spread: usize,
}

impl Stream<'_> {
    fn next(&mut self, id: &str) -> String {
        let bad = self.rng.random::<f64>() < self.corrupted_share;
        let pool = if bad {
            &self.data.unfaithful
        } else {
            &self.data.all
        };
        let item = pool.choose(&mut self.rng).unwrap();
        let mut contexts = passages(item);
        let filler = |i: usize| self.data.all[i]["contexts"][0].clone();
        if bad {
            contexts[0] = json!({"id": CORRUPTED, "text": filler(11)});
        } else {
            if self.rng.random::<f64>() < 0.3 {
                let at = self.rng.random_range(0..=contexts.len());
                contexts.insert(at, json!({"id": POPULAR, "text": filler(7)}));
            }
            if self.spread > 0 && self.rng.random::<f64>() < 0.5 {
                let k = self.rng.random_range(0..self.spread);
                let doc = json!({"id": format!("kb/shared/{k}"), "text": filler(20 + k)});
                contexts.push(doc);
            }
        }
        json!({"trace_id": id, "query": item["query"], "contexts": contexts,
               "answer": item["answer"], "stratum": "qa"})
        .to_string()
    }
}

fn config(extra: &[(&str, &str)]) -> Config {
    let mut env: HashMap<String, String> = [("RAGWATCH__STRATA__DECLARED", "qa")]
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.insert("RAGWATCH__STRATA__OUT_OF_SCOPE".into(), "[]".into());
    Config::from_toml_with_env("", &env).unwrap()
}

#[test]
fn the_corrupted_document_is_the_first_suspect() {
    let data = data();
    let mut stream = Stream {
        data: &data,
        rng: StdRng::seed_from_u64(7),
        corrupted_share: 0.05,
        spread: 0,
    };
    let n = 3000;
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces.jsonl");
    let lines: Vec<String> = (0..n).map(|i| stream.next(&format!("t{i}"))).collect();
    std::fs::write(&traces, lines.join("\n") + "\n").unwrap();
    let config = dir.path().join("ragwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = {:?}\n[strata]\ndeclared = [\"qa\"]\nout_of_scope = []\n",
            traces.display()
        ),
    )
    .unwrap();
    let rw = Ragwatch::start(&config, &[]);
    let deadline = Duration::from_secs(60);
    // Every trace judged (a trace is counted received before its verdict is recorded), and the
    // counts settled: the report's verdicts are compared with every trace of the file.
    wait_for("every trace judged", deadline, || {
        let m = rw.metrics()?;
        (m.sum("ragwatch_traces_judged_total", &[("judge", "offline")]) >= n as f64).then_some(())
    });
    let m = rw.settled_metrics(&["ragwatch_traces_"], deadline);
    assert_eq!(m.sum("ragwatch_traces_received_total", &[]), n as f64);
    assert_eq!(
        m.sum("ragwatch_traces_judged_total", &[("judge", "offline")]),
        n as f64
    );
    let (code, body) = http_get(rw.addr, "/v1/suspects?stratum=qa&judge=offline").unwrap();
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let report = &answer["reports"][0];
    assert_eq!(report["stratum"], "qa");
    assert_eq!(report["verdicts"], json!(n));
    // Every trace arrived within one short window after the start: nothing before it to compare
    // with, so the list is one of associations; the ids too thin to test are counted.
    assert_eq!(report["basis"], "association", "{body}");
    assert!(report["too_thin"].as_u64().unwrap() > 0, "{body}");
    assert!(report["tested"].as_u64().unwrap() > 0, "{body}");
    let documents = report["documents"].as_array().unwrap();
    assert!(!documents.is_empty(), "{body}");
    let first = &documents[0];
    assert_eq!(first["id"], CORRUPTED, "{body}");
    assert!(first["lift_lower"].as_f64().unwrap() > 1.0, "{body}");
    assert!(
        documents.iter().all(|d| d["id"] != POPULAR),
        "the popular document is listed: {body}"
    );
    // Asked for every candidate, the popular one is there, its interval around 1.
    let (_, body) = http_get(rw.addr, "/v1/suspects?stratum=qa&all=true").unwrap();
    let answer: Value = serde_json::from_str(&body).unwrap();
    let popular = answer["reports"][0]["documents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == POPULAR)
        .cloned()
        .unwrap();
    assert_eq!(popular["listed"], json!(false), "{popular}");
    assert!(popular["lift_lower"].as_f64().unwrap() <= 1.0, "{popular}");
    // Bad queries are refused with what is accepted.
    assert_eq!(
        http_get(rw.addr, "/v1/suspects?stratum=nope").unwrap().0,
        404
    );
    assert_eq!(
        http_get(rw.addr, "/v1/suspects?window=month").unwrap().0,
        400
    );
    // Replay names the same suspect for the same file.
    let out = run_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["replay", "--output", "/dev/null", "--config"])
            .arg(&config)
            .arg(&traces),
    );
    let table = String::from_utf8_lossy(&out.stderr);
    let suspects: Vec<&str> = table
        .lines()
        .skip_while(|l| !(l.starts_with("associations") && l.contains(" in qa (offline")))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(
        suspects
            .first()
            .is_some_and(|l| l.trim_start().starts_with(CORRUPTED)),
        "{table}"
    );
    assert!(!table.contains(POPULAR), "{table}");
}

#[test]
fn six_healthy_half_hours_seldom_list_a_change() {
    let data = data();
    let mut stream = Stream {
        data: &data,
        rng: StdRng::seed_from_u64(11),
        corrupted_share: 0.0,
        spread: 8,
    };
    let config = config(&[]);
    let shared = Shared::new(config.recorder_setup());
    let mut pipeline = Pipeline::new(&config.decode, &config.sample, shared.clone(), None);
    let changes = shared.changes().unwrap();
    let start = 1_800_000_000_000u64;
    let rate_per_sec = 4;
    let mut listed = Vec::new();
    let mut tested = 0;
    let mut highest: f64 = 0.0;
    for second in 0..6 * 1800u64 {
        for k in 0..rate_per_sec {
            let line = stream.next(&format!("h{second}-{k}"));
            pipeline.ingest_at(line.as_bytes(), None, start + second * 1000 + k * 10);
        }
        if (second + 1) % 300 == 0 {
            let now = start + (second + 1) * 1000;
            let r = changes
                .report(
                    0,
                    JudgeKind::Offline,
                    ragwatch::changes::Window::Short,
                    now,
                    false,
                    None,
                )
                .unwrap();
            assert!(r.verdicts >= 600, "{r:?}");
            tested += r.tested;
            listed.extend(
                r.documents
                    .iter()
                    .map(|d| (second, d.id.clone(), d.change.map(|c| c.lower))),
            );
            let every = changes
                .report(
                    0,
                    JudgeKind::Offline,
                    ragwatch::changes::Window::Short,
                    now,
                    true,
                    None,
                )
                .unwrap();
            if let Some(c) = every.documents.first().and_then(|d| d.change) {
                highest = highest.max(c.lower);
            }
        }
    }
    eprintln!(
        "{tested} candidates tested over 36 windows; highest change lower bound {highest:.3}; \
         {} listed as changed",
        listed.len()
    );
    assert!(tested >= 36 * 5, "too few candidates were tested: {tested}");
    // Each read holds the family-wise error of a listed rise to 2.5 %: about one read in 40.
    assert!(
        listed.len() <= 2,
        "healthy traffic listed changes: {listed:?}"
    );
}

/// One of `pool`, with one of its words dropped (at random): a paraphrase, not the same text.
fn paraphrase(rng: &mut StdRng, pool: &[&str]) -> String {
    let q = *pool.choose(rng).unwrap();
    let words: Vec<&str> = q.split_whitespace().collect();
    if words.len() < 5 {
        return q.to_owned();
    }
    let drop = rng.random_range(0..words.len());
    words
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != drop)
        .map(|(_, w)| *w)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The question counters of stratum `qa` at a moment: (new, known, unchecked).
fn questions(shared: &Shared) -> [f64; 3] {
    let m = Samples::parse(&shared.metrics.render());
    ["new", "known", "unchecked"].map(|n| {
        m.sum(
            "ragwatch_questions_total",
            &[("stratum", "qa"), ("novelty", n)],
        )
    })
}

/// Runs 50 minutes of questions from a known pool, then 10 minutes where `shifted` picks each
/// question; returns the share of new questions among the checked ones in the last 5 minutes,
/// and over the baseline before it, and the question-mix distance the rules compute from them.
fn novelty_run(
    data: &Data,
    shifted: impl Fn(&mut StdRng, &[&str], &[&str]) -> String,
) -> (f64, f64, f64) {
    let config = config(&[
        ("RAGWATCH__WINDOWS__WINDOW_SECS", "[300, 3600]"),
        ("RAGWATCH__WINDOWS__BASELINE_SECS", "3600"),
        ("RAGWATCH__CHANGES__NOVELTY__KNOWN_AFTER_SECS", "600"),
    ]);
    let shared = Shared::new(config.recorder_setup());
    let mut pipeline = Pipeline::new(&config.decode, &config.sample, shared.clone(), None);
    let mut rng = StdRng::seed_from_u64(3);
    let questions_all: Vec<&str> = data
        .all
        .iter()
        .map(|v| v["query"].as_str().unwrap())
        .collect();
    let (known, fresh) = questions_all.split_at(300);
    let start = 1_800_000_000_000u64;
    let mut at = Vec::new();
    for second in 0..3600u64 {
        for k in 0..2 {
            let q = if second < 3000 {
                paraphrase(&mut rng, known)
            } else {
                shifted(&mut rng, known, fresh)
            };
            let line = json!({"trace_id": format!("n{second}-{k}"), "query": q,
                "contexts": [{"id": "d", "text": "a passage"}], "answer": "an answer", "stratum": "qa"});
            pipeline.ingest_at(line.to_string().as_bytes(), None, start + second * 1000 + k);
        }
        if second == 3300 - 1 || second == 3600 - 1 {
            at.push(questions(&shared));
        }
    }
    // Short window: the last 5 minutes; baseline: the hour before, as the rules read them.
    let short: Vec<f64> = (0..3).map(|i| at[1][i] - at[0][i]).collect();
    let base: Vec<f64> = at[0].to_vec();
    let share = |c: &[f64]| c[0] / (c[0] + c[1]);
    let mix = |c: &[f64]| c[0] / (c[0] + c[1] + c[2]);
    (
        share(&short),
        share(&base),
        (mix(&short) - mix(&base)).abs(),
    )
}

#[test]
fn a_new_topic_raises_novelty_and_a_reshuffle_does_not() {
    let data = data();
    let rules = ragwatch::changes::config::ChangeRules::default();
    let (short, base, distance) = novelty_run(&data, |rng, known, fresh| {
        if rng.random::<f64>() < 0.3 {
            fresh.choose(rng).unwrap().to_string()
        } else {
            paraphrase(rng, known)
        }
    });
    eprintln!("new topic: new share {short:.3} against {base:.3}, mix distance {distance:.3}");
    assert!(short - base >= rules.novelty_rise, "{short} vs {base}");
    assert!(distance > rules.mix_distance, "{distance}");
    // The same known questions, asked in another proportion: a tenth of them make all traffic.
    let (short, base, distance) = novelty_run(&data, |rng, known, _| paraphrase(rng, &known[..30]));
    eprintln!("reshuffle: new share {short:.3} against {base:.3}, mix distance {distance:.3}");
    assert!(short - base < rules.novelty_rise, "{short} vs {base}");
    assert!(distance < rules.mix_distance, "{distance}");
}

/// A knowledge base's traffic, built from the labelled answers: questions asked by a Zipf law
/// (in a seeded order), each trace one of its question's answers with the question's own passages,
/// each passage under one id wherever it is retrieved; a popular healthy document in 25 % of the
/// traces; the watched document in 3 % (from the start, or only once it is added), which may go
/// bad: its traces then carry answers people marked unfaithful. No text is replaced; the two
/// documents' texts are passages of questions left out of the traffic.
struct Kb<'a> {
    /// Each question's answers, most asked first.
    questions: Vec<Vec<&'a Value>>,
    /// Cumulative Zipf weights over `questions`.
    cdf: Vec<f64>,
    /// Answers people marked unfaithful, of the questions in the traffic.
    unfaithful: Vec<&'a Value>,
    watched_text: String,
    popular_text: String,
    /// The watched document is retrieved from the start, not only once it is added.
    from_start: bool,
    rng: StdRng,
}

const WATCHED_SHARE: f64 = 0.03;
const KB_POPULAR_SHARE: f64 = 0.25;

impl<'a> Kb<'a> {
    fn new(data: &'a Data, seed: u64, from_start: bool) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut by_query: std::collections::BTreeMap<&str, Vec<&Value>> = Default::default();
        for v in &data.all {
            by_query
                .entry(v["query"].as_str().unwrap())
                .or_default()
                .push(v);
        }
        let mut questions: Vec<Vec<&Value>> = by_query.into_values().collect();
        rand::seq::SliceRandom::shuffle(&mut questions[..], &mut rng);
        // Two questions left out: their passages are the two documents' texts.
        let left_out = questions.split_off(questions.len() - 2);
        let text = |q: &[&Value]| q[0]["contexts"][0].as_str().unwrap().to_owned();
        let asked: std::collections::HashSet<&str> = questions
            .iter()
            .map(|q| q[0]["query"].as_str().unwrap())
            .collect();
        let mut total = 0.0;
        let cdf = (1..=questions.len())
            .map(|rank| {
                total += 1.0 / rank as f64;
                total
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|c| c / total)
            .collect();
        Kb {
            unfaithful: data
                .unfaithful
                .iter()
                .filter(|v| asked.contains(v["query"].as_str().unwrap()))
                .collect(),
            questions,
            cdf,
            watched_text: text(&left_out[0]),
            popular_text: text(&left_out[1]),
            from_start,
            rng,
        }
    }

    /// The next trace; `added`: the watched document is in the index (always, `from_start`);
    /// `bad`: it has gone bad.
    fn next(&mut self, id: &str, added: bool, bad: bool) -> String {
        let watched = (added || self.from_start) && self.rng.random::<f64>() < WATCHED_SHARE;
        let item = if watched && bad {
            *self.unfaithful.choose(&mut self.rng).unwrap()
        } else {
            let u = self.rng.random::<f64>();
            let q = self.cdf.partition_point(|c| *c < u).min(self.cdf.len() - 1);
            *self.questions[q].choose(&mut self.rng).unwrap()
        };
        let mut contexts = passages(item);
        for (on, doc, text) in [
            (watched, CORRUPTED, &self.watched_text),
            (
                self.rng.random::<f64>() < KB_POPULAR_SHARE,
                POPULAR,
                &self.popular_text,
            ),
        ] {
            if on {
                let at = self.rng.random_range(0..=contexts.len());
                contexts.insert(at, json!({"id": doc, "text": text}));
            }
        }
        json!({"trace_id": id, "query": item["query"], "contexts": contexts,
               "answer": item["answer"], "stratum": "qa"})
        .to_string()
    }
}

/// What one stream's change report says: the watched document's place among the changes (and
/// its change's interval), the changes listed, the chronic documents.
#[derive(Debug)]
struct Verdicts {
    watched_first: bool,
    watched: Option<(f64, f64, f64)>,
    /// The changes listed: id, then figures.
    changed: Vec<String>,
    chronic: Vec<String>,
    too_thin: u64,
}

fn verdicts_of(report: &ragwatch::changes::Report) -> Verdicts {
    assert_eq!(report.basis, ragwatch::changes::Basis::Change, "{report:?}");
    let first = report.documents.first();
    let watched = report.documents.iter().find(|d| d.id == CORRUPTED);
    Verdicts {
        watched_first: first
            .is_some_and(|d| d.id == CORRUPTED && d.change.is_some_and(|c| c.lower > 1.0)),
        watched: watched
            .and_then(|d| d.change)
            .map(|c| (c.ratio, c.lower, c.upper)),
        changed: report
            .documents
            .iter()
            .map(|d| {
                let before = d.before.as_ref().map(|b| (b.low, b.verdicts));
                let change = d.change.map(|c| (c.lower, c.against));
                format!(
                    "{} {} of {}, before {before:?}, change {change:?}",
                    d.id, d.low, d.verdicts
                )
            })
            .collect(),
        chronic: report
            .chronic_documents
            .iter()
            .map(|d| d.id.clone())
            .collect(),
        too_thin: report.too_thin,
    }
}

/// Prints the figures of ten change streams and ten no-change streams, and checks them: the
/// changed document first among the changes with an interval above 1 in at least `min_found`,
/// at most `max_false` changes listed in the no-change streams (each stream's report holds its
/// family-wise error to `changes.alpha`: 2.5 % for a rise), the chronic documents apart.
fn assert_changes_found(
    name: &str,
    changed: &[Verdicts],
    unchanged: &[Verdicts],
    min_found: usize,
    max_false: usize,
) {
    let found = changed.iter().filter(|v| v.watched_first).count();
    for (i, v) in changed.iter().enumerate() {
        eprintln!(
            "{name} change stream {i}: first {}, change {:?}, {} changed, {} chronic, {} too thin",
            v.watched_first,
            v.watched,
            v.changed.len(),
            v.chronic.len(),
            v.too_thin
        );
    }
    let false_changes: Vec<&String> = unchanged.iter().flat_map(|v| &v.changed).collect();
    let chronic: usize = unchanged.iter().map(|v| v.chronic.len()).sum();
    eprintln!(
        "{name}: the changed document first with an interval above 1 in {found} of {}; \
         {} listed as changed in {} no-change streams; {chronic} chronic listed apart there",
        changed.len(),
        false_changes.len(),
        unchanged.len()
    );
    assert!(
        false_changes.len() <= max_false,
        "{name}: {false_changes:?}"
    );
    assert!(found >= min_found, "{name}: {found} of 10: {changed:#?}");
    for v in changed.iter().chain(unchanged) {
        assert!(
            !v.chronic
                .iter()
                .any(|c| v.changed.contains(c) || c == CORRUPTED || c == POPULAR),
            "{v:?}"
        );
        assert!(!v.changed.iter().any(|c| c.starts_with(POPULAR)), "{v:?}");
    }
    let with_chronic = changed
        .iter()
        .chain(unchanged)
        .filter(|v| !v.chronic.is_empty())
        .count();
    eprintln!("{name}: chronic documents listed apart in {with_chronic} of 20 streams");
    assert!(
        with_chronic >= 15,
        "the documents of hard questions are listed as chronic"
    );
}

const KB_HALF: usize = 3000;

/// Replays ten streams where the watched document goes bad after a baseline set of 3,000 traces
/// (3,000 after it) and ten where it stays healthy, against that set; `from_start`: the watched
/// document is in the baseline set too, else it is added with the change (healthy in the
/// no-change streams). Returns each stream's verdicts, and the watched document's rank among the
/// whole after-file's associations (no baseline set) in the change streams.
fn replayed_streams(
    data: &Data,
    from_start: bool,
) -> (Vec<Verdicts>, Vec<Verdicts>, Vec<Option<usize>>) {
    let config = config(&[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (mut changed, mut unchanged, mut ranks) = (Vec::new(), Vec::new(), Vec::new());
    for seed in 0..20u64 {
        let bad = seed < 10;
        let mut kb = Kb::new(data, 1000 + seed, from_start);
        let mut lines = |part: &str, after: bool| {
            (0..KB_HALF)
                .map(|i| kb.next(&format!("{part}{i}"), after, bad && after))
                .collect::<Vec<_>>()
                .join("\n")
                + "\n"
        };
        let before = dir.path().join(format!("before-{seed}.jsonl"));
        let after = dir.path().join(format!("after-{seed}.jsonl"));
        std::fs::write(&before, lines("b", false)).unwrap();
        std::fs::write(&after, lines("a", true)).unwrap();
        let replay = |baseline: &[std::path::PathBuf]| {
            let files = ragwatch::replay::ReplayFiles {
                traces: std::slice::from_ref(&after),
                suspects_baseline: baseline,
            };
            let summary = runtime
                .block_on(ragwatch::replay::replay_with(
                    &config,
                    files,
                    None,
                    &[1],
                    false,
                    None,
                    &mut std::io::sink(),
                ))
                .unwrap();
            assert_eq!(
                summary.suspects_baseline_traces,
                baseline.len() as u64 * KB_HALF as u64
            );
            summary
                .suspects
                .into_iter()
                .find(|r| r.judge == "offline")
                .unwrap()
                .report
        };
        let report = replay(std::slice::from_ref(&before));
        assert_eq!(report.before.unwrap().verdicts, KB_HALF as u64);
        if seed == 0 && !from_start {
            // The command line says the same.
            let toml = dir.path().join("ragwatch.toml");
            std::fs::write(&toml, "[strata]\ndeclared = [\"qa\"]\nout_of_scope = []\n").unwrap();
            let out = run_ok(
                std::process::Command::new(env!("CARGO_BIN_EXE_ragwatch"))
                    .args(["replay", "--output", "/dev/null", "--config"])
                    .arg(&toml)
                    .arg("--suspects-baseline")
                    .arg(&before)
                    .arg(&after),
            );
            let table = String::from_utf8_lossy(&out.stderr);
            let changes: Vec<&str> = table
                .lines()
                .skip_while(|l| !l.starts_with("changes against the baseline set in qa (offline"))
                .skip(1)
                .take_while(|l| l.starts_with("  "))
                .collect();
            assert!(
                changes
                    .first()
                    .is_some_and(|l| l.trim_start().starts_with(CORRUPTED)),
                "{table}"
            );
            assert!(table.contains("chronic, as high before in qa"), "{table}");
        }
        let v = verdicts_of(&report);
        if bad {
            changed.push(v);
            // The whole file alone: associations, where the documents of hard questions lead.
            let alone = replay(&[]);
            assert_eq!(alone.basis, ragwatch::changes::Basis::Association);
            ranks.push(alone.documents.iter().position(|d| d.id == CORRUPTED));
        } else {
            unchanged.push(v);
        }
    }
    (changed, unchanged, ranks)
}

#[test]
fn replay_against_a_baseline_set_ranks_the_changed_document_first() {
    let data = data();
    // The document is added with the change: it is new, and compared with the stratum's rate.
    let (changed, unchanged, ranks) = replayed_streams(&data, false);
    eprintln!("the added document's rank among the whole after-file's associations: {ranks:?}");
    assert_changes_found("replay, document added", &changed, &unchanged, 5, 0);
    // The document was there, healthy, before it went bad: compared with its own 90 or so
    // traces of the baseline set, the change is seen less often (reported, not held).
    let (changed, unchanged, _) = replayed_streams(&data, true);
    let found = changed.iter().filter(|v| v.watched_first).count();
    let false_changes: usize = unchanged.iter().map(|v| v.changed.len()).sum();
    eprintln!(
        "replay, document there before: first with an interval above 1 in {found} of 10; \
         {false_changes} listed as changed in 10 no-change streams"
    );
    assert!(false_changes <= 1, "{unchanged:#?}");
}

#[test]
fn live_at_the_shipped_windows_the_changed_document_is_the_first_change() {
    let data = data();
    // The shipped windows: 5 minutes against 24 hours.
    let config = config(&[]);
    assert_eq!(
        (config.windows.short_secs, config.windows.baseline_secs),
        (300, 86_400)
    );
    let rate_per_sec = 10;
    let history_secs = 3600;
    let (mut changed, mut unchanged, mut half) = (Vec::new(), Vec::new(), Vec::new());
    for seed in 0..20u64 {
        let bad = seed < 10;
        // The document is there from the start, healthy for the first hour.
        let mut kb = Kb::new(&data, 2000 + seed, true);
        let shared = Shared::new(config.recorder_setup());
        let mut pipeline = Pipeline::new(&config.decode, &config.sample, shared.clone(), None);
        let changes = shared.changes().unwrap();
        // Epochs of the short window start at multiples of 150 s: the change starts on one.
        let start = 1_800_000_000_000u64;
        let changed_at = start + history_secs * 1000;
        let read = |now: u64| {
            changes
                .report(
                    0,
                    JudgeKind::Offline,
                    ragwatch::changes::Window::Short,
                    now,
                    false,
                    None,
                )
                .unwrap()
        };
        let mut full = None;
        for second in 0..history_secs + 450 {
            let after = second >= history_secs;
            for k in 0..rate_per_sec {
                let line = kb.next(&format!("l{second}-{k}"), true, bad && after);
                pipeline.ingest_at(line.as_bytes(), None, start + second * 1000 + k * 10);
            }
            // A full short window of changed traffic, then the thinnest the window reads (the
            // epoch after it just opened: 150 s).
            if second + 1 == history_secs + 300 {
                full = Some(read(changed_at + 300_000 - 1));
            }
        }
        let thin = verdicts_of(&read(changed_at + 450_000));
        let v = verdicts_of(&full.unwrap());
        if bad {
            changed.push(v);
            half.push(thin.watched_first);
        } else {
            unchanged.push(v);
            assert!(thin.changed.is_empty(), "{thin:?}");
        }
    }
    eprintln!(
        "live, 150 s of changed traffic in the short window: the changed document first in {} of 10",
        half.iter().filter(|h| **h).count()
    );
    assert_changes_found("live", &changed, &unchanged, 8, 0);
}
