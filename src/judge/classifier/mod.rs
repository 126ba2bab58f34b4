//! The classifier judge's in-process model (cargo feature `classifier`): a BERT-family sentence
//! encoder from a model directory ([`model`]), long inputs windowed over the context ([`window`]),
//! and a small logistic head over the answer's, question's and contexts' pooled vectors ([`head`]).
//!
//! Faithfulness is the head's probability that the answer is supported. The head reads the
//! [`pair_features`] of a trace: cosine of answer and question, the highest and mean cosine of the
//! answer with each context, and the element-wise product and absolute difference of the answer's
//! and the contexts' mean unit vectors. `benches/classifier_cv.py` computes the same features with an
//! independent forward pass and fits the head.

pub mod head;
pub mod model;
pub mod window;

use std::path::Path;

pub use head::Head;
pub use model::{Encoder, EncoderConfig};
pub use window::Window;

use crate::trace::Trace;

/// Why the classifier could not load or score.
#[derive(Debug, thiserror::Error)]
pub enum ClassifierError {
    /// A file of the model directory could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// `config.json` or the head is malformed or asks for what is not supported.
    #[error("model config: {0}")]
    Config(String),
    /// `tokenizer.json` could not be loaded or applied.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The tensors are missing, misshapen or failed to compute.
    #[error("tensor: {0}")]
    Tensor(#[from] candle_core::Error),
    /// An input the encoder cannot take.
    #[error("input: {0}")]
    Input(String),
}

impl ClassifierError {
    /// A small bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Io { .. } => "io",
            Self::Config(_) => "config",
            Self::Tokenizer(_) => "tokenizer",
            Self::Tensor(_) => "tensor",
            Self::Input(_) => "input",
        }
    }
}

/// An encoder with its windowing: text in, one pooled vector out.
#[derive(Debug)]
pub struct TextEncoder {
    encoder: Encoder,
    window: Window,
}

impl TextEncoder {
    /// Loads the encoder in `dir`; windows fill the position embeddings (special tokens aside)
    /// unless `window_tokens` asks for fewer, and overlap by half.
    pub fn load(dir: &Path, window_tokens: Option<usize>) -> Result<Self, ClassifierError> {
        let encoder = Encoder::load(dir)?;
        let most = encoder.max_tokens().saturating_sub(2).max(1);
        let tokens = window_tokens.unwrap_or(most).clamp(1, most);
        Ok(Self {
            encoder,
            window: Window::new(tokens, tokens.div_ceil(2)),
        })
    }

    /// The encoder.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// The windowing.
    pub fn window(&self) -> Window {
        self.window
    }

    /// The inputs (special tokens included) that `text` is embedded from: one per window.
    pub fn inputs(&self, text: &str) -> Result<Vec<Vec<u32>>, ClassifierError> {
        let ids = self.encoder.token_ids(text)?;
        Ok(self
            .window
            .split(&ids)
            .into_iter()
            .map(|w| self.encoder.with_special_tokens(w))
            .collect())
    }

    /// The mean of the window vectors of each text.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ClassifierError> {
        let mut inputs = Vec::new();
        let mut owner = Vec::new();
        for (i, text) in texts.iter().enumerate() {
            for input in self.inputs(text)? {
                inputs.push(input);
                owner.push(i);
            }
        }
        // Similar lengths together: less padding per batch.
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| inputs[i].len());
        let hidden = self.encoder.config().hidden_size;
        let mut sums = vec![vec![0f32; hidden]; texts.len()];
        let mut counts = vec![0usize; texts.len()];
        for chunk in order.chunks(8) {
            let batch: Vec<Vec<u32>> = chunk.iter().map(|&i| inputs[i].clone()).collect();
            for (&i, v) in chunk.iter().zip(self.encoder.embed(&batch)?) {
                for (s, x) in sums[owner[i]].iter_mut().zip(v) {
                    *s += x;
                }
                counts[owner[i]] += 1;
            }
        }
        for (s, n) in sums.iter_mut().zip(counts) {
            let n = n.max(1) as f32;
            s.iter_mut().for_each(|x| *x /= n);
        }
        Ok(sums)
    }
}

