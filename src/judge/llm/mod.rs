//! The LLM judge: RAGAS-grade faithfulness and answer relevancy through an OpenAI-compatible API,
//! under a hard budget, with every outcome counted and never a NaN.
//!
//! - Faithfulness: atomic claims with a verdict each (supported, contradicted, unsupported);
//!   score = supported / claims; no claims is its own outcome (no score). One call (extract and
//!   verify together) or RAGAS's two calls.
//! - Answer relevancy: N questions the answer would answer, each with a noncommittal flag, in one call;
//!   one embeddings call for the real and generated questions; score = mean cosine clamped to [0, 1];
//!   all noncommittal scores 0 and counts as a refusal.
//! - Partial verdicts: faithfulness is the verdict; context relevance and answer relevancy are parts
//!   of it. A part that fails (an invalid context-verdict list, a relevancy call that times out,
//!   unusable embeddings) is dropped and counted by part and reason; the rest is kept.
//! - Malformed replies are asked again once, showing the model its reply and what was wrong, within
//!   `max_attempts` and the trace deadline; transport retries are counted apart.
//! - Structured output per server (see `mode`); replay waits for the per-minute budget instead of
//!   skipping.

mod budget;
mod cache;
mod canary;
mod client;
pub mod config;
#[cfg(test)]
pub(crate) mod loopback;
mod mode;
mod observer;
mod prompt;

pub(crate) use budget::{Budget, Charge, OverBudget};
pub(crate) use cache::VerdictCache;
pub use canary::agreement;
pub(crate) use canary::run_canaries;
pub use client::backoff;
#[cfg(feature = "classifier")]
pub(crate) use client::classify;
pub(crate) use client::{
    ChatRequest, EmbeddingError, LlmClient, LlmError, Tries, Usage, retry_after,
};
pub use mode::CHAIN;
pub(crate) use mode::mode_name;
pub(crate) use observer::{IdentitySeries, LlmObserver};
pub use prompt::json_object;
pub(crate) use prompt::{
    ClaimVerdict, JudgedClaim, parse_faithfulness, parse_output, parse_relevancy,
};

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::{Citations, JudgeKind, PerQuality, Quality, Verdict, clean_score};
use crate::clock::Instant;
use crate::dimensions::JudgeOutcome;
use crate::judge::llm::config::{BudgetConfig, FaithfulnessMode, LlmConfig, StructuredOutput};
use crate::trace::Trace;
use mode::{ModeState, Probe};
use prompt::{ClaimsOutput, FaithfulnessOutput, Prompt};

/// How a call gets past the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admission {
    /// Live judging: a call the budget cannot cover now is not made (the trace is skipped). A
    /// `priority` call (a stratum's guaranteed sample) may spend the reserve.
    Skip {
        /// May spend the reserve.
        priority: bool,
    },
    /// Replay: wait for the per-minute limits, in arrival order; only the daily budget refuses.
    /// The wait does not count against the trace deadline, which bounds the calls themselves.
    Wait,
}

/// A verdict part that failed while the rest was kept.
#[derive(Debug, Clone, serde::Serialize)]
struct PartFailure {
    part: &'static str,
    reason: &'static str,
    detail: String,
}

/// One trace's calls: how they pass the budget, their deadline, and what they returned, kept for
/// the verdict record and the observer.
#[derive(Debug)]
struct CallLog {
    raw: Vec<String>,
    usage: Usage,
    /// Calls whose answer reported no usage (their estimate stays charged to the budget).
    usage_unreported: u32,
    calls: u32,
    admission: Admission,
    /// Everything for the trace finishes by then; replay moves it by the time spent waiting for
    /// the budget.
    deadline: Instant,
    retries: Vec<&'static str>,
    parts: Vec<PartFailure>,
    budget_wait: Duration,
    /// The structured-output mode of the last chat call.
    mode: Option<StructuredOutput>,
}

impl CallLog {
    fn new(admission: Admission, deadline: Instant) -> Self {
        Self {
            raw: Vec::new(),
            usage: Usage::default(),
            usage_unreported: 0,
            calls: 0,
            admission,
            deadline,
            retries: Vec::new(),
            parts: Vec::new(),
            budget_wait: Duration::ZERO,
            mode: None,
        }
    }

