//! The classifier's cost per trace on this CPU: every step a judged trace takes (tokenize, window,
//! encode answer, question and contexts, pool, features, head), one trace at a time on one thread,
//! over labelled traces; median and p99 per answer-length band.
//!
//! ```sh
//! RAYON_NUM_THREADS=1 nice -n 19 cargo bench --features classifier --bench classifier_cost -- \
//!     ../shared/data/ragtruth_qa_train.jsonl $HOME/.cache/ragwatch/all-MiniLM-L6-v2 \
//!     $HOME/.cache/ragwatch/minilm-head.json 300
//! ```
//!
//! The last argument is how many traces (spread over the file) are timed.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;

use ragwatch::clock::Instant;
use ragwatch::judge::classifier::Classifier;
use ragwatch::trace::{Decoder, Trace};

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.is_empty() {
        // `cargo test --all-targets` runs each bench once without arguments: nothing to measure.
        println!(
            "usage: classifier_cost DATA.jsonl MODEL_DIR HEAD.json N (no model given: nothing measured)"
        );
        return;
    }
    let [data, model, head, n] = args.as_slice() else {
        eprintln!("usage: classifier_cost DATA.jsonl MODEL_DIR HEAD.json N");
        std::process::exit(2);
    };
    let n: usize = n.parse().unwrap();
    let decoder = Decoder::new(&Default::default());
    let traces: Vec<Trace> = std::fs::read_to_string(data)
        .unwrap()
        .lines()
        .filter_map(|l| decoder.decode(l.as_bytes()).ok())
        .collect();
    let step = (traces.len() / n.max(1)).max(1);
    let sample: Vec<&Trace> = traces.iter().step_by(step).take(n).collect();
    let start = Instant::now();
    let classifier = Classifier::load(Path::new(model), Path::new(head)).unwrap();
    println!("load: {:.0} ms", start.elapsed().as_secs_f64() * 1e3);
    // One untimed trace: first-touch allocations.
    classifier.score(sample[0]).unwrap();
    let mut timed: Vec<(usize, usize, f64)> = Vec::with_capacity(sample.len());
    for t in &sample {
        let start = Instant::now();
        let p = classifier.score(t).unwrap();
        let ms = start.elapsed().as_secs_f64() * 1e3;
        assert!((0.0..=1.0).contains(&p));
        let words = t.answer.split_whitespace().count();
        let context_words: usize = t
            .contexts
            .iter()
            .map(|c| c.text.split_whitespace().count())
            .sum();
        timed.push((words, context_words, ms));
    }
    let bands = [(0, 50), (50, 100), (100, 200), (200, usize::MAX)];
    println!("answer words | traces | median ms | p99 ms | mean context words");
    for (lo, hi) in bands.into_iter().chain([(0, usize::MAX)]) {
        let mut ms: Vec<f64> = timed
            .iter()
            .filter(|(w, _, _)| *w >= lo && *w < hi)
            .map(|t| t.2)
            .collect();
        if ms.is_empty() {
            continue;
        }
        let ctx: f64 = timed
            .iter()
            .filter(|(w, _, _)| *w >= lo && *w < hi)
            .map(|t| t.1 as f64)
            .sum::<f64>()
            / ms.len() as f64;
        ms.sort_by(f64::total_cmp);
        let band = if (lo, hi) == (0, usize::MAX) {
            "all".to_owned()
        } else if hi == usize::MAX {
            format!("{lo}+")
        } else {
            format!("{lo}-{hi}")
        };
        println!(
            "{band} | {} | {:.1} | {:.1} | {ctx:.0}",
            ms.len(),
            quantile(&ms, 0.5),
            quantile(&ms, 0.99)
        );
    }
}
