//! `ragwatch run`: wires source, pipeline, sampled-judge pool, evaluator and admin server together,
//! and owns the shutdown sequence.
//!
//! The source is Kafka, a file, stdin or the OTLP/HTTP receiver; messages go to the pipeline
//! directly (native traces) or through span assembly ([`SpanIngest`], OTLP formats).
//!
//! Before any source starts, the replica joins its fleet ([`Fleet`], `fleet.membership`): the
//! peers are resolved once, and the LLM judge's budget takes its share before the first trace (and
//! before the first canary). The share then follows the fleet: the Kafka source's partitions, or
//! the peer watcher's answers.
//!
//! Shutdown (SIGTERM or SIGINT): readiness goes false; the source stops consuming; the judge queue is
//! closed and the pool finishes queued work until `shutdown.grace_secs`, after which it abandons the
//! rest (counted as skipped `shutdown`, offsets not stored, so redelivered); final offsets are stored
//! and committed; the admin server stops last so a final scrape still sees the counts.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::dimensions::JudgeKind;
use crate::fleet::{Fleet, ShareTx, follow_share};
use crate::http::write::WriteRoutes;
use crate::http::{self, AdminState};
use crate::judge::OfflineJudge;
use crate::judge::config::SampledJudge;
use crate::judge::llm::{Budget, LlmJudge};
use crate::pipeline::{Pipeline, PoolJudge, abandon_after_grace, run_pool};
use crate::recorder::Shared;
use crate::source::config::SourceKind;
use crate::source::{FileSource, Ingest, OtlpReceiver, Source, SourceError, SpanIngest};