    fn part_failed(&mut self, part: &'static str, reason: &'static str, detail: String) {
        self.parts.push(PartFailure {
            part,
            reason,
            detail,
        });
    }
}

/// What the calls for one trace established.
struct Judgement {
    claims: Vec<JudgedClaim>,
    /// Relevance of each context in rank order, when asked for and valid.
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
    /// Replay's calls queue here for the budget, first come first served.
    admission: tokio::sync::Mutex<()>,
    mode: ModeState,
    /// The identity published in `ragwatch_judge_info` and on every verdict.
    identity: Mutex<String>,
    /// Dimension of the first embeddings seen (0 before): a change is an error, not a cosine.
    dimension: AtomicUsize,
    cache: VerdictCache,
    observer: Arc<dyn LlmObserver>,
    records: Option<super::records::RecordsFile>,
    records_topic: Option<RecordsTopic>,
    /// What the API and the records get instead of the original texts.
    redactor: crate::redact::Redactor,
}

/// A verdict and how the call that gave it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// The verdict.
    pub verdict: Verdict,
    /// `Ok`, `NoClaims` or `Cached`.
    pub outcome: JudgeOutcome,
}

impl Judged {
    /// A verdict from the model just now.
    pub fn fresh(verdict: Verdict) -> Self {
        let outcome = if verdict.faithfulness().is_some() {
            JudgeOutcome::Ok
        } else {
            JudgeOutcome::NoClaims
        };
        Judged { verdict, outcome }
    }
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
    /// A redaction pattern could not be built.
    #[error(transparent)]
    Redact(#[from] crate::redact::RedactError),
}

/// The API key: from the environment variable, else the mounted file. A local server may need none
/// (`allow_missing`).
pub(crate) fn api_key(
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

/// What the LLM judge is built from: its own sections and, when verdict records go to a Kafka
/// topic, the Kafka client settings of its producer.
#[derive(Debug, Clone)]
pub struct LlmSetup<'a> {
    /// `[llm]`.
    pub llm: &'a LlmConfig,
    /// `[budget]`.
    pub budget: &'a BudgetConfig,
    /// `[redact]`: what is masked before the API and in the records.
    pub redact: &'a crate::redact::config::RedactConfig,
    /// The Kafka client settings for `llm.records_topic` (the source's brokers and security).
    pub records_kafka: Option<rdkafka::ClientConfig>,
}

impl LlmJudge {
    /// Builds the judge. The key comes from `env` or the key file; without one, requests go out
    /// unauthenticated (local vLLM, llama.cpp or Ollama servers).
    pub fn try_new(
        setup: LlmSetup<'_>,
        env: &HashMap<String, String>,
        observer: Arc<dyn LlmObserver>,
    ) -> Result<Self, LlmSetupError> {
        let LlmSetup {
            llm,
            budget,
            redact,
            records_kafka,
        } = setup;
        let key = api_key(llm, env)?;
        let records = match &llm.records_path {
            Some(p) => Some(
                super::records::RecordsFile::open(p, llm.records_max_bytes, llm.records_keep_files)
                    .map_err(|e| LlmSetupError::Io(p.display().to_string(), e))?,
            ),
            None => None,
        };
        let records_topic = match (&llm.records_topic, records_kafka) {
            (Some(topic), Some(c)) => {
                let producer = c.create().map_err(|e: rdkafka::error::KafkaError| {
                    LlmSetupError::Producer(e.to_string())
                })?;
                Some(RecordsTopic {
                    topic: topic.clone(),
                    producer,
                })
            }
            _ => None,
        };
        let mode = ModeState::new(llm.structured_output);
        if mode.is_resolved() {
            observer.structured_output(mode.current());
        }
        let redactor = crate::redact::Redactor::try_new(redact, env)?;
        for name in redactor.names() {
            observer.redacted(name, 0);
        }
        Ok(Self {
            redactor,
            records_topic,
            client: LlmClient::try_new(llm, key)?,
            config: llm.clone(),
            budget: Arc::new(Budget::new(budget)),
            admission: tokio::sync::Mutex::new(()),
            mode,
            identity: Mutex::new(Self::model_id(llm)),
            dimension: AtomicUsize::new(0),
            cache: VerdictCache::new(llm.cache_capacity, Duration::from_secs(llm.cache_ttl_secs)),
            observer,
            records,
        })
    }

