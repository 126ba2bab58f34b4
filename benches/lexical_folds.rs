//! The offline (lexical) judge's out-of-fold scores on a labelled set, one row per trace, so another
//! judge can be measured on the very same folds (`benches/classifier_cv.py` reads them):
//!
//! ```sh
//! nice -n 19 cargo bench --bench lexical_folds -- ../shared/data/ragtruth_qa_train.jsonl /tmp/lexical_folds.csv
//! ```
//!
//! Folds are `ragwatch train-offline`'s (grouped by question, dealt by mean answer length); the score
//! of a trace in fold k comes from `trainer::train` on the other folds, so the pooled AUROC printed
//! at the end is the trainer's own `cv_auroc_pooled`. Rows: `trace_id,fold,label,lexical`, with
//! `fold` and `lexical` empty for traces the offline judge does not score (no claims, a refusal).

#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::HashMap;

use ragwatch::judge::trainer::{self, Example, TrainConfig};
use ragwatch::trace::{Decoder, Trace};

/// The logistic model's probability, from its serialised form (its fields are the crate's own).
fn predict(model: &serde_json::Value, x: &[f64]) -> f64 {
    let v = |k: &str| -> Vec<f64> {
        model[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    let (mean, std, w) = (v("mean"), v("std"), v("weights"));
    let mut z = model["bias"].as_f64().unwrap();
    for i in 0..x.len() {
        let s = if std[i] > 0.0 { std[i] } else { 1.0 };
        z += w[i] * (x[i] - mean[i]) / s;
    }
    1.0 / (1.0 + (-z).exp())
}

fn main() {
    // `cargo bench` passes `--bench`; the two paths are the other arguments.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let (data, out) = match args.as_slice() {
        [d, o] => (d, o),
        // `cargo test --all-targets` runs each bench once without arguments: nothing to measure.
        [] => {
            println!("usage: lexical_folds DATA.jsonl OUT.csv (no data given: nothing measured)");
            return;
        }
        _ => {
            eprintln!("usage: lexical_folds DATA.jsonl OUT.csv");
            std::process::exit(2);
        }
    };
    let decoder = Decoder::new(&Default::default());
    let traces: Vec<Trace> = std::fs::read_to_string(data)
        .unwrap()
        .lines()
        .filter_map(|l| decoder.decode(l.as_bytes()).ok())
        .collect();
    let cfg = TrainConfig::default();
    // `examples` keeps the scored, labelled traces in order: pair them back with their ids.
    let scored: Vec<&Trace> = traces
        .iter()
        .filter(|t| !trainer::examples(std::slice::from_ref(*t), 1).is_empty())
        .collect();
    let examples = trainer::examples(&traces, cfg.folds);
    assert_eq!(scored.len(), examples.len(), "one example per scored trace");
    let mut oof = vec![0.0; examples.len()];
    for k in 0..cfg.folds {
        let rest: Vec<Example> = examples.iter().filter(|e| e.fold != k).cloned().collect();
        let model =
            serde_json::to_value(trainer::train(&rest, &cfg, "folds", "2026-01-01")).unwrap();
        for (i, e) in examples.iter().enumerate().filter(|(_, e)| e.fold == k) {
            oof[i] = predict(&model, &e.x);
        }
    }
    let by_id: HashMap<&str, (usize, f64)> = scored
        .iter()
        .zip(examples.iter().zip(&oof))
        .map(|(t, (e, s))| (t.trace_id.as_str(), (e.fold, *s)))
        .collect();
    let mut csv = String::from("trace_id,fold,label,lexical\n");
    for t in &traces {
        let Some(y) = t.label_faithful else { continue };
        let (fold, score) = by_id
            .get(t.trace_id.as_str())
            .map(|(f, s)| (f.to_string(), format!("{s}")))
            .unwrap_or_default();
        csv.push_str(&format!("{},{fold},{},{score}\n", t.trace_id, u8::from(y)));
    }
    std::fs::write(out, csv).unwrap();
    let (mut pos, mut neg): (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    for (e, s) in examples.iter().zip(&oof) {
        if e.y { pos.push(*s) } else { neg.push(*s) }
    }
    let wins: f64 = pos
        .iter()
        .flat_map(|p| {
            neg.iter().map(move |n| {
                if p > n {
                    1.0
                } else if p == n {
                    0.5
                } else {
                    0.0
                }
            })
        })
        .sum();
    println!(
        "{} traces, {} scored; pooled out-of-fold AUROC {:.4}",
        traces.len(),
        examples.len(),
        wins / (pos.len() * neg.len()) as f64
    );
}
