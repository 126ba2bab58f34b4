//! What the exported metrics measure on scales the config declares (`[metrics]`).

use crate::section::problems::Problems;
use serde::{Deserialize, Serialize};

/// The scale of the retriever's scores, which sets the buckets of `ragwatch_retrieval_score`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScoreScale {
    /// 0 to 1: a similarity clipped at zero, a reranker's probability. Buckets 0.1 to 1.0.
    Unit,
    /// -1 to 1: cosine similarity of unnormalised embeddings. Buckets -0.8 to 1.0.
    Signed,
    /// 0 and up, unbounded: BM25, inner products, distances. Buckets 0.25 to 256, doubling.
    Unbounded,
}

impl ScoreScale {
    /// The histogram's upper bounds for this scale (`+Inf` is implicit).
    pub fn buckets(self) -> Vec<f64> {
        match self {
            ScoreScale::Unit => (1..=10).map(|i| f64::from(i) / 10.0).collect(),
            ScoreScale::Signed => (-4..=5).map(|i| f64::from(i) / 5.0).collect(),
            ScoreScale::Unbounded => (-2..=8).map(|i| 2f64.powi(i)).collect(),
        }
    }
}

/// What the exported metrics measure on scales the config declares.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// The scale of the retriever's scores (`contexts[].score`, or the retriever span's document
    /// scores): `unit`, `signed` or `unbounded`.
    #[serde(default = "default_retrieval_score_scale")]
    pub retrieval_score_scale: ScoreScale,
    /// Upper bounds of `ragwatch_retrieval_score`'s buckets, ascending; replaces the scale's.
    #[serde(default)]
    pub retrieval_score_buckets: Option<Vec<f64>>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            retrieval_score_scale: default_retrieval_score_scale(),
            retrieval_score_buckets: None,
        }
    }
}

impl MetricsConfig {
    /// The buckets of `ragwatch_retrieval_score`: the explicit list, else the scale's.
    pub(crate) fn retrieval_buckets(&self) -> Vec<f64> {
        self.retrieval_score_buckets
            .clone()
            .unwrap_or_else(|| self.retrieval_score_scale.buckets())
    }
}

fn default_retrieval_score_scale() -> ScoreScale {
    ScoreScale::Unit
}

impl MetricsConfig {
    /// Checks `[metrics]`: explicit retriever-score bounds are few, finite and ascending.
    pub(crate) fn validate(&self, p: &mut Problems) {
        if let Some(b) = &self.retrieval_score_buckets {
            if b.is_empty() || b.len() > 40 {
                p.add("metrics.retrieval_score_buckets", "needs 1 to 40 bounds");
            } else if b.iter().any(|x| !x.is_finite()) || b.windows(2).any(|w| w[0] >= w[1]) {
                p.add(
                    "metrics.retrieval_score_buckets",
                    "must be finite and strictly ascending (+Inf is implicit)",
                );
            }
        }
    }
}
