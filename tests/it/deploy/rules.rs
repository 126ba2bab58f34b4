//! The rules as Prometheus reads them: promtool checks them and runs their unit tests, every delta
//! rule differences its own recorded readings, the PrometheusRule carries exactly the plain rules
//! file, and a kustomize overlay patches in the tuned rules as docs/operations.md shows.

use std::process::Command;

use serde_json::Value;

use super::{check, kustomize, python, user_overlay};
use crate::common::{pipe, repo, run_ok};
use crate::generated::rules_out;

#[test]
fn rules_pass_promtool_check_and_unit_tests() {
    run_ok(
        Command::new("promtool")
            .args(["check", "rules", "deploy/prometheus/rules.yaml"])
            .current_dir(repo()),
    );
    let out = run_ok(
        Command::new("promtool")
            .args(["test", "rules", "deploy/prometheus/rules_test.yaml"])
            .current_dir(repo()),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("SUCCESS"));
}

/// Each delta rule subtracts, from the reading its `last` rule has just recorded, the reading
/// recorded at the group's previous evaluation: the `last` rule reads the raw series once, in the
/// same group, before the delta (rules of a group run in order, each one's samples visible to the
/// next), so the delta never reads the raw series itself and a scrape landing mid-group cannot
/// make a delta and the next reading disagree.
#[test]
fn delta_rules_difference_recorded_readings_only() {
    let verdict = python(
        "import yaml,re\nfor g in yaml.safe_load(open('deploy/prometheus/rules.yaml'))['groups']:\n  names=[r.get('record','') for r in g['rules']]\n  for i,r in enumerate(g['rules']):\n    m=re.fullmatch(r'ragwatch:(\\w+):delta', r.get('record',''))\n    if not m: continue\n    f=m.group(1)\n    last='ragwatch:%s:last'%f\n    want='(%s - last_over_time(%s[1h] offset 1ms) >= 0) or %s'%(last,last,last)\n    j=names.index(last) if last in names else -1\n    ok=r['expr'].strip()==want and 0<=j<i and g['rules'][j]['expr'].strip()=='ragwatch_'+f\n    print(r['record'], 'ok' if ok else 'wrong')",
        &[],
    );
    let lines: Vec<&str> = verdict.lines().collect();
    for line in &lines {
        assert!(
            line.ends_with(" ok"),
            "{line}: not the delta of its own recorded readings"
        );
    }
    assert!(lines.len() >= 17, "{} delta rules", lines.len());
}

const PROMETHEUS_RULE: &str = "deploy/kubernetes/components/monitoring/prometheusrule.yaml";

#[test]
fn prometheus_rule_matches_the_plain_rules_file() {
    let verdict = python(
        "import yaml,sys\nplain=yaml.safe_load(open('deploy/prometheus/rules.yaml'))['groups']\ncr=yaml.safe_load(open(sys.argv[1]))\nprint('same' if cr['spec']['groups']==plain else 'different', len(plain))",
        &[PROMETHEUS_RULE],
    );
    assert!(verdict.starts_with("same"), "{verdict}");
}

/// The kustomize path to tuned rules, as docs/operations.md shows it: `ragwatch rules --out` into
/// the user's overlay and the PrometheusRule it writes as a patch over the monitoring component's.
/// The rendered PrometheusRule carries exactly the tuned groups.
#[test]
fn a_kustomize_overlay_patches_in_the_tuned_rules() {
    let doc = std::fs::read_to_string(repo().join("docs/operations.md")).unwrap();
    let start = doc
        .find("```yaml\n# my-install/kustomization.yaml\n")
        .expect("docs/operations.md shows the tuned overlay");
    let block = &doc[start + "```yaml\n".len()..];
    let kustomization = block[..block.find("```").unwrap()].replace("../deploy/", "{repo}/deploy/");
    // The command the overlay's comment gives, run with its own flags.
    let command = kustomization
        .lines()
        .find_map(|l| l.strip_prefix("# ragwatch rules --out my-install "))
        .expect("the overlay names the command that writes its patch");
    let flags: Vec<&str> = command.split_whitespace().collect();
    let dir = user_overlay(&[("kustomization.yaml", &kustomization)]);
    let out = rules_out(dir.path(), &flags);
    assert!(out.status.success(), "{out:?}");
    let rendered = kustomize(dir.path());
    let groups = |text: &str| -> Value {
        let out = pipe(
            Command::new("python3").arg("-c").arg(
                "import json, sys, yaml\nd = [d for d in yaml.safe_load_all(sys.stdin) if d and d.get('kind', 'PrometheusRule') == 'PrometheusRule']\nd = d[0]\njson.dump(d['spec']['groups'] if 'spec' in d else d['groups'], sys.stdout)",
            ),
            text,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let tuned = groups(&std::fs::read_to_string(dir.path().join("rules.yaml")).unwrap());
    assert_eq!(groups(&rendered), tuned);
    assert!(!rendered.contains("alert: RagwatchNoTraces"));
    assert!(rendered.contains("team: rag"), "the command's rule label");
    check("tuned overlay", &rendered);
}
