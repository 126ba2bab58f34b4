//! The trainer behind `ragwatch train-offline`: fits the offline judge's logistic model on
//! human-labelled traces and measures it with 5-fold cross-validation, grouped by question (answers
//! to one question never straddle folds, so a fold never sees the contexts it is tested on) and
//! stratified by length (each fold holds questions of every answer length).
//!
//! The score must not follow answer length inside a label class: a stream whose answers merely got
//! longer would look less faithful. The features are shares and means over sentences already; the
//! fit adds a penalty on the covariance, within each class, between the model's logit and the rank
//! of the answer's length, so the length signal that the labels carry (longer answers are unfaithful
//! more often) is not learnt through the back door of features that drift with length. The report
//! gives the cross-validated AUROC, within-class Spearman correlations and the verbosity experiment
//! ([`crate::audit::Verbosity`]).
//!
//! Everything is deterministic (folds from hashes, full-batch gradient descent from zero, fixed
//! iterations), so the same data gives the same weights to the last bit.

use serde_json::json;

use super::offline::{FEATURES, Features, OfflineModel, extract};
use super::text::word_count;
use crate::audit::{AuditSample, JudgeAudit, ranks};
use crate::eval::auroc;
use crate::trace::Trace;

/// Training settings.
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// Number of folds.
    pub folds: usize,
    /// Gradient descent iterations.
    pub iterations: usize,
    /// Learning rate.
    pub learning_rate: f64,
    /// L2 penalty on the weights (not the bias).
    pub l2: f64,
    /// Weight of the within-class length penalty (0: none).
    pub length_penalty: f64,
    /// Half-width of the `uncertain` band around 0.5.
    pub uncertain_band: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            folds: 5,
            iterations: 4000,
            learning_rate: 0.5,
            l2: 0.01,
            length_penalty: 2.0,
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
    /// The answer's length in words.
    pub words: f64,
    /// Fold index.
    pub fold: usize,
}

/// Builds examples from labelled traces: those the judge scores (not a refusal, at least one
/// claim) and that carry `label_faithful`. Folds are grouped by question and stratified by length:
/// the questions, ordered by their answers' mean length, are dealt out in blocks of `folds`, each
/// block's questions to distinct folds in an order drawn from their hashes.
pub fn examples(traces: &[Trace], folds: usize) -> Vec<Example> {
    let mut kept = Vec::new();
    for t in traces {
        let Some(y) = t.label_faithful else { continue };
        let e = extract(t);
        if e.sentences == 0 || e.refusal {
            continue;
        }
        let question = xxhash_rust::xxh3::xxh3_64(t.query.trim().to_lowercase().as_bytes());
        kept.push((
            question,
            e.features.to_vec(),
            y,
            word_count(&t.answer) as f64,
        ));
    }
    // question -> (sum of words, answers)
    let mut groups: std::collections::BTreeMap<u64, (f64, usize)> = Default::default();
    for (q, _, _, words) in &kept {
        let g = groups.entry(*q).or_default();
        g.0 += words;
        g.1 += 1;
    }
    let mut order: Vec<(f64, u64)> = groups
        .iter()
        .map(|(q, (sum, n))| (sum / *n as f64, *q))
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let folds = folds.max(1);
    let mut fold_of = std::collections::HashMap::new();
    for block in order.chunks(folds) {
        let mut block: Vec<u64> = block.iter().map(|(_, q)| *q).collect();
        block.sort_by_key(|q| q.rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15);
        for (i, q) in block.into_iter().enumerate() {
            fold_of.insert(q, i);
        }
    }
    kept.into_iter()
        .map(|(q, x, y, words)| Example {
            x,
            y,
            words,
            fold: fold_of[&q],
        })
        .collect()
}

