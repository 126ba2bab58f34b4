//! The trainer behind `ragwatch train-offline`: fits the offline judge's logistic model on
//! human-labelled traces and measures it with 5-fold cross-validation grouped by question (answers to
//! one question never straddle folds, so a fold never sees the contexts it is tested on) and
//! stratified by answer length (questions ranked by their answers' mean length are dealt to the
//! folds in turn, so every fold holds short and long answers alike).
//!
//! # Length held out of the score
//! Longer answers hold more content the lexical signals do not find in the contexts, so a model
//! fitted on likelihood alone learns "long means unfaithful" inside each label class: a stream whose
//! answers merely got longer would look as bad as one that lost faithfulness. The fit constrains the
//! weights so that, within each label class of the training data, the model's logit has zero
//! covariance with ln(1 + answer words): gradient descent runs in the subspace orthogonal to the two
//! class-wise covariance directions. Length can still separate the classes through what it does to
//! the other signals, but not rank answers within a class. The report carries the cross-validated
//! within-class Spearman correlations and the verbosity experiment ([`crate::audit::Verbosity`]).
//!
//! Everything is deterministic (folds from lengths and hashes of the questions, full-batch gradient
//! descent from zero, fixed iterations), so the same data gives the same weights to the last bit.

use std::collections::HashMap;

use serde_json::json;

use super::extract::extract;
use super::scan::word_count;
use super::{FEATURES, Features, OfflineModel};
use crate::audit::{AuditSample, Verbosity, length_spearman};
use crate::eval::auroc;
use crate::trace::Trace;

/// Training settings.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// Number of folds.
    pub folds: usize,
    /// Gradient descent iterations.
    pub(crate) iterations: usize,
    /// Learning rate.
    pub(crate) learning_rate: f64,
    /// L2 penalty on the weights (not the bias).
    pub(crate) l2: f64,
    /// Half-width of the `uncertain` band around 0.5.
    pub(crate) uncertain_band: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            folds: 5,
            iterations: 4000,
            learning_rate: 0.5,
            l2: 0.01,
            uncertain_band: 0.1,
        }
    }
}

/// One labelled example.
#[derive(Debug, Clone)]
pub struct Example {
    /// Feature vector.
    pub x: [f64; FEATURES],
    /// true = faithful.
    pub y: bool,
    /// The answer's length in whitespace-separated words.
    pub words: f64,
    /// Fold index.
    pub fold: usize,
}

/// Builds examples from labelled traces, with folds grouped by question and stratified by length:
/// questions are ranked by their answers' mean word count (ties by a hash of the question) and
/// dealt to folds `0, 1, .., folds - 1, 0, 1, ..`.
/// Left out: traces without `label_faithful`, and those the judge gives no faithfulness score (no
/// claims, or a refusal), which the model never scores.
pub fn examples(traces: &[Trace], folds: usize) -> Vec<Example> {
    let folds = folds.max(1);
    // (question key, answer words, label, features) of each answer the model scores.
    let scored: Vec<(String, f64, bool, Features)> = traces
        .iter()
        .filter_map(|t| {
            let y = t.label_faithful?;
            let extraction = extract(t);
            extraction.is_scored().then(|| {
                let key = t.query.trim().to_lowercase();
                (key, word_count(&t.answer) as f64, y, extraction.features)
            })
        })
        .collect();
    // Per question: (total words, answers).
    let mut groups: HashMap<&str, (f64, usize)> = HashMap::new();
    for (key, words, _, _) in &scored {
        let g = groups.entry(key).or_default();
        g.0 += words;
        g.1 += 1;
    }
    let mut ranked: Vec<(f64, u64, &str)> = groups
        .iter()
        .map(|(q, (words, n))| {
            (
                words / *n as f64,
                xxhash_rust::xxh3::xxh3_64(q.as_bytes()),
                *q,
            )
        })
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(b.2)));
    let fold_of: HashMap<&str, usize> = ranked
        .iter()
        .enumerate()
        .map(|(rank, (_, _, q))| (*q, rank % folds))
        .collect();
    scored
        .iter()
        .map(|(key, words, y, features)| Example {
            x: features.to_vec(),
            y: *y,
            words: *words,
            fold: fold_of[key.as_str()],
        })
        .collect()
}

