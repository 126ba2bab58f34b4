//! The LLM judge: RAGAS-grade faithfulness and answer relevancy through an OpenAI-compatible API,
//! under a hard budget, with every outcome counted and never a NaN.
//!
//! - Faithfulness: atomic claims with a verdict each (supported, contradicted, unsupported);
//!   score = supported / claims; no claims is its own outcome (no score). One call (extract and
//!   verify together) or RAGAS's two calls.
//! - Answer relevancy: N questions the answer would answer, each with a noncommittal flag, in one call;
//!   one embeddings call for the real and generated questions; score = mean cosine clamped to [0, 1];
//!   all noncommittal scores 0 and counts as a refusal.

mod budget;
mod cache;
mod canary;
mod client;
mod prompt;

pub use budget::{Budget, Charge};
pub use cache::VerdictCache;
pub use canary::{agreement, run_canaries};
pub use client::{ChatOutput, LlmClient, LlmError, Usage, backoff};
pub use prompt::{ClaimVerdict, JudgedClaim, parse_output};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Citations, JudgeKind, Verdict, clean_score};
use crate::config::{Config, FaithfulnessMode, LlmConfig};
use crate::metrics::Metrics;
use crate::trace::Trace;
use prompt::{ClaimsOutput, FaithfulnessOutput, Prompt, RelevancyOutput};

/// One trace's calls: whether they may spend the reserve, and their raw outputs and usage, kept for
/// the verdict record.
#[derive(Debug, Default)]
struct CallLog {
    raw: Vec<String>,
    usage: Usage,
    calls: u32,
    /// The calls may spend the budget's reserve.
    priority: bool,
}

/// What the calls for one trace established.
struct Judgement {
    claims: Vec<JudgedClaim>,
    /// Relevance of each context in rank order, when asked for.
    contexts: Option<Vec<bool>>,
    relevancy: Option<f64>,
    questions: Vec<prompt::GeneratedQuestion>,
}

/// The LLM judge.
#[derive(Debug)]
pub struct LlmJudge {
    client: LlmClient,
    config: LlmConfig,
    budget: Arc<Budget>,
    cache: VerdictCache,
    metrics: Arc<Metrics>,
    records: Option<super::records::RecordsFile>,
    records_topic: Option<RecordsTopic>,
}

/// Where verdict records are published, when `llm.records_topic` is set.
struct RecordsTopic {
    topic: String,
    producer: rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
}

impl std::fmt::Debug for RecordsTopic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordsTopic")
            .field("topic", &self.topic)
            .finish()
    }
}

/// Why the LLM judge cannot start.
#[derive(Debug, thiserror::Error)]
pub enum LlmSetupError {
    /// No API key where the config says it is.
    #[error("no API key: set ${0} or llm.api_key_file")]
    NoKey(String),
    /// The key file or records file could not be used.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Client(#[from] LlmError),
    /// The records producer could not be built.
    #[error("records topic producer: {0}")]
    Producer(String),
}

/// The API key: from the environment variable, else the mounted file. A local server may need none
/// (`allow_missing`).
pub fn api_key(
    config: &LlmConfig,
    env: &HashMap<String, String>,
) -> Result<Option<String>, LlmSetupError> {
    if let Some(k) = env
        .get(&config.api_key_env)
        .filter(|k| !k.trim().is_empty())
    {
        return Ok(Some(k.trim().to_owned()));
    }
    if let Some(path) = &config.api_key_file {
        let k = std::fs::read_to_string(path)
            .map_err(|e| LlmSetupError::Io(path.display().to_string(), e))?;
        return Ok(Some(k.trim().to_owned()));
    }
    Ok(None)
}

