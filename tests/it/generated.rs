//! deploy/ and the runbook are `ragwatch rules`'s output: the checked-in files equal what the
//! generator writes, every quality metric has its recording rules and alerts, every alert its
//! firing unit test and runbook section, every metric its dashboard panel linking its alerts'
//! runbook sections; the tests' windows leave no shipped range behind; `ragwatch rules --check`
//! reports a hand edit; the tuning flags label every alert and refuse names that do not exist.
//! (Prometheus's own reading of them, with promtool, is in tests/it/rules.rs.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use ragwatch::dimensions::Quality;
use ragwatch::rules::{Pooling, Windows, generate};
use serde_json::Value;

use crate::common::repo;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap()
}

/// The test's own list of the per-metric alerts, from the metric's row: a floor and a shift alert
/// for every metric, a drift alert where `alerts.drift` says so. Written apart from the generator
/// so that a generator that drops an alert fails here.
fn expected_alerts() -> Vec<(Quality, String)> {
    let mut out = Vec::new();
    for m in Quality::ALL {
        let camel: String = m
            .name()
            .split('_')
            .map(|w| w[..1].to_uppercase() + &w[1..])
            .collect();
        let mut kinds = vec!["BelowFloor", "Shift"];
        if m.spec().alerts.drift {
            kinds.push("Drift");
        }
        for kind in kinds {
            out.push((m, format!("Ragwatch{camel}{kind}")));
        }
    }
    out
}

