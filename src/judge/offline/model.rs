//! The model: a standardised logistic regression over the features, committed as
//! `offline_model.json` and reproduced bit for bit by `ragwatch train-offline`.

use serde::{Deserialize, Serialize};

use super::features::Features;

/// The committed model, produced by `ragwatch train-offline`.
const MODEL_JSON: &str = include_str!("../offline_model.json");

/// A standardised logistic model over [`Features`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfflineModel {
    /// Feature names, checked against [`Features::NAMES`] at load.
    pub(crate) features: Vec<String>,
    /// Per-feature mean used for standardisation.
    pub(crate) mean: Vec<f64>,
    /// Per-feature standard deviation used for standardisation.
    pub(crate) std: Vec<f64>,
    /// Weights on the standardised features.
    pub(crate) weights: Vec<f64>,
    /// Intercept.
    pub(crate) bias: f64,
    /// Probabilities within this distance of 0.5 are `uncertain`.
    pub(crate) uncertain_band: f64,
    /// How the model was made: data, folds, cross-validated AUROC, date.
    pub report: serde_json::Value,
}

impl OfflineModel {
    /// The committed model with this build.
    pub(crate) fn committed() -> OfflineModel {
        let model: OfflineModel =
            serde_json::from_str(MODEL_JSON).expect("the committed offline model is valid JSON");
        assert!(
            model.is_consistent(),
            "the committed offline model matches Features::NAMES"
        );
        model
    }

    /// Whether the vectors line up with [`Features::NAMES`].
    pub(crate) fn is_consistent(&self) -> bool {
        let n = Features::NAMES.len();
        self.features.iter().map(String::as_str).eq(Features::NAMES)
            && self.mean.len() == n
            && self.std.len() == n
            && self.weights.len() == n
    }

    /// Probability that the answer is faithful.
    pub(crate) fn predict(&self, x: &[f64]) -> f64 {
        let mut z = self.bias;
        for (((x, w), mean), std) in x.iter().zip(&self.weights).zip(&self.mean).zip(&self.std) {
            let s = if *std > 0.0 { *std } else { 1.0 };
            z += w * (x - mean) / s;
        }
        1.0 / (1.0 + (-z).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_model_loads_and_is_consistent() {
        assert!(OfflineModel::committed().is_consistent());
    }
}