/// The directions the weights must stay orthogonal to: for each label class present, the
/// covariance of every standardised feature with the class-standardised ln(1 + words), made
/// orthonormal (Gram-Schmidt; a direction already spanned is dropped).
#[allow(clippy::needless_range_loop)]
fn length_directions(data: &[&Example], z: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let n = Features::NAMES.len();
    let mut basis: Vec<Vec<f64>> = Vec::new();
    for class in [true, false] {
        let idx: Vec<usize> = (0..data.len()).filter(|&i| data[i].y == class).collect();
        if idx.len() < 2 {
            continue;
        }
        let len: Vec<f64> = idx.iter().map(|&i| data[i].words.ln_1p()).collect();
        let count = idx.len() as f64;
        let mean_len = len.iter().sum::<f64>() / count;
        let sd_len = (len.iter().map(|l| (l - mean_len).powi(2)).sum::<f64>() / count).sqrt();
        if sd_len <= 1e-12 {
            continue;
        }
        let mut mean_z = vec![0.0; n];
        for &i in &idx {
            for k in 0..n {
                mean_z[k] += z[i][k] / count;
            }
        }
        let mut a = vec![0.0; n];
        for (&i, l) in idx.iter().zip(&len) {
            let lc = (l - mean_len) / sd_len;
            for k in 0..n {
                a[k] += (z[i][k] - mean_z[k]) * lc / count;
            }
        }
        for q in &basis {
            let dot: f64 = a.iter().zip(q).map(|(a, q)| a * q).sum();
            for k in 0..n {
                a[k] -= dot * q[k];
            }
        }
        let norm = a.iter().map(|v| v * v).sum::<f64>().sqrt();
        if norm > 1e-9 {
            basis.push(a.iter().map(|v| v / norm).collect());
        }
    }
    basis
}

/// `g` with its components along the orthonormal `basis` removed.
fn project_out(g: &mut [f64], basis: &[Vec<f64>]) {
    for q in basis {
        let dot: f64 = g.iter().zip(q).map(|(g, q)| g * q).sum();
        for (g, q) in g.iter_mut().zip(q) {
            *g -= dot * q;
        }
    }
}

/// Fits a standardised logistic regression on `data`.
// Index loops keep the linear algebra readable; the vectors all have `n` entries.
#[allow(clippy::needless_range_loop)]
pub(crate) fn fit(data: &[&Example], cfg: &TrainConfig) -> OfflineModel {
    let n = Features::NAMES.len();
    let count = data.len().max(1) as f64;
    let mut mean = vec![0.0; n];
    let mut std = vec![0.0; n];
    for e in data {
        for i in 0..n {
            mean[i] += e.x[i] / count;
        }
    }
    for e in data {
        for i in 0..n {
            std[i] += (e.x[i] - mean[i]).powi(2) / count;
        }
    }
    for s in &mut std {
        *s = if *s > 1e-12 { s.sqrt() } else { 1.0 };
    }
    let z: Vec<Vec<f64>> = data
        .iter()
        .map(|e| (0..n).map(|i| (e.x[i] - mean[i]) / std[i]).collect())
        .collect();
    let basis = length_directions(data, &z);
    let mut w = vec![0.0; n];
    let mut b = 0.0;
    for _ in 0..cfg.iterations {
        let mut gw = vec![0.0; n];
        let mut gb = 0.0;
        for (e, zi) in data.iter().zip(&z) {
            let logit = b + w.iter().zip(zi).map(|(w, x)| w * x).sum::<f64>();
            let p = 1.0 / (1.0 + (-logit).exp());
            let err = p - f64::from(u8::from(e.y));
            gb += err / count;
            for i in 0..n {
                gw[i] += err * zi[i] / count;
            }
        }
        for i in 0..n {
            gw[i] += cfg.l2 * w[i];
        }
        // Weights start at zero and every step stays orthogonal to the length directions.
        project_out(&mut gw, &basis);
        for i in 0..n {
            w[i] -= cfg.learning_rate * gw[i];
        }
        b -= cfg.learning_rate * gb;
    }
    OfflineModel {
        features: Features::NAMES.iter().map(|s| (*s).to_owned()).collect(),
        mean,
        std,
        weights: w,
        bias: b,
        uncertain_band: cfg.uncertain_band,
        report: serde_json::Value::Null,
    }
}