/// Every `- alert:` name in a rules file.
pub(crate) fn alert_names(rules: &str) -> Vec<String> {
    rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_checked_in_files_are_what_ragwatch_rules_writes() {
    let mut stale = Vec::new();
    for file in generate(&Windows::SHIPPED, &Pooling::shipped()) {
        let on_disk = std::fs::read_to_string(repo().join(file.path)).unwrap_or_default();
        if on_disk != file.text {
            stale.push(file.path);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from the generator's output: edit src/rules/templates/ or the metric's \
         row in src/dimensions.rs, then run `cargo run --release -- rules`"
    );
}

#[test]
fn every_metric_has_its_rules_alerts_unit_tests_panel_and_runbook_sections() {
    let rules = read("deploy/prometheus/rules.yaml");
    let tests = read("deploy/prometheus/rules_test.yaml");
    let runbook = read("docs/runbook.md");
    let dashboard: Value =
        serde_json::from_str(&read("deploy/grafana/ragwatch-dashboard.json")).unwrap();
    let alerts = alert_names(&rules);
    let mut missing = Vec::new();
    for m in Quality::ALL {
        let name = m.name();
        for record in [
            "mean_5m",
            "samples_5m",
            "combined_mean_5m",
            "combined_upper_5m",
        ] {
            if !rules.contains(&format!("- record: ragwatch:{name}:{record}\n")) {
                missing.push(format!("rule ragwatch:{name}:{record}"));
            }
        }
        for part in ["count", "sum"] {
            if !rules.contains(&format!(
                "(sum_over_time(ragwatch:{name}_ratio_{part}:delta["
            )) {
                missing.push(format!("{name}'s {part} in the shift rule's moments"));
            }
        }
    }
    for (m, alert) in expected_alerts() {
        if !alerts.contains(&alert) {
            missing.push(format!("alert {alert}"));
        }
        // Its panel: a query of the metric's mean and a link to the alert's runbook section.
        let anchor = format!("#{}", alert.to_lowercase());
        let panel = dashboard["panels"].as_array().unwrap().iter().find(|p| {
            p["targets"].as_array().into_iter().flatten().any(|t| {
                t["expr"]
                    .as_str()
                    .is_some_and(|e| e.starts_with(&format!("ragwatch:{}:mean_5m{{", m.name())))
            }) && p["links"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|l| l["url"].as_str().is_some_and(|u| u.ends_with(&anchor)))
        });
        if panel.is_none() {
            missing.push(format!("a dashboard panel of {} linking {alert}", m.name()));
        }
    }
    // Every alert, per metric or not: a runbook section and a unit test in which it fires.
    for alert in &alerts {
        if !runbook.contains(&format!("\n## {alert}\n")) {
            missing.push(format!("runbook section {alert}"));
        }
        if !tests.contains(&format!(
            "alertname: {alert}\n        exp_alerts:\n          - exp_labels:"
        )) {
            missing.push(format!("a unit test in which {alert} fires"));
        }
    }
    assert!(missing.is_empty(), "missing: {missing:#?}");
}

/// `ragwatch rules --root root` with `args`: the generated files written into, or checked in, `root`.
fn rules_at(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ragwatch"))
        .arg("rules")
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn ragwatch_rules_check_reports_a_hand_edit() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| rules_at(dir.path(), args);
    assert!(run(&[]).status.success());
    assert!(run(&["--check"]).status.success());
    let runbook = dir.path().join("docs/runbook.md");
    let text = std::fs::read_to_string(&runbook).unwrap();
    std::fs::write(&runbook, text.replace("## RagwatchFaithfulnessShift\n", "")).unwrap();
    let out = run(&["--check"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("docs/runbook.md"));
}

/// The windows of the tests that run the rules: 20 s, 40 s and a 310 s baseline, a 3 s pending
/// duration. (Not 300 s as the other tests: its sums would read like the shipped short window's.)
fn shortened_windows() -> Windows {
    Windows {
        short: Duration::from_secs(20),
        middle: Duration::from_secs(40),
        baseline: Duration::from_secs(310),
        health: Some(Duration::from_secs(20)),
        pending: Some(Duration::from_secs(3)),
        ..Windows::SHIPPED
    }
}

/// The rules with [`shortened_windows`].
pub(crate) fn short_rules() -> String {
    ragwatch::rules::rules_yaml(&shortened_windows(), &Pooling::shipped())
}

#[test]
fn the_tests_windows_leave_no_shipped_range_or_pending_duration() {
    let shipped = ragwatch::rules::rules_yaml(&Windows::SHIPPED, &Pooling::shipped());
    let windows = shortened_windows();
    let short = short_rules();
    for range in [
        "[1h]",
        "[24h]",
        "[10m]",
        "[15m]",
        "[4m59s999ms]",
        "[59m59s999ms]",
        "[23h59m59s999ms]",
    ] {
        assert!(shipped.contains(range), "the shipped rules read {range}");
        assert!(
            !short.contains(range),
            "the tests' rules still read {range}"
        );
    }
    let waits = |rules: &str, pending: &str| rules.lines().any(|l| l.trim() == pending);
    for pending in ["for: 5m", "for: 10m", "for: 15m"] {
        assert!(waits(&shipped, pending));
        assert!(
            !waits(&short, pending),
            "the tests' rules still wait {pending}"
        );
    }
    assert!(short.contains("[19s999ms]") && short.contains("[5m9s999ms]"));
    // The same rules otherwise: as many rules, each alert once.
    assert_eq!(alert_names(&shipped), alert_names(&short));
    // The drop scan keeps the look-back windows a baseline holds twice: 8 shipped, 5 here.
    let scan_windows = |rules: &str| {
        rules
            .matches("- record: ragwatch:scan_terms:increase\n")
            .count()
    };
    assert_eq!((scan_windows(&shipped), scan_windows(&short)), (8, 5));
    assert_eq!(
        shipped.matches("- record: ").count() - scan_windows(&shipped),
        short.matches("- record: ").count() - scan_windows(&short)
    );
    let dashboard = ragwatch::rules::dashboard_json(&windows, &Pooling::shipped());
    assert!(!dashboard.contains("[24h]") && dashboard.contains("[5m10s]"));
    assert!(dashboard.contains("window=\\\"20s\\\""));
}

/// The tuning flags of `ragwatch rules --out`, as a user might set them: a team label, a disabled
/// alert, a pending duration and a threshold of the lag alert, a group interval.
pub(crate) const TUNING: [&str; 10] = [
    "--rule-label",
    "team=rag",
    "--disable-alert",
    "RagwatchNoTraces",
    "--alert-for",
    "RagwatchConsumerLagGrowing=30m",
    "--alert-threshold",
    "RagwatchConsumerLagGrowing.lag_messages=50000",
    "--group-interval",
    "1m",
];

/// `ragwatch rules --out out` with `flags`.
pub(crate) fn rules_out(out: &std::path::Path, flags: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ragwatch"))
        .args(["rules", "--out"])
        .arg(out)
        .args(flags)
        .output()
        .unwrap()
}

/// `ragwatch rules --out DIR` with the tuning flags ([`TUNING`]): the extra label is on every alert
/// and on no recording rule, a disabled alert is gone, every group takes the interval, and the
/// PrometheusRule manifest carries the same groups.
#[test]
fn tuned_rules_carry_the_tuned_labels_and_groups() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tuned");
    let tuned = rules_out(&out, &TUNING);
    assert!(
        tuned.status.success(),
        "{}",
        String::from_utf8_lossy(&tuned.stderr)
    );
    let rules = std::fs::read_to_string(out.join("rules.yaml")).unwrap();
    let shipped = read("deploy/prometheus/rules.yaml");
    let mut names = alert_names(&shipped);
    names.retain(|n| n != "RagwatchNoTraces");
    assert_eq!(alert_names(&rules), names);
    // One team label in each alert's block, none elsewhere.
    let mut in_alert = false;
    let mut teams = 0;
    for line in rules.lines() {
        if line.starts_with("      - ") {
            in_alert = line.starts_with("      - alert: ");
        }
        if line == "          team: \"rag\"" {
            assert!(in_alert, "a recording rule got the alerts' label");
            teams += 1;
        }
    }
    assert_eq!(teams, names.len());
    assert_eq!(
        rules.matches("\n    interval: 1m\n").count(),
        rules.matches("\n  - name: ").count()
    );
    // The manifest carries the same groups.
    let manifest = std::fs::read_to_string(out.join("prometheusrule.yaml")).unwrap();
    let groups = &rules[rules.find("groups:").unwrap()..];
    let indented: String = groups
        .lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_owned()
            } else {
                format!("  {l}\n")
            }
        })
        .collect();
    assert!(manifest.ends_with(&indented));
}

