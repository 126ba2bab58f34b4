//! ragwatch: a sidecar that watches a RAG service's live traces and tells Prometheus when answers
//! stop being grounded in the retrieved context.
//!
//! # Data flow
//! ```text
//! Kafka topic / JSONL file
//!   └─ source::{kafka, file}        consume; store an offset once its trace is accounted for
//!       └─ trace::Decoder           bytes → Trace (native schema or JSON-pointer mapping), or a reject reason
//!           └─ sample::Stratifier   bounded stratum label: declared strata, `default`, `other`
//!               └─ judge::OfflineJudge   every trace, inline, microseconds
//!                   ├─ pipeline::Shared::record → metrics histograms/counters + window rings
//!                   └─ sample::Sampler → bounded queue → judge::run_pool (sampled judge, off the ingest path)
//! window::run_evaluator             window gauges, confidence bounds, drift flags, every second
//! http                              /metrics, /livez, /readyz
//! ```
//!
//! # Modules
//! - [`config`]: TOML config, `RAGWATCH__SECTION__KEY` overrides, `validate()`.
//! - [`source`]: Kafka consumer group and JSONL file/stdin sources; per-partition offset tracking.
//! - [`trace`]: the trace model and its decoder with limits and reject reasons.
//! - [`sample`]: stratification and hash-based, redelivery-stable sampling.
//! - [`judge`]: verdicts, the offline judge and its trained model, the sampled-judge pool.
//! - [`window`]: rolling bucket rings, drift rules, the evaluator that exports them.
//! - [`pipeline`]: one message from bytes to windows; never blocks the source.
//! - [`metrics`]: every metric name, on one registry.
//! - [`events`]: log-and-count call sites, rate-limited.
//! - [`http`]: the admin server.
//! - [`app`]: `ragwatch run` wiring and the shutdown sequence.
//! - [`replay`]: `ragwatch replay`, one pass over JSONL files with a summary.
//! - [`eval`]: AUROC, precision and recall against human labels; retrieval metrics against gold ids.
//! - [`gate`]: `ragwatch gate`, floors and maximum drops over replay summaries for CI.
//! - [`fuzzing`]: the decoder invariant that `fuzz/` and the corpus regression test check.

pub mod app;
pub mod clock;
pub mod config;
pub mod eval;
pub mod events;
pub mod fuzzing;
pub mod gate;
pub mod http;
pub mod judge;
pub mod labels;
pub mod metrics;
pub mod pipeline;
pub mod recorder;
pub mod replay;
pub mod sample;
pub mod source;
pub mod trace;
pub mod window;