impl LlmJudge {
    /// Builds the judge. The key comes from `env` or the key file; without one, requests go out
    /// unauthenticated (local vLLM, llama.cpp or Ollama servers).
    pub fn try_new(
        config: &Config,
        env: &HashMap<String, String>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, LlmSetupError> {
        let key = api_key(&config.llm, env)?;
        let records = match &config.llm.records_path {
            Some(p) => Some(
                super::records::RecordsFile::open(
                    p,
                    config.llm.records_max_bytes,
                    config.llm.records_keep_files,
                )
                .map_err(|e| LlmSetupError::Io(p.display().to_string(), e))?,
            ),
            None => None,
        };
        let records_topic = match &config.llm.records_topic {
            Some(topic) => {
                let mut c = crate::source::client_config(&config.kafka, env);
                // Producer-side settings only: the consumer-group keys make no sense here.
                for key in [
                    "group.id",
                    "enable.auto.offset.store",
                    "enable.auto.commit",
                    "auto.commit.interval.ms",
                    "auto.offset.reset",
                ] {
                    c.remove(key);
                }
                let producer = c.create().map_err(|e: rdkafka::error::KafkaError| {
                    LlmSetupError::Producer(e.to_string())
                })?;
                Some(RecordsTopic {
                    topic: topic.clone(),
                    producer,
                })
            }
            None => None,
        };
        Ok(Self {
            records_topic,
            client: LlmClient::try_new(&config.llm, key)?,
            config: config.llm.clone(),
            budget: Arc::new(Budget::new(&config.budget)),
            cache: VerdictCache::new(
                config.llm.cache_capacity,
                Duration::from_secs(config.llm.cache_ttl_secs),
            ),
            metrics,
            records,
        })
    }

    /// The judge identity recorded in `ragwatch_build_info` and on every verdict: everything that
    /// changes a verdict (models, prompt version, faithfulness form, context verdicts on or off), so
    /// a change of any of them shows as a judge change.
    pub fn model_id(config: &LlmConfig) -> String {
        let mode = match config.faithfulness_mode {
            FaithfulnessMode::OneCall => "one_call",
            FaithfulnessMode::TwoCall => "two_call",
        };
        format!(
            "{}+{}@{}/{mode}{}",
            config.chat_model,
            config.embedding_model,
            config.prompt_version,
            if config.context_relevance { "+ctx" } else { "" }
        )
    }

    /// The budget, so the source can set this replica's share.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// Judges one trace. Every failure is an `LlmError` whose `kind()` is the outcome label. A
    /// `priority` trace (a stratum's guaranteed sample) may spend the budget's reserve.
    pub async fn judge(&self, trace: &Trace, priority: bool) -> Result<Verdict, LlmError> {
        if let Some(v) = self.cache.get(VerdictCache::key(trace), Instant::now()) {
            return Ok(v);
        }
        self.judge_fresh(trace, priority).await
    }

    /// Judges one trace without consulting the cache (canaries must reach the model).
    pub async fn judge_fresh(&self, trace: &Trace, priority: bool) -> Result<Verdict, LlmError> {
        let key = VerdictCache::key(trace);
        let started = Instant::now();
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.trace_deadline_ms);
        let mut log = CallLog {
            priority,
            ..CallLog::default()
        };
        let result = self.judge_uncached(trace, deadline, &mut log).await;
        let latency_ms = started.elapsed().as_millis() as u64;
        let m = &self.metrics;
        m.judge_tokens
            .with_label_values(&["llm", "prompt"])
            .inc_by(log.usage.prompt_tokens);
        m.judge_tokens
            .with_label_values(&["llm", "completion"])
            .inc_by(log.usage.completion_tokens);
        m.budget_remaining.set(self.budget.remaining_tokens());
        let record = |status: &str, verdict: Option<&Verdict>| {
            json!({
                "trace_id": trace.trace_id, "status": status, "judge_model": Self::model_id(&self.config),
                "faithfulness": verdict.and_then(|v| v.faithfulness),
                "answer_relevancy": verdict.and_then(|v| v.answer_relevancy),
                "context_relevance": verdict.and_then(|v| v.context_relevance),
                "details": verdict.map(|v| &v.details), "raw": log.raw, "usage": log.usage,
                "calls": log.calls, "latency_ms": latency_ms,
            })
        };
        match result {
            Ok(Judgement {
                claims,
                contexts,
                relevancy,
                questions,
            }) => {
                let supported = claims
                    .iter()
                    .filter(|c| c.verdict == ClaimVerdict::Supported)
                    .count();
                let count = |v| claims.iter().filter(|c| c.verdict == v).count();
                let faithfulness = if claims.is_empty() {
                    None
                } else {
                    clean_score(supported as f64 / claims.len() as f64)
                };
                let refusal = !questions.is_empty() && questions.iter().all(|q| q.noncommittal);
                let verdict = Verdict {
                    judge: JudgeKind::Llm,
                    faithfulness,
                    answer_relevancy: if refusal { Some(0.0) } else { relevancy },
                    refusal,
                    uncertain: false,
                    citations: Citations::default(),
                    context_relevance: contexts
                        .as_deref()
                        .and_then(crate::eval::context_precision)
                        .and_then(clean_score),
                    details: json!({
                        "contexts_relevant": contexts,
                        "judge_model": Self::model_id(&self.config),
                        "mode": self.config.faithfulness_mode,
                        "claims": claims,
                        "contradicted": count(ClaimVerdict::Contradicted),
                        "unsupported": count(ClaimVerdict::Unsupported),
                        "questions": questions,
                        "usage": log.usage,
                        "latency_ms": latency_ms,
                    }),
                };
                self.write_record(&record("judged", Some(&verdict)));
                self.cache.put(key, verdict.clone(), Instant::now());
                Ok(verdict)
            }
            Err(e) => {
                self.write_record(&record(e.kind(), None));
                Err(e)
            }
        }
    }

