//! Texts to pooled vectors: each text tokenized ([`Tokens`]), cut into windows ([`Window`]),
//! each window embedded in process ([`Encoder`]) or by a model server ([`Served`]), and the
//! text's vector the mean of its windows' vectors.

use std::path::Path;

use super::ClassifierError;
use super::model::Encoder;
use super::served::Served;
use super::tokens::Tokens;
use super::window::Window;

/// Where the windows' vectors are computed.
#[derive(Debug)]
enum Backend {
    InProcess(Encoder),
    Served(Served),
}

/// A tokenizer, its windowing and the encoder that embeds the windows.
#[derive(Debug)]
pub struct TextEncoder {
    tokens: Tokens,
    window: Window,
    backend: Backend,
}

/// The windows of several texts as one batch: each input (special tokens included) and the text
/// it belongs to.
#[derive(Debug, Default)]
pub struct Inputs {
    /// Token ids per window.
    pub ids: Vec<Vec<u32>>,
    /// The text each window belongs to.
    pub owner: Vec<usize>,
    /// Texts.
    pub texts: usize,
}

impl TextEncoder {
    /// The tokenizer and encoder in `dir`, in process; windows fill the position embeddings
    /// (special tokens aside) unless `window_tokens` asks for fewer, and overlap by half.
    pub fn load(dir: &Path, window_tokens: Option<usize>) -> Result<Self, ClassifierError> {
        let tokens = Tokens::load(dir)?;
        let encoder = Encoder::load(dir, &tokens)?;
        Ok(Self::new(
            tokens,
            window_tokens,
            Backend::InProcess(encoder),
        ))
    }

    /// The tokenizer in `dir`, its windows embedded by `served`.
    pub fn served(
        dir: &Path,
        window_tokens: Option<usize>,
        served: Served,
    ) -> Result<Self, ClassifierError> {
        let tokens = Tokens::load(dir)?;
        Ok(Self::new(tokens, window_tokens, Backend::Served(served)))
    }

    fn new(tokens: Tokens, window_tokens: Option<usize>, backend: Backend) -> Self {
        let most = tokens.max_tokens().saturating_sub(2).max(1);
        let n = window_tokens.unwrap_or(most).clamp(1, most);
        Self {
            tokens,
            window: Window::new(n, n.div_ceil(2)),
            backend,
        }
    }

    /// The tokenizer and the model's configuration.
    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// The windowing.
    pub fn window(&self) -> Window {
        self.window
    }

    /// The inputs (special tokens included) that `text` is embedded from: one per window.
    pub fn inputs(&self, text: &str) -> Result<Vec<Vec<u32>>, ClassifierError> {
        let ids = self.tokens.token_ids(text)?;
        Ok(self
            .window
            .split(&ids)
            .into_iter()
            .map(|w| self.tokens.with_special_tokens(w))
            .collect())
    }

    /// The windows of every text.
    pub fn batch(&self, texts: &[&str]) -> Result<Inputs, ClassifierError> {
        let mut out = Inputs {
            texts: texts.len(),
            ..Inputs::default()
        };
        for (i, text) in texts.iter().enumerate() {
            for input in self.inputs(text)? {
                out.ids.push(input);
                out.owner.push(i);
            }
        }
        Ok(out)
    }

    /// Whether the windows are embedded in process (CPU-bound: run it off the async threads).
    pub fn in_process(&self) -> bool {
        matches!(self.backend, Backend::InProcess(_))
    }

    /// The mean of the window vectors of each text, in process.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ClassifierError> {
        let Backend::InProcess(encoder) = &self.backend else {
            return Err(ClassifierError::Config(
                "the encoder is served: embed with embed_served".to_owned(),
            ));
        };
        let inputs = self.batch(texts)?;
        // Similar lengths together: less padding per batch.
        let mut order: Vec<usize> = (0..inputs.ids.len()).collect();
        order.sort_by_key(|&i| inputs.ids[i].len());
        let mut vectors = vec![Vec::new(); inputs.ids.len()];
        for chunk in order.chunks(8) {
            let batch: Vec<Vec<u32>> = chunk.iter().map(|&i| inputs.ids[i].clone()).collect();
            for (&i, v) in chunk.iter().zip(encoder.embed(&batch)?) {
                vectors[i] = v;
            }
        }
        Ok(mean_per_text(&inputs, vectors))
    }

    /// The mean of the window vectors of each text, from the model server.
    pub async fn embed_served(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ClassifierError> {
        let Backend::Served(served) = &self.backend else {
            return Err(ClassifierError::Config(
                "the encoder runs in process: embed with embed".to_owned(),
            ));
        };
        let inputs = self.batch(texts)?;
        let vectors = served.embed(&inputs.ids).await?;
        let hidden = self.tokens.config().hidden_size;
        if let Some(v) = vectors.iter().find(|v| v.len() != hidden) {
            return Err(ClassifierError::Served(crate::judge::llm::LlmError::Parse(
                format!("a vector of {} numbers; the model's are {hidden}", v.len()),
            )));
        }
        Ok(mean_per_text(&inputs, vectors))
    }
}

/// Each text's vector: the mean of its windows' vectors.
fn mean_per_text(inputs: &Inputs, vectors: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
    let hidden = vectors.first().map_or(0, Vec::len);
    let mut sums = vec![vec![0f32; hidden]; inputs.texts];
    let mut counts = vec![0usize; inputs.texts];
    for (&owner, v) in inputs.owner.iter().zip(vectors) {
        for (s, x) in sums[owner].iter_mut().zip(v) {
            *s += x;
        }
        counts[owner] += 1;
    }
    for (s, n) in sums.iter_mut().zip(counts) {
        let n = n.max(1) as f32;
        s.iter_mut().for_each(|x| *x /= n);
    }
    sums
}
