//! `ragwatch rules`: the shipped Prometheus rules, their promtool unit tests, the PrometheusRule
//! manifest, the Grafana dashboard and the runbook, written from [`Quality::ALL`] and each metric's
//! [`QualitySpec`](crate::dimensions::QualitySpec). What is the same for every metric comes from the
//! templates in `src/rules/templates/`; what is per metric (recording rules, alerts, their unit
//! tests, dashboard panels, runbook sections) is generated here, so a new metric brings its own.
//!
//! The output is byte-stable: the checked-in files are this module's output with
//! [`Windows::SHIPPED`], and a test fails when they differ. Tests that run the rules in a real
//! Prometheus generate them with shorter [`Windows`] instead of editing the text.

mod alert;
mod dashboard;
mod manifest;
mod runbook;
mod template;
mod unit_test;
mod window;

use std::path::Path;

use crate::dimensions::Quality;

pub use alert::{Alert, AlertKind};
pub use window::Windows;

/// A generated file: its path from the repository root and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Path from the repository root.
    pub path: &'static str,
    /// The whole text.
    pub text: String,
}

/// Where the rules are written, from the repository root.
pub const RULES_PATH: &str = "deploy/prometheus/rules.yaml";
/// Where their promtool unit tests are written.
pub const RULE_TESTS_PATH: &str = "deploy/prometheus/rules_test.yaml";
/// Where the PrometheusRule manifest is written.
pub const MANIFEST_PATH: &str = "deploy/kubernetes/components/monitoring/prometheusrule.yaml";
/// Where the Grafana dashboard is written.
pub const DASHBOARD_PATH: &str = "deploy/kubernetes/components/dashboard/ragwatch-dashboard.json";
/// Where the runbook is written.
pub const RUNBOOK_PATH: &str = "docs/runbook.md";

/// Every generated file, with `windows` in the rules and the dashboard's queries.
pub fn generate(windows: &Windows) -> Vec<File> {
    let rules = rules_yaml(windows);
    vec![
        File {
            path: MANIFEST_PATH,
            text: manifest::prometheus_rule(&rules),
        },
        File {
            path: RULES_PATH,
            text: rules,
        },
        File {
            path: RULE_TESTS_PATH,
            text: unit_test::rule_tests(),
        },
        File {
            path: DASHBOARD_PATH,
            text: dashboard::dashboard_json(windows),
        },
        File {
            path: RUNBOOK_PATH,
            text: runbook::runbook(),
        },
    ]
}

/// Writes every generated file under `root`, or with `check` writes nothing; returns the paths
/// whose text on disk differs from the generated one (all of them written, unless `check`).
pub fn write(root: &Path, windows: &Windows, check: bool) -> std::io::Result<Vec<&'static str>> {
    let mut stale = Vec::new();
    for file in generate(windows) {
        let path = root.join(file.path);
        let on_disk = std::fs::read_to_string(&path).ok();
        if on_disk.as_deref() == Some(file.text.as_str()) {
            continue;
        }
        stale.push(file.path);
        if !check {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&path, &file.text).map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()))
            })?;
        }
    }
    Ok(stale)
}

/// The rules file (`deploy/prometheus/rules.yaml` with [`Windows::SHIPPED`]).
pub fn rules_yaml(windows: &Windows) -> String {
    alert::rules_yaml(windows)
}

/// The Grafana dashboard's JSON with `windows` in its queries.
pub fn dashboard_json(windows: &Windows) -> String {
    dashboard::dashboard_json(windows)
}

/// Every per-metric alert ragwatch ships, metric by metric.
pub fn metric_alerts() -> Vec<Alert> {
    Quality::ALL
        .into_iter()
        .flat_map(Alert::of_metric)
        .collect()
}
