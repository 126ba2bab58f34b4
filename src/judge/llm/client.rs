//! The OpenAI-compatible client: chat completions and embeddings over one `reqwest::Client` built at
//! start-up, with connect and request timeouts, retries with full-jitter exponential backoff that
//! honour `Retry-After`, and a deadline per trace. Errors know their retry policy and their bounded
//! metric label.

use std::time::Duration;

use rand::RngExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::config::LlmConfig;

/// Why a judge call failed. `kind()` is the `outcome` label.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    /// The budget could not cover the call; nothing was sent.
    #[error("budget exhausted")]
    Budget,
    /// The call (or the trace's deadline) timed out.
    #[error("timed out")]
    Timeout,
    /// HTTP 429 after all retries.
    #[error("rate limited (retry after {retry_after:?})")]
    RateLimited {
        /// The server's `Retry-After`, when given.
        retry_after: Option<Duration>,
    },
    /// Another HTTP error status.
    #[error("http status {0}")]
    Http(u16),
    /// Connection refused, reset, or another transport failure.
    #[error("transport: {0}")]
    Transport(String),
    /// The body was not the JSON the schema asks for.
    #[error("unparseable judge output: {0}")]
    Parse(String),
    /// The output was cut off by the token limit, also after one retry with a larger limit.
    #[error("truncated judge output")]
    Truncated,
}

impl LlmError {
    /// Whether the provider may have done (and billed) the work. Rejections (429, other HTTP
    /// statuses) and transport failures come without usage and are not billed, so their charge is
    /// refunded; a timeout keeps its charge, since the server may have finished the call unseen.
    pub fn may_be_billed(&self) -> bool {
        !matches!(
            self,
            LlmError::Budget
                | LlmError::RateLimited { .. }
                | LlmError::Http(_)
                | LlmError::Transport(_)
        )
    }

    /// The bounded `outcome` label.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::Budget => "budget_exhausted",
            LlmError::Timeout => "timeout",
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Http(_) => "http_error",
            LlmError::Transport(_) => "http_error",
            LlmError::Parse(_) => "parse_error",
            LlmError::Truncated => "truncated",
        }
    }

    /// Whether another attempt may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Timeout | LlmError::RateLimited { .. } | LlmError::Transport(_) => true,
            LlmError::Http(code) => *code >= 500,
            _ => false,
        }
    }

    /// How long the server asked us to wait.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            LlmError::RateLimited { retry_after } => *retry_after,
            _ => None,
        }
    }
}

/// Token usage as the API reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub completion_tokens: u64,
}

impl Usage {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// One chat completion's useful parts.
#[derive(Debug, Clone)]
pub struct ChatOutput {
    /// The message content.
    pub content: String,
    /// `stop`, `length`...
    pub finish_reason: String,
    /// Reported usage.
    pub usage: Usage,
}

/// The HTTP client of the LLM judge.
#[derive(Debug, Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    config: LlmConfig,
    api_key: Option<String>,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Usage,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct EmbeddingResponse {
    data: Vec<EmbeddingItem>,
    #[serde(default)]
    usage: Usage,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    embedding: Vec<f64>,
    #[serde(default)]
    index: usize,
}

impl LlmClient {
    /// Builds the client; the API key was resolved from the environment or a mounted file.
    pub fn try_new(config: &LlmConfig, api_key: Option<String>) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .timeout(Duration::from_millis(config.request_timeout_ms))
            .build()
            .map_err(|e| LlmError::Transport(e.to_string()))?;
        Ok(Self {
            http,
            config: config.clone(),
            api_key,
        })
    }