    /// The judge identity as configured, recorded in `ragwatch_judge_info` and on every verdict:
    /// everything that changes a verdict (models, prompt version, faithfulness form, context
    /// verdicts on or off, structured-output mode), so a change of any of them shows as a judge
    /// change. With `structured_output = "auto"` it says `auto` until
    /// [`LlmJudge::resolve_structured_output`] has found the server's mode.
    pub(crate) fn model_id(config: &LlmConfig) -> String {
        Self::identity_for(config, config.structured_output)
    }

    fn identity_for(config: &LlmConfig, mode: StructuredOutput) -> String {
        let faithfulness = match config.faithfulness_mode {
            FaithfulnessMode::OneCall => "one_call",
            FaithfulnessMode::TwoCall => "two_call",
        };
        format!(
            "{}+{}@{}/{faithfulness}{}/{}",
            config.chat_model,
            config.embedding_model,
            config.prompt_version,
            if config.context_relevance { "+ctx" } else { "" },
            mode_name(mode)
        )
    }

    /// The identity in force: the configured one, or with `auto` the mode found at start-up.
    pub fn identity(&self) -> String {
        self.identity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The structured-output mode calls use now.
    pub fn structured_output(&self) -> StructuredOutput {
        self.mode.current()
    }

    /// With `structured_output = "auto"`, finds the mode the server takes before any trace is
    /// judged: one tiny request per mode (under the budget) until the server answers one; a 400
    /// or 422 naming `response_format` moves to the next. The choice is logged, exported in
    /// `ragwatch_judge_structured_output_info` and becomes part of the identity, which replaces
    /// the configured one in `ragwatch_judge_info` (the `auto` series is withdrawn first, so it is
    /// never scraped beside the real one). When the server cannot be reached, the identity stays
    /// `.../auto` for this process and the first calls that get through settle the mode.
    pub(crate) async fn resolve_structured_output(&self) -> StructuredOutput {
        if self.mode.is_resolved() {
            return self.mode.current();
        }
        let placeholder = self.identity();
        let withdrawn = self.observer.hide_identity(&placeholder);
        let probe = Probe::new();
        let deadline =
            Instant::now() + Duration::from_millis(self.config.trace_deadline_ms.min(30_000));
        let mut log = CallLog::new(Admission::Skip { priority: true }, deadline);
        loop {
            let mode = self.mode.current();
            let request = ChatRequest {
                system: probe.system,
                user: probe.user,
                schema_name: "probe",
                schema: &probe.schema,
                grammar_schema: &probe.schema,
                shape: probe.shape,
                repair: None,
                max_tokens: 16,
            };
            let estimate = 64 + request.max_tokens;
            let Ok(charge) = self.admit(estimate, &mut log).await else {
                tracing::warn!(
                    "the judge budget cannot cover a structured-output probe; the first judge calls will find the mode"
                );
                break;
            };
            let mut tries = Tries::new(self.config.max_attempts);
            let result = self.client.chat(&request, mode, deadline, &mut tries).await;
            log.retries.append(&mut tries.retries);
            log.calls += 1;
            match result {
                Ok(out) => {
                    self.bill(charge, out.usage, &mut log);
                    self.confirm_mode(mode, "probe");
                    break;
                }
                Err(LlmError::FormatRejected { status, .. }) => {
                    self.budget.reconcile(charge, 0);
                    tracing::info!(
                        mode = mode_name(mode),
                        status,
                        "the judge server does not take this structured-output mode; trying the next"
                    );
                    log.retries.push("format_fallback");
                    if !self.mode.fall_back(mode) {
                        break;
                    }
                }
                Err(e) => {
                    self.refund_unbilled(charge, &e);
                    tracing::warn!(
                        error = %e,
                        "cannot probe the judge server's structured output; the first judge calls will find the mode, and the judge identity says auto"
                    );
                    break;
                }
            }
        }
        self.count_spend(&log);
        let identity = if self.mode.is_resolved() {
            Self::identity_for(&self.config, self.mode.current())
        } else {
            placeholder.clone()
        };
        *self.identity.lock().unwrap_or_else(|p| p.into_inner()) = identity.clone();
        for series in withdrawn {
            self.observer.show_identity(&IdentitySeries {
                model: series.model.replace(&placeholder, &identity),
            });
        }
        self.mode.current()
    }

    /// Settles `auto` on `mode` (once): logged and exported.
    fn confirm_mode(&self, mode: StructuredOutput, how: &str) {
        if self.mode.confirm(mode) {
            tracing::info!(
                mode = mode_name(mode),
                how,
                "judge structured output chosen"
            );
            self.observer.structured_output(mode);
        }
    }

    /// The budget, whose share of the fleet `fleet::follow_share` sets.
    pub fn budget(&self) -> &Arc<Budget> {
        &self.budget
    }

    /// Judges one trace: the verdict and its outcome (`ok`, `no_claims`, or `cached` when reused);
    /// every failure is an `LlmError` whose `kind()` is the outcome. A `priority` trace (a
    /// stratum's guaranteed sample) may spend the budget's reserve.
    pub async fn judge(&self, trace: &Trace, priority: bool) -> Result<Judged, LlmError> {
        if let Some(verdict) = self.cache.get(VerdictCache::key(trace), Instant::now()) {
            return Ok(Judged {
                verdict,
                outcome: JudgeOutcome::Cached,
            });
        }
        self.judge_with(trace, Admission::Skip { priority })
            .await
            .map(Judged::fresh)
    }

    /// Judges one trace for replay: every trace is wanted, so a call waits for the per-minute
    /// budget (in arrival order) instead of being skipped; only the daily budget skips
    /// (`budget_exhausted`), and the trace deadline bounds the calls, not the wait.
    pub(crate) async fn judge_paced(&self, trace: &Trace) -> Result<Verdict, LlmError> {
        if let Some(v) = self.cache.get(VerdictCache::key(trace), Instant::now()) {
            return Ok(v);
        }
        self.judge_with(trace, Admission::Wait).await
    }

    /// Judges one trace without consulting the cache (canaries must reach the model).
    pub(crate) async fn judge_fresh(
        &self,
        trace: &Trace,
        priority: bool,
    ) -> Result<Verdict, LlmError> {
        self.judge_with(trace, Admission::Skip { priority }).await
    }

    async fn judge_with(&self, trace: &Trace, admission: Admission) -> Result<Verdict, LlmError> {
        let key = VerdictCache::key(trace);
        let started = Instant::now();
        let deadline = Instant::now() + Duration::from_millis(self.config.trace_deadline_ms);
        let mut log = CallLog::new(admission, deadline);
        // The API, the raw outputs and the records see the redacted texts only.
        let mut counts = crate::redact::Counts::new();
        let shown = self.redactor.redact_trace(trace, &mut counts);
        for (name, &n) in self.redactor.names().zip(&counts) {
            if n > 0 {
                self.observer.redacted(name, n);
            }
        }
        let result = self.judge_uncached(&shown, &mut log).await;
        let latency_ms = started.elapsed().as_millis() as u64;
        self.count_spend(&log);
        for p in &log.parts {
            self.observer.part_failed(p.part, p.reason);
        }
        self.observer.budget_left(self.budget.remaining_tokens());
        let identity = self.identity();
        let mode = log.mode.map(mode_name);
        let record = |status: &str, verdict: Option<&Verdict>, error: Option<&LlmError>| {
            let mut record = json!({
                "trace_id": trace.trace_id, "status": status, "judge_model": identity,
                "structured_output": mode,
                "details": verdict.map(|v| &v.details), "raw": log.raw, "usage": log.usage,
                "usage_unreported_calls": log.usage_unreported,
                "calls": log.calls, "retries": log.retries, "part_failures": log.parts,
                "error": error.map(ToString::to_string),
                "budget_wait_ms": log.budget_wait.as_millis() as u64, "latency_ms": latency_ms,
            });
            for m in Quality::ALL {
                record[m.name()] = json!(verdict.and_then(|v| v.score(m)));
            }
            record
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
                let context_relevance = contexts
                    .as_deref()
                    .and_then(crate::eval::context_precision)
                    .and_then(clean_score);
                let verdict = Verdict {
                    judge: JudgeKind::Llm,
                    scores: PerQuality::default()
                        .with(Quality::Faithfulness, faithfulness)
                        .with(
                            Quality::AnswerRelevancy,
                            if refusal { Some(0.0) } else { relevancy },
                        )
                        .with(Quality::ContextRelevance, context_relevance),
                    refusal,
                    uncertain: false,
                    citations: Citations::default(),
                    details: json!({
                        "contexts_relevant": contexts,
                        "judge_model": identity,
                        "structured_output": mode,
                        "mode": self.config.faithfulness_mode,
                        "claims": claims,
                        "contradicted": count(ClaimVerdict::Contradicted),
                        "unsupported": count(ClaimVerdict::Unsupported),
                        "questions": questions,
                        "part_failures": log.parts,
                        "retries": log.retries,
                        "usage": log.usage,
                        "latency_ms": latency_ms,
                        "budget_wait_ms": log.budget_wait.as_millis() as u64,
                    }),
                };
                self.write_record(&record("judged", Some(&verdict), None));
                // A partial verdict is not cached: the same trace again gets a full try.
                if log.parts.is_empty() {
                    self.cache.put(key, verdict.clone(), Instant::now());
                }
                Ok(verdict)
            }
            Err(e) => {
                self.write_record(&record(e.kind().name(), None, Some(&e)));
                Err(e)
            }
        }
    }

