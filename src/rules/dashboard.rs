//! The Grafana dashboard: the template's panels, in the per-stratum row one panel per metric
//! (each judge's mean, the combined estimate, the floors, the 10th percentile with exemplars, and
//! a link to the runbook section of each of the metric's alerts), and in the last row a heatmap
//! per metric of its score histogram.

use serde_json::{Value, json};

use super::alert::{Alert, title, words};
use super::pooling::Pooling;
use super::template::fill;
use super::window::Windows;
use crate::dimensions::Quality;

const TEMPLATE: &str = include_str!("templates/dashboard.json");

/// Where the metric panels start: below the per-stratum row's first line of panels.
const TOP: u64 = 15;
/// A metric panel's width and height; three to a line.
const WIDTH: u64 = 8;
const HEIGHT: u64 = 8;
/// The first metric panel's id: above every id the template uses.
const FIRST_ID: u64 = 100;
/// Where the score heatmaps start, in the template's coordinates: the line below its "Score
/// distributions" row (they move down with the rest by the metric panels' height).
const HEATMAP_TOP: u64 = 184;
/// The first heatmap's id: above the metric panels'.
const FIRST_HEATMAP_ID: u64 = 150;

/// The dashboard's JSON with `windows` in its queries, selecting installs by `pooling`'s labels.
pub(super) fn dashboard_json(windows: &Windows, pooling: &Pooling) -> String {
    let per_line = 24 / WIDTH;
    let lines = (Quality::COUNT as u64).div_ceil(per_line);
    let height = lines * HEIGHT;
    let indented = |panel: &Value| -> String {
        let text = serde_json::to_string_pretty(panel).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(|l| format!("    {l}")).collect();
        lines.join("\n")
    };
    let panels: Vec<String> = Quality::ALL
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let i = i as u64;
            let panel = panel(
                m,
                FIRST_ID + i,
                (i % per_line) * WIDTH,
                TOP + (i / per_line) * HEIGHT,
            );
            format!("{},", indented(&panel))
        })
        .collect();
    let heatmaps: Vec<String> = Quality::ALL
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let i = i as u64;
            indented(&heatmap(
                m,
                FIRST_HEATMAP_ID + i,
                (i % per_line) * WIDTH,
                HEATMAP_TOP + height + (i / per_line) * HEIGHT,
            ))
        })
        .collect();
    let mut vars: Vec<(String, String)> = windows
        .vars()
        .into_iter()
        .chain(pooling.vars())
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    vars.push((
        "short_label".to_owned(),
        crate::window::window_label(windows.short.as_secs()),
    ));
    vars.push(("metric_panels".to_owned(), panels.join("\n")));
    vars.push(("score_heatmaps".to_owned(), heatmaps.join(",\n")));
    // Panels below the metric panels move down by their height: `@@y:N@@` is N plus that height.
    let mut rest = TEMPLATE;
    while let Some(i) = rest.find("@@y:") {
        let after = &rest[i + 4..];
        let n: String = after.chars().take_while(char::is_ascii_digit).collect();
        if let Ok(y) = n.parse::<u64>() {
            vars.push((format!("y:{n}"), (y + height).to_string()));
        }
        rest = after;
    }
    let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    // The metric panels carry the install's label placeholders of their own: a second pass.
    fill(&fill(TEMPLATE, &vars), &pooling.vars())
}

/// `ragwatch:<metric>:...{cluster, namespace, stratum}` as the per-stratum row selects it.
fn selected(series: &str, extra: &str) -> String {
    format!(
        "{series}{{@@cluster@@=~\"$cluster\", namespace=~\"$namespace\", @@install@@=~\"$install\", stratum=~\"$stratum\"{extra}}}"
    )
}

fn target(expr: String, legend: &str, ref_id: &str) -> Value {
    json!({
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "expr": expr,
        "legendFormat": legend,
        "refId": ref_id,
        "range": true
    })
}

