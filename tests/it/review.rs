//! The reviewer estimate on real answers: a stratum of traces drawn from the human-labelled RAG
//! answers in `../shared/data`, the offline judge on each, an LLM stand-in on a 20 % sample whose
//! verdicts follow the human labels with 10 % flipped, the review queue picking at its budget, and
//! reviewers simulated by the human labels. In 100 seeded runs the estimate's 90 % interval covers
//! the stratum's true faithful share (the labels of its traces) in at least 85, and is narrower
//! than the same number of uniformly random labels alone; with a biased LLM stand-in (it calls 20 %
//! of unfaithful answers faithful) the judge's gap excludes 0 and the estimate stays on the truth.

use std::collections::HashMap;

use crate::common::{Samples, labelled_data};
use ragwatch::config::Config;
use ragwatch::dimensions::{JudgeKind, PerQuality, Quality};
use ragwatch::judge::{Citations, OfflineJudge, Verdict};
use ragwatch::recorder::Shared;
use ragwatch::trace::Decoder;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::Value;

const TRACES: usize = 6000;
const SAMPLE: f64 = 0.2;
const REVIEWS_PER_DAY: &str = "150";
const Z90: f64 = 1.645;

struct Item {
    trace: ragwatch::trace::Trace,
    faithful: bool,
    offline: Option<f64>,
}

fn items() -> Vec<Item> {
    let text = std::fs::read_to_string(labelled_data("ragtruth_qa_train.jsonl")).unwrap();
    let decoder = Decoder::new(&Config::default().decode);
    let judge = OfflineJudge::default();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let trace = decoder.decode(l.as_bytes()).unwrap();
            let offline = judge.score(&trace).faithfulness;
            Item {
                faithful: v["label_faithful"].as_bool().unwrap(),
                trace,
                offline,
            }
        })
        .collect()
}

fn verdict(judge: JudgeKind, faithfulness: Option<f64>) -> Verdict {
    Verdict {
        judge,
        scores: PerQuality::default().with(Quality::Faithfulness, faithfulness),
        refusal: false,
        uncertain: false,
        citations: Citations::default(),
        details: Value::Null,
    }
}

/// The LLM stand-in: it reads an answer as people did 90 % of the time; biased, it also calls 20 %
/// of the unfaithful answers faithful. It calls an answer faithful (`labels.llm_faithful_threshold`,
/// 1.0) when it finds every claim supported.
fn llm_score(rng: &mut StdRng, faithful: bool, biased: bool) -> f64 {
    let reads_faithful = if faithful {
        rng.random::<f64>() >= 0.1
    } else {
        rng.random::<f64>() < 0.1 || (biased && rng.random::<f64>() < 0.2)
    };
    // Every claim supported (1.0), or some unsupported: a share of them below 1.
    if reads_faithful {
        1.0
    } else {
        0.9 * rng.random::<f64>()
    }
}

/// One phase's weighted mean and its variance from the exported sums, as the rules compute them.
fn phase(m: &Samples, phase: &str) -> (f64, f64, f64) {
    let t = |term: &str| {
        m.sum(
            "ragwatch_review_terms_total",
            &[("stratum", "qa"), ("phase", phase), ("term", term)],
        )
    };
    let (n, w, a, b, c, d) = (t("n"), t("w"), t("wy"), t("ww"), t("wwy"), t("wwyy"));
    let mean = a / w;
    let var = (d - 2.0 * mean * c + mean * mean * b + 0.25 * b / n) / (w * w);
    (mean, var, n)
}

struct Run {
    truth: f64,
    estimate: f64,
    half_width: f64,
    gap: f64,
    gap_half_width: f64,
    labels: f64,
    picked_informative: f64,
}

