//! Verdict export: each judged trace's verdicts sent to where people read traces, on the span whose
//! answer was judged: OpenTelemetry `gen_ai.evaluation.result` log records (and, optionally,
//! zero-length child spans) over OTLP/HTTP or OTLP/gRPC, and Phoenix span annotations.
//!
//! ```text
//! recorder (offline verdict on every trace, LLM verdicts and failures on the sample)
//!   └─ Exporter::offer: one VerdictEvent per metric ─► try_send, one bounded queue per target
//!        (full: dropped, queue_full; no span id: dropped, no_span)      │
//!                                                                       ▼
//!                         run_target: batches (batch_max, batch_delay_ms) ─► Target::send
//!                         retries with exponential backoff on retryable answers; at shutdown
//!                         the queue is sent until flush_timeout_ms, the rest dropped (shutdown)
//!                                   │ Phoenix had not stored the judged span yet
//!                                   ▼
//!                         SpanWait: held (span_wait_capacity; full: span_wait_full), sent again
//!                         with a later batch until span_wait_ms (then: span_not_stored)
//! ```
//!
//! Judging never waits for a target: the only call on the judging path is a `try_send`. What a
//! verdict carries is bounded: a label from [`VerdictLabel`], the judge's identity, and an
//! explanation only when `export.explanations` is on, from the claims the LLM judge was shown
//! (redacted) and cut to `export.explanation_max_bytes`.

pub mod config;
mod otlp;
mod phoenix;
mod wait;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use crate::dimensions::VerdictLabel;
use crate::dimensions::{JudgeKind, Quality};
use crate::events::LogLimiter;
use crate::judge::Verdict;
use crate::judge::llm::config::LlmConfig;
use crate::metrics::Metrics;
use crate::sample::Variants;
use crate::sample::variant::config::VariantsConfig;
use crate::trace::Trace;
use crate::trace::metadata::MetadataField;
use config::ExportConfig;
use wait::{Held, SpanWait, Waiting};

/// One metric's verdict from one judge on one span: what every target sends, in its own shape.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictEvent {
    /// The W3C trace id of the judged span.
    pub trace_id: [u8; 16],
    /// The judged span's id.
    pub span_id: [u8; 8],
    /// The trace id ragwatch knows the trace by (the hex of `trace_id` for OTLP input).
    pub ragwatch_trace_id: String,
    /// The metric (`gen_ai.evaluation.name`).
    pub metric: Quality,
    /// The judge tier.
    pub judge: JudgeKind,
    /// The score, absent for no claims and failures.
    pub score: Option<f64>,
    /// The label.
    pub label: VerdictLabel,
    /// The unsupported and contradicted claims, with `export.explanations`.
    pub explanation: Option<String>,
    /// Why the judge failed (an `LlmError` kind), for `failed`.
    pub error_type: Option<&'static str>,
    /// The judge's identity, as in `ragwatch_judge_info` and the verdict records.
    pub judge_model: Arc<str>,
    /// The LLM judge's prompt revision.
    pub prompt_version: Option<Arc<str>>,
    /// The trace's stratum.
    pub stratum: String,
    /// The release that served the trace, when `[variants]` is on.
    pub variant: Option<String>,
    /// The model response's id, when the trace carries it.
    pub response_id: Option<String>,
    /// When the verdict was made, in ns since the epoch.
    pub time_unix_nano: u64,
}

/// Why a batch was not accepted. Knows whether trying again may help.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// An HTTP answer other than 2xx, with its `Retry-After` when it gave one.
    #[error("HTTP {0}")]
    Status(u16, Option<Duration>),
    /// A gRPC status other than OK.
    #[error("gRPC {0:?}")]
    Grpc(tonic::Code),
    /// No answer: connection refused or reset, a timeout.
    #[error("transport: {0}")]
    Transport(String),
}

impl SendError {
    /// Whether another try may be accepted: HTTP 429 and 5xx, gRPC UNAVAILABLE and
    /// RESOURCE_EXHAUSTED, and transport errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            SendError::Status(s, _) => *s == 429 || (500..600).contains(s),
            SendError::Grpc(c) => {
                matches!(c, tonic::Code::Unavailable | tonic::Code::ResourceExhausted)
            }
            SendError::Transport(_) => true,
        }
    }

    /// The wait the target asked for (HTTP `Retry-After` in seconds).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            SendError::Status(_, after) => *after,
            _ => None,
        }
    }
}

/// Why export cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ExportSetupError {
    /// A target's client could not be built.
    #[error("export.{0}: {1}")]
    Client(&'static str, String),
}

/// A destination of verdict events.
#[derive(Debug)]
enum Target {
    Otlp(otlp::OtlpTarget),
    Phoenix(phoenix::PhoenixTarget),
    /// An in-process Phoenix for the loop's tests under a paused clock.
    #[cfg(test)]
    Fake(Arc<tests::FakePhoenix>),
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::Otlp(_) => "otlp",
            Target::Phoenix(_) => "phoenix",
            #[cfg(test)]
            Target::Fake(_) => "phoenix",
        }
    }

    /// Sends the batch. `Ok` with the judged spans the target has not stored yet, whose events it
    /// did not take (none: every event accepted).
    async fn send(&self, batch: &[Arc<VerdictEvent>]) -> Result<Vec<[u8; 8]>, SendError> {
        match self {
            Target::Otlp(t) => t.send(batch).await.map(|()| Vec::new()),
            Target::Phoenix(t) => t.send(batch).await,
            #[cfg(test)]
            Target::Fake(t) => t.send(batch),
        }
    }
}

