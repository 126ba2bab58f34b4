//! deploy/helm/ragwatch: the chart passes Helm's lint with its own values and every values file in
//! its ci/ folder; each renders (through Helm's own install action) into manifests that validate
//! against the Kubernetes schemas and pass the same checks as the kustomize overlays (ragwatch's
//! container restricted on its own, a config change rolls the pods, the records emptyDir above the
//! records' cap), with a config ragwatch accepts; the PrometheusRule and the AlertmanagerConfig carry
//! exactly what deploy/ ships; two releases in one namespace share no object name, select none of
//! each other's pods, and their dashboards differ in uid, title and file; the runbook's address
//! is one value; and the rollout gates are components/rollout-gates' objects pointed at the release.
//!
//! Helm's library comes from helm-sdkpy (PyPI), in a venv tests/run.sh makes; its python is
//! `RAGWATCH_HELM_PYTHON`, else `~/.cache/ragwatch/helm-venv/bin/python`. tests/helm_chart.py says
//! how it lints and renders without a cluster.
//!
//! Its parts: lint and refusals (`lint.rs`), each values file rendered (`render.rs`), the knobs
//! and defaults (`values.rs`), two releases side by side (`releases.rs`), what the chart carries
//! from deploy/ (`shipped.rs`) and the notes and docs (`notes.rs`). That the chart is
//! self-contained, its copies `ragwatch rules`'s, is checked in the plain tier
//! (tests/it/generated.rs).

mod lint;
mod notes;
mod releases;
mod render;
mod shipped;
mod values;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::manifests;
use crate::common::{pipe, repo, run_ok};

fn chart() -> PathBuf {
    repo().join("deploy/helm/ragwatch")
}

fn helm_python() -> PathBuf {
    std::env::var_os("RAGWATCH_HELM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap())
                .join(".cache/ragwatch/helm-venv/bin/python")
        })
}

fn helm_chart(args: &[&str]) -> Vec<Value> {
    let python = helm_python();
    assert!(
        python.exists(),
        "{} is missing: tests/run.sh installs helm-sdkpy into it",
        python.display()
    );
    let out = run_ok(
        Command::new(python)
            .arg(repo().join("tests/helm_chart.py"))
            .args(args)
            .current_dir(repo()),
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The chart's test values files (ci/*.yaml), by path from the repository's root.
fn values_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(chart().join("ci"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            p.strip_prefix(repo()).unwrap().display().to_string()
        })
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    files
}

/// Helm's rendered manifest for `release` in namespace `rag` with `values` files applied in order
/// (paths from the repository's root), or the install's error.
fn render(release: &str, values: &[&str]) -> Result<(String, String), String> {
    let chart = chart();
    let mut args = vec!["render", chart.to_str().unwrap(), release, "rag"];
    args.extend_from_slice(values);
    let out = helm_chart(&args).pop().unwrap();
    match out["error"].as_str() {
        Some(e) => Err(e.to_owned()),
        None => Ok((
            out["manifest"].as_str().unwrap().to_owned(),
            out["notes"].as_str().unwrap().to_owned(),
        )),
    }
}

/// A values file written for one test.
fn values_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    f
}

/// The rendered objects, as JSON.
fn objects(manifest: &str) -> Vec<Value> {
    let out = pipe(
        Command::new("python3").arg("-c").arg(
            "import json, sys, yaml\njson.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)",
        ),
        manifest,
    );
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check(name: &str, manifest: &str, external_config: Option<&Path>) -> Value {
    let v = manifests::check(name, manifest, external_config);
    assert_eq!(v["workloads"].as_array().unwrap().len(), 1, "{name}: {v}");
    v
}