    /// A chat completion with a JSON-schema response format (or JSON mode, per config).
    pub async fn chat(
        &self,
        system: &str,
        user: &str,
        schema_name: &str,
        schema: &Value,
        max_tokens: u64,
        deadline: Instant,
    ) -> Result<ChatOutput, LlmError> {
        // Without structured output the server cannot see the schema, so the prompt carries it.
        let (response_format, system) = if self.config.json_schema {
            (
                json!({"type": "json_schema", "json_schema": {"name": schema_name, "strict": true, "schema": schema}}),
                std::borrow::Cow::Borrowed(system),
            )
        } else {
            (
                json!({"type": "json_object"}),
                std::borrow::Cow::Owned(format!(
                    "{system}\nThe reply is one JSON object that follows this JSON schema: {schema}"
                )),
            )
        };
        let mut body = json!({
            "model": self.config.chat_model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": self.config.temperature,
            "max_tokens": max_tokens,
            "response_format": response_format,
        });
        if let Some(seed) = self.config.seed {
            body["seed"] = json!(seed);
        }
        let raw: ChatResponse = self.post("chat/completions", &body, deadline).await?;
        let choice = raw
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| LlmError::Parse("no choices".into()))?;
        Ok(ChatOutput {
            content: choice.message.content.unwrap_or_default(),
            finish_reason: choice.finish_reason.unwrap_or_default(),
            usage: raw.usage,
        })
    }

    /// Embeddings of `inputs`, in input order.
    pub async fn embed(
        &self,
        inputs: &[&str],
        deadline: Instant,
    ) -> Result<(Vec<Vec<f64>>, Usage), LlmError> {
        let body = json!({"model": self.config.embedding_model, "input": inputs});
        let mut raw: EmbeddingResponse = self.post("embeddings", &body, deadline).await?;
        if raw.data.len() != inputs.len() {
            return Err(LlmError::Parse(format!(
                "{} embeddings for {} inputs",
                raw.data.len(),
                inputs.len()
            )));
        }
        raw.data.sort_by_key(|d| d.index);
        Ok((
            raw.data.into_iter().map(|d| d.embedding).collect(),
            raw.usage,
        ))
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<T, LlmError> {
        let url = format!("{}/{}", self.config.base_url.trim_end_matches('/'), path);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let result = tokio::time::timeout_at(deadline, self.post_once(&url, body)).await;
            let err = match result {
                Err(_) => return Err(LlmError::Timeout),
                Ok(Ok(text)) => {
                    return serde_json::from_str(&text).map_err(|e| LlmError::Parse(e.to_string()));
                }
                Ok(Err(e)) => e,
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
            if Instant::now() + wait >= deadline {
                return Err(err);
            }
            tracing::debug!(attempt, error = %err, wait_ms = wait.as_millis() as u64, "retrying judge call");
            tokio::time::sleep(wait).await;
        }
    }

    async fn post_once(&self, url: &str, body: &Value) -> Result<String, LlmError> {
        let mut req = self.http.post(url).json(body).query(&self.config.query);
        for (k, v) in &self.config.headers {
            req = req.header(k, v);
        }
        if let Some(key) = &self.api_key {
            req = if self.config.api_key_header == "authorization" {
                req.bearer_auth(key)
            } else {
                req.header(&self.config.api_key_header, key)
            };
        }
        let resp = req.send().await.map_err(classify)?;
        let status = resp.status();
        if status.as_u16() == 429 {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64);
            return Err(LlmError::RateLimited { retry_after });
        }
        if !status.is_success() {
            return Err(LlmError::Http(status.as_u16()));
        }
        resp.text().await.map_err(classify)
    }
}

fn classify(e: reqwest::Error) -> LlmError {
    if e.is_timeout() {
        LlmError::Timeout
    } else {
        LlmError::Transport(e.to_string())
    }
}

/// Full-jitter exponential backoff: uniform in [0, min(max, base * 2^attempt)], but never shorter
/// than the server's `Retry-After`.
pub fn backoff(attempt: u32, base_ms: u64, max_ms: u64, retry_after: Option<Duration>) -> Duration {
    let cap = base_ms.saturating_mul(1u64 << attempt.min(20)).min(max_ms);
    let jitter = Duration::from_millis(rand::rng().random_range(0..=cap));
    retry_after.map_or(jitter, |r| r.max(jitter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_work_the_provider_may_have_done_keeps_its_charge() {
        assert!(LlmError::Timeout.may_be_billed());
        assert!(LlmError::Parse("x".into()).may_be_billed());
        assert!(LlmError::Truncated.may_be_billed());
        assert!(!LlmError::Transport("reset".into()).may_be_billed());
        assert!(!LlmError::Http(503).may_be_billed());
        assert!(!LlmError::RateLimited { retry_after: None }.may_be_billed());
    }

    #[test]
    fn backoff_is_bounded_and_honours_retry_after() {
        for attempt in 1..10 {
            let d = backoff(attempt, 100, 1000, None);
            assert!(d <= Duration::from_millis(1000));
        }
        assert!(backoff(1, 100, 1000, Some(Duration::from_secs(3))) >= Duration::from_secs(3));
    }

    #[test]
    fn error_policy() {
        assert!(LlmError::Http(503).is_retryable());
        assert!(!LlmError::Http(400).is_retryable());
        assert!(!LlmError::Parse("x".into()).is_retryable());
        assert_eq!(
            LlmError::RateLimited { retry_after: None }.kind(),
            "rate_limited"
        );
        assert_eq!(LlmError::Budget.kind(), "budget_exhausted");
    }
}
