//! The rules file: the template's fixed groups with each metric's recording rules and alerts.

use super::pooling::Pooling;
use super::template::fill;
use super::tuning::{Threshold, replace_thresholds, thresholds_of};
use super::window::Windows;
use crate::dimensions::Quality;

const TEMPLATE: &str = include_str!("templates/rules.yaml");

/// Where the runbook's sections are published; an alert's `runbook_url` is this plus its anchor.
pub(super) const RUNBOOK_URL: &str =
    "https://github.com/ragwatch/ragwatch/blob/main/docs/runbook.md";

/// The per-metric alerts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AlertKind {
    /// The combined estimate's upper bound is below the floor.
    BelowFloor,
    /// The combined estimate dropped from its baseline (metrics with `alerts.drift`).
    Drift,
    /// The offline judge's scale-free shift from its own baseline.
    Shift,
}

/// One metric's alert of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Alert {
    /// The metric it watches.
    pub metric: Quality,
    /// Which rule.
    pub kind: AlertKind,
}

impl Alert {
    /// The metric's alerts, in the order the rules file lists them.
    pub(crate) fn of_metric(metric: Quality) -> Vec<Alert> {
        let mut kinds = vec![AlertKind::BelowFloor];
        if metric.spec().alerts.drift {
            kinds.push(AlertKind::Drift);
        }
        kinds.push(AlertKind::Shift);
        kinds
            .into_iter()
            .map(|kind| Alert { metric, kind })
            .collect()
    }

    /// The alert name: `Ragwatch<Quality><Kind>`.
    pub fn name(&self) -> String {
        let kind = match self.kind {
            AlertKind::BelowFloor => "BelowFloor",
            AlertKind::Drift => "Drift",
            AlertKind::Shift => "Shift",
        };
        format!("Ragwatch{}{kind}", camel(self.metric))
    }

    /// The runbook section's anchor: the name in lower case.
    pub fn anchor(&self) -> String {
        self.name().to_lowercase()
    }

    /// `critical` or `warning`.
    pub fn severity(&self) -> &'static str {
        match self.kind {
            AlertKind::BelowFloor if self.metric.spec().alerts.floor_pages => "critical",
            AlertKind::Drift => "critical",
            AlertKind::BelowFloor | AlertKind::Shift => "warning",
        }
    }

    /// How long its condition holds before it fires, as shipped (seconds): the drop scan a
    /// minute (its threshold already weighs the evidence of up to 160 minutes), another page one
    /// short window, a warning two.
    pub(crate) fn pending_secs(&self) -> u64 {
        if self.kind == AlertKind::Drift {
            60
        } else if self.severity() == "critical" {
            300
        } else {
            600
        }
    }

    /// Its rule in the `ragwatch.alerts` group.
    fn rule(&self, windows: &Windows, pooling: &Pooling) -> String {
        let m = self.metric;
        let spec = m.spec();
        let name = m.name();
        let mut vars = vec![
            ("alert", self.name()),
            ("metric", name.to_owned()),
            ("words", words(m)),
            ("title", title(m)),
            ("for", windows.pending_for(self.pending_secs())),
            ("severity", self.severity().to_owned()),
            (
                "stage_label",
                spec.alerts
                    .stage
                    .map(|s| format!("\n          stage: {s}"))
                    .unwrap_or_default(),
            ),
            ("runbook_url", format!("{RUNBOOK_URL}#{}", self.anchor())),
            ("meaning", spec.alerts.meaning.to_owned()),
        ];
        let in_scope = spec.alerts.in_scope_only;
        let (template, scope_comment) = match self.kind {
            AlertKind::BelowFloor => (
                FLOOR,
                "\n        # Out-of-scope strata are excluded: their questions should be declined\n        # (RagwatchRefusalRatioLow watches them). Scope comes from ragwatch's config\n        # (ragwatch_stratum_info), not from the stratum's name.",
            ),
            AlertKind::Drift => (DRIFT, ""),
            AlertKind::Shift => (
                SHIFT,
                " Out-of-scope strata are excluded,\n        # as for the floor.",
            ),
        };
        let scope_comment = if in_scope { scope_comment } else { "" };
        vars.push(("scope_comment", scope_comment.to_owned()));
        vars.push(("scope", scope_clause(in_scope)));
        vars.extend(pooling.vars());
        vars.extend(windows.vars());
        fill(template, &vars)
    }
}

/// `answer_relevancy` -> `AnswerRelevancy`.
pub(super) fn camel(m: Quality) -> String {
    m.name().split('_').map(capitalized).collect()
}

