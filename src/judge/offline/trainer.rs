//! The trainer behind `ragwatch train-offline`: fits the offline judge's logistic model on
//! human-labelled traces and measures it with 5-fold cross-validation grouped by question (answers to
//! one question never straddle folds, so a fold never sees the contexts it is tested on).
//!
//! Everything is deterministic (fold = hash of the question, full-batch gradient descent from zero,
//! fixed iterations), so the same data gives the same weights to the last bit.

use serde_json::json;

use super::extract::extract;
use super::{FEATURES, Features, OfflineModel};
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
    /// Fold index.
    pub fold: usize,
}

/// Builds examples from labelled traces (traces without `label_faithful` are ignored).
pub fn examples(traces: &[Trace], folds: usize) -> Vec<Example> {
    traces
        .iter()
        .filter_map(|t| {
            let y = t.label_faithful?;
            let f = extract(t).features;
            let fold = (xxhash_rust::xxh3::xxh3_64(t.query.trim().to_lowercase().as_bytes())
                % folds as u64) as usize;
            Some(Example {
                x: f.to_vec(),
                y,
                fold,
            })
        })
        .collect()
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
            w[i] -= cfg.learning_rate * (gw[i] + cfg.l2 * w[i]);
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
        "grouping": "question (hash of the lowercased query)",
        "cv_auroc_pooled": pooled.map(round),
        "cv_auroc_per_fold": fold_auroc.iter().map(|v| round(*v)).collect::<Vec<_>>(),
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
            Example { x, y, fold: 0 }
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
        assert!(model.report["cv_auroc_pooled"].as_f64().unwrap() >= 0.78);
    }
}
