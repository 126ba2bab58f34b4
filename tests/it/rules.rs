//! deploy/ and the runbook are `ragwatch rules`'s output: the checked-in files equal what the
//! generator writes, every quality metric has its recording rules and alerts, every alert its
//! firing unit test and runbook section, every metric its dashboard panel linking its alerts'
//! runbook sections; the tests' windows leave no shipped range behind. Needs `promtool` (Debian's
//! `prometheus` package, installed by tests/run.sh) for the last test only.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ragwatch::dimensions::Quality;
use ragwatch::rules::{Pooling, Windows, generate};
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
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
fn alert_names(rules: &str) -> Vec<String> {
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
        let on_disk = std::fs::read_to_string(root().join(file.path)).unwrap_or_default();
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

#[test]
fn the_tests_windows_leave_no_shipped_range_or_pending_duration() {
    let shipped = ragwatch::rules::rules_yaml(&Windows::SHIPPED, &Pooling::shipped());
    let windows = Windows {
        short: Duration::from_secs(20),
        middle: Duration::from_secs(40),
        // Not 300 s as the other tests: its sums would read like the shipped short window's.
        baseline: Duration::from_secs(310),
        health: Some(Duration::from_secs(20)),
        pending: Some(Duration::from_secs(3)),
    };
    let short = ragwatch::rules::rules_yaml(&windows, &Pooling::shipped());
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

    // promtool accepts the shortened rules too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, &short).unwrap();
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .expect("promtool is installed by tests/run.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn ragwatch_rules_check_reports_a_hand_edit() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_ragwatch");
    let run = |args: &[&str]| {
        Command::new(bin)
            .arg("rules")
            .arg("--root")
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    assert!(run(&[]).status.success());
    assert!(run(&["--check"]).status.success());
    let runbook = dir.path().join("docs/runbook.md");
    let text = std::fs::read_to_string(&runbook).unwrap();
    std::fs::write(&runbook, text.replace("## RagwatchFaithfulnessShift\n", "")).unwrap();
    let out = run(&["--check"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("docs/runbook.md"));
}

/// `ragwatch rules --out DIR` with the tuning flags: the rules promtool checks, the alert's tuned
/// threshold and pending duration decide when it fires (a promtool unit test on the tuned file),
/// the extra label is on every alert and on no recording rule, a disabled alert is gone, and a
/// name that does not exist is refused with the names that do.
#[test]
fn tuned_rules_fire_at_the_tuned_threshold_and_carry_the_tuned_labels() {
    let dir = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_ragwatch");
    let out = dir.path().join("tuned");
    let run = |extra: &[&str]| {
        Command::new(bin)
            .args(["rules", "--out"])
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    let tuned = run(&[
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
    ]);
    assert!(
        tuned.status.success(),
        "{}",
        String::from_utf8_lossy(&tuned.stderr)
    );
    let rules = std::fs::read_to_string(out.join("rules.yaml")).unwrap();
    let check = Command::new("promtool")
        .args(["check", "rules"])
        .arg(out.join("rules.yaml"))
        .output()
        .expect("promtool is installed by tests/run.sh");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
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

    // Lag 30000 and growing for an hour: the shipped rules fire at 15 minutes; the tuned ones
    // (50000 messages) never, and at 60000 only after 30 minutes.
    let test = |file: &Path, lag: u64, at: &str, fires: bool| {
        let alerts = if fires {
            "            - exp_labels: {severity: warning, metric: lag, namespace: rag, job: rw, topic: t, team: rag}\n              \
             exp_annotations:\n                summary: ragwatch is falling behind topic t\n                \
             description: Consumer lag is 60.4k messages and growing.\n                \
             runbook_url: https://github.com/ragwatch/ragwatch/blob/main/docs/runbook.md#ragwatchconsumerlaggrowing\n"
        } else {
            ""
        };
        let exp = if fires {
            format!("exp_alerts:\n{alerts}")
        } else {
            "exp_alerts: []".to_owned()
        };
        let text = format!(
            "rule_files: [{}]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n      \
             - series: 'ragwatch_kafka_consumer_lag_messages{{namespace=\"rag\",job=\"rw\",topic=\"t\",partition=\"0\"}}'\n        \
             values: '{lag}+10x60'\n    alert_rule_test:\n      - eval_time: {at}\n        alertname: RagwatchConsumerLagGrowing\n        {exp}\n",
            file.display()
        );
        let path = dir
            .path()
            .join(format!("t-{lag}-{at}-{}.yaml", rand::random::<u32>()));
        std::fs::write(&path, text).unwrap();
        Command::new("promtool")
            .args(["test", "rules"])
            .arg(&path)
            .output()
            .unwrap()
    };
    let ok = |o: std::process::Output| {
        o.status.success().then_some(()).ok_or_else(|| {
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
        })
    };
    let shipped_file = root().join("deploy/prometheus/rules.yaml");
    let tuned_file = out.join("rules.yaml");
    // The shipped alert carries no team label: its expected labels differ, so it is checked by
    // firing at all (a failed expectation lists what fired).
    let fired = test(&shipped_file, 30000, "20m", false);
    let said = String::from_utf8_lossy(&fired.stdout).into_owned()
        + &String::from_utf8_lossy(&fired.stderr);
    assert!(
        said.contains("got:[\n            0:") && !fired.status.success(),
        "the shipped rule fires at 30000"
    );
    ok(test(&tuned_file, 30000, "50m", false)).unwrap();
    ok(test(&tuned_file, 60000, "20m", false)).unwrap();
    ok(test(&tuned_file, 60000, "40m", true)).unwrap();

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
    let refused = Command::new(bin)
        .args(["rules", "--root"])
        .arg(dir.path())
        .args(["--rule-label", "team=rag"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
}