    /// Tokens and retries of `log`, to the observer.
    fn count_spend(&self, log: &CallLog) {
        self.observer.spent(&log.usage, &log.retries);
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
                self.observer.record_not_published();
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
        log: &mut CallLog,
    ) -> Result<Judgement, LlmError> {
        let rate_contexts = self.config.context_relevance && !trace.contexts.is_empty();
        let out: Option<FaithfulnessOutput> = match self.config.faithfulness_mode {
            FaithfulnessMode::OneCall => Some(
                self.call(
                    &Prompt::faithfulness(trace, rate_contexts),
                    log,
                    parse_faithfulness,
                )
                .await?,
            ),
            FaithfulnessMode::TwoCall => {
                let extracted: ClaimsOutput =
                    self.call(&Prompt::claims(trace), log, parse_output).await?;
                let wanted: Vec<String> = extracted
                    .claims
                    .into_iter()
                    .filter(|c| !c.trim().is_empty())
                    .collect();
                if wanted.is_empty() && !rate_contexts {
                    None
                } else {
                    let n = wanted.len();
                    let verify = Prompt::verify(trace, &wanted, rate_contexts);
                    Some(
                        self.call(&verify, log, |content: &str| {
                            let out = parse_faithfulness(content)?;
                            if out.claims.len() == n {
                                Ok(out)
                            } else {
                                Err(format!(
                                    "{} verdicts for {n} claims: one per claim, in order",
                                    out.claims.len()
                                ))
                            }
                        })
                        .await?,
                    )
                }
            }
        };
        let contexts = match &out {
            Some(out) if rate_contexts => match out.context_verdicts(trace.contexts.len()) {
                Ok(v) => Some(v),
                Err(p) => {
                    log.part_failed("context_relevance", p.kind(), p.to_string());
                    None
                }
            },
            _ => None,
        };
        let claims: Vec<JudgedClaim> = out
            .map(|o| o.claims)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !c.claim.trim().is_empty())
            .collect();
        let (relevancy, questions) = match self.relevancy(trace, log).await {
            Ok(r) => r,
            Err(e) => {
                log.part_failed("answer_relevancy", e.part_reason(), e.to_string());
                (None, Vec::new())
            }
        };
        Ok(Judgement {
            claims,
            contexts,
            relevancy,
            questions,
        })
    }

