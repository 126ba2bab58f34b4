//! What the test reads from Prometheus: exemplars, the estimates behind a page (for the log), and
//! every dashboard query.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::common::prometheus::{SCALE, by_stratum, query, urlencode};
use crate::common::{http_get, wait_for};

/// The exemplars Prometheus holds for `q` between `start` and `end` (Unix seconds): the series'
/// labels, the exemplar's trace id and value.
pub(super) fn query_exemplars(
    prom: u16,
    q: &str,
    start: f64,
    end: f64,
) -> Vec<(Value, String, f64)> {
    let Some((200, body)) = http_get(
        ([127, 0, 0, 1], prom).into(),
        &format!(
            "/api/v1/query_exemplars?query={}&start={start:.3}&end={end:.3}",
            urlencode(q)
        ),
    ) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    let mut out = Vec::new();
    for series in v["data"].as_array().into_iter().flatten() {
        for e in series["exemplars"].as_array().into_iter().flatten() {
            out.push((
                series["seriesLabels"].clone(),
                e["labels"]["trace_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["value"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN),
            ));
        }
    }
    out
}

/// Each stratum's faithfulness as Prometheus has it, for the log: the combined estimate with its
/// interval, judged pairs and 24h (here 60 s) baseline, and its parts; the raw LLM and offline
/// means; the offline shift rule's z.
pub(super) fn estimates(prom: u16) -> String {
    let get = |q: &str| by_stratum(prom, q);
    let (yhat, fhat, fbar, lambda) = (
        get("ragwatch:estimate:yhat_5m{metric=\"faithfulness\"}"),
        get("ragwatch:estimate:fhat_5m{metric=\"faithfulness\"}"),
        get("ragwatch:estimate:fbar_5m{metric=\"faithfulness\"}"),
        get("ragwatch:estimate:lambda_5m{metric=\"faithfulness\"}"),
    );
    let (mean, lower, upper, k, base, llm, offline, z) = (
        get("ragwatch:faithfulness:combined_mean_5m"),
        get("ragwatch:faithfulness:combined_lower_5m"),
        get("ragwatch:faithfulness:combined_upper_5m"),
        get("ragwatch:faithfulness:combined_samples_5m"),
        get("ragwatch:faithfulness:combined_mean_24h"),
        get("ragwatch:faithfulness:mean_5m{judge=\"llm\"}"),
        get("ragwatch:faithfulness:mean_5m{judge=\"offline\"}"),
        get("ragwatch:shift:z_5m{metric=\"faithfulness\", judge=\"offline\"}"),
    );
    ["stable", "degrading"]
        .iter()
        .map(|s| {
            let f = |m: &BTreeMap<String, f64>| m.get(*s).copied().unwrap_or(f64::NAN);
            format!(
                "{s} {:.3} [{:.3}, {:.3}] k={:.0} base {:.3} (Yh {:.3} + lambda {:.2} x (fbar {:.3} - Fh {:.3}); llm {:.3}, offline {:.3} z {:.1})",
                f(&mean),
                f(&lower),
                f(&upper),
                f(&k),
                f(&base),
                f(&yhat),
                f(&lambda),
                f(&fbar),
                f(&fhat),
                f(&llm),
                f(&offline),
                f(&z)
            )
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Every target expression of the dashboard's panels, rows' nested panels included.
fn panel_queries(panels: &Value, out: &mut Vec<(String, String)>) {
    for panel in panels.as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                out.push((title.clone(), expr.to_owned()));
            }
        }
        panel_queries(&panel["panels"], out);
    }
}

/// A dashboard query as Grafana would send it here: template variables at "All" (`.*`), Grafana's
/// interval variables. The dashboard is generated with the test's windows.
fn dashboard_query(expr: &str, variables: &[String]) -> String {
    let mut q = expr
        .replace("$__rate_interval", "20s")
        .replace("$__interval", "20s")
        .replace("$__range", "60s")
        // A single-value variable (the judges do not share a scale): one of its values.
        .replace("judge=\"$judge\"", "judge=\"offline\"");
    let mut variables = variables.to_vec();
    // Longest first, so that `$name` never eats the start of `$namespace`.
    variables.sort_by_key(|v| std::cmp::Reverse(v.len()));
    for v in &variables {
        q = q
            .replace(&format!("${{{v}}}"), ".*")
            .replace(&format!("${v}"), ".*");
    }
    q
}

/// Every dashboard panel's query returns data from this Prometheus.
pub(super) fn check_dashboard(prom: u16) {
    let dash = SCALE.dashboard();
    let variables: Vec<String> = dash["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .collect();
    let mut queries = Vec::new();
    panel_queries(&dash["panels"], &mut queries);
    assert!(!queries.is_empty(), "the dashboard has queries");
    // The variant comparison's panels need [variants]: tests/it/rollout_gates.rs checks those.
    // What changed needs sources, a coverage level and scored contexts, the reviewers' panel the
    // review queue, the feedback panel user feedback, the OTLP, write-listener, redaction and
    // label panels their own inputs: tests/it/deploy/dashboard.rs checks those. The container's memory limit is the
    // kubelet's (cAdvisor), which no test scrapes.
    queries.retain(|(_, expr)| {
        !expr.contains("comparison")
            && ![
                "container_spec_",
                "ragwatch_otlp_",
                "ragwatch_spans_",
                "ragwatch_write_",
                "ragwatch_labels_total",
                "ragwatch_redactions_total",
                "canary_agreement",
                "source_lift",
                "question_",
                "retrieval_uncovered",
                "retrieval_shift",
                "changes_threshold",
                "review_",
                "feedback",
            ]
            .iter()
            .any(|t| expr.contains(t))
    });
    for (title, expr) in &queries {
        let q = dashboard_query(expr, &variables);
        wait_for(
            &format!("data for panel {title:?}: {q}"),
            Duration::from_secs(30),
            || query(prom, &q).filter(|r| !r.is_empty()),
        );
    }
    eprintln!("dashboard: {} queries return data", queries.len());
}
