//! The rules' promtool unit tests: the template's tests of the fixed groups, and for every
//! per-metric alert a test that it fires where it should (with its exact labels and annotations)
//! and stays quiet where it must: too few samples, a wide interval, a healthy stratum, and an
//! out-of-scope stratum for the metrics that leave those out.

use super::alert::{Alert, AlertKind, RUNBOOK_URL, title, words};
use super::template::fill;
use crate::dimensions::Quality;

const TEMPLATE: &str = include_str!("templates/rules_test.yaml");
const FLOOR: &str = include_str!("templates/tests/floor.yaml");
const DRIFT: &str = include_str!("templates/tests/drift.yaml");
const SHIFT: &str = include_str!("templates/tests/shift.yaml");

/// `deploy/prometheus/rules_test.yaml`.
pub(super) fn rule_tests() -> String {
    let tests: Vec<String> = Quality::ALL
        .into_iter()
        .flat_map(Alert::of_metric)
        .map(|a| test(&a))
        .collect();
    fill(TEMPLATE, &[("metric_tests", tests.join("\n"))])
}

/// One alert's test: its template with the alerts it must raise.
fn test(alert: &Alert) -> String {
    let m = alert.metric;
    let a = &m.spec().alerts;
    // The out-of-scope stratum fires only for a metric that keeps out-of-scope strata.
    let fires_out_of_scope = !a.in_scope_only;
    let (template, expected) = match alert.kind {
        AlertKind::BelowFloor => {
            let description = |stratum: &str, diagnosis: &str| {
                format!(
                    "Over the last 5 minutes, the combined estimate of {} in stratum {stratum} is 40% (interval 37% to 43%, 60 LLM-judged traces): even its upper bound is below the floor of 70%; {}.{diagnosis}",
                    words(m),
                    a.meaning
                )
            };
            let summary =
                |stratum: &str| format!("{} of stratum {stratum} is below its floor", title(m));
            let mut expected = vec![exp_alert(
                alert,
                "tail",
                "combined",
                &summary("tail"),
                &description("tail", " Diagnosis: look at generation."),
            )];
            if fires_out_of_scope {
                expected.push(exp_alert(
                    alert,
                    "chitchat",
                    "combined",
                    &summary("chitchat"),
                    &description("chitchat", ""),
                ));
            }
            (FLOOR, expected)
        }
        AlertKind::Drift => (
            DRIFT,
            vec![exp_alert(
                alert,
                "head",
                "combined",
                &format!("{} of stratum head dropped from its 24h baseline", title(m)),
                &format!(
                    "The combined estimate of {} in stratum head over the last 5 minutes is 75%, against 92.44% over the rest of its 24-hour baseline: more than the allowed drop, beyond the noise of both windows.",
                    words(m)
                ),
            )],
        ),
        AlertKind::Shift => {
            let exp = |stratum: &str| {
                exp_alert(
                    alert,
                    stratum,
                    "offline",
                    &format!(
                        "The offline judge's {} of stratum {stratum} shifted down from its baseline",
                        words(m)
                    ),
                    &format!(
                        "The offline judge's 5-minute mean {} in stratum {stratum} is 0.530 against 0.620 over the rest of the last 24 hours: z = 7.7, 0.44 baseline standard deviations lower (scores on that judge's own scale).",
                        words(m)
                    ),
                )
            };
            let mut expected = vec![exp("tail")];
            if fires_out_of_scope {
                expected.insert(0, exp("chitchat"));
            }
            (SHIFT, expected)
        }
    };
    let scope_title = if a.in_scope_only {
        "; out-of-scope strata left out"
    } else {
        "; out-of-scope strata included"
    };
    fill(
        template,
        &[
            ("alert", alert.name()),
            ("metric", m.name().to_owned()),
            ("camel", super::alert::camel(m)),
            ("histogram", m.spec().histogram.to_owned()),
            ("scope_title", scope_title.to_owned()),
            ("exp_alerts", expected.join("\n")),
        ],
    )
}

/// An `exp_alerts` entry.
fn exp_alert(
    alert: &Alert,
    stratum: &str,
    judge: &str,
    summary: &str,
    description: &str,
) -> String {
    let stage = alert
        .metric
        .spec()
        .alerts
        .stage
        .map(|s| format!("\n              stage: {s}"))
        .unwrap_or_default();
    format!(
        "          - exp_labels:\n              severity: {severity}\n              metric: {metric}{stage}\n              stratum: {stratum}\n              judge: {judge}\n            exp_annotations:\n              summary: \"{summary}\"\n              description: \"{description}\"\n              runbook_url: \"{RUNBOOK_URL}#{anchor}\"",
        severity = alert.severity(),
        metric = alert.metric.name(),
        anchor = alert.anchor(),
    )
}
