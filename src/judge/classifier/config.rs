//! The `[classifier]` section: the small model judge (`judge.sampled = "classifier"`): its model
//! directory and head, and optionally the model server that computes the encoder's vectors in its
//! place. Plain data; the judge is built only with the cargo feature `classifier`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::section::problems::Problems;

/// The classifier judge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierConfig {
    /// The model directory: `config.json` and `tokenizer.json` always, `model.safetensors` when
    /// the encoder runs in process (no `served`). Mounted or baked into the image; nothing is
    /// downloaded.
    #[serde(default)]
    pub model_dir: Option<PathBuf>,
    /// The head (JSON, as `benches/classifier_cv.py --head` writes it): standardised logistic
    /// weights over the answer's, question's and contexts' pooled vectors, and the window it was
    /// trained with.
    #[serde(default)]
    pub head: Option<PathBuf>,
    /// Tokens per window over a long text (special tokens excluded); unset: the head's.
    #[serde(default)]
    pub window_tokens: Option<usize>,
    /// A model server that computes the encoder's vectors: the windows go out as token ids, so
    /// the served and the in-process path see the same inputs.
    #[serde(default)]
    pub served: Option<ServedConfig>,
    /// As the combined estimate's prediction (`judge.prediction = "classifier"`): traces waiting
    /// for the classifier; a trace that finds it full keeps the offline judge's score.
    #[serde(default = "default_queue_capacity")]
    pub queue_capacity: usize,
    /// As the prediction: traces scored at once.
    #[serde(default = "default_workers")]
    pub workers: usize,
}

/// Which model server's API the served path speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServedApi {
    /// Hugging Face text-embeddings-inference: `POST {url}/embed`, `{"inputs": [[ids]],
    /// "normalize": false}`, answered with one vector per input.
    Tei,
    /// vLLM's pooling API: `POST {url}/pooling`, `{"model", "input": [[ids]], "task": "embed",
    /// "normalize": false}`, answered with `{"data": [{"index", "data": vector}]}`.
    Vllm,
}

/// The model server of the served path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServedConfig {
    /// The server's base URL (`http://tei.models:8080`).
    pub url: String,
    /// Its API.
    pub api: ServedApi,
    /// The model name vLLM serves (sent as `model`); TEI serves one model and ignores it.
    #[serde(default)]
    pub model: Option<String>,
    /// One request's timeout.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Tries of one request (the first and its retries) on a 429, a 5xx, a timeout or a transport
    /// error; waits follow the LLM client's full-jitter backoff and a `Retry-After`.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The wait before the first retry; it doubles up to `backoff_max_ms`.
    #[serde(default = "default_backoff_base_ms")]
    pub backoff_base_ms: u64,
    /// The longest wait between two tries.
    #[serde(default = "default_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Requests per second at most (this replica's); unset: no limit. A request waits for its
    /// turn; there is no token budget, the server is the team's own.
    #[serde(default)]
    pub requests_per_sec: Option<u32>,
    /// Windows sent in one request at most.
    #[serde(default = "default_batch_max")]
    pub batch_max: usize,
}

crate::section::fields::default_from_serde!(ClassifierConfig);

fn default_queue_capacity() -> usize {
    1024
}

fn default_workers() -> usize {
    1
}

fn default_timeout_ms() -> u64 {
    10_000
}

fn default_max_attempts() -> u32 {
    3
}

fn default_backoff_base_ms() -> u64 {
    200
}

fn default_backoff_max_ms() -> u64 {
    5_000
}

fn default_batch_max() -> usize {
    32
}

impl ClassifierConfig {
    /// Checks `[classifier]`; `used`: the classifier runs (`judge.sampled` or `judge.prediction`
    /// names it).
    pub(crate) fn validate(&self, used: bool, p: &mut Problems) {
        if !used {
            return;
        }
        if !cfg!(feature = "classifier") {
            p.add(
                "judge",
                "the classifier needs a ragwatch built with the cargo feature `classifier`",
            );
        }
        p.positive("classifier.queue_capacity", self.queue_capacity as u64);
        p.positive("classifier.workers", self.workers as u64);
        if self.model_dir.is_none() {
            p.add(
                "classifier.model_dir",
                "names the model directory (config.json, tokenizer.json and, in process, model.safetensors)",
            );
        }
        if self.head.is_none() {
            p.add("classifier.head", "names the head file (JSON)");
        }
        if self.window_tokens == Some(0) {
            p.add("classifier.window_tokens", "must be > 0");
        }
        if let Some(s) = &self.served {
            if !(s.url.starts_with("http://") || s.url.starts_with("https://")) {
                p.add(
                    "classifier.served.url",
                    "must be an http:// or https:// URL",
                );
            }
            if s.api == ServedApi::Vllm && s.model.is_none() {
                p.add(
                    "classifier.served.model",
                    "names the model vLLM serves (the `model` of each request)",
                );
            }
            p.positive("classifier.served.timeout_ms", s.timeout_ms);
            p.positive("classifier.served.max_attempts", s.max_attempts);
            if s.backoff_base_ms > s.backoff_max_ms {
                p.add(
                    "classifier.served.backoff_base_ms",
                    "must be <= backoff_max_ms",
                );
            }
            if let Some(rate) = s.requests_per_sec {
                p.positive("classifier.served.requests_per_sec", rate);
            }
            p.positive("classifier.served.batch_max", s.batch_max as u64);
        }
    }
}