    /// Answer relevancy: the generated questions and the mean cosine of their embeddings with the
    /// real question's. A question entry that is invalid is dropped and counted.
    async fn relevancy(
        &self,
        trace: &Trace,
        log: &mut CallLog,
    ) -> Result<(Option<f64>, Vec<prompt::GeneratedQuestion>), LlmError> {
        let n = self.config.relevancy_questions;
        let rel = self
            .call(&Prompt::relevancy(trace, n), log, parse_relevancy)
            .await?;
        for _ in 0..rel.invalid {
            log.part_failed(
                "answer_relevancy",
                "invalid_question",
                "a generated question that is not {question, noncommittal}, dropped".into(),
            );
        }
        let questions = rel.questions;
        if questions.iter().all(|q| q.noncommittal) {
            return Ok((Some(0.0), questions));
        }
        let mut inputs: Vec<&str> = vec![trace.query.as_str()];
        inputs.extend(questions.iter().map(|q| q.question.as_str()));
        let estimate = inputs.iter().map(|s| s.len() as u64).sum::<u64>() / 3 + 16;
        let charge = self.admit(estimate, log).await?;
        log.calls += 1;
        let mut tries = Tries::new(self.config.max_attempts);
        let result = self.client.embed(&inputs, log.deadline, &mut tries).await;
        log.retries.append(&mut tries.retries);
        let (vectors, usage) = result.inspect_err(|e| self.refund_unbilled(charge, e))?;
        self.bill(charge, usage, log);
        self.check_dimension(vectors[0].len())?;
        let q = &vectors[0];
        let cosines: Vec<f64> = vectors[1..].iter().map(|g| cosine(q, g)).collect();
        Ok((
            clean_score(cosines.iter().sum::<f64>() / cosines.len() as f64),
            questions,
        ))
    }

