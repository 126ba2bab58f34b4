//! `ragwatch rules`: the shipped Prometheus rules, their promtool unit tests, the PrometheusRule
//! manifest, the Alertmanager route and inhibit rules, the Grafana dashboard and the runbook, written from [`Quality::ALL`] and each metric's
//! [`QualitySpec`](crate::dimensions::QualitySpec). What is the same for every metric comes from the
//! templates in `src/rules/templates/`; what is per metric (recording rules, alerts, their unit
//! tests, dashboard panels, runbook sections) is generated here, so a new metric brings its own.
//!
//! The output is byte-stable: the checked-in files are this module's output with
//! [`Windows::SHIPPED`], and a test fails when they differ. Tests that run the rules in a real
//! Prometheus generate them at another timescale ([`Windows::at_scale`]: every duration divided by
//! one factor) instead of editing the text.

mod alert;
mod alertmanager;
mod dashboard;
mod manifest;
mod pooling;
mod runbook;
mod scan;
mod template;
mod tuning;
mod unit_test;
mod window;

use std::path::Path;

use crate::dimensions::Quality;

pub(crate) use alert::Alert;
pub use pooling::Pooling;
pub use tuning::{Threshold, Tuning, key_value};
pub use window::{Scale, Windows, parse_scale, prom_duration};

/// A generated file: its path from the repository root and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Path from the repository root.
    pub path: &'static str,
    /// The whole text.
    pub text: String,
}

/// Where the rules are written, from the repository root.
pub(crate) const RULES_PATH: &str = "deploy/prometheus/rules.yaml";
/// Where their promtool unit tests are written.
pub(crate) const RULE_TESTS_PATH: &str = "deploy/prometheus/rules_test.yaml";
/// Where the PrometheusRule manifest is written.
pub(crate) const MANIFEST_PATH: &str =
    "deploy/kubernetes/components/monitoring/prometheusrule.yaml";
/// Where the Grafana dashboard is written.
pub(crate) const DASHBOARD_PATH: &str =
    "deploy/kubernetes/components/dashboard/ragwatch-dashboard.json";
/// Where the example Alertmanager configuration is written.
pub(crate) const ALERTMANAGER_PATH: &str = "deploy/alertmanager/alertmanager.yml";
/// Where the same route and inhibit rule are written as a Prometheus Operator AlertmanagerConfig.
pub(crate) const ALERTMANAGER_CONFIG_PATH: &str =
    "deploy/kubernetes/components/monitoring/alertmanagerconfig.yaml";
/// Where the Helm chart's copy of the rules is written: the rules file with every tunable
/// threshold kept as a marker, which the chart's PrometheusRule template fills from its values.
pub(crate) const CHART_RULES_PATH: &str = "deploy/helm/ragwatch/files/rules.yaml";
/// Where the runbook is written.
pub(crate) const RUNBOOK_PATH: &str = "docs/runbook.md";

/// The Helm chart's copies of files deploy/ ships, as (copy, source): the chart folder is packaged
/// and installed alone, so it holds real files rather than links out of it.
pub const CHART_COPIES: [(&str, &str); 5] = [
    (
        "deploy/helm/ragwatch/files/ragwatch-dashboard.json",
        DASHBOARD_PATH,
    ),
    (
        "deploy/helm/ragwatch/files/alertmanagerconfig.yaml",
        ALERTMANAGER_CONFIG_PATH,
    ),
    (
        "deploy/helm/ragwatch/files/ragwatch.toml",
        "deploy/kubernetes/base/ragwatch.toml",
    ),
    (
        "deploy/helm/ragwatch/files/analysistemplate.yaml",
        "deploy/kubernetes/components/rollout-gates/argo/analysistemplate.yaml",
    ),
    (
        "deploy/helm/ragwatch/files/metrictemplate.yaml",
        "deploy/kubernetes/components/rollout-gates/flagger/metrictemplate.yaml",
    ),
];

/// The chart's copies ([`CHART_COPIES`]), each with its source's text: a generated source's from
/// `generated`, a hand-written one's as it is on disk under `root` (none for a source `root` does
/// not hold: a root with only the generated files gets only their copies).
pub fn chart_copies(root: &Path, generated: &[File]) -> std::io::Result<Vec<File>> {
    let mut copies = Vec::new();
    for &(path, source) in &CHART_COPIES {
        let text = match generated.iter().find(|f| f.path == source) {
            Some(f) => f.text.clone(),
            None => match std::fs::read_to_string(root.join(source)) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("cannot read {source}: {e}"),
                    ));
                }
            },
        };
        copies.push(File { path, text });
    }
    Ok(copies)
}

