//! The served path: a model server computes the encoder's vectors (text-embeddings-inference's
//! `/embed`, vLLM's `/pooling`). Windows go out as token ids with their special tokens, so the
//! server embeds exactly what the in-process encoder would; `normalize: false` keeps the pooled
//! vectors as they are. Timeouts, retries (full-jitter backoff, `Retry-After`) and the failure
//! kinds are the LLM client's; a rate limit paces requests, and no token budget applies.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use serde_json::{Value, json};

use super::config::{ServedApi, ServedConfig};
use crate::judge::llm::{LlmError, backoff, classify, retry_after};

/// A model server and how to ask it.
pub struct Served {
    config: ServedConfig,
    http: reqwest::Client,
    limiter: Option<DefaultDirectRateLimiter>,
}

impl std::fmt::Debug for Served {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Served")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// One item of vLLM's pooling answer.
#[derive(Deserialize)]
struct PoolingItem {
    #[serde(default)]
    index: Option<usize>,
    data: Vec<f32>,
}

#[derive(Deserialize)]
struct PoolingResponse {
    data: Vec<PoolingItem>,
}

impl Served {
    /// A client for `config`.
    pub fn new(config: &ServedConfig) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .connect_timeout(Duration::from_millis(config.timeout_ms.min(5_000)))
            .build()
            .map_err(classify)?;
        let limiter = config
            .requests_per_sec
            .and_then(NonZeroU32::new)
            .map(|n| RateLimiter::direct(Quota::per_second(n)));
        Ok(Self {
            config: config.clone(),
            http,
            limiter,
        })
    }

    /// The request body for `inputs`.
    pub fn body(&self, inputs: &[Vec<u32>]) -> (String, Value) {
        let base = self.config.url.trim_end_matches('/');
        match self.config.api {
            ServedApi::Tei => (
                format!("{base}/embed"),
                json!({"inputs": inputs, "normalize": false, "truncate": false}),
            ),
            ServedApi::Vllm => (
                format!("{base}/pooling"),
                json!({
                    "model": self.config.model,
                    "input": inputs,
                    "task": "embed",
                    "normalize": false,
                }),
            ),
        }
    }

    /// The vectors of an answer to a request for `want` inputs, in input order.
    pub fn parse(&self, text: &str, want: usize) -> Result<Vec<Vec<f32>>, LlmError> {
        let vectors = match self.config.api {
            ServedApi::Tei => serde_json::from_str::<Vec<Vec<f32>>>(text)
                .map_err(|e| LlmError::Parse(format!("/embed: {e}")))?,
            ServedApi::Vllm => {
                let mut r: PoolingResponse = serde_json::from_str(text)
                    .map_err(|e| LlmError::Parse(format!("/pooling: {e}")))?;
                if r.data.iter().all(|d| d.index.is_some()) {
                    r.data.sort_by_key(|d| d.index);
                }
                r.data.into_iter().map(|d| d.data).collect()
            }
        };
        if vectors.len() != want {
            return Err(LlmError::Parse(format!(
                "{} vectors for {want} inputs",
                vectors.len()
            )));
        }
        if vectors.iter().flatten().any(|x| !x.is_finite()) {
            return Err(LlmError::Parse("a vector holds a non-finite number".into()));
        }
        Ok(vectors)
    }

    /// The pooled vector of each input (ids with special tokens), `batch_max` per request.
    pub async fn embed(&self, inputs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, LlmError> {
        let mut out = Vec::with_capacity(inputs.len());
        for chunk in inputs.chunks(self.config.batch_max.max(1)) {
            out.extend(self.request(chunk).await?);
        }
        Ok(out)
    }

    async fn request(&self, inputs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, LlmError> {
        let (url, body) = self.body(inputs);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            if let Some(l) = &self.limiter {
                l.until_ready().await;
            }
            let err = match self.post_once(&url, &body).await {
                Ok(text) => return self.parse(&text, inputs.len()),
                Err(e) => e,
            };
            if !err.is_retryable() || attempt >= self.config.max_attempts {
                return Err(err);
            }
            let wait = backoff(
                attempt,
                self.config.backoff_base_ms,
                self.config.backoff_max_ms,
                err.retry_after(),
            );
            tracing::debug!(attempt, error = %err, wait_ms = wait.as_millis() as u64, "retrying the classifier's model server");
            tokio::time::sleep(wait).await;
        }
    }

    async fn post_once(&self, url: &str, body: &Value) -> Result<String, LlmError> {
        let resp = self
            .http
            .post(url)
            .json(body)
            .send()
            .await
            .map_err(classify)?;
        let status = resp.status();
        if status.as_u16() == 429 {
            return Err(LlmError::RateLimited {
                retry_after: retry_after(resp.headers()),
            });
        }
        if !status.is_success() {
            return Err(LlmError::Http(status.as_u16()));
        }
        resp.text().await.map_err(classify)
    }
}
