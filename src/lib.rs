//! ragwatch: a sidecar that watches a RAG service's live traces and tells Prometheus when answers
//! stop being grounded in the retrieved context.
//!
//! # Data flow
//! ```text
//! Kafka topic / JSONL file / OTLP/HTTP / OTLP/gRPC
//!   └─ source::{kafka, file, otlp}  consume; store an offset once its trace is accounted for
//!       ├─ trace::otlp              OTLP spans → assembled Traces (source::SpanIngest joins offsets)
//!       └─ trace::Decoder           bytes → Trace (native schema or JSON-pointer mapping), or a reject reason
//!           └─ sample::Stratifier   bounded stratum label: declared strata, `default`, `other`
//!               (sample::Variants    with [variants]: the release, declared, `other`, `unknown`)
//!               └─ judge::OfflineJudge   every trace, inline, microseconds, on the original text
//!                   ├─ recorder::Shared::record → histograms/counters + window rings + combined estimate
//!                   │    (+ each candidate's and the baseline's comparison arms)
//!                   │    (+ changes::Changes: suspect documents and sources, question novelty, coverage)
//!                   │    (+ export::Exporter: each verdict, try_send to the OTLP and Phoenix targets' queues)
//!                   └─ sample::Sampler (with the inclusion probability) → bounded queue
//!                        (→ pipeline::run_stage: every trace's classifier score as the estimate's prediction)
//!                        → pipeline::run_pool (sampled judge, off the ingest path) → recorder::Shared::record_sampled
//!                          (redact::Redactor before the LLM judge's API and its verdict records)
//! recorder::run_evaluator           window gauges, combined estimate, drift flags, every second
//! http                              /metrics, /livez, /readyz, /v1/suspects (read-only); http::write: POST /v1/traces,
//!                                   POST /v1/labels behind tokens, TLS and a per-client rate limit
//! source::run_label_source          labels topic ─┐
//!                                                 └─ recorder::Feedback: join to recent traces,
//!                                                    agreement, score buckets for the label AUROC
//! ```
//!
//! # Layers
//! Dependencies point down only (`tests/it/layering.rs` fails on an upward `crate::` reference):
//! ```text
//! app, http, replay, gate, fuzzing, rules  entry points and wiring
//! config                               the whole file: TOML, overrides, validate(); each component's setup
//! source                               Kafka, file, stdin, OTLP/HTTP and gRPC; span ingest
//! fleet                                this replica's share of the fleet; the budget follows it
//! pipeline                             one message from bytes to the recorder; the judge pool
//! recorder, review                     verdicts into metrics and windows; the evaluator; the review queue
//! events, export                       log-and-count call sites; verdicts sent to trace views (OTLP, Phoenix)
//! metrics                              every metric name, on one registry
//! sample, judge, window, changes       stratify and sample; judges; rings, estimate, drift rules; what changed
//! eval, audit                          AUROC, agreement and retrieval figures; the judge audit
//! trace, redact                        the trace model and its decoder; OTLP span assembly; redaction
//! <component>/config.rs                each component's sections: plain data, defaults, own checks
//! section, dimensions, clock           what sections are built from (problems, defaults); the bounded label values; the wall and monotonic clocks
//! ```
//! A new judge metric: a variant of [`dimensions::Quality`] with its row in `Quality::spec` (histogram
//! name, help, built-in floor and drop), the judges that score it, and the docs; its config keys,
//! rings, histogram, gauges, estimate, verdict records, replay summary and the generic recording
//! rules follow from `Quality::ALL` (`tests/it/layering.rs` fails if other code names a metric). A new
//! source kind: a `source::Source` implementation in its own file, a `SourceKind` variant with its
//! config section, and one arm in `app.rs`.
//!
//! # Modules
//! - [`dimensions`]: the bounded sets Prometheus labels take their values from: quality metric,
//!   judge, stratum, skip reason. ("Labels" elsewhere are human labels: `[labels]`, `/v1/labels`.)
//! - [`clock`]: the wall and monotonic clocks, read in one place.
//! - [`section`]: what every config section is built from: the problems its check adds to (and
//!   [`section::problems::ConfigError`]), serde defaults and the label check.
//! - [`config`]: composes the sections into one [`config::Config`]: TOML, `RAGWATCH__SECTION__KEY`
//!   overrides, `validate()` reporting every problem at once. Each section's types, defaults and
//!   own checks sit beside the component that reads them (`source/kafka/config.rs`,
//!   `judge/llm/config.rs`, `window/config/`...); `tests/it/layering.rs` keeps them plain data.
//!   No component reads the whole file: each is built from its own sections, which the config
//!   hands over ([`config::Config::recorder_setup`], `review_setup`, `export_setup`; the LLM
//!   judge's `app::llm_setup`), so the config sits above every component it gathers.
//! - [`trace`]: the trace model (its metadata kept as checked JSON text until a field is read), its
//!   decoder with limits and reject reasons, OTLP span assembly.
//! - [`redact`]: e-mail, phone, card (Luhn), secret and IP patterns and the config's own, masked
//!   or hashed in the texts the LLM judge is sent and the verdict records hold.
//! - [`eval`]: AUROC, precision and recall against human labels; retrieval metrics against gold ids.
//! - [`audit`]: the judge audit: agreement (AUROC, Cohen's kappa) with bootstrap intervals, length
//!   correlation overall and within each label class, position bias.
//! - [`sample`]: stratification, variants (which release served a trace) and hash-based,
//!   redelivery-stable sampling with known probabilities (candidates at a boost).
//! - [`judge`]: verdicts; the offline judge (`judge/offline/`: sentences and tokens, the answer's
//!   and question's indexes, one pass over the contexts, phrases and citations, the 28 features,
//!   the logistic model and its trainer; a plain reference of every feature in its tests); the LLM
//!   judge.
//! - [`changes`]: what changed when a stratum degrades: Space-Saving sketches of the context ids
//!   in its low verdicts against all (the suspects, with their lift), sources, a MinHash sample of
//!   its questions (novelty), the retriever's coverage; memory fixed by `[changes]`.
//! - [`window`]: rolling bucket rings, the combined (prediction-powered) estimate, drift rules,
//!   diagnosis, and the drop scan the page rules compute (its arithmetic, held to the PromQL).
//! - [`metrics`]: every metric name, on one registry; the trace-id exemplars of the score and
//!   judge-latency histograms, the OpenMetrics exposition that carries them, and each stratum's
//!   per-trace series, kept once looked up.
//! - `events`: log-and-count call sites, rate-limited.
//! - [`export`]: verdict export (`[export]`): each verdict as an OpenTelemetry
//!   `gen_ai.evaluation.result` log record (and child span) or a Phoenix span annotation on the span
//!   whose answer was judged; bounded queues, batches, retries, a flush at shutdown.
//! - [`recorder`]: where verdicts become numbers (the live judge audit's length sums and
//!   same-family count too); the evaluator that exports windows and drift.
//! - [`pipeline`]: one message from bytes to the recorder, never blocking the source; the judge pool
//!   and, with the classifier as the combined estimate's prediction, the classifier stage.
//! - [`fleet`]: fleet membership (`[fleet]`): this replica's share of the judge budget, sent on a
//!   watch channel by the Kafka source (its partitions), the peer watcher (the ready replicas a
//!   headless Service resolves to) or the config (a fixed number of replicas), and followed by the
//!   LLM judge's budget and `ragwatch_budget_share_ratio`.
//! - [`source`]: Kafka consumer group, JSONL file/stdin and OTLP/HTTP sources; per-partition offset
//!   tracking, through span assembly for OTLP.
//! - `http`: the admin server.
//! - [`app`]: `ragwatch run` wiring and the shutdown sequence.
//! - [`replay`]: `ragwatch replay`, one pass over JSONL files with a summary.
//! - [`gate`]: `ragwatch gate`, floors and maximum drops over replay summaries for CI.
//! - [`rules`]: `ragwatch rules`, the shipped Prometheus rules, their unit tests, the dashboard and
//!   the runbook written from the metric list.
//! - [`fuzzing`]: the decoder invariant that `fuzz/` and the corpus regression test check.

pub mod app;
pub mod audit;
pub mod changes;
pub mod clock;
pub mod config;
pub mod dimensions;
pub mod eval;
pub(crate) mod events;
pub mod export;
pub mod fleet;
pub mod fuzzing;
pub mod gate;
pub(crate) mod http;
pub mod judge;
pub mod metrics;
pub mod pipeline;
pub mod recorder;
pub mod redact;
pub mod replay;
pub mod review;
pub mod rules;
pub mod sample;
pub mod section;
pub mod source;
pub mod trace;
pub mod window;
