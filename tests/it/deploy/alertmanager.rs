//! The Alertmanager example: merged into a cluster's configuration it routes only ragwatch's alerts
//! (amtool), and the AlertmanagerConfig resource routes like the plain example.

use std::process::Command;

use super::python;
use crate::common::{repo, run_ok};

const ALERTMANAGER: &str = "deploy/alertmanager/alertmanager.yml";

/// The receiver `amtool config routes test` finds for an alert with `labels` (`name=value`).
fn amtool_receiver(labels: &[String]) -> String {
    let out = run_ok(
        Command::new("amtool")
            .args(["config", "routes", "test", "--config.file", ALERTMANAGER])
            .args(labels)
            .current_dir(repo()),
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Merged into a cluster's configuration, the example routes only ragwatch's alerts: the cluster's
/// own critical and warning alerts go where the root route sends them (`default`, standing for the
/// user's receiver), every alert of rules.yaml to the receiver of its severity.
#[test]
fn only_ragwatch_alerts_reach_the_ragwatch_receivers() {
    run_ok(
        Command::new("amtool")
            .args(["check-config", ALERTMANAGER])
            .current_dir(repo()),
    );
    let foreign = [
        ("KubePodCrashLooping", "critical"),
        ("KubeNodeNotReady", "warning"),
        ("Watchdog", "none"),
        ("TargetDown", "info"),
    ];
    for (alert, severity) in foreign {
        let labels = [
            format!("alertname={alert}"),
            format!("severity={severity}"),
            "namespace=kube-system".to_owned(),
        ];
        assert_eq!(amtool_receiver(&labels), "default", "{alert} {severity}");
    }
    let alerts = python(
        "import yaml\nfor g in yaml.safe_load(open('deploy/prometheus/rules.yaml'))['groups']:\n  for r in g['rules']:\n    if 'alert' in r: print(r['alert'], r['labels']['severity'])",
        &[],
    );
    let mut pages = 0;
    for line in alerts.lines() {
        let (alert, severity) = line.split_once(' ').unwrap();
        let expected = match severity {
            "critical" => "ragwatch-pager",
            "warning" => "ragwatch-ticket",
            "info" => "null",
            other => panic!("{alert}: severity {other}"),
        };
        pages += usize::from(severity == "critical");
        let labels = [
            format!("alertname={alert}"),
            format!("severity={severity}"),
            "namespace=rag".to_owned(),
            "stratum=head".to_owned(),
        ];
        assert_eq!(amtool_receiver(&labels), expected, "{alert}");
    }
    assert!(pages >= 2, "{alerts}");
    // A ragwatch alert without a severity: a ticket, never lost, never a page.
    assert_eq!(
        amtool_receiver(&["alertname=RagwatchSomething".to_owned()]),
        "ragwatch-ticket"
    );
}

/// The AlertmanagerConfig of components/monitoring is the plain example's ragwatch route: the same
/// matchers, receivers, grouping, waits and child routes, and its first inhibit rule.
#[test]
fn the_alertmanager_config_resource_routes_like_the_plain_example() {
    let verdict = python(
        r#"
import sys, yaml
plain = yaml.safe_load(open(sys.argv[1]))
cr = yaml.safe_load(open(sys.argv[2]))
def matchers(ms):
    out = []
    for m in ms:
        if isinstance(m, str):
            name, op, value = __import__('re').fullmatch(r'(\w+)(=~|!~|!=|=)"(.*)"', m).groups()
        else:
            name, op, value = m['name'], m.get('matchType', '='), m['value']
        out.append((name, op, value))
    return sorted(out)
def plain_route(r):
    return {'matchers': matchers(r.get('matchers', [])), 'receiver': r['receiver'],
            'group_by': r.get('group_by'), 'group_wait': r.get('group_wait'),
            'group_interval': r.get('group_interval'), 'repeat_interval': r.get('repeat_interval'),
            'routes': [plain_route(x) for x in r.get('routes', [])]}
def cr_route(r):
    return {'matchers': matchers(r.get('matchers', [])), 'receiver': r['receiver'],
            'group_by': r.get('groupBy'), 'group_wait': r.get('groupWait'),
            'group_interval': r.get('groupInterval'), 'repeat_interval': r.get('repeatInterval'),
            'routes': [cr_route(x) for x in r.get('routes', [])]}
ragwatch = [r for r in plain['route']['routes'] if matchers(r['matchers']) == [('alertname', '=~', 'Ragwatch.*')]]
assert len(ragwatch) == 1, plain['route']
problems = []
if plain_route(ragwatch[0]) != cr_route(cr['spec']['route']):
    problems.append(f"routes differ: {plain_route(ragwatch[0])} != {cr_route(cr['spec']['route'])}")
used = set()
def receivers(r):
    used.add(r['receiver']); [receivers(x) for x in r.get('routes', [])]
receivers(cr['spec']['route'])
if used != {r['name'] for r in cr['spec']['receivers']}: problems.append(f'receivers {used}')
inhibit = plain['inhibit_rules'][0]
cr_inhibit = cr['spec']['inhibitRules'][0]
if (matchers(inhibit['source_matchers']), matchers(inhibit['target_matchers']), inhibit['equal']) != (matchers(cr_inhibit['sourceMatch']), matchers(cr_inhibit['targetMatch']), cr_inhibit['equal']):
    problems.append('inhibit rules differ')
print(problems)
"#,
        &[
            ALERTMANAGER,
            "deploy/kubernetes/components/monitoring/alertmanagerconfig.yaml",
        ],
    );
    assert_eq!(verdict.trim(), "[]");
}