/// `answer_relevancy` -> `answer relevancy`.
pub(super) fn words(m: Quality) -> String {
    m.name().replace('_', " ")
}

/// `answer_relevancy` -> `Answer relevancy`.
pub(super) fn title(m: Quality) -> String {
    capitalized(&words(m))
}

/// `warning` -> `Warning`.
pub(super) fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn scope_clause(in_scope_only: bool) -> String {
    if in_scope_only {
        "\n          unless on (@@pool@@, stratum) ragwatch_stratum_info{scope=\"out_of_scope\"}"
            .to_owned()
    } else {
        String::new()
    }
}

/// The histogram's recording-rule stem: `faithfulness_ratio`.
fn stem(m: Quality) -> &'static str {
    let h = m.spec().histogram;
    h.strip_prefix("ragwatch_").unwrap_or(h)
}

/// The tunable thresholds of the rules, as shipped.
pub(super) fn thresholds() -> Vec<Threshold> {
    thresholds_of(TEMPLATE)
}

/// The rules file with `windows`, pooled over `pooling`'s labels, each tunable threshold written
/// as `threshold` gives it.
pub(super) fn rules_yaml(
    windows: &Windows,
    pooling: &Pooling,
    threshold: impl Fn(&Threshold) -> String,
) -> String {
    let template = replace_thresholds(TEMPLATE, threshold);
    let mut vars = windows.vars();
    vars.extend(pooling.vars());
    let mut deltas = String::new();
    let mut means = String::new();
    let mut combined = String::new();
    let mut alerts = String::new();
    for m in Quality::ALL {
        for part in ["count", "sum"] {
            let series = format!("{}_{part}", stem(m));
            deltas.push_str(&format!("      - record: ragwatch:{series}:last\n        expr: ragwatch_{series}\n      - record: ragwatch:{series}:delta\n        expr: (ragwatch:{series}:last - last_over_time(ragwatch:{series}:last[@@middle@@] offset 1ms) >= 0) or ragwatch:{series}:last\n"));
        }
        for (window, sum) in [
            ("5m", "@@short_sum@@"),
            ("1h", "@@middle_sum@@"),
            ("24h", "@@baseline_sum@@"),
        ] {
            means.push_str(&format!("      - record: ragwatch:{name}:mean_{window}\n        expr: sum by (@@pool@@, stratum, judge) (sum_over_time(ragwatch:{s}_sum:delta[{sum}])) / sum by (@@pool@@, stratum, judge) (sum_over_time(ragwatch:{s}_count:delta[{sum}]))\n",
                name = m.name(),
                s = stem(m),));
        }
        means.push_str(&format!("      - record: ragwatch:{name}:samples_5m\n        expr: sum by (@@pool@@, stratum, judge) (sum_over_time(ragwatch:{s}_count:delta[@@short_sum@@]))\n",
            name = m.name(),
            s = stem(m),));
        let mut estimates = vec![
            ("combined_mean_5m", "estimate:mean_5m"),
            ("combined_upper_5m", "estimate:upper_5m"),
            ("combined_lower_5m", "estimate:lower_5m"),
            ("combined_samples_5m", ""),
            ("combined_mean_24h", "estimate:mean_24h"),
        ];
        if m.spec().alerts.drift {
            estimates.push(("combined_drop_llr", "estimate:scan_llr"));
        }
        for (record, source) in estimates {
            let expr = if source.is_empty() {
                format!(
                    "max without (metric, term) (ragwatch:estimate_terms:increase5m{{metric=\"{}\",term=\"k\"}})",
                    m.name()
                )
            } else {
                format!(
                    "max without (metric) (ragwatch:{source}{{metric=\"{}\"}})",
                    m.name()
                )
            };
            combined.push_str(&format!("      - record: ragwatch:{}:{record}\n        expr: {expr}\n        labels:\n          judge: combined\n",
                m.name()));
        }
        for alert in Alert::of_metric(m) {
            alerts.push_str(&alert.rule(windows, pooling));
        }
    }
    let per_metric = |part: &str, sum: &str| {
        Quality::ALL
            .into_iter()
            .map(|m| {
                format!(
                    "label_replace(sum by (@@pool@@, stratum, judge) (sum_over_time(ragwatch:{}_{part}:delta[{sum}])), \"metric\", \"{}\", \"\", \"\")",
                    stem(m),
                    m.name()
                )
            })
            .collect::<Vec<_>>()
            .join("\n          or ")
    };
    let blocks = [
        ("scan", super::scan::records(windows)),
        ("metric_deltas", deltas),
        ("metric_means", means),
        ("metric_combined", combined),
        ("metric_alerts", alerts),
        ("score_count_short", per_metric("count", "@@short_sum@@")),
        ("score_sum_short", per_metric("sum", "@@short_sum@@")),
        (
            "score_count_baseline",
            per_metric("count", "@@baseline_sum@@"),
        ),
        ("score_sum_baseline", per_metric("sum", "@@baseline_sum@@")),
    ];
    // The blocks hold window placeholders of their own: fill them in a second pass.
    let with_blocks = fill(
        &template,
        &blocks
            .iter()
            .map(|(k, v)| (*k, v.trim_end_matches('\n').to_owned()))
            .chain(vars.iter().map(|(k, _)| (*k, format!("@@{k}@@"))))
            .collect::<Vec<_>>(),
    );
    fill(&with_blocks, &vars)
}