    /// The first embeddings set the dimension; any other later is an error with a reason.
    fn check_dimension(&self, dim: usize) -> Result<(), LlmError> {
        match self
            .dimension
            .compare_exchange(0, dim, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(was) if was == dim => Ok(()),
            Err(was) => Err(EmbeddingError::DimensionChanged { was, now: dim }.into()),
        }
    }

    /// Gives a failed call's charge back when the provider cannot have billed it.
    fn refund_unbilled(&self, charge: Charge, error: &LlmError) {
        if !error.may_be_billed() {
            self.budget.reconcile(charge, 0);
        }
    }

    /// Reconciles a call's charge with its reported usage; without a report, the estimate stays
    /// charged (the budget must not believe a call was free).
    fn bill(&self, charge: Charge, usage: Option<Usage>, log: &mut CallLog) {
        match usage {
            Some(u) => {
                self.budget.reconcile(charge, u.total());
                log.usage.prompt_tokens += u.prompt_tokens;
                log.usage.completion_tokens += u.completion_tokens;
            }
            None => log.usage_unreported += 1,
        }
    }

    /// Passes the budget: at once or not at all live; in replay, waiting in arrival order for the
    /// per-minute limits, the wait moving the trace's deadline.
    async fn admit(&self, estimate: u64, log: &mut CallLog) -> Result<Charge, LlmError> {
        let priority = match log.admission {
            Admission::Skip { priority } => {
                return self
                    .budget
                    .try_charge(estimate, priority)
                    .ok_or(LlmError::Budget);
            }
            Admission::Wait => true,
        };
        let started = Instant::now();
        let _turn = self.admission.lock().await;
        let result = loop {
            match self.budget.charge_or_wait(estimate, priority) {
                Ok(c) => break Ok(c),
                Err(OverBudget::Never) => break Err(LlmError::Budget),
                // A millisecond past the limiter's answer, so the retry is not a spin.
                Err(OverBudget::Later(d)) => {
                    tokio::time::sleep(d + Duration::from_millis(1)).await;
                }
            }
        };
        let waited = started.elapsed();
        log.budget_wait += waited;
        log.deadline += waited;
        result
    }

