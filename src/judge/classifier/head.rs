//! The classifier's head: a standardised logistic regression over [`super::pair_features`],
//! loaded from a small JSON file that `benches/classifier_cv.py` writes.

use std::path::Path;

use serde::Deserialize;

use super::ClassifierError;

/// A logistic head and how its training inputs were windowed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Head {
    /// Tokens per window the features were computed with.
    pub window_tokens: usize,
    /// Per-feature mean for standardisation.
    pub mean: Vec<f64>,
    /// Per-feature standard deviation for standardisation.
    pub std: Vec<f64>,
    /// Weights on the standardised features.
    pub weights: Vec<f64>,
    /// Intercept.
    pub bias: f64,
    /// How the head was made: encoder, data, folds, cross-validated AUROC.
    #[serde(default)]
    pub report: serde_json::Value,
}

impl Head {
    /// Reads and checks a head file.
    pub fn load(path: &Path) -> Result<Self, ClassifierError> {
        let bytes = std::fs::read(path).map_err(|e| ClassifierError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        let head: Head = serde_json::from_slice(&bytes)
            .map_err(|e| ClassifierError::Config(format!("{}: {e}", path.display())))?;
        let n = head.weights.len();
        if n == 0 || head.mean.len() != n || head.std.len() != n {
            return Err(ClassifierError::Config(format!(
                "{}: mean, std and weights must have one equal, non-zero length",
                path.display()
            )));
        }
        Ok(head)
    }

    /// Probability of the positive class (supported).
    pub fn predict(&self, x: &[f64]) -> f64 {
        let mut z = self.bias;
        for (((x, w), mean), std) in x.iter().zip(&self.weights).zip(&self.mean).zip(&self.std) {
            let s = if *std > 0.0 { *std } else { 1.0 };
            z += w * (x - mean) / s;
        }
        1.0 / (1.0 + (-z).exp())
    }
}