/// Fits a standardised logistic regression on `data`, with the L2 and within-class length
/// penalties of `cfg`.
// Index loops keep the linear algebra readable; the vectors all have `n` entries.
#[allow(clippy::needless_range_loop)]
pub fn fit(data: &[&Example], cfg: &TrainConfig) -> OfflineModel {
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
    // The length penalty, sum over classes of cov(logit, length rank)^2, is (g_c . w)^2 summed
    // over classes, with g_c the class mean of z * rank (constant, as the ranks have mean 0): a
    // quadratic taken by a proximal step after each gradient step on the rest, which stays stable
    // however strongly a feature follows length.
    let g: Vec<Vec<f64>> = length_ranks(data)
        .iter()
        .map(|class| {
            let m = class.len().max(1) as f64;
            (0..n)
                .map(|i| class.iter().map(|&(j, r)| z[j][i] * r).sum::<f64>() / m)
                .collect()
        })
        .collect();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(a, b)| a * b).sum::<f64>();
    let mut w = vec![0.0; n];
    let mut b = 0.0;
    for _ in 0..cfg.iterations {
        let mut gw = vec![0.0; n];
        let mut gb = 0.0;
        for (e, zi) in data.iter().zip(&z) {
            let logit = b + dot(&w, zi);
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
        if cfg.length_penalty > 0.0 {
            // argmin_u |u - w|^2 / 2 + lr mu sum_c (g_c . u)^2 = w - G (I / (2 lr mu) + G'G)^-1 G'w.
            let d = 1.0 / (2.0 * cfg.learning_rate * cfg.length_penalty);
            let (m00, m01, m11) = (
                d + dot(&g[0], &g[0]),
                dot(&g[0], &g[1]),
                d + dot(&g[1], &g[1]),
            );
            let (a0, a1) = (dot(&g[0], &w), dot(&g[1], &w));
            let det = m00 * m11 - m01 * m01;
            let (t0, t1) = ((m11 * a0 - m01 * a1) / det, (m00 * a1 - m01 * a0) / det);
            for i in 0..n {
                w[i] -= g[0][i] * t0 + g[1][i] * t1;
            }
        }
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

/// For each label class, its examples' indices and the standardised rank of their length within
/// the class (mean 0, variance 1; empty for a class of fewer than two lengths).
fn length_ranks(data: &[&Example]) -> [Vec<(usize, f64)>; 2] {
    [true, false].map(|label| {
        let idx: Vec<usize> = (0..data.len()).filter(|&j| data[j].y == label).collect();
        let r = ranks(&idx.iter().map(|&j| data[j].words).collect::<Vec<_>>());
        let m = r.len() as f64;
        let mean = r.iter().sum::<f64>() / m;
        let sd = (r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / m).sqrt();
        // A constant (or NaN) column has no rank to correlate.
        if sd.is_nan() || sd <= 0.0 {
            return Vec::new();
        }
        idx.into_iter()
            .zip(r)
            .map(|(j, v)| (j, (v - mean) / sd))
            .collect()
    })
}

/// Cross-validates, then fits on everything; the model's `report` holds the figures.
pub fn train(examples: &[Example], cfg: &TrainConfig, source: &str, date: &str) -> OfflineModel {
    let oof = out_of_fold(examples, cfg);
    let mut fold_auroc = Vec::new();
    for k in 0..cfg.folds {
        let (s, l): (Vec<f64>, Vec<bool>) = examples
            .iter()
            .zip(&oof)
            .filter(|(e, _)| e.fold == k)
            .map(|(e, s)| (*s, e.y))
            .unzip();
        fold_auroc.push(auroc(&s, &l).unwrap_or(f64::NAN));
    }
    let labels: Vec<bool> = examples.iter().map(|e| e.y).collect();
    let samples: Vec<AuditSample> = examples
        .iter()
        .zip(&oof)
        .map(|(e, s)| AuditSample {
            score: *s,
            faithful: e.y,
            answer_words: e.words,
            reversed: None,
        })
        .collect();
    let cv = JudgeAudit::compute(&samples, 0.5, 0, 0);
    let single = auroc(
        &examples.iter().map(|e| e.x[0]).collect::<Vec<_>>(),
        &labels,
    );
    let all: Vec<&Example> = examples.iter().collect();
    let mut model = fit(&all, cfg);
    let round = |v: f64| (v * 10_000.0).round() / 10_000.0;
    let verbosity = cv.verbosity;
    model.report = json!({
        "version": format!("lr-{}", &date.replace('-', "")),
        "trained": date,
        "data": source,
        "examples": examples.len(),
        "faithful": labels.iter().filter(|y| **y).count(),
        "folds": cfg.folds,
        "grouping": "question (hash of the lowercased query), stratified by the answers' mean length",
        "cv_auroc_pooled": cv.auroc.map(|e| round(e.value)),
        "cv_auroc_per_fold": fold_auroc.iter().map(|v| round(*v)).collect::<Vec<_>>(),
        "cv_length_spearman_faithful": cv.length_spearman_faithful.map(round),
        "cv_length_spearman_unfaithful": cv.length_spearman_unfaithful.map(round),
        "cv_verbosity_mean_90": verbosity.map(|v| round(v.mean_90)),
        "cv_verbosity_longer_90": verbosity.map(|v| round(v.longer_90)),
        "cv_verbosity_mean_75": verbosity.map(|v| round(v.mean_75)),
        "cv_verbosity_ratio": verbosity.and_then(|v| v.ratio()).map(round),
        "baseline_auroc_supported_tokens_alone": single.map(round),
        "iterations": cfg.iterations,
        "learning_rate": cfg.learning_rate,
        "l2": cfg.l2,
        "length_penalty": cfg.length_penalty,
    });
    model
}

/// Each example's score from the model fitted on the other folds.
pub fn out_of_fold(examples: &[Example], cfg: &TrainConfig) -> Vec<f64> {
    let mut oof = vec![f64::NAN; examples.len()];
    for k in 0..cfg.folds {
        let train: Vec<&Example> = examples.iter().filter(|e| e.fold != k).collect();
        let model = fit(&train, cfg);
        for (i, e) in examples.iter().enumerate().filter(|(_, e)| e.fold == k) {
            oof[i] = model.predict(&e.x);
        }
    }
    oof
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example(v: f64, y: bool, words: f64) -> Example {
        let mut x = [0.0; FEATURES];
        x[0] = v;
        Example {
            x,
            y,
            words,
            fold: 0,
        }
    }

    #[test]
    fn fit_separates_a_separable_toy_set_and_is_deterministic() {
        let data: Vec<Example> = (0..40)
            .map(|i| example(i as f64 / 40.0, i >= 20, 10.0))
            .collect();
        let refs: Vec<&Example> = data.iter().collect();
        let cfg = TrainConfig::default();
        let a = fit(&refs, &cfg);
        let b = fit(&refs, &cfg);
        assert_eq!(a, b);
        assert!(a.weights[0] > 1.0);
        assert!(a.predict(&data[39].x) > 0.8 && a.predict(&data[0].x) < 0.2);
    }

    /// A feature that tracks length inside each class (feature 1) beside one that carries the
    /// label and not length (feature 0): without the penalty the fit leans on both, with it the
    /// score stops following length within the classes.
    #[test]
    fn length_penalty_stops_the_score_following_length_within_a_class() {
        let mut data = Vec::new();
        for i in 0..200 {
            let y = i % 2 == 0;
            let words = 20.0 + (i * 37 % 200) as f64;
            let mut e = example(
                f64::from(u8::from(y)) + ((i * 13 % 7) as f64 - 3.0) * 0.3,
                y,
                words,
            );
            // Long answers are unfaithful more often: the length-tracking feature carries the
            // label too, through length.
            e.x[1] = -words / 100.0 + if y { 0.5 } else { 0.0 };
            data.push(e);
        }
        let refs: Vec<&Example> = data.iter().collect();
        let rho = |cfg: &TrainConfig| {
            let m = fit(&refs, cfg);
            let samples: Vec<AuditSample> = data
                .iter()
                .map(|e| AuditSample {
                    score: m.predict(&e.x),
                    faithful: e.y,
                    answer_words: e.words,
                    reversed: None,
                })
                .collect();
            let a = JudgeAudit::compute(&samples, 0.5, 0, 0);
            a.length_spearman_faithful
                .unwrap()
                .abs()
                .max(a.length_spearman_unfaithful.unwrap().abs())
        };
        let plain = rho(&TrainConfig {
            length_penalty: 0.0,
            ..TrainConfig::default()
        });
        let penalised = rho(&TrainConfig::default());
        assert!(plain > 0.3, "without the penalty {plain}");
        assert!(
            penalised < 0.1,
            "with the penalty {penalised} (without {plain})"
        );
    }
}