/// One metric's heatmap: its score histogram's buckets over time, for the judge the `judge`
/// variable picks, pooled across the selected replicas and strata.
fn heatmap(m: Quality, id: u64, x: u64, y: u64) -> Value {
    let histogram = m.spec().histogram;
    json!({
        "type": "heatmap",
        "id": id,
        "title": format!("{} scores: $judge judge", title(m)),
        "description": format!(
            "How the chosen judge's {words} scores spread over time: the score histogram's buckets ({histogram}_bucket), as scores per second per bucket, pooled across the selected replicas and strata. A mean can hold while the scores split into a good and a bad group; a band that darkens low is where to read verdicts (the exemplars on the by-judge panel name traces). The judge variable picks the judge: the judges do not share a scale.",
            words = words(m),
        ),
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": WIDTH, "h": HEIGHT},
        "fieldConfig": {
            "defaults": {
                "unit": "suffix: scores/s",
                "custom": {"scaleDistribution": {"type": "linear"}}
            },
            "overrides": []
        },
        "options": {
            "calculate": false,
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64, "exponent": 0.5, "reverse": false},
            "yAxis": {"axisPlacement": "left", "unit": "percentunit"},
            "rowsFrame": {"layout": "le"},
            "tooltip": {"show": true, "yHistogram": true},
            "legend": {"show": true}
        },
        "targets": [{
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "expr": format!(
                "sum by (le) (rate({histogram}_bucket{{@@cluster@@=~\"$cluster\", namespace=~\"$namespace\", @@install@@=~\"$install\", pod=~\"$pod\", stratum=~\"$stratum\", judge=\"$judge\"}}[$__rate_interval]))"
            ),
            "format": "heatmap",
            "legendFormat": "{{le}}",
            "refId": "A",
            "range": true
        }]
    })
}

/// One metric's panel.
fn panel(m: Quality, id: u64, x: u64, y: u64) -> Value {
    let name = m.name();
    let spec = m.spec();
    let mut description = format!(
        "Mean {words} per judge over 5 minutes, pooled across replicas (ragwatch:{name}:mean_5m): the offline judge on every trace, the LLM judge on the sample, and the combined estimate its alerts read. The judges do not share a scale: the floors (dashed) are on the LLM judge's scale, the combined estimate's and, if configured, the raw LLM mean's; the offline judge has none (its rule is a shift against its own baseline). If only the offline judge moved, read a few verdict records before acting. The dots are exemplars: each low or high bucket's latest verdict, hovered for its score and trace id; with the Prometheus data source's exemplar link set (docs/metrics.md), a click opens that trace in Tempo or Phoenix. The dotted p10 line is the 10th percentile of each judge's scores.",
        words = words(m),
    );
    if spec.alerts.in_scope_only {
        description.push_str(" Out-of-scope strata are low by design (a refusal scores 0) and left out of its alerts: watch their refusal ratio instead.");
    }
    let mut p10 = target(
        format!(
            "histogram_quantile(0.1, sum by (le, judge) (rate({}_bucket{{@@cluster@@=~\"$cluster\", namespace=~\"$namespace\", @@install@@=~\"$install\", pod=~\"$pod\", stratum=~\"$stratum\"}}[$__rate_interval])))",
            spec.histogram
        ),
        "p10 {{judge}}",
        "C",
    );
    p10["exemplar"] = json!(true);
    let links: Vec<Value> = Alert::of_metric(m)
        .into_iter()
        .map(|a| {
            json!({
                "title": format!("Runbook: {}", a.name()),
                "url": format!("${{runbook}}#{}", a.anchor()),
                "targetBlank": true
            })
        })
        .collect();
    json!({
        "type": "timeseries",
        "id": id,
        "title": format!("{} by judge: $stratum", title(m)),
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": WIDTH, "h": HEIGHT},
        "fieldConfig": {
            "defaults": {
                "unit": "percentunit",
                "custom": {"lineWidth": 1, "fillOpacity": 0, "showPoints": "never", "spanNulls": false},
                "min": 0,
                "max": 1
            },
            "overrides": [
                {
                    "matcher": {"id": "byRegexp", "options": "floor .*"},
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                        {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}
                    ]
                },
                {
                    "matcher": {"id": "byRegexp", "options": "p10 .*"},
                    "properties": [{"id": "custom.lineStyle", "value": {"fill": "dot"}}]
                }
            ]
        },
        "targets": [
            target(selected(&format!("ragwatch:{name}:mean_5m"), ""), "{{judge}}", "A"),
            target(selected(&format!("ragwatch:{name}:combined_mean_5m"), ""), "{{judge}}", "B"),
            target(
                selected(
                    "ragwatch:threshold_floor:ratio",
                    &format!(", judge!=\"offline\", metric=\"{name}\""),
                ),
                "floor {{judge}}",
                "D",
            ),
            p10
        ],
        "links": links,
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": true},
            "tooltip": {"mode": "multi", "sort": "none"}
        }
    })
}