    fn write_record(&self, record: &Value) {
        if let Some(RecordsTopic { topic, producer }) = &self.records_topic {
            let payload = record.to_string();
            let key = record["trace_id"].as_str().unwrap_or_default().to_owned();
            if let Err((e, _)) = producer.send(
                rdkafka::producer::BaseRecord::to(topic)
                    .key(&key)
                    .payload(&payload),
            ) {
                self.metrics
                    .kafka_errors
                    .with_label_values(&["records_produce"])
                    .inc();
                tracing::debug!(error = %e, "cannot publish verdict record");
            }
        }
        if let Some(records) = &self.records {
            records.write(record);
        }
    }

    async fn judge_uncached(
        &self,
        trace: &Trace,
        deadline: tokio::time::Instant,
        log: &mut CallLog,
    ) -> Result<Judgement, LlmError> {
        let rate_contexts = self.config.context_relevance && !trace.contexts.is_empty();
        let mut contexts = None;
        let mut keep_context_verdicts = |out: &FaithfulnessOutput| -> Result<(), LlmError> {
            if rate_contexts {
                contexts = Some(
                    out.context_verdicts(trace.contexts.len())
                        .map_err(LlmError::Parse)?,
                );
            }
            Ok(())
        };
        let claims = match self.config.faithfulness_mode {
            FaithfulnessMode::OneCall => {
                let out: FaithfulnessOutput = self
                    .call(&Prompt::faithfulness(trace, rate_contexts), deadline, log)
                    .await?;
                keep_context_verdicts(&out)?;
                out.claims
            }
            FaithfulnessMode::TwoCall => {
                let extracted: ClaimsOutput =
                    self.call(&Prompt::claims(trace), deadline, log).await?;
                let wanted: Vec<String> = extracted
                    .claims
                    .into_iter()
                    .filter(|c| !c.trim().is_empty())
                    .collect();
                if wanted.is_empty() && !rate_contexts {
                    Vec::new()
                } else {
                    let verified: FaithfulnessOutput = self
                        .call(
                            &Prompt::verify(trace, &wanted, rate_contexts),
                            deadline,
                            log,
                        )
                        .await?;
                    keep_context_verdicts(&verified)?;
                    if verified.claims.len() != wanted.len() {
                        return Err(LlmError::Parse(format!(
                            "{} verdicts for {} claims",
                            verified.claims.len(),
                            wanted.len()
                        )));
                    }
                    verified.claims
                }
            }
        };
        let claims: Vec<JudgedClaim> = claims
            .into_iter()
            .filter(|c| !c.claim.trim().is_empty())
            .collect();
        let n = self.config.relevancy_questions;
        let rel: RelevancyOutput = self
            .call(&Prompt::relevancy(trace, n), deadline, log)
            .await?;
        let questions: Vec<_> = rel
            .questions
            .into_iter()
            .filter(|q| !q.question.trim().is_empty())
            .collect();
        if questions.is_empty() {
            return Err(LlmError::Parse("no generated questions".into()));
        }
        let score = if questions.iter().all(|q| q.noncommittal) {
            Some(0.0)
        } else {
            let mut inputs: Vec<&str> = vec![trace.query.as_str()];
            inputs.extend(questions.iter().map(|q| q.question.as_str()));
            let estimate = inputs.iter().map(|s| s.len() as u64).sum::<u64>() / 3 + 16;
            let charge = self
                .budget
                .try_charge(estimate, log.priority)
                .ok_or(LlmError::Budget)?;
            log.calls += 1;
            let (vectors, usage) = self
                .client
                .embed(&inputs, deadline)
                .await
                .inspect_err(|e| self.refund_unbilled(charge, e))?;
            self.budget.reconcile(charge, usage.total());
            log.usage.prompt_tokens += usage.prompt_tokens;
            let q = &vectors[0];
            let cosines: Vec<f64> = vectors[1..].iter().map(|g| cosine(q, g)).collect();
            clean_score(cosines.iter().sum::<f64>() / cosines.len() as f64)
        };
        Ok(Judgement {
            claims,
            contexts,
            relevancy: score,
            questions,
        })
    }