    /// One chat call under the budget: charge an upper-bound estimate, call, reconcile with the
    /// reported usage. A `length` finish is asked again once with a limit sized to the answer; a
    /// reply `parse` rejects is asked again once (within `max_attempts` and the deadline) showing
    /// the model its reply and the error; with `auto` still looking, a refused `response_format`
    /// moves to the next mode.
    async fn call<T>(
        &self,
        prompt: &Prompt,
        log: &mut CallLog,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<T, LlmError> {
        let mut max_tokens = self.config.max_output_tokens;
        let mut tries = Tries::new(self.config.max_attempts);
        let mut repair: Option<(String, String)> = None;
        let mut lengthened = false;
        loop {
            let mode = self.mode.current();
            let request = ChatRequest {
                system: &prompt.system,
                user: &prompt.user,
                schema_name: prompt.schema_name,
                schema: &prompt.schema,
                grammar_schema: &prompt.grammar_schema,
                shape: &prompt.shape,
                repair: repair.as_ref().map(|(r, e)| (r.as_str(), e.as_str())),
                max_tokens,
            };
            let sent = prompt.system.len()
                + prompt.user.len()
                + prompt.shape.len()
                + repair.as_ref().map_or(0, |(r, e)| r.len() + e.len());
            let estimate = sent as u64 / 3 + 32 + max_tokens;
            let charge = self.admit(estimate, log).await?;
            log.calls += 1;
            log.mode = Some(mode);
            let result = self
                .client
                .chat(&request, mode, log.deadline, &mut tries)
                .await;
            log.retries.append(&mut tries.retries);
            let out = match result {
                Ok(out) => out,
                Err(LlmError::FormatRejected { .. }) if self.mode.fall_back(mode) => {
                    self.budget.reconcile(charge, 0);
                    log.retries.push("format_fallback");
                    continue;
                }
                Err(e) => {
                    self.refund_unbilled(charge, &e);
                    if let LlmError::FormatRejected { mode, .. } = &e {
                        tracing::warn!(
                            mode = mode_name(*mode),
                            "the judge server refuses llm.structured_output; set it to auto or to a mode the server takes"
                        );
                    }
                    return Err(e);
                }
            };
            self.confirm_mode(mode, "first answer");
            self.bill(charge, out.usage, log);
            log.raw.push(out.content.clone());
            if out.finish_reason == "length" {
                if lengthened {
                    return Err(LlmError::Truncated);
                }
                // Once more, with room for what this answer needs (at least twice the limit,
                // at most eight times the configured one).
                lengthened = true;
                let ceiling = self.config.max_output_tokens.saturating_mul(8);
                max_tokens = (max_tokens * 2).max(prompt.output_hint * 2).min(ceiling);
                log.retries.push("truncated");
                continue;
            }
            match parse(&out.content) {
                Ok(v) => return Ok(v),
                Err(error)
                    if repair.is_none() && tries.left > 0 && Instant::now() < log.deadline =>
                {
                    log.retries.push("malformed");
                    repair = Some((out.content, error));
                }
                Err(error) => return Err(LlmError::Parse(error)),
            }
        }
    }
}

/// Cosine similarity; 0 for a zero or mismatched vector (never NaN).
pub(crate) fn cosine(a: &[f64], b: &[f64]) -> f64 {
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
    use loopback::{Loopback, Reply};

    fn judge(server: &Loopback, budget: &str) -> LlmJudge {
        let llm = server.llm_config("max_attempts = 1\n");
        let budget: BudgetConfig = toml::from_str(budget).unwrap();
        let setup = LlmSetup {
            llm: &llm,
            budget: &budget,
            redact: &Default::default(),
            records_kafka: None,
        };
        LlmJudge::try_new(setup, &HashMap::new(), Arc::new(observer::Unobserved)).unwrap()
    }

    /// The budget refuses before anything is sent: a call larger than a minute's tokens, and a
    /// call past the requests per minute (after one that was sent and failed) reach no server.
    #[tokio::test]
    async fn a_call_the_budget_refuses_is_never_sent() {
        let server = Loopback::start(Reply::Status(500, None)).await;
        let trace = Trace::of("When does the museum open?", &[], "It opens at 9.");
        let small = judge(&server, "tokens_per_minute = 10");
        assert!(matches!(
            small.judge(&trace, true).await,
            Err(LlmError::Budget)
        ));
        assert_eq!(server.requests(), 0, "refused before the call");
        let one_a_minute = judge(&server, "requests_per_minute = 1");
        assert!(matches!(
            one_a_minute.judge(&trace, true).await,
            Err(LlmError::Http(500))
        ));
        assert_eq!(server.requests(), 1);
        assert!(matches!(
            one_a_minute.judge(&trace, true).await,
            Err(LlmError::Budget)
        ));
        assert_eq!(
            server.requests(),
            1,
            "the second call of the minute was not sent"
        );
    }

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
