//! The OpenAI-compatible client: chat completions and embeddings over one `reqwest::Client` built at
//! start-up, with connect and request timeouts, retries with full-jitter exponential backoff that
//! honour `Retry-After`, and a deadline per trace. Errors know their retry policy and their bounded
//! metric label.
//!
//! Servers differ in how they take structured output (see [`StructuredOutput`]) and in what their
//! embeddings endpoint returns: one pooled vector per input (OpenAI, vLLM, Ollama), one vector per
//! token (llama-cpp-python with a model that has no pooling: mean-pooled here), or base64 of
//! little-endian f32s (`encoding_format = "base64"`). Whatever the shape, a vector is finite and of
//! one dimension, or the call fails with a reason; never a NaN.

use std::time::Duration;

use rand::RngExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::clock::Instant;
use crate::dimensions::JudgeOutcome;
use crate::judge::llm::config::{EmbeddingEncoding, LlmConfig, StructuredOutput};

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
    /// The server refused the request's `response_format` (a 400, 422 or, from llama-cpp-python,
    /// 500 whose body names it): the structured-output mode in use is not one it takes.
    #[error("http status {status}: the server does not take response_format {mode:?}")]
    FormatRejected {
        /// The status.
        status: u16,
        /// The mode it refused.
        mode: StructuredOutput,
    },
    /// Connection refused, reset, or another transport failure.
    #[error("transport: {0}")]
    Transport(String),
    /// The body was not the JSON the schema asks for.
    #[error("unparseable judge output: {0}")]
    Parse(String),
    /// The output was cut off by the token limit, also after one retry with a larger limit.
    #[error("truncated judge output")]
    Truncated,
    /// The embeddings were unusable.
    #[error("embeddings: {0}")]
    Embedding(#[from] EmbeddingError),
}

/// Why embeddings were unusable; `kind()` is a bounded label (`reason` of
/// `ragwatch_judge_part_failures_total`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmbeddingError {
    /// Not a list of numbers, a list of per-token lists, or a base64 string.
    #[error("unexpected shape: {0}")]
    Shape(String),
    /// Fewer or more vectors than inputs.
    #[error("{got} embeddings for {want} inputs")]
    Count {
        /// Vectors returned.
        got: usize,
        /// Inputs sent.
        want: usize,
    },
    /// A base64 vector that does not decode to f32s.
    #[error("invalid base64 vector")]
    Base64,
    /// A NaN or infinite component.
    #[error("a vector has a non-finite component")]
    NonFinite,
    /// Vectors (or token vectors) of different dimensions in one answer.
    #[error("vectors of dimension {first} and {other} in one answer")]
    DimensionMismatch {
        /// The first vector's dimension.
        first: usize,
        /// Another vector's.
        other: usize,
    },
    /// The dimension differs from the one this judge saw before: the model behind the name
    /// changed, and cosines across the two would be meaningless.
    #[error("dimension changed from {was} to {now}: the embedding model changed")]
    DimensionChanged {
        /// Dimension seen first.
        was: usize,
        /// Dimension now.
        now: usize,
    },
}

impl EmbeddingError {
    /// The bounded label.
    pub fn kind(&self) -> &'static str {
        match self {
            EmbeddingError::Shape(_) => "embedding_shape",
            EmbeddingError::Count { .. } => "embedding_count",
            EmbeddingError::Base64 => "embedding_base64",
            EmbeddingError::NonFinite => "embedding_non_finite",
            EmbeddingError::DimensionMismatch { .. } => "embedding_dimension_mismatch",
            EmbeddingError::DimensionChanged { .. } => "embedding_dimension_changed",
        }
    }
}

impl LlmError {
    /// Whether the provider may have done (and billed) the work. Rejections (429, other HTTP
    /// statuses) and transport failures come without usage and are not billed, so their charge is
    /// refunded; a timeout keeps its charge, since the server may have finished the call unseen.
    pub(crate) fn may_be_billed(&self) -> bool {
        !matches!(
            self,
            LlmError::Budget
                | LlmError::RateLimited { .. }
                | LlmError::Http(_)
                | LlmError::FormatRejected { .. }
                | LlmError::Transport(_)
        )
    }