    /// Gives a failed call's charge back when the provider cannot have billed it.
    fn refund_unbilled(&self, charge: Charge, error: &LlmError) {
        if !error.may_be_billed() {
            self.budget.reconcile(charge, 0);
        }
    }

    /// One chat call under the budget: charge an upper-bound estimate, call, reconcile with the
    /// reported usage; a `length` finish is retried once with a limit sized to the answer.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        prompt: &Prompt,
        deadline: tokio::time::Instant,
        log: &mut CallLog,
    ) -> Result<T, LlmError> {
        let mut max_tokens = self.config.max_output_tokens;
        for attempt in 0..2 {
            let estimate = (prompt.system.len() + prompt.user.len()) as u64 / 3 + 32 + max_tokens;
            let charge = self
                .budget
                .try_charge(estimate, log.priority)
                .ok_or(LlmError::Budget)?;
            log.calls += 1;
            let out = self
                .client
                .chat(
                    &prompt.system,
                    &prompt.user,
                    prompt.schema_name,
                    &prompt.schema,
                    max_tokens,
                    deadline,
                )
                .await
                .inspect_err(|e| self.refund_unbilled(charge, e))?;
            self.budget.reconcile(charge, out.usage.total());
            log.usage.prompt_tokens += out.usage.prompt_tokens;
            log.usage.completion_tokens += out.usage.completion_tokens;
            log.raw.push(out.content.clone());
            if out.finish_reason == "length" {
                if attempt == 0 {
                    // Once more, with room for what this answer needs (at least twice the limit,
                    // at most eight times the configured one).
                    let ceiling = self.config.max_output_tokens.saturating_mul(8);
                    max_tokens = (max_tokens * 2).max(prompt.output_hint * 2).min(ceiling);
                    continue;
                }
                return Err(LlmError::Truncated);
            }
            return parse_output(&out.content).map_err(LlmError::Parse);
        }
        Err(LlmError::Truncated)
    }
}

/// Cosine similarity; 0 for a zero or mismatched vector (never NaN).
pub fn cosine(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 || !dot.is_finite() {
        0.0
    } else {
        dot / (na * nb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_edges() {
        assert_eq!(cosine(&[1.0, 0.0], &[1.0, 0.0]), 1.0);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 1.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), 0.0);
        assert!(
            cosine(&[1.0, 0.0], &[-1.0, 0.0]) < 0.0,
            "clamping happens on the mean"
        );
    }
}
