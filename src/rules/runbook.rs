//! The runbook (`docs/runbook.md`): the template's sections on the fixed alerts, and a section per
//! per-metric alert with its severity, what fires it and the metric's own advice.

use super::alert::{Alert, AlertKind, capitalized, title, words};
use super::template::fill;
use crate::dimensions::Quality;

const TEMPLATE: &str = include_str!("templates/runbook.md");
const DRIFT: &str = include_str!("templates/runbook/drift.md");
/// The close of every per-metric section: where to look next.
const WHAT_CHANGED: &str = "\n- **What changed**: the stratum's suspect documents and sources \
(`GET /v1/suspects?stratum=<stratum>` on a replica's admin port), new questions, lost coverage and a \
retriever shift: [What changed?](#what-changed).\n";

/// `docs/runbook.md`.
pub(super) fn runbook() -> String {
    let alerts = super::metric_alerts();
    let rows: Vec<String> = alerts
        .iter()
        .map(|a| {
            format!(
                "| {} | {} | {} |",
                a.name(),
                a.severity(),
                super::window::prom_duration(std::time::Duration::from_secs(a.pending_secs()))
            )
        })
        .collect();
    let sections: Vec<String> = alerts.iter().map(|a| section(a) + WHAT_CHANGED).collect();
    fill(
        TEMPLATE,
        &[
            ("metric_severity_rows", rows.join("\n")),
            ("metric_sections", sections.join("\n")),
        ],
    )
}

/// `*Critical, stage retrieval.*`
fn badge(alert: &Alert) -> String {
    let severity = capitalized(alert.severity());
    match alert.metric.spec().alerts.stage {
        Some(stage) => format!("{severity}, stage {stage}"),
        None => severity,
    }
}

fn shift_of(m: Quality) -> String {
    Alert {
        metric: m,
        kind: AlertKind::Shift,
    }
    .name()
}

fn floor_of(m: Quality) -> String {
    Alert {
        metric: m,
        kind: AlertKind::BelowFloor,
    }
    .name()
}

/// One alert's section.
fn section(alert: &Alert) -> String {
    let m = alert.metric;
    let a = &m.spec().alerts;
    let out_of_scope = if a.in_scope_only {
        " Strata the config declares out of scope are left out: declining there is right."
    } else {
        ""
    };
    match alert.kind {
        AlertKind::BelowFloor => format!(
            "## {name}\n\n*{badge}.* Over the last 5 minutes, the combined estimate of a stratum's {words} is\nconfidently below its floor: even the upper end of its interval is, with at least `min_samples`\nLLM-judged traces.{out_of_scope} In short, {meaning}. The description gives the estimate, the\ninterval, the number of judged traces, and ragwatch's diagnosis when it has one.\n\n{advice}\n",
            name = alert.name(),
            badge = badge(alert),
            words = words(m),
            meaning = a.meaning,
            advice = a.floor_advice,
        ),
        AlertKind::Drift => fill(
            DRIFT,
            &[
                ("alert", alert.name()),
                ("severity", badge(alert)),
                ("words", words(m)),
                ("metric", m.name().to_owned()),
                ("shift_alert", shift_of(m)),
            ],
        ),
        AlertKind::Shift => format!(
            "## {name}\n\n*{badge}.* The offline judge's 5-minute mean {words} in a stratum is significantly (z >=\n`shift_z`) and materially (>= `shift_sd` baseline standard deviations) below the rest of its last 24\nhours, with enough scores on both sides.{out_of_scope} The offline judge scores every trace at no\ncost, so this often comes first, before the LLM sample has enough verdicts to reach\n`{floor}`. The description carries both means, z and the effect size, on the offline judge's own\nscale (not comparable with the LLM judge's numbers). Silent for 24 hours after a judge change.\nOn the dashboard: *{title} by judge*.\n\n{advice}\n",
            name = alert.name(),
            badge = badge(alert),
            words = words(m),
            floor = floor_of(m),
            title = title(m),
            advice = a.shift_advice,
        ),
    }
}