/// Every generated file, with `windows` in the rules and the dashboard's queries, pooling each
/// install apart by `pooling`'s labels.
pub fn generate(windows: &Windows, pooling: &Pooling) -> Vec<File> {
    let rules = rules_yaml(windows, pooling);
    vec![
        File {
            path: CHART_RULES_PATH,
            text: alert::rules_yaml(windows, pooling, tuning::chart_marker),
        },
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
            text: dashboard::dashboard_json(windows, pooling),
        },
        File {
            path: ALERTMANAGER_PATH,
            text: alertmanager::alertmanager_yml(pooling),
        },
        File {
            path: ALERTMANAGER_CONFIG_PATH,
            text: alertmanager::alertmanager_config(pooling),
        },
        File {
            path: RUNBOOK_PATH,
            text: runbook::runbook(),
        },
    ]
}

/// Writes every generated file and the chart's copies of deploy/'s files under `root`, or with
/// `check` writes nothing; returns the paths whose text on disk differs from the generated one, or
/// that are links rather than files (all of them written, unless `check`).
pub fn write(
    root: &Path,
    windows: &Windows,
    pooling: &Pooling,
    check: bool,
) -> std::io::Result<Vec<&'static str>> {
    let mut stale = Vec::new();
    let generated = generate(windows, pooling);
    let copies = chart_copies(root, &generated)?;
    for file in generated.into_iter().chain(copies) {
        let path = root.join(file.path);
        let link = path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink());
        let on_disk = std::fs::read_to_string(&path).ok();
        if !link && on_disk.as_deref() == Some(file.text.as_str()) {
            continue;
        }
        stale.push(file.path);
        if !check {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            if link {
                // Written through, a link would overwrite its target.
                std::fs::remove_file(&path)?;
            }
            std::fs::write(&path, &file.text).map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()))
            })?;
        }
    }
    Ok(stale)
}

/// The rules file (`deploy/prometheus/rules.yaml` with [`Windows::SHIPPED`] and
/// [`Pooling::shipped`]).
pub fn rules_yaml(windows: &Windows, pooling: &Pooling) -> String {
    alert::rules_yaml(windows, pooling, |t| t.default.clone())
}

/// The tunable thresholds, as shipped.
pub fn thresholds() -> Vec<Threshold> {
    alert::thresholds()
}

/// The rules file and its PrometheusRule with `tuning` applied, or why `tuning` names something
/// that does not exist.
pub fn tuned(
    windows: &Windows,
    pooling: &Pooling,
    tuning: &Tuning,
) -> Result<(String, String), String> {
    let shipped = rules_yaml(windows, pooling);
    tuning.validate(&shipped, &thresholds())?;
    let rules = tuning.apply(&alert::rules_yaml(windows, pooling, |t| {
        tuning.threshold(t)
    }));
    let manifest = manifest::prometheus_rule(&rules);
    Ok((rules, manifest))
}

/// The Grafana dashboard's JSON with `windows` in its queries.
pub fn dashboard_json(windows: &Windows, pooling: &Pooling) -> String {
    dashboard::dashboard_json(windows, pooling)
}

