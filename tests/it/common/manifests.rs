//! Checks of rendered Kubernetes manifests, shared by the kustomize overlays (tests/it/deploy/) and
//! the Helm chart (tests/it/helm/): schema validation and tests/check_manifests.py.
//!
//! Used as `#[path = "common/manifests.rs"] mod manifests;` beside `mod common;`.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::common::pipe;

/// Validates `rendered` against the Kubernetes schemas (kubernetes-validate --strict); at least two
/// objects must be known to it (the Prometheus Operator's kinds are not).
pub fn validate(name: &str, rendered: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, rendered).unwrap();
    let out = Command::new("kubernetes-validate")
        .arg("--strict")
        .arg(&file)
        .output()
        .expect("kubernetes-validate (pip) is installed by tests/run.sh");
    let report =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: {report}");
    assert!(
        report.matches("passed for resource").count() >= 2,
        "{name}: {report}"
    );
}

/// Runs tests/check_manifests.py on `rendered` and asserts it found no problem and a ragwatch
/// workload; `external_config` is the config a ConfigMap that is not rendered (the user's) holds.
pub fn check(name: &str, rendered: &str, external_config: Option<&Path>) -> Value {
    let mut cmd = Command::new("python3");
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/check_manifests.py"));
    if let Some(p) = external_config {
        cmd.arg(p);
    }
    let out = pipe(&mut cmd, rendered);
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["problems"], json!([]), "{name}: {v}");
    assert!(
        !v["workloads"].as_array().unwrap().is_empty(),
        "{name}: no ragwatch workload"
    );
    v
}