    /// The outcome of the call that ended with this error.
    pub fn kind(&self) -> JudgeOutcome {
        match self {
            LlmError::Budget => JudgeOutcome::BudgetExhausted,
            LlmError::Timeout => JudgeOutcome::Timeout,
            LlmError::RateLimited { .. } => JudgeOutcome::RateLimited,
            LlmError::Http(_) | LlmError::FormatRejected { .. } | LlmError::Transport(_) => {
                JudgeOutcome::HttpError
            }
            LlmError::Parse(_) | LlmError::Embedding(_) => JudgeOutcome::ParseError,
            LlmError::Truncated => JudgeOutcome::Truncated,
        }
    }

    /// The bounded label of a verdict part that failed for this reason: the outcome label, or for
    /// embeddings what was wrong with them.
    pub(crate) fn part_reason(&self) -> &'static str {
        match self {
            LlmError::Embedding(e) => e.kind(),
            other => other.kind().name(),
        }
    }

    /// Whether another attempt may succeed.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            LlmError::Timeout | LlmError::RateLimited { .. } | LlmError::Transport(_) => true,
            LlmError::Http(code) => *code >= 500,
            _ => false,
        }
    }

    /// How long the server asked us to wait.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
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
pub(crate) struct ChatOutput {
    /// The message content.
    pub content: String,
    /// `stop`, `length`...
    pub finish_reason: String,
    /// Reported usage; `None` when the server reports none.
    pub usage: Option<Usage>,
}

/// One chat request of the judge, whatever the structured-output mode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChatRequest<'a> {
    /// System message.
    pub system: &'a str,
    /// User message.
    pub user: &'a str,
    /// Name of the response schema.
    pub(crate) schema_name: &'a str,
    /// The JSON schema of the answer.
    pub schema: &'a Value,
    /// The same with list lengths and non-empty strings, sent in `json_object_schema` mode.
    pub(crate) grammar_schema: &'a Value,
    /// The answer's shape in words, for modes where the server does not see the schema.
    pub shape: &'a str,
    /// A previous reply that was not valid, and what was wrong with it: the re-ask shows both.
    pub(crate) repair: Option<(&'a str, &'a str)>,
    /// `max_tokens`.
    pub max_tokens: u64,
}

/// Longest invalid reply shown back to the model in a re-ask.
const REPAIR_SHOWN_BYTES: usize = 4000;

impl ChatRequest<'_> {
    /// The request body under `mode`.
    fn body(&self, config: &LlmConfig, mode: StructuredOutput) -> Value {
        let in_prompt = matches!(
            mode,
            StructuredOutput::JsonObject | StructuredOutput::Prompt
        );
        let system = if in_prompt {
            format!(
                "{}\nReply with one JSON object of this shape, your own content in place of the \
                 descriptions in angle brackets and one value where alternatives are separated by \
                 |: {}",
                self.system, self.shape
            )
        } else {
            self.system.to_owned()
        };
        let mut messages = vec![
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": self.user}),
        ];
        if let Some((invalid, error)) = self.repair {
            let mut end = invalid.len().min(REPAIR_SHOWN_BYTES);
            while !invalid.is_char_boundary(end) {
                end -= 1;
            }
            messages.push(json!({"role": "assistant", "content": &invalid[..end]}));
            messages.push(json!({"role": "user", "content": format!(
                "That reply is not valid: {error}. Reply again with only the corrected JSON object{}.",
                if in_prompt { format!(" of this shape: {}", self.shape) } else { String::new() }
            )}));
        }
        let mut body = json!({
            "model": config.chat_model,
            "messages": messages,
            "temperature": config.temperature,
            "max_tokens": self.max_tokens,
        });
        match mode {
            StructuredOutput::JsonSchema | StructuredOutput::Auto => {
                body["response_format"] = json!({"type": "json_schema", "json_schema": {
                    "name": self.schema_name, "strict": true, "schema": self.schema}});
            }
            StructuredOutput::JsonObjectSchema => {
                body["response_format"] =
                    json!({"type": "json_object", "schema": self.grammar_schema});
            }
            StructuredOutput::JsonObject => {
                body["response_format"] = json!({"type": "json_object"});
            }
            StructuredOutput::Prompt => {}
        }
        if let Some(seed) = config.seed {
            body["seed"] = json!(seed);
        }
        body
    }
}