/// A faithfulness classifier: encoder, windowing and head.
#[derive(Debug)]
pub struct Classifier {
    text: TextEncoder,
    head: Head,
}

impl Classifier {
    /// Loads the encoder in `model_dir` and the head in `head_path` (JSON), windows as the head
    /// was trained.
    pub fn load(model_dir: &Path, head_path: &Path) -> Result<Self, ClassifierError> {
        let head = Head::load(head_path)?;
        let text = TextEncoder::load(model_dir, Some(head.window_tokens))?;
        if head.weights.len() != 3 + 2 * text.encoder().config().hidden_size {
            return Err(ClassifierError::Config(format!(
                "the head has {} weights; this encoder's features number {}",
                head.weights.len(),
                3 + 2 * text.encoder().config().hidden_size
            )));
        }
        Ok(Self { text, head })
    }

    /// Probability that the trace's answer is supported by its contexts.
    pub fn score(&self, trace: &Trace) -> Result<f64, ClassifierError> {
        let mut texts: Vec<&str> = vec![&trace.answer, &trace.query];
        texts.extend(trace.contexts.iter().map(|c| c.text.as_str()));
        let vectors = self.text.embed(&texts)?;
        let features = pair_features(&vectors[0], &vectors[1], &vectors[2..]);
        Ok(self.head.predict(&features))
    }
}

/// Unit vector of `v` (zeros stay zeros).
fn unit(v: &[f32]) -> Vec<f64> {
    let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let norm = if norm > 0.0 { norm } else { 1.0 };
    v.iter().map(|x| f64::from(*x) / norm).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The head's inputs, from the pooled vectors of the answer, the question and each context:
/// `[cos(a, q), max_i cos(a, c_i), mean_i cos(a, c_i), a * c, |a - c|]`, where every vector is made
/// unit length first and `c` is the unit mean of the unit context vectors (zeros without contexts,
/// whose cosines are then 0).
pub fn pair_features(answer: &[f32], question: &[f32], contexts: &[Vec<f32>]) -> Vec<f64> {
    let a = unit(answer);
    let q = unit(question);
    let cs: Vec<Vec<f64>> = contexts.iter().map(|c| unit(c)).collect();
    let cosines: Vec<f64> = cs.iter().map(|c| dot(&a, c)).collect();
    let max = cosines.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let max = if max.is_finite() { max } else { 0.0 };
    let mean = if cosines.is_empty() {
        0.0
    } else {
        cosines.iter().sum::<f64>() / cosines.len() as f64
    };
    let mut c = vec![0.0; a.len()];
    for ci in &cs {
        for (s, x) in c.iter_mut().zip(ci) {
            *s += x;
        }
    }
    let norm = dot(&c, &c).sqrt();
    if norm > 0.0 {
        c.iter_mut().for_each(|x| *x /= norm);
    }
    let mut out = Vec::with_capacity(3 + 2 * a.len());
    out.extend([dot(&a, &q), max, mean]);
    out.extend(a.iter().zip(&c).map(|(x, y)| x * y));
    out.extend(a.iter().zip(&c).map(|(x, y)| (x - y).abs()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_of_an_answer_equal_to_its_context() {
        let v = vec![3.0f32, 4.0];
        let f = pair_features(&v, &[0.0, 1.0], std::slice::from_ref(&v));
        let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
        assert!(close(f[0], 0.8) && close(f[1], 1.0) && close(f[2], 1.0));
        assert!(close(f[3], 0.36) && close(f[4], 0.64));
        assert!(close(f[5], 0.0) && close(f[6], 0.0));
    }

    #[test]
    fn no_contexts_give_zero_cosines() {
        let f = pair_features(&[1.0, 0.0], &[1.0, 0.0], &[]);
        assert_eq!(f, vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    }
}