/// Every per-metric alert ragwatch ships, metric by metric.
pub(crate) fn metric_alerts() -> Vec<Alert> {
    Quality::ALL
        .into_iter()
        .flat_map(Alert::of_metric)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Splits `text` into its duration tokens (`5m`, `23h59m59s999ms`, `1m20s`: units ms, s, m,
    /// h, d, w, y, standing alone, not inside a name such as `mean_5m`) and the text around them.
    fn durations(text: &str) -> (String, Vec<Duration>) {
        let b = text.as_bytes();
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        let (mut rest, mut found) = (String::new(), Vec::new());
        let mut i = 0;
        while i < b.len() {
            if b[i].is_ascii_digit() && (i == 0 || !word(b[i - 1])) {
                // Parts of a number and a unit, as many as follow one another.
                let (mut j, mut ms, mut parts) = (i, 0u128, 0);
                loop {
                    let start = j;
                    while j < b.len() && b[j].is_ascii_digit() {
                        j += 1;
                    }
                    if j == start {
                        break;
                    }
                    let n: u128 = text[start..j].parse().unwrap();
                    let unit = [
                        ("ms", 1),
                        ("s", 1_000),
                        ("m", 60_000),
                        ("h", 3_600_000),
                        ("d", 86_400_000),
                        ("w", 604_800_000),
                        ("y", 31_536_000_000),
                    ]
                    .into_iter()
                    .find(|(u, _)| text[j..].starts_with(u));
                    let Some((u, per)) = unit else {
                        j = start;
                        break;
                    };
                    j += u.len();
                    ms += n * per;
                    parts += 1;
                    if j < b.len() && !b[j].is_ascii_digit() {
                        break;
                    }
                }
                if parts > 0 && (j >= b.len() || !word(b[j])) {
                    found.push(Duration::from_millis(ms as u64));
                    rest.push_str("<duration>");
                    i = j;
                    continue;
                }
                // A number that is not a duration: copied up to its end.
                let mut k = i;
                while k < b.len() && word(b[k]) {
                    k += 1;
                }
                rest.push_str(&text[i..k]);
                i = k;
                continue;
            }
            let c = text[i..].chars().next().unwrap();
            rest.push(c);
            i += c.len_utf8();
        }
        (rest, found)
    }

    #[test]
    fn duration_tokens_are_found_alone_and_not_inside_names() {
        let (rest, found) = durations("a[23h59m59s999ms] mean_5m for: 1m20s, 1x 24h 5 m");
        assert_eq!(
            rest,
            "a[<duration>] mean_5m for: <duration>, 1x <duration> 5 m"
        );
        assert_eq!(
            found,
            [
                Duration::from_millis(86_399_999),
                Duration::from_secs(80),
                Duration::from_secs(86_400)
            ]
        );
    }

    /// The rules at `--scale 15` are the shipped rules with every duration divided by 15: the same
    /// text around the durations, and each duration the shipped one over 15. The one exception is
    /// the millisecond of Prometheus's resolution: `offset 1ms` stays, and a window sum one
    /// millisecond short of its window (`[23h59m59s999ms]`) is one millisecond short of the
    /// scaled window (`[1h35m59s999ms]`).
    #[test]
    fn the_rules_at_a_scale_are_the_shipped_rules_with_every_duration_divided() {
        let pooling = Pooling::shipped();
        let shipped = rules_yaml(&Windows::SHIPPED, &pooling);
        let scale = Scale::new(15.0).unwrap();
        let scaled = rules_yaml(&Windows::at_scale(scale), &pooling);
        let (shipped_text, shipped_d) = durations(&shipped);
        let (scaled_text, scaled_d) = durations(&scaled);
        for (n, (a, b)) in shipped_text.lines().zip(scaled_text.lines()).enumerate() {
            assert_eq!(a, b, "line {} differs beyond its durations", n + 1);
        }
        assert_eq!(shipped_text, scaled_text);
        assert_eq!(shipped_d.len(), scaled_d.len());
        let ms = Duration::from_millis(1);
        for (d, e) in shipped_d.iter().zip(&scaled_d) {
            let divided = *e * 15 == *d;
            let resolution = *d == ms && *e == ms;
            let one_ms_short = (*e + ms) * 15 == *d + ms;
            assert!(
                divided || resolution || one_ms_short,
                "{d:?} at scale 15 reads {e:?}"
            );
        }
        // Every kind of duration is there, divided: windows, sums, the scan's look-backs and
        // labels, health ranges, pending durations, the review window.
        for (shipped_has, scaled_has) in [
            ("[24h]", "[1h36m]"),
            ("[1h]", "[4m]"),
            ("[4m59s999ms]", "[19s999ms]"),
            ("[23h59m59s999ms]", "[1h35m59s999ms]"),
            ("[2h39m59s999ms]", "[10m39s999ms]"),
            ("window: \"160m\"", "window: \"10m40s\""),
            ("window: \"1m\"", "window: \"4s\""),
            ("[10m]", "[40s]"),
            ("[15m]", "[1m]"),
            ("for: 5m\n", "for: 20s\n"),
            ("for: 1m\n", "for: 4s\n"),
            ("for: 15m\n", "for: 1m\n"),
        ] {
            assert!(shipped.contains(shipped_has), "shipped: {shipped_has}");
            assert!(scaled.contains(scaled_has), "scaled: {scaled_has}");
        }
        // Scale one is the shipped rules.
        assert_eq!(
            rules_yaml(&Windows::at_scale(Scale::ONE), &pooling),
            shipped
        );
    }

    #[test]
    fn a_scale_divides_to_the_millisecond_and_refuses_what_is_not_a_factor() {
        let s = parse_scale("7").unwrap();
        assert_eq!(
            s.of(Duration::from_secs(300)),
            Duration::from_millis(42_857)
        );
        assert_eq!(
            window::prom_duration(s.of(Duration::from_secs(300))),
            "42s857ms"
        );
        for bad in ["0", "-2", "inf", "NaN", "x"] {
            assert!(parse_scale(bad).is_err(), "{bad}");
        }
    }
}