/// Why `run` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The admin server could not bind.
    #[error("cannot listen on {0}: {1}")]
    Listen(String, #[source] std::io::Error),
    /// The write listener could not start.
    #[error(transparent)]
    Write(#[from] crate::http::write::WriteError),
    /// The source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The canary file could not be read.
    #[error("canaries {0}: {1}")]
    Canaries(String, String),
    /// The LLM judge could not be set up.
    #[error("llm judge: {0}")]
    Judge(#[from] crate::judge::llm::LlmSetupError),
    /// The classifier judge could not be loaded.
    #[error("classifier judge: {0}")]
    Classifier(String),
    /// Verdict export could not be set up.
    #[error(transparent)]
    Export(#[from] crate::export::ExportSetupError),
    /// The config does not say what to run.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A task of the running monitor panicked: what it had in hand may not be accounted for.
    #[error("the {0} task failed: {1}")]
    Task(&'static str, String),
}

/// Runs until `stop` is cancelled (the binary cancels it on SIGTERM/SIGINT) or a non-looping file
/// source ends and `stop` follows.
pub async fn run(
    config: Config,
    env: HashMap<String, String>,
    stop: CancellationToken,
) -> Result<(), RunError> {
    let kind = config.source_kind()?;
    let shared = Shared::new(config.recorder_setup());
    shared
        .attach_review(config.review_setup(), &env)
        .map_err(|e| RunError::Task("review", e))?;
    // Verdict export: its tasks send until the judge pool has ended, then flush.
    let export_stop = CancellationToken::new();
    let export = match crate::export::Exporter::try_new(
        config.export_setup(),
        &env,
        Arc::clone(&shared.metrics),
    )? {
        Some((exporter, tasks)) => {
            shared.attach_export(exporter);
            Some(tokio::spawn(tasks.run(export_stop.clone())))
        }
        None => None,
    };
    let admin = Admin::start(&config, &shared)?;

    let mut fleet = Fleet::join(
        &config.fleet,
        kind == SourceKind::Kafka,
        &env,
        Arc::clone(&shared.metrics),
    )
    .await;
    let abandon = CancellationToken::new();
    let (ack_tx, ack_rx) = mpsc::unbounded_channel();
    let (judges, budget, pool_judge) = sampled_judge(&config, &env, &shared, &fleet, &stop).await?;
    // Both end with `stop`, or when the source ends on its own.
    let fleet_stop = stop.child_token();
    let follower = tokio::spawn(follow_share(
        fleet.share_rx(),
        Arc::clone(&shared.metrics),
        budget,
        fleet_stop.clone(),
    ));
    let peers = fleet.spawn_peers(fleet_stop.clone());
    // The pool holds the only ack sender: when the pool ends (or there is none), the Kafka source's
    // drain sees the channel close. A sender kept here would make that drain wait forever.
    let (jobs_tx, pool) = match pool_judge {
        None => (None, None),
        Some(judge) => {
            let (tx, rx) = mpsc::channel(config.judge.queue_capacity);
            let pool = tokio::spawn(run_pool(
                judge,
                config.judge.workers,
                rx,
                (kind == SourceKind::Kafka).then(|| ack_tx.clone()),
                shared.clone(),
                abandon.clone(),
            ));
            (Some(tx), Some(pool))
        }
    };
    // The classifier stage, when it is the prediction: it holds an ack sender and a way to the
    // pool, so both end after it.
    let acks = (kind == SourceKind::Kafka).then_some(ack_tx);
    let mut stage = Stage::spawn(&config, &shared, jobs_tx.as_ref(), acks, &abandon)?;

    let evaluator_stop = CancellationToken::new();
    let evaluator = tokio::spawn(crate::recorder::run_evaluator(
        shared.clone(),
        judges.clone(),
        evaluator_stop.clone(),
    ));

    // The drain is bounded from the moment `stop` fires: after the grace period the pool abandons
    // what is left, which also ends the Kafka source's wait for acks.
    let grace = Duration::from_secs(config.shutdown.grace_secs);
    let abandon_timer = abandon_after_grace(stop.clone(), grace, abandon.clone());

    let labels_stop = stop.child_token();
    let label_source = spawn_label_source(&config, &env, &shared, &labels_stop);

    let (otlp, write) = start_write_listener(&config, &env, &shared, kind)?;

    let pipeline = stage.pipeline(Pipeline::new(
        &config.decode,
        &config.sample,
        shared.clone(),
        jobs_tx,
    ));
    admin.ready.store(true, Ordering::Relaxed);
    tracing::info!(source = ?kind, format = ?config.decode.format, strata = ?shared.stratifier.names(), "ragwatch running");

    // Each arm owns the pipeline and drops it when its source ends, which closes the judge queue.
    let result = match (otlp, config.decode.format.is_otlp()) {
        (Some(receiver), _) => {
            let mut spans = SpanIngest::new(&config.decode, &config.assembly, pipeline);
            receiver.run(&mut spans, &stop).await.map(|_| ())
        }
        (_, true) => {
            let mut spans = SpanIngest::new(&config.decode, &config.assembly, pipeline);
            let share_tx = fleet.partitions_tx.take();
            feed(&config, &env, &mut spans, &shared, ack_rx, share_tx, &stop).await
        }
        (_, false) => {
            let mut pipeline = pipeline;
            let share_tx = fleet.partitions_tx.take();
            feed(
                &config,
                &env,
                &mut pipeline,
                &shared,
                ack_rx,
                share_tx,
                &stop,
            )
            .await
        }
    };
    admin.ready.store(false, Ordering::Relaxed);
    if let Some(write) = write {
        write.shutdown().await;
    }
    labels_stop.cancel();
    fleet_stop.cancel();
    let mut joined = Joined::default();
    joined.task("classifier stage", stage.task).await;
    joined.task("judge pool", pool).await;
    export_stop.cancel();
    joined.task("verdict export", export).await;
    joined.task("label source", label_source).await;
    joined.task("peer watcher", peers).await;
    joined.task("budget share", Some(follower)).await;
    abandon_timer.abort();
    evaluator_stop.cancel();
    joined.task("evaluator", Some(evaluator)).await;
    crate::recorder::evaluate_once(&shared, &judges, crate::clock::now_ms());
    admin.stop().await;
    tracing::info!("ragwatch stopped");
    result.map_err(RunError::from)?;
    joined.0.map_or(Ok(()), Err)
}

/// The first task that panicked, once the tasks are joined: a panicked task is a failed run
/// (exit 1), never a quiet one. Each is logged.
#[derive(Default)]
struct Joined(Option<RunError>);

impl Joined {
    /// Waits for `handle`, when the task was started.
    async fn task(&mut self, task: &'static str, handle: Option<tokio::task::JoinHandle<()>>) {
        let Some(handle) = handle else { return };
        if let Err(e) = handle.await {
            tracing::error!(task, error = %e, "task failed");
            self.0.get_or_insert(RunError::Task(task, e.to_string()));
        }
    }
}

/// The admin server (`/metrics`, `/livez`, `/readyz`, `/v1/suspects`), on a thread of its own;
/// it stops last, so a final scrape still sees the counts.
struct Admin {
    /// What `/readyz` answers: true while the source runs.
    ready: Arc<AtomicBool>,
    stop: CancellationToken,
    server: std::thread::JoinHandle<()>,
}

impl Admin {
    /// Binds `http.listen` and writes the address to `http.port_file` when set.
    fn start(config: &Config, shared: &Shared) -> Result<Self, RunError> {
        let ready = Arc::new(AtomicBool::new(false));
        let stop = CancellationToken::new();
        let state = AdminState {
            metrics: Arc::clone(&shared.metrics),
            ready: Arc::clone(&ready),
            suspects: http::SuspectsState {
                shared: shared.clone(),
                judges: config.judge.verdict_judges(),
                windows: (config.windows.short_secs, config.windows.baseline_secs),
            },
        };
        let (addr, server) = http::spawn(&config.http.listen, state, stop.clone())
            .map_err(|e| RunError::Listen(config.http.listen.clone(), e))?;
        tracing::info!(%addr, "admin server listening");
        if let Some(path) = &config.http.port_file
            && let Err(e) = std::fs::write(path, addr.to_string())
        {
            tracing::warn!(error = %e, path = %path.display(), "cannot write port file");
        }
        Ok(Self {
            ready,
            stop,
            server,
        })
    }

    async fn stop(self) {
        self.stop.cancel();
        let server = self.server;
        let _ = tokio::task::spawn_blocking(move || server.join()).await;
    }
}

/// The write listener, when the OTLP receiver or the labels endpoint is on: the receiver's route
/// (whose requests the source takes, returned beside it) and the labels endpoint. It stops when
/// the source ends.
fn start_write_listener(
    config: &Config,
    env: &HashMap<String, String>,
    shared: &Shared,
    kind: SourceKind,
) -> Result<(Option<OtlpReceiver>, Option<http::write::WriteServer>), RunError> {
    let (traces, otlp) = if kind == SourceKind::Otlp {
        let (routes, receiver) = OtlpReceiver::routes(
            &config.otlp,
            config.assembly.max_spans_per_message,
            Arc::clone(&shared.metrics),
        );
        (Some(routes), Some(receiver))
    } else {
        (None, None)
    };
    if !config.write_listener_needed() {
        return Ok((otlp, None));
    }
    let routes = WriteRoutes {
        traces,
        labels: config.labels.enabled.then(|| shared.clone()),
    };
    let server = http::write::spawn(&config.write, env, routes, Arc::clone(&shared.metrics))?;
    Ok((otlp, Some(server)))
}

/// The sampled judge `judge.sampled` names, with the judges whose verdicts the evaluator exports
/// and the LLM judge's budget, at this replica's share already. The LLM judge settles its
/// structured-output mode and starts its canaries before the first trace.
async fn sampled_judge(
    config: &Config,
    env: &HashMap<String, String>,
    shared: &Shared,
    fleet: &Fleet,
    stop: &CancellationToken,
) -> Result<(Vec<JudgeKind>, Option<Arc<Budget>>, Option<PoolJudge>), RunError> {
    let judges = config.judge.verdict_judges();
    let mut budget = None;
    let pool_judge = match config.judge.sampled {
        SampledJudge::None => None,
        SampledJudge::Offline => Some(PoolJudge::Offline(OfflineJudge::default())),
        SampledJudge::Llm => {
            let judge = Arc::new(LlmJudge::try_new(
                llm_setup(config, env),
                env,
                shared.metrics.clone(),
            )?);
            // The budget is the fleet's: this replica's share before any call, canaries included.
            judge.budget().set_share(fleet.share_rx().current());
            // Other replicas may be spending: no minute's worth at once.
            if fleet.others_may_be_spending() {
                judge.budget().join_spending_fleet();
            }
            // `structured_output = "auto"`: ask the server before the first trace, so the judge
            // identity on ragwatch_judge_info is the settled one from the first scrape on.
            judge.resolve_structured_output().await;
            budget = Some(Arc::clone(judge.budget()));
            if let Some(path) = &config.llm.canary_path {
                let canaries = load_canaries(path, config)?;
                tokio::spawn(crate::judge::llm::run_canaries(
                    Arc::clone(&judge),
                    canaries,
                    config.judge.faithful_threshold,
                    Duration::from_secs(config.llm.canary_interval_secs),
                    shared.metrics.clone(),
                    stop.clone(),
                ));
            }
            Some(PoolJudge::Llm(judge))
        }
        SampledJudge::Classifier => Some(classifier_judge(config)?),
    };
    Ok((judges, budget, pool_judge))
}

/// What the LLM judge is built from: `[llm]`, `[budget]`, `[redact]`, and the Kafka client of its
/// records topic.
pub fn llm_setup<'a>(
    config: &'a Config,
    env: &HashMap<String, String>,
) -> crate::judge::llm::LlmSetup<'a> {
    crate::judge::llm::LlmSetup {
        llm: &config.llm,
        budget: &config.budget,
        redact: &config.redact,
        records_kafka: config.records_kafka(env),
    }
}

/// The classifier judge `[classifier]` describes, loaded before the first trace.
#[cfg(feature = "classifier")]
fn classifier_judge(config: &Config) -> Result<PoolJudge, RunError> {
    Ok(PoolJudge::Classifier(load_classifier(config)?))
}

#[cfg(feature = "classifier")]
fn load_classifier(config: &Config) -> Result<Arc<crate::judge::classifier::Classifier>, RunError> {
    let judge = crate::judge::classifier::Classifier::from_config(&config.classifier)
        .map_err(|e| RunError::Classifier(e.to_string()))?;
    tracing::info!(
        model = judge.identity(),
        served = config.classifier.served.is_some(),
        "classifier judge loaded"
    );
    Ok(Arc::new(judge))
}

/// The classifier stage's task and the way into it, when the classifier is the prediction.
struct Stage {
    #[cfg(feature = "classifier")]
    tx: Option<mpsc::Sender<crate::pipeline::Staged>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Stage {
    /// Starts the stage when `judge.prediction = "classifier"`; it hands sampled traces to
    /// `jobs_tx` and acks the others on `acks`, which it drops otherwise.
    #[cfg_attr(not(feature = "classifier"), allow(unused_variables))]
    fn spawn(
        config: &Config,
        shared: &Shared,
        jobs_tx: Option<&mpsc::Sender<crate::pipeline::JudgeJob>>,
        acks: Option<mpsc::UnboundedSender<crate::pipeline::Position>>,
        abandon: &CancellationToken,
    ) -> Result<Stage, RunError> {
        #[cfg(feature = "classifier")]
        if config.judge.prediction == crate::judge::config::Prediction::Classifier
            && let Some(jobs_tx) = jobs_tx
        {
            let (tx, rx) = mpsc::channel(config.classifier.queue_capacity);
            let task = tokio::spawn(crate::pipeline::run_stage(
                load_classifier(config)?,
                config.classifier.workers,
                rx,
                jobs_tx.clone(),
                acks,
                shared.clone(),
                abandon.clone(),
            ));
            return Ok(Stage {
                tx: Some(tx),
                task: Some(task),
            });
        }
        Ok(Stage {
            #[cfg(feature = "classifier")]
            tx: None,
            task: None,
        })
    }

    /// `pipeline`, sending every trace through the stage when there is one.
    /// The stage's only sender moves into the pipeline, so the stage ends when the source does.
    fn pipeline(&mut self, pipeline: Pipeline) -> Pipeline {
        #[cfg(feature = "classifier")]
        if let Some(tx) = self.tx.take() {
            return pipeline.with_stage(tx);
        }
        pipeline
    }
}

/// Without the feature, config validation refuses `judge.sampled = "classifier"` first.
#[cfg(not(feature = "classifier"))]
fn classifier_judge(_: &Config) -> Result<PoolJudge, RunError> {
    Err(RunError::Classifier(
        "this ragwatch is built without the cargo feature `classifier`".to_owned(),
    ))
}

/// Starts the Kafka label consumer when `labels.topic` is set. Its failure stops labels only:
/// the traces are monitored all the same.
fn spawn_label_source(
    config: &Config,
    env: &HashMap<String, String>,
    shared: &Shared,
    stop: &CancellationToken,
) -> Option<tokio::task::JoinHandle<()>> {
    let topic = config.labels.topic.clone()?;
    let group = config
        .labels
        .group_id
        .clone()
        .unwrap_or_else(|| format!("{}-labels", config.kafka.group_id));
    let (kafka, env, shared, stop) = (
        config.kafka.clone(),
        env.clone(),
        shared.clone(),
        stop.clone(),
    );
    Some(tokio::spawn(async move {
        if let Err(e) =
            crate::source::kafka::run_label_source(&kafka, &topic, &group, &env, shared, &stop)
                .await
        {
            tracing::error!(error = %e, topic, "label source failed: no labels from Kafka; traces are monitored all the same");
        }
    }))
}

/// Runs a Kafka, file or stdin source into `ingest` until it ends or `stop` fires.
async fn feed<I: Ingest>(
    config: &Config,
    env: &HashMap<String, String>,
    ingest: &mut I,
    shared: &Shared,
    ack_rx: mpsc::UnboundedReceiver<crate::pipeline::Position>,
    share_tx: Option<ShareTx>,
    stop: &CancellationToken,
) -> Result<(), SourceError> {
    match config.source.kind {
        Some(SourceKind::Kafka) => {
            let source = crate::source::kafka::KafkaSource {
                config: &config.kafka,
                env,
                metrics: Arc::clone(&shared.metrics),
                acks: ack_rx,
                share_tx,
            };
            source.run(ingest, stop).await.map(|_| ())
        }
        _ => {
            let source = FileSource {
                config: &config.source,
                decode: &config.decode,
            };
            let lines = source.run(ingest, stop).await;
            if let Ok(n) = &lines {
                tracing::info!(lines = n, "input ended; serving metrics until stopped");
            }
            ingest.close_queue();
            stop.cancelled().await;
            lines.map(|_| ())
        }
    }
}

/// Reads the canary traces; every one must decode and carry `label_faithful`.
fn load_canaries(
    path: &std::path::Path,
    config: &Config,
) -> Result<Vec<crate::trace::Trace>, RunError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| RunError::Canaries(shown.clone(), e.to_string()))?;
    let decoder = crate::trace::Decoder::new(&config.decode);
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| match decoder.decode(l.as_bytes()) {
            Ok(t) if t.label_faithful.is_some() => Ok(t),
            Ok(_) => Err(RunError::Canaries(
                shown.clone(),
                format!("line {} has no label_faithful", i + 1),
            )),
            Err(e) => Err(RunError::Canaries(
                shown.clone(),
                format!("line {}: {e}", i + 1),
            )),
        })
        .collect()
}