const FLOOR: &str = r#"      - alert: @@alert@@
        # The combined estimate's upper confidence bound is below the floor: even the most favourable
        # reading of the short window is too low, with enough LLM-judged pairs behind it.@@scope_comment@@
        expr: |
          (
            ragwatch:@@metric@@:combined_upper_5m
              < on (@@pool@@, stratum, judge) ragwatch:threshold_floor:ratio{metric="@@metric@@", judge="combined"}
          )
          and on (@@pool@@, stratum)
          (
            ragwatch:@@metric@@:combined_samples_5m
              >= on (@@pool@@, stratum, judge) ragwatch:threshold_min_samples:count{metric="@@metric@@", judge="combined"}
          )@@scope@@
        for: @@for@@
        labels:
          severity: @@severity@@
          metric: @@metric@@@@stage_label@@
        annotations:
          summary: "@@title@@ of stratum {{ $labels.stratum }} is below its floor"
          description: >-
            Over the last 5 minutes, the combined estimate of @@words@@ in stratum {{ $labels.stratum }} is
            {{ with printf "ragwatch:@@metric@@:combined_mean_5m{@@pool_match@@,stratum='%s'}" @@pool_args@@ $labels.stratum | query }}{{ . | first | value | humanizePercentage }}{{ end }}
            (interval {{ with printf "ragwatch:@@metric@@:combined_lower_5m{@@pool_match@@,stratum='%s'}" @@pool_args@@ $labels.stratum | query }}{{ . | first | value | humanizePercentage }}{{ end }}
            to {{ $value | humanizePercentage }}, {{ with printf "ragwatch:@@metric@@:combined_samples_5m{@@pool_match@@,stratum='%s'}" @@pool_args@@ $labels.stratum | query }}{{ . | first | value | printf "%.0f" }}{{ end }} LLM-judged traces):
            even its upper bound is below the floor of
            {{ with printf "ragwatch:threshold_floor:ratio{@@pool_match@@,metric='@@metric@@',stratum='%s',judge='combined'}" @@pool_args@@ $labels.stratum | query }}{{ . | first | value | humanizePercentage }}{{ end }};
            @@meaning@@.{{ range printf "max by (stage) (ragwatch:diagnosis:max{@@pool_match@@,stratum='%s'}) == 1" @@pool_args@@ $labels.stratum | query | sortByLabel "stage" }} Diagnosis: look at {{ .Labels.stage }}.{{ end }}
          runbook_url: "@@runbook_url@@"
"#;