/// The judging side of export: turns verdicts into events and queues them, never waiting.
#[derive(Debug)]
pub struct Exporter {
    config: ExportConfig,
    metrics: Arc<Metrics>,
    queues: Vec<(&'static str, mpsc::Sender<Arc<VerdictEvent>>)>,
    variants: Option<Variants>,
    trace_id_field: Option<MetadataField>,
    span_id_field: Option<MetadataField>,
    response_id_field: Option<MetadataField>,
    offline_model: Arc<str>,
    llm_model: Arc<str>,
    prompt_version: Arc<str>,
}

/// The sending side of export: one task per target, started by [`ExportTasks::run`].
#[derive(Debug)]
pub struct ExportTasks {
    config: ExportConfig,
    metrics: Arc<Metrics>,
    targets: Vec<(Target, mpsc::Receiver<Arc<VerdictEvent>>)>,
}

/// The sections verdict export is built from, gathered from the config file above it.
#[derive(Debug, Clone, Copy)]
pub struct ExportSetup<'a> {
    /// `[export]`: the targets, queues and what each event carries.
    pub export: &'a ExportConfig,
    /// `[variants]`: the release each event names.
    pub variants: &'a VariantsConfig,
    /// `[llm]`: the LLM judge's identity and prompt version on its events.
    pub llm: &'a LlmConfig,
}

impl Exporter {
    /// The exporter of `setup.export` and its tasks; `None` when no target is configured. The
    /// OpenTelemetry target reads the `OTEL_EXPORTER_OTLP_*` variables from `env`, Phoenix its key.
    pub fn try_new(
        setup: ExportSetup<'_>,
        env: &HashMap<String, String>,
        metrics: Arc<Metrics>,
    ) -> Result<Option<(Exporter, ExportTasks)>, ExportSetupError> {
        let c = setup.export;
        if !c.enabled() {
            return Ok(None);
        }
        let mut targets = Vec::new();
        if let Some(o) = &c.otlp {
            targets.push(Target::Otlp(otlp::OtlpTarget::try_new(o, env)?));
        }
        if let Some(p) = &c.phoenix {
            targets.push(Target::Phoenix(phoenix::PhoenixTarget::try_new(p, env)?));
        }
        let mut queues = Vec::new();
        let mut tasks = Vec::new();
        for target in targets {
            let (tx, rx) = mpsc::channel(c.queue_capacity);
            queues.push((target.name(), tx));
            tasks.push((target, rx));
        }
        let field = |f: &Option<String>| f.as_deref().map(MetadataField::of_pointer);
        let offline = crate::judge::OfflineJudge::default();
        let version = offline.model().report["version"]
            .as_str()
            .unwrap_or("dev")
            .to_owned();
        let exporter = Exporter {
            config: c.clone(),
            metrics: Arc::clone(&metrics),
            queues,
            variants: Variants::new(setup.variants),
            trace_id_field: field(&c.trace_id_field),
            span_id_field: field(&c.span_id_field),
            response_id_field: field(&c.response_id_field),
            offline_model: format!("offline-{version}").into(),
            llm_model: crate::judge::llm::LlmJudge::model_id(setup.llm).into(),
            prompt_version: setup.llm.prompt_version.as_str().into(),
        };
        let tasks = ExportTasks {
            config: c.clone(),
            metrics,
            targets: tasks,
        };
        Ok(Some((exporter, tasks)))
    }

    /// Queues the events of a verdict on `trace` in `stratum` (the offline judge's only with
    /// `export.offline`).
    pub fn verdict(&self, stratum: &str, trace: &Trace, verdict: &Verdict) {
        if verdict.judge == JudgeKind::Offline && !self.config.offline {
            return;
        }
        let mut labelled = [None; Quality::COUNT];
        for (slot, metric) in labelled.iter_mut().zip(Quality::ALL) {
            let score = verdict.score(metric);
            let spec = &metric.spec().labels;
            let label = match score {
                _ if verdict.refusal && spec.refusal => VerdictLabel::Refusal,
                None => match spec.unscored {
                    Some(l) => l,
                    None => continue,
                },
                Some(s) if s >= self.config.label_threshold => spec.above,
                Some(_) => spec.below,
            };
            *slot = Some((metric, score, label));
        }
        let n = labelled.iter().flatten().count();
        if self.full() {
            self.drop_all(n, "queue_full");
            return;
        }
        let Some(base) = self.base(stratum, trace, verdict.judge) else {
            self.drop_all(n, "no_span");
            return;
        };
        let base = match verdict.judge {
            JudgeKind::Llm => VerdictEvent {
                judge_model: verdict.details["judge_model"]
                    .as_str()
                    .map_or_else(|| Arc::clone(&self.llm_model), Into::into),
                ..base
            },
            _ => base,
        };
        for (metric, score, label) in labelled.into_iter().flatten() {
            let explanation = (metric.spec().labels.claims_explain
                && verdict.judge == JudgeKind::Llm
                && self.config.explanations)
                .then(|| explanation(&verdict.details, self.config.explanation_max_bytes))
                .flatten();
            self.offer(VerdictEvent {
                metric,
                score,
                label,
                explanation,
                ..base.clone()
            });
        }
    }

    /// Queues `failed` events for each metric of an LLM judge failure (`kind`: the error's kind).
    pub fn failed(&self, stratum: &str, trace: &Trace, kind: &'static str) {
        if self.full() {
            self.drop_all(Quality::COUNT, "queue_full");
            return;
        }
        let Some(base) = self.base(stratum, trace, JudgeKind::Llm) else {
            self.drop_all(Quality::COUNT, "no_span");
            return;
        };
        for metric in Quality::ALL {
            self.offer(VerdictEvent {
                metric,
                label: VerdictLabel::Failed,
                error_type: Some(kind),
                ..base.clone()
            });
        }
    }

    /// Every queue is full: the events are counted as dropped without being built (a target that
    /// is down costs judging a few atomic reads per verdict).
    fn full(&self) -> bool {
        self.queues.iter().all(|(_, tx)| tx.capacity() == 0)
    }