/// What one logical call may still spend (HTTP attempts, shared by transport retries and the
/// re-ask of a malformed reply), and the retries it made, by reason.
#[derive(Debug, Clone)]
pub(crate) struct Tries {
    /// Attempts left.
    pub left: u32,
    /// Reasons of the retries made (labels of `ragwatch_judge_retries_total`).
    pub retries: Vec<&'static str>,
}

impl Tries {
    /// `max_attempts` attempts.
    pub fn new(max_attempts: u32) -> Self {
        Self {
            left: max_attempts,
            retries: Vec::new(),
        }
    }
}

/// The HTTP client of the LLM judge.
#[derive(Debug, Clone)]
pub(crate) struct LlmClient {
    http: reqwest::Client,
    config: LlmConfig,
    api_key: Option<String>,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<Usage>,
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
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    embedding: Value,
    #[serde(default)]
    index: Option<usize>,
}

/// Longest error body read, to find out whether it names `response_format`.
const ERROR_BODY_BYTES: usize = 8192;

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

    /// A chat completion under structured-output `mode`. A refusal of the mode's
    /// `response_format` is [`LlmError::FormatRejected`].
    pub async fn chat(
        &self,
        request: &ChatRequest<'_>,
        mode: StructuredOutput,
        deadline: Instant,
        tries: &mut Tries,
    ) -> Result<ChatOutput, LlmError> {
        let body = request.body(&self.config, mode);
        let raw: ChatResponse = self
            .post("chat/completions", &body, deadline, tries)
            .await
            .map_err(|e| match e {
                LlmError::FormatRejected { status, .. } if mode != StructuredOutput::Prompt => {
                    LlmError::FormatRejected { status, mode }
                }
                LlmError::FormatRejected { status, .. } => LlmError::Http(status),
                other => other,
            })?;
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

    /// Embeddings of `inputs`, in input order, each one vector of one dimension (per-token vectors
    /// mean-pooled, base64 decoded), all finite.
    pub async fn embed(
        &self,
        inputs: &[&str],
        deadline: Instant,
        tries: &mut Tries,
    ) -> Result<(Vec<Vec<f64>>, Option<Usage>), LlmError> {
        let mut body = json!({"model": self.config.embedding_model, "input": inputs});
        if self.config.embedding_encoding == EmbeddingEncoding::Base64 {
            body["encoding_format"] = json!("base64");
        }
        let raw: EmbeddingResponse = self.post("embeddings", &body, deadline, tries).await?;
        Ok((vectors(raw.data, inputs.len())?, raw.usage))
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        deadline: Instant,
        tries: &mut Tries,
    ) -> Result<T, LlmError> {
        let url = format!("{}/{}", self.config.base_url.trim_end_matches('/'), path);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            tries.left = tries.left.saturating_sub(1);
            let result = tokio::time::timeout_at(deadline, self.post_once(&url, body)).await;
            let err = match result {
                Err(_) => return Err(LlmError::Timeout),
                Ok(Ok(text)) => {
                    return serde_json::from_str(&text).map_err(|e| LlmError::Parse(e.to_string()));
                }
                Ok(Err(e)) => e,
            };
            if !err.is_retryable() || tries.left == 0 {
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
            tries.retries.push(err.kind().name());
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
        let mut resp = req.send().await.map_err(classify)?;
        let status = resp.status();
        if status.as_u16() == 429 {
            let retry_after = retry_after(resp.headers());
            return Err(LlmError::RateLimited { retry_after });
        }
        if matches!(status.as_u16(), 400 | 422 | 500) {
            // OpenAI, Azure and vLLM say 400 with the parameter named; FastAPI servers say 422
            // with the field's path; llama-cpp-python 0.3 wraps that validation error in a 500.
            // Each names response_format.
            let mut head = Vec::new();
            while head.len() < ERROR_BODY_BYTES {
                match resp.chunk().await {
                    Ok(Some(chunk)) => head.extend_from_slice(&chunk),
                    _ => break,
                }
            }
            let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
            // A 500 counts only as the validation error it wraps, not as any crash whose body
            // happens to echo the request.
            let names_format = text.contains("response_format")
                && (status.as_u16() != 500 || text.contains("validation error"));
            if names_format {
                return Err(LlmError::FormatRejected {
                    status: status.as_u16(),
                    mode: StructuredOutput::Auto,
                });
            }
            tracing::debug!(status = status.as_u16(), body = %text.chars().take(300).collect::<String>(), "judge API refused a request");
            return Err(LlmError::Http(status.as_u16()));
        }
        if !status.is_success() {
            return Err(LlmError::Http(status.as_u16()));
        }
        resp.text().await.map_err(classify)
    }
}

/// The vectors of an embeddings answer, in input order.
fn vectors(mut data: Vec<EmbeddingItem>, want: usize) -> Result<Vec<Vec<f64>>, EmbeddingError> {
    if data.len() != want {
        return Err(EmbeddingError::Count {
            got: data.len(),
            want,
        });
    }
    if data.iter().all(|d| d.index.is_some()) {
        data.sort_by_key(|d| d.index);
    }
    let vectors = data
        .iter()
        .map(|d| vector(&d.embedding))
        .collect::<Result<Vec<_>, _>>()?;
    let first = vectors.first().map_or(0, Vec::len);
    if let Some(other) = vectors.iter().map(Vec::len).find(|&n| n != first) {
        return Err(EmbeddingError::DimensionMismatch { first, other });
    }
    Ok(vectors)
}

/// One input's vector: a list of numbers, a list of per-token lists (mean-pooled), or base64.
pub fn vector(v: &Value) -> Result<Vec<f64>, EmbeddingError> {
    let out = match v {
        Value::String(s) => decode_f32s(s)?,
        Value::Array(tokens) if tokens.first().is_some_and(Value::is_array) => {
            let tokens = tokens.iter().map(numbers).collect::<Result<Vec<_>, _>>()?;
            mean_pool(&tokens)?
        }
        Value::Array(items) => numbers(v).map_err(|_| {
            EmbeddingError::Shape(format!("a list of {} items, not all numbers", items.len()))
        })?,
        other => {
            return Err(EmbeddingError::Shape(format!(
                "{} instead of a vector",
                json_type(other)
            )));
        }
    };
    if out.is_empty() {
        return Err(EmbeddingError::Shape("an empty vector".into()));
    }
    if out.iter().any(|x| !x.is_finite()) {
        return Err(EmbeddingError::NonFinite);
    }
    Ok(out)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn numbers(v: &Value) -> Result<Vec<f64>, EmbeddingError> {
    let Value::Array(items) = v else {
        return Err(EmbeddingError::Shape(format!(
            "{} where a list of numbers belongs",
            json_type(v)
        )));
    };
    items
        .iter()
        .map(|x| {
            x.as_f64().ok_or_else(|| {
                EmbeddingError::Shape(format!("{} where a number belongs", json_type(x)))
            })
        })
        .collect()
}

/// The mean of per-token vectors, as the pooled sentence embedding.
pub(crate) fn mean_pool(tokens: &[Vec<f64>]) -> Result<Vec<f64>, EmbeddingError> {
    let Some(first) = tokens.first() else {
        return Err(EmbeddingError::Shape("no token vectors".into()));
    };
    let dim = first.len();
    let mut sum = vec![0.0; dim];
    for t in tokens {
        if t.len() != dim {
            return Err(EmbeddingError::DimensionMismatch {
                first: dim,
                other: t.len(),
            });
        }
        for (s, x) in sum.iter_mut().zip(t) {
            *s += x;
        }
    }
    let n = tokens.len() as f64;
    Ok(sum.into_iter().map(|s| s / n).collect())
}

/// Decodes standard base64 (padding optional) of little-endian f32s.
pub(crate) fn decode_f32s(text: &str) -> Result<Vec<f64>, EmbeddingError> {
    fn sextet(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    }
    let text = text.trim().trim_end_matches('=');
    let mut bytes = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        acc = (acc << 6) | sextet(c).ok_or(EmbeddingError::Base64)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if !bytes.len().is_multiple_of(4) {
        return Err(EmbeddingError::Base64);
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect())
}

pub(crate) fn classify(e: reqwest::Error) -> LlmError {
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

/// A server's `Retry-After` in seconds (fractions taken), if it sent a usable one.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::judge::llm::loopback::{Loopback, Reply};

    fn client(server: &Loopback, extra: &str) -> LlmClient {
        let config = server.llm_config(&format!(
            "max_attempts = 10\nbackoff_base_ms = 100\nbackoff_max_ms = 1000\n{extra}"
        ));
        LlmClient::try_new(&config, None).unwrap()
    }

    async fn embed(client: &LlmClient, deadline: Instant, tries: &mut Tries) -> LlmError {
        client.embed(&["q"], deadline, tries).await.unwrap_err()
    }

    /// On tokio's paused clock against a real server on loopback: a 429 with `Retry-After: 3` is
    /// asked again exactly 3 s later (the jitter is at most 1 s), and with a deadline at 10 s the
    /// client gives up at 9 s, when the next wait would pass it, rather than sleep into it.
    #[tokio::test(start_paused = true)]
    async fn a_429_is_asked_again_after_its_retry_after_until_the_deadline() {
        let server = Loopback::start(Reply::Status(429, Some(3))).await;
        let client = client(&server, "");
        let start = Instant::now();
        let mut tries = Tries::new(10);
        let err = embed(&client, start + Duration::from_secs(10), &mut tries).await;
        assert!(
            matches!(err, LlmError::RateLimited { retry_after: Some(d) } if d == Duration::from_secs(3)),
            "{err:?}"
        );
        let secs = |s: &[u64]| {
            s.iter()
                .map(|&s| Duration::from_secs(s))
                .collect::<Vec<_>>()
        };
        assert_eq!(server.arrivals_since(start), secs(&[0, 3, 6, 9]));
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(9),
            "no sleep into the deadline"
        );
        assert_eq!(tries.retries, ["rate_limited"; 3]);
        // A server that takes a minute to answer: the deadline, not the hour-long request
        // timeout, ends the call.
        server.set_reply(Reply::Verdict {
            delay: Duration::from_secs(60),
        });
        let client = self::client(&server, "request_timeout_ms = 3600000\n");
        let start = Instant::now();
        let err = embed(&client, start + Duration::from_secs(10), &mut Tries::new(1)).await;
        assert!(matches!(err, LlmError::Timeout), "{err:?}");
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }

    #[test]
    fn only_work_the_provider_may_have_done_keeps_its_charge() {
        assert!(LlmError::Timeout.may_be_billed());
        assert!(LlmError::Parse("x".into()).may_be_billed());
        assert!(LlmError::Truncated.may_be_billed());
        assert!(!LlmError::Transport("reset".into()).may_be_billed());
        assert!(!LlmError::Http(503).may_be_billed());
        assert!(
            !LlmError::FormatRejected {
                status: 400,
                mode: StructuredOutput::JsonSchema
            }
            .may_be_billed()
        );
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
            JudgeOutcome::RateLimited
        );
        assert_eq!(LlmError::Budget.kind().name(), "budget_exhausted");
        let dim = LlmError::from(EmbeddingError::DimensionChanged { was: 3, now: 4 });
        assert_eq!(
            (dim.kind(), dim.part_reason()),
            (JudgeOutcome::ParseError, "embedding_dimension_changed")
        );
    }

    /// `xs` as little-endian f32s in standard base64, as a server sends `encoding_format = "base64"`.
    fn base64_of(xs: &[f32]) -> String {
        use base64::Engine;
        let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn every_vector_shape_decodes_to_one_finite_vector() {
        assert_eq!(vector(&json!([0.5, -1.0])).unwrap(), vec![0.5, -1.0]);
        assert_eq!(
            vector(&json!([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])).unwrap(),
            vec![1.0, 1.0],
            "per-token vectors are mean-pooled"
        );
        let b64 = base64_of(&[1.5, -2.25, 0.0]);
        assert_eq!(vector(&json!(b64)).unwrap(), vec![1.5, -2.25, 0.0]);
        assert_eq!(
            vector(&json!(base64_of(&[1.0, f32::NAN]))),
            Err(EmbeddingError::NonFinite)
        );
        assert_eq!(vector(&json!("a*b=")), Err(EmbeddingError::Base64));
        assert_eq!(vector(&json!("AAA")), Err(EmbeddingError::Base64));
        assert!(matches!(
            vector(&json!([[1.0, 2.0], [1.0]])),
            Err(EmbeddingError::DimensionMismatch { first: 2, other: 1 })
        ));
        assert!(matches!(vector(&json!([])), Err(EmbeddingError::Shape(_))));
        assert!(matches!(
            vector(&json!({"x": 1})),
            Err(EmbeddingError::Shape(_))
        ));
        assert!(matches!(
            vector(&json!([1.0, "x"])),
            Err(EmbeddingError::Shape(_))
        ));
    }

    #[test]
    fn an_answer_has_one_vector_per_input_of_one_dimension() {
        let item = |v: Value, i: usize| EmbeddingItem {
            embedding: v,
            index: Some(i),
        };
        let ok = vectors(
            vec![item(json!([0.0, 1.0]), 1), item(json!([1.0, 0.0]), 0)],
            2,
        );
        assert_eq!(
            ok.unwrap(),
            vec![vec![1.0, 0.0], vec![0.0, 1.0]],
            "by index"
        );
        assert_eq!(
            vectors(vec![item(json!([1.0]), 0)], 2),
            Err(EmbeddingError::Count { got: 1, want: 2 })
        );
        assert_eq!(
            vectors(vec![item(json!([1.0]), 0), item(json!([1.0, 2.0]), 1)], 2),
            Err(EmbeddingError::DimensionMismatch { first: 1, other: 2 })
        );
    }

    #[test]
    fn each_mode_sends_its_response_format_and_a_re_ask_shows_the_invalid_reply() {
        let config = LlmConfig::default();
        let schema = json!({"type": "object"});
        let req = ChatRequest {
            system: "S",
            user: "U",
            schema_name: "faithfulness",
            schema: &schema,
            grammar_schema: &schema,
            shape: "{\"claims\": [...]}",
            repair: None,
            max_tokens: 10,
        };
        let b = req.body(&config, StructuredOutput::JsonSchema);
        assert_eq!(b["response_format"]["type"], "json_schema");
        assert_eq!(b["response_format"]["json_schema"]["schema"], schema);
        assert_eq!(
            b["messages"][0]["content"], "S",
            "the schema is not in the prompt"
        );
        let b = req.body(&config, StructuredOutput::JsonObjectSchema);
        assert_eq!(
            b["response_format"],
            json!({"type": "json_object", "schema": schema})
        );
        let b = req.body(&config, StructuredOutput::JsonObject);
        assert_eq!(b["response_format"], json!({"type": "json_object"}));
        assert!(
            b["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains("\"claims\"")
        );
        let b = req.body(&config, StructuredOutput::Prompt);
        assert!(b.get("response_format").is_none());
        assert!(
            b["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains("\"claims\"")
        );
        let long = "é".repeat(REPAIR_SHOWN_BYTES);
        let again = ChatRequest {
            repair: Some((&long, "missing field `claims`")),
            ..req
        };
        let b = again.body(&config, StructuredOutput::JsonSchema);
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m[2]["role"], "assistant");
        assert!(m[2]["content"].as_str().unwrap().len() <= REPAIR_SHOWN_BYTES);
        assert!(m[3]["content"].as_str().unwrap().contains("missing field"));
    }
}