const DRIFT: &str = r#"      - alert: @@alert@@
        # The drop scan (src/window/scan.rs): the largest log-likelihood ratio, over look-back windows
        # of 1 to 160 minutes and drops of 1, 2 and 4 times max_drop, of "dropped" against "unchanged",
        # each window against the reference (the @@baseline@@ baseline before the longest look-back),
        # reaches windows.page_llr; each window and its reference with at least min_samples
        # LLM-judged pairs. A bounded-memory CUSUM: at ~60
        # verdicts per 5 minutes a drop from 90 % to 50 % faithful answers pages in about 8 minutes on
        # average, within the sizing table's ratio of the fastest any rule with one false page per
        # stratum-year can (benches/page_power.rs; docs/judges.md).
        expr: |
          ragwatch:@@metric@@:combined_drop_llr
            >= on (@@pool@@) group_left () ragwatch:threshold_page_llr:max
          # A judge change is a metric reset: no drift against a baseline from another judge.
          unless on (@@pool@@) (ragwatch:judge_models:count_24h > 1)
        for: @@for@@
        labels:
          severity: @@severity@@
          metric: @@metric@@@@stage_label@@
        annotations:
          summary: "@@title@@ of stratum {{ $labels.stratum }} dropped from its @@baseline@@ baseline"
          description: >-
            {{ $w := "" }}{{ with printf "topk(1, max by (window) (ragwatch:scan:llr{@@pool_match@@,metric='@@metric@@',stratum='%s'}))" @@pool_args@@ $labels.stratum | query }}{{ with . | first }}{{ $w = .Labels.window }}{{ end }}{{ end }}The combined estimate of @@words@@ in stratum {{ $labels.stratum }} over the last {{ $w }}
            is {{ with printf "ragwatch:scan:window_mean{@@pool_match@@,metric='@@metric@@',stratum='%s',window='%s'}" @@pool_args@@ $labels.stratum $w | query }}{{ . | first | value | humanizePercentage }}{{ end }},
            against {{ with printf "ragwatch:scan:rest_mean{@@pool_match@@,metric='@@metric@@',stratum='%s',window='%s'}" @@pool_args@@ $labels.stratum $w | query }}{{ . | first | value | humanizePercentage }}{{ end }}
            over its @@baseline@@ baseline before the last @@horizon@@: the evidence of a drop (log-likelihood ratio {{ $value | printf "%.1f" }},
            paging at {{ with printf "ragwatch:threshold_page_llr:max{@@pool_match@@}" @@pool_args@@ | query }}{{ . | first | value | printf "%.1f" }}{{ end }}) is beyond what a healthy stratum shows once a year.
          runbook_url: "@@runbook_url@@"
"#;

const SHIFT: &str = r#"      - alert: @@alert@@
        # The offline judge's scale-free rule: its short-window mean is significantly and materially
        # below the rest of its baseline. The offline score is a probability on a compressed scale; it
        # has no floor, only this comparison with itself.@@scope_comment@@
        expr: |
          (
            ragwatch:shift:z_5m{metric="@@metric@@"}
              >= on (@@pool@@, metric, stratum, judge) ragwatch:threshold_shift_z:max
          )
          and on (@@pool@@, metric, stratum, judge)
          (
            ragwatch:shift:effect_sd_5m
              >= on (@@pool@@, metric, stratum, judge) ragwatch:threshold_shift_sd:max
          )
          and on (@@pool@@, metric, stratum, judge)
          (
            ragwatch:score_count:increase5m
              >= on (@@pool@@, metric, stratum, judge) ragwatch:threshold_min_samples:count
          )
          and on (@@pool@@, metric, stratum, judge)
          (
            ragwatch:shift:baseline_count_24h
              >= on (@@pool@@, metric, stratum, judge) ragwatch:threshold_min_samples:count
          )
          # A reference with less history than the window it judges is mostly noise.
          and on (@@pool@@, metric, stratum, judge)
          (
            ragwatch:shift:baseline_count_24h
              >= on (@@pool@@, metric, stratum, judge) ragwatch:score_count:increase5m
          )@@scope@@
          unless on (@@pool@@) (ragwatch:judge_models:count_24h > 1)
        for: @@for@@
        labels:
          severity: @@severity@@
          metric: @@metric@@@@stage_label@@
        annotations:
          summary: "The {{ $labels.judge }} judge's @@words@@ of stratum {{ $labels.stratum }} shifted down from its baseline"
          description: >-
            The {{ $labels.judge }} judge's 5-minute mean @@words@@ in stratum {{ $labels.stratum }} is
            {{ with printf "ragwatch:shift:short_mean_5m{@@pool_match@@,metric='@@metric@@',stratum='%s',judge='%s'}" @@pool_args@@ $labels.stratum $labels.judge | query }}{{ . | first | value | printf "%.3f" }}{{ end }}
            against {{ with printf "ragwatch:shift:baseline_mean_24h{@@pool_match@@,metric='@@metric@@',stratum='%s',judge='%s'}" @@pool_args@@ $labels.stratum $labels.judge | query }}{{ . | first | value | printf "%.3f" }}{{ end }}
            over the rest of the last 24 hours: z = {{ $value | printf "%.1f" }},
            {{ with printf "ragwatch:shift:effect_sd_5m{@@pool_match@@,metric='@@metric@@',stratum='%s',judge='%s'}" @@pool_args@@ $labels.stratum $labels.judge | query }}{{ . | first | value | printf "%.2f" }}{{ end }}
            baseline standard deviations lower (scores on that judge's own scale).
          runbook_url: "@@runbook_url@@"
"#;