    /// The parts of an event every metric's shares; `None` without a judged span.
    fn base(&self, stratum: &str, trace: &Trace, judge: JudgeKind) -> Option<VerdictEvent> {
        let (trace_id, span_id) = self.span_of(trace)?;
        let read = |f: &Option<MetadataField>| f.as_ref().and_then(|f| f.read(&trace.metadata));
        let llm = judge == JudgeKind::Llm;
        Some(VerdictEvent {
            trace_id,
            span_id,
            ragwatch_trace_id: trace.trace_id.clone(),
            metric: Quality::ALL[0],
            judge,
            score: None,
            label: VerdictLabel::Failed,
            explanation: None,
            error_type: None,
            judge_model: Arc::clone(if llm {
                &self.llm_model
            } else {
                &self.offline_model
            }),
            prompt_version: llm.then(|| Arc::clone(&self.prompt_version)),
            stratum: stratum.to_owned(),
            variant: self
                .variants
                .as_ref()
                .map(|v| v.name(v.assign(trace)).to_owned()),
            response_id: read(&self.response_id_field),
            time_unix_nano: crate::clock::now_ms().saturating_mul(1_000_000),
        })
    }

    /// The judged span: from OTLP assembly, else the configured metadata fields (the trace id
    /// defaulting to the trace's own when it is a W3C one).
    fn span_of(&self, trace: &Trace) -> Option<([u8; 16], [u8; 8])> {
        let trace_hex = match &self.trace_id_field {
            Some(f) => f.read(&trace.metadata)?,
            None => trace.trace_id.clone(),
        };
        let trace_id = hex_id::<16>(&trace_hex)?;
        let span_id = match (trace.span_id, &self.span_id_field) {
            (Some(id), _) => id.to_be_bytes(),
            (None, Some(f)) => hex_id::<8>(&f.read(&trace.metadata)?)?,
            (None, None) => return None,
        };
        Some((trace_id, span_id))
    }

    /// Offers one event to every target's queue; never waits.
    fn offer(&self, event: VerdictEvent) {
        let event = Arc::new(event);
        for (name, tx) in &self.queues {
            let reason = match tx.try_send(Arc::clone(&event)) {
                Ok(()) => continue,
                Err(mpsc::error::TrySendError::Full(_)) => "queue_full",
                Err(mpsc::error::TrySendError::Closed(_)) => "shutdown",
            };
            self.metrics
                .export
                .dropped
                .with_label_values(&[name, reason])
                .inc();
        }
    }

    fn drop_all(&self, n: usize, reason: &str) {
        for (name, _) in &self.queues {
            self.metrics
                .export
                .dropped
                .with_label_values(&[name, reason])
                .inc_by(n as u64);
        }
    }
}

impl ExportTasks {
    /// Runs every target until `stop`; then sends what is queued until `export.flush_timeout_ms`
    /// has passed, and counts what is left as dropped (`shutdown`).
    pub async fn run(self, stop: CancellationToken) {
        let abandon = CancellationToken::new();
        let flush = Duration::from_millis(self.config.flush_timeout_ms);
        let timer = {
            let (stop, abandon) = (stop.clone(), abandon.clone());
            tokio::spawn(async move {
                stop.cancelled().await;
                tokio::time::sleep(flush).await;
                abandon.cancel();
            })
        };
        let (span_wait, span_wait_capacity) = self.config.phoenix.as_ref().map_or(
            (
                config::default_span_wait_ms(),
                config::default_span_wait_capacity(),
            ),
            |p| (p.span_wait_ms, p.span_wait_capacity),
        );
        let config = Arc::new(self.config);
        let mut handles = Vec::new();
        for (target, rx) in self.targets {
            let wait = SpanWait::new(Duration::from_millis(span_wait), span_wait_capacity);
            handles.push(tokio::spawn(run_target(
                target,
                rx,
                wait,
                Arc::clone(&config),
                Arc::clone(&self.metrics),
                stop.clone(),
                abandon.clone(),
            )));
        }
        for h in handles {
            let _ = h.await;
        }
        timer.abort();
    }
}

/// One target's loop: batch, send with retries, hold the events whose span the target has not
/// stored yet and send them again with later batches, and at the end flush within the deadline.
/// Every event ends in `sent` or `dropped`.
async fn run_target(
    target: Target,
    mut rx: mpsc::Receiver<Arc<VerdictEvent>>,
    mut wait: SpanWait,
    config: Arc<ExportConfig>,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    abandon: CancellationToken,
) {
    let name = target.name();
    let dropped = |reason: &str, n: usize| {
        if n > 0 {
            metrics
                .export
                .dropped
                .with_label_values(&[name, reason])
                .inc_by(n as u64);
        }
    };
    let sent = |outcome: &str, n: usize| {
        if n > 0 {
            metrics
                .export
                .sent
                .with_label_values(&[name, outcome])
                .inc_by(n as u64);
        }
    };
    let (expired_log, full_log) = (LogLimiter::new(), LogLimiter::new());
    let mut open = true;
    while let Some(batch) =
        next_batch(&mut rx, &mut open, &mut wait, &config, &stop, &abandon).await
    {
        let events: Vec<Arc<VerdictEvent>> = batch
            .due
            .iter()
            .map(|w| Arc::clone(&w.event))
            .chain(batch.fresh.iter().cloned())
            .collect();
        let outcome = tokio::select! {
            biased;
            _ = abandon.cancelled() => None,
            o = send_with_retries(&target, &events, &config, &abandon) => Some(o),
        };
        let not_stored = match outcome {
            None => {
                dropped("shutdown", events.len());
                break;
            }
            Some(Sent::Done(outcome)) => {
                sent(outcome, events.len());
                continue;
            }
            Some(Sent::NotStored(spans)) => spans,
        };
        // The held events come back first, so the capacity counts them before the new ones.
        let now = crate::clock::Instant::now();
        let (mut ok, mut expired, mut full) = (0, 0, 0);
        for w in batch.due {
            if !not_stored.contains(&w.event.span_id) {
                ok += 1;
            } else if wait.again(w, now) == Held::Expired {
                expired += 1;
            }
        }
        for e in batch.fresh {
            if !not_stored.contains(&e.span_id) {
                ok += 1;
                continue;
            }
            match wait.hold(e, now) {
                Held::Waiting => {}
                Held::Full => full += 1,
                Held::Expired => expired += 1,
            }
        }
        sent("ok", ok);
        dropped("span_not_stored", expired);
        dropped("span_wait_full", full);
        if expired > 0
            && let Some(suppressed) = expired_log.allow()
        {
            tracing::warn!(
                target = name,
                events = expired,
                span_wait_ms = wait_ms(&config),
                suppressed,
                "verdict export: the judged span was not stored within export.phoenix.span_wait_ms; dropped"
            );
        }
        if full > 0
            && let Some(suppressed) = full_log.allow()
        {
            tracing::warn!(
                target = name,
                events = full,
                waiting = wait.len(),
                suppressed,
                "verdict export: no room to wait for the judged span (export.phoenix.span_wait_capacity); dropped"
            );
        }
    }
    rx.close();
    let mut left = wait.len();
    while rx.try_recv().is_ok() {
        left += 1;
    }
    dropped("shutdown", left);
}

