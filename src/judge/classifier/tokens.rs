//! The model directory's tokenizer: text to the token ids an encoder takes, with its special
//! tokens and the longest input its position embeddings allow. Both paths tokenize here, so the
//! in-process encoder and a model server see the same ids.

use std::path::Path;

use tokenizers::Tokenizer;

use super::ClassifierError;
use super::model::EncoderConfig;

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
