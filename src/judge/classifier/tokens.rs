//! The model directory's tokenizer: text to the token ids an encoder takes, with its special
//! tokens and the longest input its position embeddings allow. Both paths tokenize here, so the
//! in-process encoder and a model server see the same ids.

use std::path::Path;

use serde::Deserialize;
use tokenizers::Tokenizer;

use super::ClassifierError;

/// A tokenizer and the encoder facts windowing needs.
#[derive(Debug)]
pub struct Tokens {
    config: EncoderConfig,
    tokenizer: Tokenizer,
    cls_id: u32,
    sep_id: u32,
    pad_id: u32,
}

/// Reads `name` in `dir`.
pub(super) fn read(dir: &Path, name: &str) -> Result<Vec<u8>, ClassifierError> {
    std::fs::read(dir.join(name)).map_err(|e| ClassifierError::Io {
        path: dir.join(name).display().to_string(),
        source: e,
    })
}

impl Tokens {
    /// Loads `config.json` and `tokenizer.json` from `dir`.
    pub fn load(dir: &Path) -> Result<Self, ClassifierError> {
        let config: EncoderConfig = serde_json::from_slice(&read(dir, "config.json")?)
            .map_err(|e| ClassifierError::Config(format!("config.json: {e}")))?;
        let mut tokenizer = Tokenizer::from_bytes(read(dir, "tokenizer.json")?)
            .map_err(|e| ClassifierError::Tokenizer(e.to_string()))?;
        // Windowing decides lengths; the file's own truncation and padding would cut inputs short.
        tokenizer
            .with_truncation(None)
            .map_err(|e| ClassifierError::Tokenizer(e.to_string()))?;
        tokenizer.with_padding(None);
        let special = |token: &str| {
            tokenizer.token_to_id(token).ok_or_else(|| {
                ClassifierError::Tokenizer(format!("tokenizer.json has no {token} token"))
            })
        };
        let (cls_id, sep_id) = (special("[CLS]")?, special("[SEP]")?);
        let pad_id = tokenizer.token_to_id("[PAD]").unwrap_or(0);
        Ok(Self {
            config,
            tokenizer,
            cls_id,
            sep_id,
            pad_id,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &EncoderConfig {
        &self.config
    }

    /// The longest input the position embeddings allow, special tokens included.
    pub fn max_tokens(&self) -> usize {
        self.config.max_position_embeddings
    }

    /// The padding id.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The ids of `text` without special tokens and without truncation.
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, ClassifierError> {
        let encoding = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| ClassifierError::Tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// `[CLS] ids [SEP]`: one input as the encoder takes it.
    pub fn with_special_tokens(&self, ids: &[u32]) -> Vec<u32> {
        let mut out = Vec::with_capacity(ids.len() + 2);
        out.push(self.cls_id);
        out.extend_from_slice(ids);
        out.push(self.sep_id);
        out
    }
}

/// The fields of a BERT `config.json` the forward pass needs; the rest are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct EncoderConfig {
    /// Vocabulary size of the word embeddings.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Number of transformer layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Feed-forward activation: `gelu` (erf), `gelu_new` / `gelu_pytorch_tanh` (tanh), `relu`.
    #[serde(default = "default_hidden_act")]
    pub hidden_act: String,
    /// Longest input, in tokens, the position embeddings cover.
    pub max_position_embeddings: usize,
    /// Number of token types (segments).
    #[serde(default = "default_type_vocab_size")]
    pub type_vocab_size: usize,
    /// Layer norm epsilon.
    #[serde(default = "default_layer_norm_eps")]
    pub layer_norm_eps: f64,
}

fn default_hidden_act() -> String {
    "gelu".to_owned()
}

fn default_type_vocab_size() -> usize {
    2
}

fn default_layer_norm_eps() -> f64 {
    1e-12
}