/// A tuning flag naming what does not exist is refused, with the names that do; without `--out`,
/// tuning never touches the repository's files.
#[test]
fn tuning_refuses_names_that_do_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tuned");
    let run = |extra: &[&str]| rules_out(&out, extra);
    // Names that do not exist are refused, with what exists.
    for (flag, value, names) in [
        ("--disable-alert", "RagwatchNope", "RagwatchNoTraces"),
        (
            "--alert-threshold",
            "RagwatchNoTraces.x=1",
            "RagwatchConsumerLagGrowing.lag_messages",
        ),
        (
            "--alert-for",
            "RagwatchNoTraces=soon",
            "Prometheus duration",
        ),
    ] {
        let refused = run(&[flag, value]);
        assert_eq!(refused.status.code(), Some(2), "{flag} {value}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains(names),
            "{}",
            String::from_utf8_lossy(&refused.stderr)
        );
    }
    // Without --out, tuning never touches the repository's files.
    let refused = rules_at(dir.path(), &["--rule-label", "team=rag"]);
    assert_eq!(refused.status.code(), Some(2));
}

/// The chart folder is packaged and installed alone: no link anywhere under deploy/helm (a copied
/// or packaged chart would ship the link's text), and each file of files/ is its source's copy
/// (`ragwatch rules` writes them, `ragwatch rules --check` fails when one differs).
#[test]
fn the_chart_is_self_contained() {
    fn walk(dir: &Path, links: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                links.push(e.path());
            } else if t.is_dir() {
                walk(&e.path(), links);
            }
        }
    }
    let mut links = Vec::new();
    walk(&repo().join("deploy/helm"), &mut links);
    assert_eq!(links, Vec::<PathBuf>::new());
    let mut copied = BTreeSet::new();
    for (copy, source) in ragwatch::rules::CHART_COPIES {
        assert_eq!(
            std::fs::read_to_string(repo().join(copy)).unwrap(),
            std::fs::read_to_string(repo().join(source)).unwrap(),
            "{copy} is not {source}: run `cargo run -- rules`"
        );
        copied.insert(repo().join(copy));
    }
    // The rules are the generator's own chart flavour (each threshold a marker), not a copy.
    copied.insert(repo().join("deploy/helm/ragwatch").join("files/rules.yaml"));
    let files: BTreeSet<PathBuf> =
        std::fs::read_dir(repo().join("deploy/helm/ragwatch").join("files"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
    assert_eq!(
        files, copied,
        "every file in files/ is a copy `ragwatch rules` keeps"
    );
}

/// `ragwatch rules` keeps the chart's copies: a copy that differs from its source, or a link in
/// its place, fails `--check` by name; writing replaces the link with a file and leaves the link's
/// target as it was.
#[test]
fn ragwatch_rules_writes_the_chart_copies_and_replaces_links() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| rules_at(dir.path(), args);
    assert!(run(&[]).status.success());
    let source = dir.path().join("deploy/kubernetes/base/ragwatch.toml");
    let copy = dir.path().join("deploy/helm/ragwatch/files/ragwatch.toml");
    std::fs::create_dir_all(source.parent().unwrap()).unwrap();
    std::fs::write(&source, "[source]\nkind = \"kafka\"\n").unwrap();
    let out = run(&["--check"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("deploy/helm/ragwatch/files/ragwatch.toml"),
        "{out:?}"
    );
    // A link to the source reads the same text, and still fails the check.
    std::os::unix::fs::symlink(&source, &copy).unwrap();
    assert_eq!(
        std::fs::read_to_string(&copy).unwrap(),
        std::fs::read_to_string(&source).unwrap()
    );
    assert!(!run(&["--check"]).status.success());
    assert!(run(&[]).status.success());
    assert!(run(&["--check"]).status.success());
    assert!(!copy.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(
        std::fs::read_to_string(&copy).unwrap(),
        "[source]\nkind = \"kafka\"\n"
    );
    assert_eq!(
        std::fs::read_to_string(&source).unwrap(),
        "[source]\nkind = \"kafka\"\n"
    );
    // The chart's rules, each threshold marker read as its default, are the rules file.
    let rules =
        std::fs::read_to_string(dir.path().join("deploy/helm/ragwatch/files/rules.yaml")).unwrap();
    let marker = regex::Regex::new(r"\(\(threshold:[A-Za-z]+\.[a-z_]+=([^)]*)\)\)").unwrap();
    assert!(marker.is_match(&rules));
    assert_eq!(
        marker.replace_all(&rules, "$1"),
        std::fs::read_to_string(dir.path().join("deploy/prometheus/rules.yaml")).unwrap()
    );
}