/// `export.phoenix.span_wait_ms`, for the log.
fn wait_ms(config: &ExportConfig) -> u64 {
    config
        .phoenix
        .as_ref()
        .map_or_else(config::default_span_wait_ms, |p| p.span_wait_ms)
}

/// One request's events: held ones due to be sent again, and new ones.
#[derive(Debug)]
struct Batch {
    due: Vec<Waiting>,
    fresh: Vec<Arc<VerdictEvent>>,
}

/// The next batch. Waits for a first event (until `stop`) or for a held event's time to be sent
/// again. Woken by a new event, it waits for more until the batch is full or `batch_delay_ms` has
/// passed, and fills what room is left with the held events that are due; woken by held events,
/// it takes them first and fills the room with what is queued, without waiting. After `stop` (or
/// once every sender is gone): what is queued without waiting, and the held events as they come
/// due until `abandon`; `None` when nothing is left (or `abandon`, with what is still held).
async fn next_batch(
    rx: &mut mpsc::Receiver<Arc<VerdictEvent>>,
    open: &mut bool,
    wait: &mut SpanWait,
    config: &ExportConfig,
    stop: &CancellationToken,
    abandon: &CancellationToken,
) -> Option<Batch> {
    use mpsc::error::TryRecvError;
    let max = config.batch_max;
    loop {
        let mut fresh = Vec::new();
        let woken_by_due = loop {
            let due_at = wait.next_due();
            if stop.is_cancelled() || !*open {
                if *open {
                    match rx.try_recv() {
                        Ok(e) => {
                            fresh.push(e);
                            break false;
                        }
                        Err(TryRecvError::Disconnected) => *open = false,
                        Err(TryRecvError::Empty) => {}
                    }
                }
                let at = due_at?;
                tokio::select! {
                    biased;
                    _ = abandon.cancelled() => return None,
                    _ = tokio::time::sleep_until(at) => break true,
                }
            }
            tokio::select! {
                biased;
                e = rx.recv() => match e {
                    Some(e) => {
                        fresh.push(e);
                        break false;
                    }
                    None => *open = false,
                },
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep_until(due_at.unwrap_or_else(crate::clock::Instant::now)),
                    if due_at.is_some() => break true,
            }
        };
        let mut due = if woken_by_due {
            wait.take_due(crate::clock::Instant::now(), max)
        } else {
            Vec::new()
        };
        let deadline = crate::clock::Instant::now() + Duration::from_millis(config.batch_delay_ms);
        while *open && due.len() + fresh.len() < max {
            if woken_by_due || stop.is_cancelled() {
                match rx.try_recv() {
                    Ok(e) => fresh.push(e),
                    Err(TryRecvError::Disconnected) => *open = false,
                    Err(TryRecvError::Empty) => break,
                }
                continue;
            }
            tokio::select! {
                biased;
                e = rx.recv() => match e {
                    Some(e) => fresh.push(e),
                    None => *open = false,
                },
                _ = stop.cancelled() => {}
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        if !woken_by_due {
            due = wait.take_due(
                crate::clock::Instant::now(),
                max.saturating_sub(fresh.len()),
            );
        }
        if !due.is_empty() || !fresh.is_empty() {
            return Some(Batch { due, fresh });
        }
    }
}

/// How a batch ended after its tries.
#[derive(Debug)]
enum Sent {
    /// Every event alike: the outcome label.
    Done(&'static str),
    /// Accepted but for the events on these judged spans, which the target has not stored yet.
    NotStored(Vec<[u8; 8]>),
}

/// Sends a batch, trying again on retryable errors after an exponential backoff (or the wait the
/// target asked for, within the cap), up to `max_attempts`. A span the target has not stored yet
/// is not an error: its events come back in [`Sent::NotStored`], to wait for it.
async fn send_with_retries(
    target: &Target,
    batch: &[Arc<VerdictEvent>],
    config: &ExportConfig,
    abandon: &CancellationToken,
) -> Sent {
    let mut wait = Duration::from_millis(config.backoff_initial_ms);
    let cap = Duration::from_millis(config.backoff_max_ms);
    for attempt in 1..=config.max_attempts {
        match target.send(batch).await {
            Ok(not_stored) if not_stored.is_empty() => return Sent::Done("ok"),
            Ok(not_stored) => return Sent::NotStored(not_stored),
            Err(e) if !e.is_retryable() => {
                tracing::warn!(target = target.name(), error = %e, events = batch.len(), "verdict export rejected; not retrying");
                return Sent::Done("rejected");
            }
            Err(e) if attempt == config.max_attempts => {
                tracing::warn!(target = target.name(), error = %e, events = batch.len(), attempts = attempt, "verdict export failed");
                return Sent::Done("failed");
            }
            Err(e) => {
                tracing::debug!(target = target.name(), error = %e, attempt, "verdict export failed; retrying");
                let sleep = e.retry_after().unwrap_or(wait).min(cap);
                tokio::select! {
                    _ = abandon.cancelled() => return Sent::Done("failed"),
                    _ = tokio::time::sleep(sleep) => {}
                }
                wait = (wait * 2).min(cap);
            }
        }
    }
    Sent::Done("failed")
}

/// The LLM judge's unsupported and contradicted claims, `; `-joined, cut to `max_bytes` on a
/// character boundary (`…` marking the cut). `None` when there are none.
fn explanation(details: &serde_json::Value, max_bytes: usize) -> Option<String> {
    let claims = details["claims"].as_array()?;
    let mut out = String::new();
    for c in claims {
        let (Some(claim), Some(verdict)) = (c["claim"].as_str(), c["verdict"].as_str()) else {
            continue;
        };
        if verdict == "supported" {
            continue;
        }
        if !out.is_empty() {
            out.push_str("; ");
        }
        out.push_str(claim.trim());
        out.push_str(" (");
        out.push_str(verdict);
        out.push(')');
    }
    if out.is_empty() {
        return None;
    }
    if out.len() > max_bytes {
        let mut cut = max_bytes.saturating_sub('…'.len_utf8());
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    Some(out)
}

/// Parses `N` bytes of lowercase or uppercase hex (`2N` digits); all-zero ids are invalid.
fn hex_id<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.trim();
    if s.len() != 2 * N || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    out.iter().any(|&b| b != 0).then_some(out)
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    //! The exporter against loopback sinks in the test's runtime: what is sent, the retries, the
    //! drops, the flush.

    use std::sync::Mutex;

    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode, Uri};
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message;

    use super::*;
    use crate::judge::Citations;

    const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
    const SPAN: u64 = 0xb7ad6b7169203331;

    /// What a sink received: path, headers, body.
    type Received = Arc<Mutex<Vec<(String, HeaderMap, Bytes)>>>;

    /// A loopback HTTP sink answering `fail` requests with `status` first, then 200 (after
    /// `delay` each).
    async fn sink(fail: usize, status: u16, delay: Duration) -> (String, Received) {
        let received: Received = Arc::default();
        let left = Arc::new(Mutex::new(fail));
        let app = axum::Router::new().fallback({
            let received = Arc::clone(&received);
            move |uri: Uri, headers: HeaderMap, body: Bytes| {
                let (received, left) = (Arc::clone(&received), Arc::clone(&left));
                async move {
                    tokio::time::sleep(delay).await;
                    received
                        .lock()
                        .unwrap()
                        .push((uri.path().to_owned(), headers, body));
                    let mut left = left.lock().unwrap();
                    if *left > 0 {
                        *left -= 1;
                        StatusCode::from_u16(status).unwrap()
                    } else {
                        StatusCode::OK
                    }
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), received)
    }

    fn exporter(toml: &str, env: &[(&str, &str)]) -> (Exporter, ExportTasks) {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        use crate::section::fields::section;
        let export: ExportConfig = section(toml, "export");
        let variants: VariantsConfig = section(toml, "variants");
        let llm: LlmConfig = section(toml, "llm");
        let metrics = Arc::new(Metrics::new(
            &["default".to_owned(), "head".to_owned()],
            "test",
        ));
        let setup = ExportSetup {
            export: &export,
            variants: &variants,
            llm: &llm,
        };
        Exporter::try_new(setup, &env, metrics).unwrap().unwrap()
    }

    fn trace(span: Option<u64>) -> Trace {
        Trace {
            trace_id: TRACE.into(),
            span_id: span,
            ..Trace::of("Who wrote it?", &[("d0", "Ann wrote it.")], "Bob wrote it.")
        }
    }

    fn llm_verdict() -> Verdict {
        Verdict {
            judge: JudgeKind::Llm,
            scores: crate::dimensions::PerQuality::default()
                .with(Quality::Faithfulness, Some(0.0))
                .with(Quality::AnswerRelevancy, Some(0.9)),
            refusal: false,
            uncertain: false,
            citations: Citations::default(),
            details: serde_json::json!({
                "judge_model": "m+e@v3/one_call/json_schema",
                "claims": [
                    {"claim": "Bob wrote it.", "verdict": "contradicted"},
                    {"claim": "It is a book.", "verdict": "supported"},
                ],
            }),
        }
    }

    fn count(m: &Metrics, family: &str, target: &str, label: &str) -> u64 {
        match family {
            "sent" => m.export.sent.with_label_values(&[target, label]).get(),
            _ => m.export.dropped.with_label_values(&[target, label]).get(),
        }
    }

    fn attr<'a>(
        attrs: &'a [opentelemetry_proto::tonic::common::v1::KeyValue],
        key: &str,
    ) -> Option<&'a Any> {
        attrs
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref()?.value.as_ref())
    }

    /// An LLM verdict becomes one log record per scored metric on the judged span, with the
    /// evaluation attributes, the provenance and (opted in) the unsupported claims; the child
    /// spans are parented to the judged span. The standard variables name the endpoint and the
    /// headers; the body is gzipped when asked.
    #[tokio::test]
    async fn llm_verdicts_become_evaluation_records_on_the_judged_span() {
        let (url, received) = sink(0, 200, Duration::ZERO).await;
        let toml = "[export]\nexplanations = true\nbatch_delay_ms = 10\n[export.otlp]\nchild_spans = true\n";
        let (exporter, tasks) = exporter(
            toml,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &url),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t%201"),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ],
        );
        let metrics = Arc::clone(&exporter.metrics);
        let stop = CancellationToken::new();
        let run = tokio::spawn(tasks.run(stop.clone()));
        exporter.verdict("default", &trace(Some(SPAN)), &llm_verdict());
        stop.cancel();
        run.await.unwrap();
        assert_eq!(count(&metrics, "sent", "otlp", "ok"), 2);
        let received = received.lock().unwrap();
        let paths: Vec<&str> = received.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(paths, ["/v1/logs", "/v1/traces"]);
        let (_, headers, body) = &received[0];
        assert_eq!(headers["x-tenant"], "t 1");
        assert_eq!(headers["content-encoding"], "gzip");
        let mut plain = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut plain)
            .unwrap();
        let logs = ExportLogsServiceRequest::decode(&plain[..]).unwrap();
        let records = &logs.resource_logs[0].scope_logs[0].log_records;
        assert_eq!(records.len(), 2);
        let f = &records[0];
        assert_eq!(f.event_name, "gen_ai.evaluation.result");
        assert_eq!(hex(&f.trace_id), TRACE);
        assert_eq!(f.span_id, SPAN.to_be_bytes());
        let a = &f.attributes;
        assert_eq!(
            attr(a, "gen_ai.evaluation.name"),
            Some(&Any::StringValue("faithfulness".into()))
        );
        assert_eq!(
            attr(a, "gen_ai.evaluation.score.value"),
            Some(&Any::DoubleValue(0.0))
        );
        assert_eq!(
            attr(a, "gen_ai.evaluation.score.label"),
            Some(&Any::StringValue("unfaithful".into()))
        );
        assert_eq!(
            attr(a, "gen_ai.evaluation.explanation"),
            Some(&Any::StringValue("Bob wrote it. (contradicted)".into()))
        );
        assert_eq!(
            attr(a, "ragwatch.judge.model"),
            Some(&Any::StringValue("m+e@v3/one_call/json_schema".into()))
        );
        assert_eq!(
            attr(&records[1].attributes, "gen_ai.evaluation.score.label"),
            Some(&Any::StringValue("relevant".into()))
        );
        assert!(attr(&records[1].attributes, "gen_ai.evaluation.explanation").is_none());
        let mut plain = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&received[1].2[..]),
            &mut plain,
        )
        .unwrap();
        let spans = ExportTraceServiceRequest::decode(&plain[..]).unwrap();
        let spans = &spans.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 2);
        assert!(spans.iter().all(|s| s.parent_span_id == SPAN.to_be_bytes()
            && s.start_time_unix_nano == s.end_time_unix_nano
            && s.span_id != SPAN.to_be_bytes()));
    }

    /// Phoenix: one annotation per metric, named by the metric, LLM or CODE by judge, with the
    /// key as a bearer token; 503s are retried with backoff until accepted.
    #[tokio::test]
    async fn phoenix_annotations_are_retried_on_503_and_carry_the_key() {
        let (url, received) = sink(2, 503, Duration::ZERO).await;
        let toml = format!(
            "[export]\nbatch_delay_ms = 10\nbackoff_initial_ms = 5\n[export.phoenix]\nbase_url = \"{url}\"\n"
        );
        let (exporter, tasks) = exporter(&toml, &[("PHOENIX_API_KEY", "k1")]);
        let metrics = Arc::clone(&exporter.metrics);
        let stop = CancellationToken::new();
        let run = tokio::spawn(tasks.run(stop.clone()));
        exporter.verdict(
            "head",
            &trace(Some(SPAN)),
            &Verdict::with_faithfulness(JudgeKind::Offline, 0.75),
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        stop.cancel();
        run.await.unwrap();
        assert_eq!(count(&metrics, "sent", "phoenix", "ok"), 1);
        let received = received.lock().unwrap();
        assert_eq!(received.len(), 3, "two 503s, then accepted");
        let (path, headers, body) = &received[2];
        assert_eq!(path, "/v1/span_annotations");
        assert_eq!(headers["authorization"], "Bearer k1");
        let body: serde_json::Value = serde_json::from_slice(body).unwrap();
        let a = &body["data"][0];
        assert_eq!(a["span_id"], format!("{SPAN:016x}"));
        assert_eq!(a["name"], "faithfulness");
        assert_eq!(a["annotator_kind"], "CODE");
        assert_eq!(a["identifier"], "ragwatch.offline");
        assert_eq!(a["result"]["label"], "faithful");
        assert_eq!(a["result"]["score"], 0.75);
        assert_eq!(a["metadata"]["stratum"], "head");
        assert!(
            a["metadata"]["judge_model"]
                .as_str()
                .unwrap()
                .starts_with("offline-")
        );
    }

    /// A trace with no judged span is not sent (counted `no_span`), nor is a 400 retried
    /// (counted `rejected`); native traces name the span in their metadata.
    #[tokio::test]
    async fn no_span_and_rejections_are_counted() {
        let (url, received) = sink(1, 400, Duration::ZERO).await;
        let toml = format!(
            "[export]\nbatch_delay_ms = 10\nspan_id_field = \"/otel/span_id\"\n[export.otlp]\nendpoint = \"{url}\"\n"
        );
        let (exporter, tasks) = exporter(&toml, &[]);
        let metrics = Arc::clone(&exporter.metrics);
        let stop = CancellationToken::new();
        let run = tokio::spawn(tasks.run(stop.clone()));
        let offline = Verdict::with_faithfulness(JudgeKind::Offline, 0.2);
        exporter.verdict("default", &trace(None), &offline);
        assert_eq!(count(&metrics, "dropped", "otlp", "no_span"), 1);
        let mut native = trace(None);
        native.metadata = crate::trace::metadata::Metadata::from_checked_text(
            r#"{"otel":{"span_id":"00f067aa0ba902b7"}}"#,
        );
        exporter.verdict("default", &native, &offline);
        tokio::time::sleep(Duration::from_millis(100)).await;
        exporter.verdict("default", &native, &offline);
        stop.cancel();
        run.await.unwrap();
        assert_eq!(count(&metrics, "sent", "otlp", "rejected"), 1);
        assert_eq!(count(&metrics, "sent", "otlp", "ok"), 1);
        let received = received.lock().unwrap();
        let logs = ExportLogsServiceRequest::decode(&received[1].2[..]).unwrap();
        let r = &logs.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(hex(&r.span_id), "00f067aa0ba902b7");
    }

    /// A target that answers slowly: offering never waits (a thousand verdicts offered in well
    /// under the time one request takes), the queue's overflow is counted `queue_full`, and what is
    /// still queued when the flush deadline passes is counted `shutdown`: every event is
    /// accounted for.
    #[tokio::test]
    async fn a_slow_target_never_slows_the_offer_and_every_event_is_counted() {
        let (url, _received) = sink(0, 200, Duration::from_millis(500)).await;
        let toml = format!(
            "[export]\nqueue_capacity = 8\nbatch_max = 2\nbatch_delay_ms = 1\nflush_timeout_ms = 100\n[export.otlp]\nendpoint = \"{url}\"\n"
        );
        let (exporter, tasks) = exporter(&toml, &[]);
        let metrics = Arc::clone(&exporter.metrics);
        let stop = CancellationToken::new();
        let run = tokio::spawn(tasks.run(stop.clone()));
        let offline = Verdict::with_faithfulness(JudgeKind::Offline, 0.2);
        let started = crate::clock::Instant::now();
        for _ in 0..1000 {
            exporter.verdict("default", &trace(Some(SPAN)), &offline);
        }
        assert!(
            started.elapsed() < Duration::from_millis(250),
            "{:?}",
            started.elapsed()
        );
        stop.cancel();
        run.await.unwrap();
        let sent: u64 = crate::metrics::export::EXPORT_OUTCOMES
            .iter()
            .map(|o| count(&metrics, "sent", "otlp", o))
            .sum();
        let dropped: u64 = crate::metrics::export::EXPORT_DROP_REASONS
            .iter()
            .map(|r| count(&metrics, "dropped", "otlp", r))
            .sum();
        assert_eq!(sent + dropped, 1000);
        assert!(count(&metrics, "dropped", "otlp", "queue_full") >= 990 - 8);
        assert!(count(&metrics, "dropped", "otlp", "shutdown") > 0);
    }

    /// Phoenix in process, for the loop under a paused clock: it takes the annotations of the spans
    /// it has stored (when, and on which span) and names the others.
    #[derive(Debug, Default)]
    pub(super) struct FakePhoenix {
        stored: Mutex<Vec<[u8; 8]>>,
        accepted: Mutex<Vec<([u8; 8], crate::clock::Instant)>>,
        requests: Mutex<usize>,
    }

    impl FakePhoenix {
        pub(super) fn send(&self, batch: &[Arc<VerdictEvent>]) -> Result<Vec<[u8; 8]>, SendError> {
            *self.requests.lock().unwrap() += 1;
            let stored = self.stored.lock().unwrap();
            let mut not_stored = Vec::new();
            for e in batch {
                if stored.contains(&e.span_id) {
                    let now = crate::clock::Instant::now();
                    self.accepted.lock().unwrap().push((e.span_id, now));
                } else if !not_stored.contains(&e.span_id) {
                    not_stored.push(e.span_id);
                }
            }
            Ok(not_stored)
        }

        fn store(&self, span: u64) {
            self.stored.lock().unwrap().push(span.to_be_bytes());
        }

        /// When each annotation on `span` was accepted.
        fn accepted(&self, span: u64) -> Vec<crate::clock::Instant> {
            let span = span.to_be_bytes();
            let accepted = self.accepted.lock().unwrap();
            accepted
                .iter()
                .filter(|(s, _)| *s == span)
                .map(|(_, at)| *at)
                .collect()
        }
    }

    /// An exporter whose one target is a [`FakePhoenix`], with `[export]` keys `keys` (the
    /// Phoenix section's after `[export.phoenix]`).
    fn fake_phoenix(export: &str, phoenix: &str) -> (Exporter, ExportTasks, Arc<FakePhoenix>) {
        let toml = format!(
            "[export]\n{export}\n[export.phoenix]\nbase_url = \"http://127.0.0.1:9\"\n{phoenix}\n"
        );
        let (exporter, mut tasks) = exporter(&toml, &[]);
        let fake = Arc::new(FakePhoenix::default());
        tasks.targets[0].0 = Target::Fake(Arc::clone(&fake));
        (exporter, tasks, fake)
    }

    /// The offline judge's one faithfulness event on `span`.
    fn offer_on(exporter: &Exporter, span: u64) {
        exporter.verdict(
            "default",
            &trace(Some(span)),
            &Verdict::with_faithfulness(JudgeKind::Offline, 0.75),
        );
    }

    /// Every event in `sent` or `dropped`: the total, for `n` offered.
    fn accounted(m: &Metrics) -> u64 {
        let sent: u64 = crate::metrics::export::EXPORT_OUTCOMES
            .iter()
            .map(|o| count(m, "sent", "phoenix", o))
            .sum();
        let dropped: u64 = crate::metrics::export::EXPORT_DROP_REASONS
            .iter()
            .map(|r| count(m, "dropped", "phoenix", r))
            .sum();
        sent + dropped
    }

    /// With the shipped defaults, an annotation whose span reaches Phoenix 8 s after the verdict
    /// lands (sent again until it is there, well past the retry budget of failed requests), and
    /// it holds back none of the annotations on spans Phoenix has: those offered after it land
    /// within a batch delay.
    #[tokio::test(start_paused = true)]
    async fn a_late_span_gets_its_annotation_and_holds_back_no_other() {
        let (late, known) = (0x0a, 0x0b);
        let (exporter, tasks, fake) = fake_phoenix("", "");
        let metrics = Arc::clone(&exporter.metrics);
        let stop = CancellationToken::new();
        let run = tokio::spawn(tasks.run(stop.clone()));
        fake.store(known);
        let t0 = crate::clock::Instant::now();
        offer_on(&exporter, late);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for i in 0..5 {
            let offered = crate::clock::Instant::now();
            offer_on(&exporter, known);
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let accepted = fake.accepted(known);
            assert_eq!(accepted.len(), i + 1, "the late span holds nothing back");
            assert!(accepted[i] - offered <= Duration::from_millis(1000));
        }
        assert!(fake.accepted(late).is_empty());
        tokio::time::sleep_until(t0 + Duration::from_secs(8)).await;
        fake.store(late);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let landed = fake.accepted(late);
        assert_eq!(landed.len(), 1);
        assert!(
            landed[0] - t0 <= Duration::from_secs(11),
            "{:?}",
            landed[0] - t0
        );
        assert_eq!(count(&metrics, "sent", "phoenix", "ok"), 6);
        assert_eq!(accounted(&metrics), 6);
        stop.cancel();
        run.await.unwrap();
        assert_eq!(accounted(&metrics), 6);
    }

    /// A span that never reaches Phoenix: its annotation is sent again until
    /// `export.phoenix.span_wait_ms` (30 s by default) after the first refusal, then counted
    /// `span_not_stored`, not before.
    #[tokio::test(start_paused = true)]
    async fn an_annotation_whose_span_never_comes_is_counted_at_the_deadline() {
        let (exporter, tasks, fake) = fake_phoenix("batch_delay_ms = 10", "");
        let metrics = Arc::clone(&exporter.metrics);
        let stop = CancellationToken::new();
        let run = tokio::spawn(tasks.run(stop.clone()));
        offer_on(&exporter, 0x0a);
        tokio::time::sleep(Duration::from_millis(29_900)).await;
        assert_eq!(count(&metrics, "dropped", "phoenix", "span_not_stored"), 0);
        let requests = *fake.requests.lock().unwrap();
        assert!((10..=20).contains(&requests), "{requests} requests");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(count(&metrics, "dropped", "phoenix", "span_not_stored"), 1);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            *fake.requests.lock().unwrap(),
            requests + 1,
            "not sent again"
        );
        assert_eq!(accounted(&metrics), 1);
        stop.cancel();
        run.await.unwrap();
        assert_eq!(accounted(&metrics), 1);
    }

    /// The waiting set holds `export.phoenix.span_wait_capacity` annotations; one more is counted
    /// `span_wait_full` (and the one sent on a stored span is not held at all). Those held land
    /// when their spans come.
    #[tokio::test(start_paused = true)]
    async fn the_wait_is_bounded_and_what_does_not_fit_is_counted() {
        let (exporter, tasks, fake) = fake_phoenix("batch_delay_ms = 10", "span_wait_capacity = 3");
        let metrics = Arc::clone(&exporter.metrics);
        let stop = CancellationToken::new();
        let run = tokio::spawn(tasks.run(stop.clone()));
        fake.store(0x10);
        for span in 1..=5 {
            offer_on(&exporter, span);
        }
        offer_on(&exporter, 0x10);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(count(&metrics, "dropped", "phoenix", "span_wait_full"), 2);
        assert_eq!(count(&metrics, "sent", "phoenix", "ok"), 1);
        for span in 1..=5 {
            fake.store(span);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(count(&metrics, "sent", "phoenix", "ok"), 4);
        let landed: Vec<u64> = (1..=5).filter(|s| !fake.accepted(*s).is_empty()).collect();
        assert_eq!(landed, [1, 2, 3], "the first three were held");
        assert_eq!(accounted(&metrics), 6);
        stop.cancel();
        run.await.unwrap();
    }

    /// At shutdown the held annotations are sent again until the flush deadline, then counted
    /// `shutdown`.
    #[tokio::test(start_paused = true)]
    async fn held_annotations_are_counted_at_the_flush_deadline() {
        let (exporter, tasks, fake) = fake_phoenix("batch_delay_ms = 10", "");
        let metrics = Arc::clone(&exporter.metrics);
        let stop = CancellationToken::new();
        let run = tokio::spawn(tasks.run(stop.clone()));
        offer_on(&exporter, 0x0a);
        offer_on(&exporter, 0x0b);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stopped = crate::clock::Instant::now();
        stop.cancel();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        fake.store(0x0b);
        run.await.unwrap();
        let took = crate::clock::Instant::now() - stopped;
        assert!(took <= Duration::from_millis(5100), "{took:?}");
        assert_eq!(fake.accepted(0x0b).len(), 1, "sent while flushing");
        assert_eq!(count(&metrics, "sent", "phoenix", "ok"), 1);
        assert_eq!(count(&metrics, "dropped", "phoenix", "shutdown"), 1);
        assert_eq!(accounted(&metrics), 2);
    }

    #[test]
    fn explanations_are_cut_on_a_character_boundary() {
        let details = serde_json::json!({"claims": [
            {"claim": "é".repeat(40), "verdict": "unsupported"},
        ]});
        let e = explanation(&details, 21).unwrap();
        assert!(e.len() <= 21 && e.ends_with('…'), "{e}");
        assert_eq!(explanation(&serde_json::json!({"claims": []}), 64), None);
    }

    #[test]
    fn only_w3c_ids_are_taken() {
        assert_eq!(
            hex_id::<8>("00f067aa0ba902b7").map(|b| hex(&b)).as_deref(),
            Some("00f067aa0ba902b7")
        );
        assert_eq!(hex_id::<8>("0000000000000000"), None);
        assert_eq!(hex_id::<8>("+0f067aa0ba902b7"), None);
        assert_eq!(hex_id::<16>("abc"), None);
    }
}
