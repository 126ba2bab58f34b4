//! The generated rules as Prometheus reads them, with `promtool` (Debian's `prometheus` package,
//! installed by tests/run.sh): the tests' shortened rules pass its check, and the tuned rules of
//! `ragwatch rules --out` pass it and fire when their tuned threshold and pending duration say
//! (a promtool unit test on the tuned file). What needs no promtool is in tests/it/generated.rs.

use std::path::Path;
use std::process::Command;

use crate::common::repo;
use crate::generated::{TUNING, rules_out, short_rules};

#[test]
fn the_tests_shortened_rules_pass_promtool_check() {
    let short = short_rules();
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

/// `ragwatch rules --out DIR` with the tuning flags: the rules promtool checks, and the lag
/// alert's tuned threshold and pending duration decide when it fires.
#[test]
fn tuned_rules_pass_promtool_and_fire_at_the_tuned_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tuned");
    assert!(rules_out(&out, &TUNING).status.success());
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
    let shipped_file = repo().join("deploy/prometheus/rules.yaml");
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
}