fn run(items: &[Item], seed: u64, biased: bool, days: usize) -> Run {
    let env: HashMap<String, String> = [
        ("RAGWATCH__STRATA__DECLARED", "qa"),
        ("RAGWATCH__STRATA__OUT_OF_SCOPE", "[]"),
        ("RAGWATCH__JUDGE__SAMPLED", "llm"),
        ("RAGWATCH__LABELS__ENABLED", "true"),
        ("RAGWATCH__REVIEW__ENABLED", "true"),
        ("RAGWATCH__REVIEW__REVIEWS_PER_DAY", REVIEWS_PER_DAY),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let config = Config::from_toml_with_env("", &env).unwrap();
    let shared = Shared::new(config.recorder_setup());
    shared
        .attach_review(config.review_setup(), &HashMap::new())
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let start = 1_800_000_000_000u64;
    let day_ms = 86_400_000u64;
    let mut faithful = 0usize;
    let traces = TRACES * days;
    for i in 0..traces {
        let item = &items[rng.random_range(0..items.len())];
        faithful += usize::from(item.faithful);
        if rng.random::<f64>() >= SAMPLE {
            continue;
        }
        let now = start + i as u64 * day_ms / TRACES as u64;
        let mut trace = item.trace.clone();
        trace.trace_id = format!("s{seed}-{i}");
        let offline = verdict(JudgeKind::Offline, item.offline);
        let llm = verdict(
            JudgeKind::Llm,
            Some(llm_score(&mut rng, item.faithful, biased)),
        );
        shared.record_sampled(0, &llm, &offline, SAMPLE, &trace, now);
        // The reviewer labels what the queue picked (labels of unpicked traces join nothing).
        let label = format!(
            "{{\"trace_id\": \"{}\", \"faithful\": {}, \"source\": \"review\"}}",
            trace.trace_id, item.faithful
        );
        shared.label(label.as_bytes(), now + 60_000);
    }
    let m = Samples::parse(&shared.metrics.render());
    let (judge_mean, judge_var, _) = phase(&m, "judge");
    let (gap_offset, gap_var, labels) = phase(&m, "review");
    let gap = gap_offset - 1.0;
    let picked = |reason: &str| {
        m.sum(
            "ragwatch_review_picked_total",
            &[("stratum", "qa"), ("reason", reason)],
        )
    };
    Run {
        truth: faithful as f64 / traces as f64,
        estimate: judge_mean + gap,
        half_width: Z90 * (judge_var + gap_var).sqrt(),
        gap,
        gap_half_width: Z90 * gap_var.sqrt(),
        labels,
        picked_informative: picked("disagreement") + picked("near_score"),
    }
}

#[test]
fn the_reviewer_estimate_covers_the_truth_and_beats_random_labels() {
    let items = items();
    let runs: Vec<Run> = (0..100).map(|seed| run(&items, seed, false, 1)).collect();
    let covered = runs
        .iter()
        .filter(|r| (r.estimate - r.truth).abs() <= r.half_width)
        .count();
    let mean = |f: &dyn Fn(&Run) -> f64| runs.iter().map(f).sum::<f64>() / runs.len() as f64;
    let labels = mean(&|r| r.labels);
    let ours = mean(&|r| 2.0 * r.half_width);
    // The same number of uniformly random labels alone: a Wald interval on their share.
    let random = mean(&|r| 2.0 * Z90 * (r.truth * (1.0 - r.truth) / r.labels).sqrt());
    let flagged = runs
        .iter()
        .filter(|r| r.gap.abs() > r.gap_half_width)
        .count();
    eprintln!(
        "gap {:+.3}, outside its 90 % interval in {flagged}/100",
        mean(&|r| r.gap)
    );
    eprintln!(
        "covered {covered}/100; {labels:.0} labels a run ({:.0} informative picks); \
         90 % width {ours:.3} against {random:.3} for as many random labels; mean error {:+.4}",
        mean(&|r| r.picked_informative),
        mean(&|r| r.estimate - r.truth)
    );
    assert!(covered >= 85, "covered {covered}/100");
    assert!(ours < random, "{ours} >= {random}");
    assert!(
        (100.0..=300.0).contains(&labels),
        "the budget: {labels} labels"
    );
}

#[test]
fn a_biased_judge_shows_as_a_gap_and_the_estimate_stays_on_the_truth() {
    let items = items();
    let runs: Vec<Run> = (0..20)
        .map(|seed| run(&items, 1000 + seed, true, 3))
        .collect();
    let flagged = runs
        .iter()
        .filter(|r| r.gap.abs() > r.gap_half_width)
        .count();
    let covered = runs
        .iter()
        .filter(|r| (r.estimate - r.truth).abs() <= r.half_width)
        .count();
    let error = runs.iter().map(|r| r.estimate - r.truth).sum::<f64>() / runs.len() as f64;
    let gap = runs.iter().map(|r| r.gap).sum::<f64>() / runs.len() as f64;
    eprintln!(
        "biased judge: gap {gap:+.3} flagged in {flagged}/20; estimate error {error:+.4}; covered {covered}/20"
    );
    assert!(flagged >= 18, "the gap was seen in {flagged}/20 runs");
    assert!(error.abs() < 0.02, "the estimate is off by {error}");
    assert!(covered >= 16, "covered {covered}/20");
}