/// Cross-validates, then fits on everything; the model's `report` holds the figures.
pub fn train(examples: &[Example], cfg: &TrainConfig, source: &str, date: &str) -> OfflineModel {
    let mut oof = vec![0.0; examples.len()];
    let mut fold_auroc = Vec::new();
    for k in 0..cfg.folds {
        let train: Vec<&Example> = examples.iter().filter(|e| e.fold != k).collect();
        let model = fit(&train, cfg);
        let (mut s, mut l) = (Vec::new(), Vec::new());
        for (i, e) in examples.iter().enumerate().filter(|(_, e)| e.fold == k) {
            oof[i] = model.predict(&e.x);
            s.push(oof[i]);
            l.push(e.y);
        }
        fold_auroc.push(auroc(&s, &l).unwrap_or(f64::NAN));
    }
    let labels: Vec<bool> = examples.iter().map(|e| e.y).collect();
    let pooled = auroc(&oof, &labels);
    let single = auroc(
        &examples.iter().map(|e| e.x[0]).collect::<Vec<_>>(),
        &labels,
    );
    let samples: Vec<AuditSample> = examples
        .iter()
        .zip(&oof)
        .map(|(e, &score)| AuditSample {
            score,
            faithful: e.y,
            answer_words: e.words,
            reversed: None,
        })
        .collect();
    let within = |class| length_spearman(&samples, Some(class));
    let verbosity = Verbosity::compute(&samples);
    let all: Vec<&Example> = examples.iter().collect();
    let mut model = fit(&all, cfg);
    let round = |v: f64| (v * 10_000.0).round() / 10_000.0;
    model.report = json!({
        "version": format!("lr-{}", &date.replace('-', "")),
        "trained": date,
        "data": source,
        "examples": examples.len(),
        "faithful": labels.iter().filter(|y| **y).count(),
        "folds": cfg.folds,
        "grouping": "question (the lowercased query), dealt to folds in order of its answers' mean length",
        "length_constraint": "within each label class, zero covariance of the logit with ln(1 + answer words)",
        "cv_auroc_pooled": pooled.map(round),
        "cv_auroc_per_fold": fold_auroc.iter().map(|v| round(*v)).collect::<Vec<_>>(),
        "cv_length_spearman_faithful": within(true).map(round),
        "cv_length_spearman_unfaithful": within(false).map(round),
        "cv_verbosity_ratio": verbosity.and_then(|v| v.ratio()).map(round),
        "baseline_auroc_mean_support_alone": single.map(round),
        "iterations": cfg.iterations,
        "learning_rate": cfg.learning_rate,
        "l2": cfg.l2,
    });
    model
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_separates_a_separable_toy_set_and_is_deterministic() {
        let mk = |v: f64, y: bool| {
            let mut x = [0.0; FEATURES];
            x[0] = v;
            Example {
                x,
                y,
                words: 10.0,
                fold: 0,
            }
        };
        let data: Vec<Example> = (0..40).map(|i| mk(i as f64 / 40.0, i >= 20)).collect();
        let refs: Vec<&Example> = data.iter().collect();
        let cfg = TrainConfig::default();
        let a = fit(&refs, &cfg);
        let b = fit(&refs, &cfg);
        assert_eq!(a, b);
        assert!(a.weights[0] > 1.0);
        assert!(a.predict(&data[39].x) > 0.8 && a.predict(&data[0].x) < 0.2);
    }

    /// A signal that tracks length inside each class gets no weight along length: the fitted
    /// logit's covariance with ln(1 + words) is zero within each class, while a signal that
    /// separates the classes keeps its weight.
    #[test]
    fn the_fit_holds_length_out_of_the_logit_within_each_class() {
        // Lengths cycle through ten values; the noise steps once per cycle, so inside each class it
        // is exactly uncorrelated with length.
        let data: Vec<Example> = (0..400)
            .map(|i| {
                let y = i % 2 == 0;
                let words = 10.0 + ((i / 2) % 10) as f64 * 5.0;
                let mut x = [0.0; FEATURES];
                // Separates the classes.
                x[0] = f64::from(u8::from(y)) + ((i / 20) % 7) as f64 / 7.0;
                // Falls with length inside each class (the bias the fit must not learn).
                x[1] = -words.ln_1p() + f64::from(u8::from(y)) * 0.5;
                Example {
                    x,
                    y,
                    words,
                    fold: 0,
                }
            })
            .collect();
        let refs: Vec<&Example> = data.iter().collect();
        let model = fit(&refs, &TrainConfig::default());
        let logit = |e: &Example| {
            let p = model.predict(&e.x);
            (p / (1.0 - p)).ln()
        };
        for class in [true, false] {
            let of: Vec<&Example> = data.iter().filter(|e| e.y == class).collect();
            let n = of.len() as f64;
            let (ml, mw) = (
                of.iter().map(|e| logit(e)).sum::<f64>() / n,
                of.iter().map(|e| e.words.ln_1p()).sum::<f64>() / n,
            );
            let cov: f64 = of
                .iter()
                .map(|e| (logit(e) - ml) * (e.words.ln_1p() - mw))
                .sum::<f64>()
                / n;
            assert!(cov.abs() < 1e-6, "class {class}: covariance {cov}");
        }
        assert!(model.weights[0] > 0.5, "{:?}", model.weights);
    }

    /// `train-offline` reproduces the committed weights exactly from the development set. The data set
    /// is read from `../shared/data` (beside the checkout, as on the developers' machines and in CI).
    #[test]
    fn trainer_reproduces_committed_model() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/ragtruth_qa_train.jsonl");
        let Ok(text) = std::fs::read_to_string(&path) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have {}",
                path.display()
            );
            eprintln!("skipped: {} not present", path.display());
            return;
        };
        let decoder = crate::trace::Decoder::new(&Default::default());
        let traces: Vec<_> = text
            .lines()
            .filter_map(|l| decoder.decode(l.as_bytes()).ok())
            .collect();
        let cfg = TrainConfig::default();
        let examples = examples(&traces, cfg.folds);
        let committed = OfflineModel::committed();
        let date = committed.report["trained"].as_str().unwrap().to_owned();
        let model = train(&examples, &cfg, "ragtruth_qa_train.jsonl", &date);
        assert_eq!(model, committed);
        let figure = |k: &str| model.report[k].as_f64().unwrap();
        assert!(figure("cv_auroc_pooled") >= 0.74);
        assert!(figure("cv_length_spearman_faithful").abs() <= 0.1);
        assert!(figure("cv_length_spearman_unfaithful").abs() <= 0.1);
        assert!(figure("cv_verbosity_ratio") < 1.0 / 3.0);
    }
}
