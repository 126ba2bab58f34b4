//! deploy/: the rules pass promtool (syntax and unit tests) and the PrometheusRule carries exactly the
//! plain rules; every kustomize overlay renders and validates against the Kubernetes schemas, without
//! traps (no Secret and no Prometheus Operator object unless opted into, a config change rolls the
//! pods, one place for the `release` label), and ragwatch's container is restricted on its own; the
//! config shipped to the cluster is one ragwatch accepts; the image's build context and copy list
//! hold everything the build and the default command need (checked without a Docker engine); logs
//! are plain text or JSON when stderr is not a terminal; and the Grafana dashboard is well formed,
//! and every one of its queries returns data from a real Prometheus scraping ragwatch.

use crate::common::dockerfile::{Dockerfile, Stage};
use crate::common::manifests;
use crate::common::prometheus;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::openai::FakeOpenAi;
use crate::common::{Ragwatch, gen_traces, http_post, pipe, run_ok, wait_for};
use manifests::validate;
use prometheus::{WINDOWS, query, start_prometheus, test_dashboard, test_rules};
use serde_json::{Value, json};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn python(script: &str, args: &[&str]) -> String {
    let out = run_ok(
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .current_dir(root()),
    );
    String::from_utf8(out.stdout).unwrap()
}

// ------------------------------------------------------------------------------------------ rules

#[test]
fn rules_pass_promtool_check_and_unit_tests() {
    run_ok(
        Command::new("promtool")
            .args(["check", "rules", "deploy/prometheus/rules.yaml"])
            .current_dir(root()),
    );
    let out = run_ok(
        Command::new("promtool")
            .args(["test", "rules", "deploy/prometheus/rules_test.yaml"])
            .current_dir(root()),
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

// ---------------------------------------------------------------------------------- alertmanager

const ALERTMANAGER: &str = "deploy/alertmanager/alertmanager.yml";

/// The receiver `amtool config routes test` finds for an alert with `labels` (`name=value`).
fn amtool_receiver(labels: &[String]) -> String {
    let out = run_ok(
        Command::new("amtool")
            .args(["config", "routes", "test", "--config.file", ALERTMANAGER])
            .args(labels)
            .current_dir(root()),
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
            .current_dir(root()),
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

// -------------------------------------------------------------------------------------- kustomize

const WORKLOADS: [&str; 3] = ["standalone", "sidecar", "native-sidecar"];

fn kustomize(dir: &Path) -> String {
    let out = run_ok(Command::new("kubectl").arg("kustomize").arg(dir));
    String::from_utf8(out.stdout).unwrap()
}

fn render(overlay: &str) -> String {
    kustomize(&root().join("deploy/kubernetes/overlays").join(overlay))
}

/// Renders `overlay` as a user's own overlay would use it: with the monitoring component, and
/// `extra` appended to the kustomization (e.g. the user's own `release` patch).
fn render_with_monitoring(overlay: &str, extra: &str) -> String {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Kustomize takes relative paths only: climb from the temporary directory to `/`.
    let up = "../".repeat(dir.path().components().count() - 1);
    let repo = format!(
        "{up}{}",
        root().display().to_string().trim_start_matches('/')
    );
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {repo}/deploy/kubernetes/overlays/{overlay}\ncomponents:\n  - {repo}/deploy/kubernetes/components/monitoring\n{extra}"
        ),
    )
    .unwrap();
    kustomize(dir.path())
}

fn check(name: &str, rendered: &str) -> Value {
    manifests::check(name, rendered, None)
}

fn has_kind(v: &Value, kind: &str) -> bool {
    v["kinds"].as_array().unwrap().iter().any(|k| k == kind)
}

/// The workload overlays apply to any cluster: no Prometheus Operator object, no Secret to overwrite
/// the real one, the config from a generated ConfigMap, ragwatch's container restricted on its own.
#[test]
fn workload_overlays_render_validate_and_carry_no_trap() {
    for overlay in WORKLOADS {
        let rendered = render(overlay);
        validate(overlay, &rendered);
        let v = check(overlay, &rendered);
        assert_eq!(v["secrets"], json!([]), "{overlay} ships a Secret");
        assert_eq!(v["release"], json!({}), "{overlay}: {v}");
        for kind in ["ConfigMap", "Deployment"] {
            assert!(has_kind(&v, kind), "{overlay} lacks {kind}");
        }
    }
}

/// The sidecar's restricted settings do not lean on the pod: the stand-in application's pod sets no
/// securityContext at all.
#[test]
fn the_sidecar_is_restricted_in_a_pod_that_sets_nothing() {
    for overlay in ["sidecar", "native-sidecar"] {
        let v = check(overlay, &render(overlay));
        let workload = &v["workloads"][0];
        assert_eq!(workload["name"], "rag-service");
        assert_eq!(workload["pod_security_context"], Value::Null, "{overlay}");
    }
}

#[test]
fn the_standalone_deployment_has_a_disruption_budget_and_a_service() {
    let v = check("standalone", &render("standalone"));
    assert!(has_kind(&v, "Service"));
    let pdbs = v["pdbs"].as_array().unwrap();
    assert_eq!(pdbs.len(), 1, "{v}");
    // maxUnavailable, so one replica can still be drained.
    assert_eq!(pdbs[0]["maxUnavailable"], 1);
    let labels = &v["workloads"][0]["labels"];
    for (k, val) in pdbs[0]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[k], val, "the budget selects the Deployment's pods");
    }
}

/// The component's value of the `release` label, from its patch.
fn component_release() -> String {
    python(
        "import yaml\nk=yaml.safe_load(open('deploy/kubernetes/components/monitoring/kustomization.yaml'))\nops=[op for p in k['patches'] for op in yaml.safe_load(p['patch']) if op['path']=='/metadata/labels/release']\nassert len(ops)==1\nprint(ops[0]['value'])",
        &[],
    )
    .trim()
    .to_owned()
}

/// With the monitoring component every workload gets the ServiceMonitor, PodMonitor and
/// PrometheusRule, all with the one `release` label, which a user's overlay sets in one place.
#[test]
fn the_monitoring_component_adds_the_operator_objects_with_one_release_label() {
    let release = component_release();
    assert_eq!(release, "kube-prometheus-stack");
    let all = json!({"AlertmanagerConfig": release, "PodMonitor": release, "PrometheusRule": release, "ServiceMonitor": release});
    for overlay in WORKLOADS {
        let rendered = render_with_monitoring(overlay, "");
        validate(overlay, &rendered);
        let v = check(overlay, &rendered);
        assert_eq!(v["release"], all, "{overlay}");
    }
    let mine = "patches:\n  - target:\n      group: monitoring.coreos.com\n    patch: |-\n      - op: add\n        path: /metadata/labels/release\n        value: my-prometheus\n";
    let v = check("standalone", &render_with_monitoring("standalone", mine));
    assert_eq!(
        v["release"],
        json!({"AlertmanagerConfig": "my-prometheus", "PodMonitor": "my-prometheus", "PrometheusRule": "my-prometheus", "ServiceMonitor": "my-prometheus"})
    );
}

const RUNBOOK: &str = "https://github.com/ragwatch/ragwatch/blob/main/docs/runbook.md";

/// The `runbook_url`s of rendered manifests, one per alert.
fn runbook_urls(rendered: &str) -> Vec<String> {
    rendered
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook_url:"))
        .map(|u| u.trim().trim_matches('"').to_owned())
        .collect()
}

/// The runbook's address is one setting for the PrometheusRule (an annotation the component's
/// replacement writes into every runbook_url) and one documented `sed` for the plain rules and the
/// dashboard; the anchors stay.
#[test]
fn the_runbook_address_is_one_setting() {
    // kustomize: as shipped, then with the setting changed in a copy of the component.
    let shipped = runbook_urls(&render("example"));
    assert!(shipped.len() >= 15, "{shipped:?}");
    for url in &shipped {
        assert!(url.starts_with(&format!("{RUNBOOK}#ragwatch")), "{url}");
    }
    let component = root().join("deploy/kubernetes/components/monitoring");
    let kustomization = std::fs::read_to_string(component.join("kustomization.yaml")).unwrap();
    let setting = format!("ragwatch.io/runbook-base-url: {RUNBOOK}");
    assert_eq!(kustomization.matches(&setting).count(), 1);
    let mine = "https://wiki.example.com/ragwatch/runbook";
    let mut files: Vec<(String, String)> = std::fs::read_dir(&component)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    for (name, text) in &mut files {
        if name == "kustomization.yaml" {
            *text = text.replace(&setting, &format!("ragwatch.io/runbook-base-url: {mine}"));
        }
    }
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let copy = user_overlay(&refs);
    let user = user_overlay(&[(
        "kustomization.yaml",
        &format!(
            "resources: [{{repo}}/deploy/kubernetes/overlays/standalone]\ncomponents: [{}]\n",
            copy.path().display()
        ),
    )]);
    // kustomize takes relative paths: the component copy's, from the user's overlay.
    let relative = format!("../{}", copy.path().file_name().unwrap().to_str().unwrap());
    std::fs::write(
        user.path().join("kustomization.yaml"),
        std::fs::read_to_string(user.path().join("kustomization.yaml"))
            .unwrap()
            .replace(&copy.path().display().to_string(), &relative),
    )
    .unwrap();
    let moved = runbook_urls(&kustomize(user.path()));
    assert_eq!(moved.len(), shipped.len());
    for (url, before) in moved.iter().zip(&shipped) {
        assert_eq!(url, &before.replace(RUNBOOK, mine));
    }

    // The documented sed, on copies of the plain files.
    let doc = std::fs::read_to_string(root().join("docs/deployment.md")).unwrap();
    let sed = doc
        .lines()
        .find(|l| l.starts_with("sed -i 's|") && l.contains(RUNBOOK))
        .expect("docs/deployment.md documents the sed");
    let dir = tempfile::tempdir().unwrap();
    let files = [
        "deploy/prometheus/rules.yaml",
        "deploy/kubernetes/components/dashboard/ragwatch-dashboard.json",
    ];
    for f in files {
        assert!(sed.contains(f), "{sed}");
        let to = dir.path().join(f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root().join(f), &to).unwrap();
    }
    run_ok(
        Command::new("sh")
            .arg("-c")
            .arg(sed)
            .current_dir(dir.path()),
    );
    let rules = dir.path().join(files[0]);
    run_ok(
        Command::new("promtool")
            .arg("check")
            .arg("rules")
            .arg(&rules),
    );
    let rules = std::fs::read_to_string(&rules).unwrap();
    let dash = std::fs::read_to_string(dir.path().join(files[1])).unwrap();
    for text in [&rules, &dash] {
        assert!(!text.contains(RUNBOOK));
    }
    assert_eq!(
        rules.matches(&format!("{mine}#ragwatch")).count(),
        shipped.len()
    );
    let dash: Value = serde_json::from_str(&dash).unwrap();
    assert_eq!(runbook_variable(&dash), mine);
}

/// The dashboard's hidden constant variable `runbook`: the runbook's address, the one place the
/// dashboard names it.
fn runbook_variable(dash: &Value) -> &str {
    let found: Vec<&Value> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["name"] == "runbook")
        .collect();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["type"], "constant");
    assert_eq!(found[0]["hide"], 2, "hidden");
    found[0]["query"].as_str().unwrap()
}

/// The dashboard names the runbook's address once, in its `runbook` variable, and every runbook
/// link is that variable and an anchor: no literal runbook address in a link.
#[test]
fn the_dashboard_names_the_runbook_address_once() {
    let text =
        std::fs::read_to_string(root().join("deploy/grafana/ragwatch-dashboard.json")).unwrap();
    assert_eq!(text.matches(RUNBOOK).count(), 1);
    assert!(!text.contains("runbook.md#"), "a literal runbook link");
    let d = dashboard();
    assert_eq!(runbook_variable(&d), RUNBOOK);
    let links = text.matches("\"url\": \"${runbook}#").count();
    assert!(links >= 15, "{links} runbook links");
}

/// Reads a render on stdin; prints what the NetworkPolicy allows, and its problems: it must select
/// exactly the Deployment's pods, name ports the container has, keep DNS, and leave the selectors
/// of other pods (Prometheus, writers, brokers) free of the install's own labels.
const NETWORK_POLICY: &str = r#"
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
problems = []
policies = [d for d in docs if d['kind'] == 'NetworkPolicy']
deploys = [d for d in docs if d['kind'] == 'Deployment']
if len(policies) != 1 or len(deploys) != 1: problems.append('one NetworkPolicy, one Deployment'); print(json.dumps({'problems': problems})); sys.exit()
np, dep = policies[0]['spec'], deploys[0]
pod_labels = dep['spec']['template']['metadata']['labels']
if np['podSelector'].get('matchLabels') != dep['spec']['selector']['matchLabels']: problems.append('podSelector is not the Deployment selector')
if not all(pod_labels.get(k) == v for k, v in np['podSelector']['matchLabels'].items()): problems.append('podSelector misses the pods')
if sorted(np.get('policyTypes', [])) != ['Egress', 'Ingress']: problems.append('policyTypes')
ports = {p['name'] for c in dep['spec']['template']['spec']['containers'] for p in c.get('ports', [])}
ingress = sorted(p['port'] for r in np['ingress'] for p in r['ports'])
for p in ingress:
    if p not in ports: problems.append(f'ingress port {p} is no container port')
for r in np['ingress'] + np['egress']:
    for peer in r.get('from', []) + r.get('to', []):
        for sel in ('podSelector', 'namespaceSelector'):
            if peer.get(sel, {}).get('matchLabels'): problems.append(f'{sel} with matchLabels (the install labels would join it)')
egress = sorted({(p.get('protocol'), p['port']) for r in np['egress'] for p in r['ports']})
if ('UDP', 53) not in egress or ('TCP', 53) not in egress: problems.append('DNS')
print(json.dumps({'problems': problems, 'ingress': ingress, 'egress': [list(e) for e in egress]}))
"#;

/// The standalone install ships a NetworkPolicy that validates and allows in Prometheus (metrics)
/// and the declared writers (both write ports, OTLP/HTTP and OTLP/gRPC) only, and out DNS, the brokers and HTTPS for a hosted
/// judge; the second install of docs/deployment.md gets its own, selecting only its own pods.
#[test]
fn the_network_policy_renders_validates_and_selects_the_install() {
    for (name, rendered) in [
        ("standalone", render("standalone")),
        ("second install", {
            let second = user_overlay(&[("kustomization.yaml", &documented_second_install())]);
            kustomize(second.path())
        }),
    ] {
        validate(name, &rendered);
        let out = pipe(
            Command::new("python3").arg("-c").arg(NETWORK_POLICY),
            &rendered,
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["problems"], json!([]), "{name}: {v}");
        assert_eq!(
            v["ingress"],
            json!(["metrics", "otlp-grpc", "otlp-http"]),
            "{name}: {v}"
        );
        assert_eq!(
            v["egress"],
            json!([
                ["TCP", 53],
                ["TCP", 443],
                ["TCP", 9092],
                ["TCP", 9093],
                ["UDP", 53]
            ]),
            "{name}: {v}"
        );
    }
}

/// docs/deployment.md's patch of the kustomize NetworkPolicy, as a user copies it: the policy still
/// validates and passes the same checks, lets in the Collector's namespace on both write ports, and
/// lets out the brokers' network on their port only.
#[test]
fn the_documented_network_policy_patch_changes_writers_and_kafka() {
    let doc = std::fs::read_to_string(root().join("docs/deployment.md")).unwrap();
    let start = doc
        .find("```yaml\n# netpol/kustomization.yaml\n")
        .expect("docs/deployment.md shows the NetworkPolicy's patch");
    let block = &doc[start + "```yaml\n".len()..];
    let block = block[..block.find("```").unwrap()].replace("../deploy/", "{repo}/deploy/");
    let overlay = user_overlay(&[("kustomization.yaml", &block)]);
    let rendered = kustomize(overlay.path());
    validate("patched NetworkPolicy", &rendered);
    let out = pipe(
        Command::new("python3").arg("-c").arg(NETWORK_POLICY),
        &rendered,
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["problems"], json!([]), "{v}");
    assert_eq!(
        v["ingress"],
        json!(["metrics", "otlp-grpc", "otlp-http"]),
        "{v}"
    );
    assert_eq!(
        v["egress"],
        json!([["TCP", 53], ["TCP", 443], ["TCP", 9096], ["UDP", 53]]),
        "{v}"
    );
    let docs: Vec<Value> = rendered
        .split("\n---\n")
        .filter(|d| d.contains("kind: NetworkPolicy"))
        .map(|d| {
            let out = pipe(
                Command::new("python3").arg("-c").arg(
                    "import json, sys, yaml\njson.dump(yaml.safe_load(sys.stdin), sys.stdout)",
                ),
                d,
            );
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    let np = &docs[0]["spec"];
    assert_eq!(
        np["ingress"][1]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["observability"])
    );
    assert_eq!(
        np["egress"][1]["to"],
        json!([{"ipBlock": {"cidr": "10.20.0.0/16"}}])
    );
}

/// The example overlay has everything, and its generated Secrets (the judge key, the write tokens)
/// can never overwrite the real ones.
#[test]
fn the_example_overlay_generates_a_secret_under_a_hashed_name() {
    let rendered = render("example");
    validate("example", &rendered);
    let v = check("example", &rendered);
    let mut secrets: Vec<&str> = v["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    secrets.sort();
    assert_eq!(secrets.len(), 2, "{secrets:?}");
    for (name, real) in secrets
        .iter()
        .zip(["ragwatch-secrets-", "ragwatch-write-tokens-"])
    {
        assert!(name.starts_with(real) && name.len() > real.len(), "{name}");
    }
    for kind in [
        "PodMonitor",
        "PrometheusRule",
        "ServiceMonitor",
        "PodDisruptionBudget",
    ] {
        assert!(has_kind(&v, kind), "example lacks {kind}");
    }
    assert_eq!(
        v["dashboards"],
        json!(["ragwatch"]),
        "the example has the dashboard"
    );
    // The workload overlays leave the dashboard to its component, opted into once per Grafana.
    for overlay in WORKLOADS {
        assert_eq!(check(overlay, &render(overlay))["dashboards"], json!([]));
    }
}

/// The rollout gates render beside a workload overlay, both or each alone, and pass the same
/// checks; their templates' own placeholders (Argo's `{{args.*}}`, Flagger's `{{ namespace }}` and
/// `{{ target }}`) reach the cluster untouched. (Their schemas are checked in
/// tests/it/rollout_gates.rs: kubernetes-validate knows neither kind.)
#[test]
fn the_rollout_gate_components_render_beside_a_workload() {
    for (component, kinds) in [
        ("rollout-gates", &["AnalysisTemplate", "MetricTemplate"][..]),
        ("rollout-gates/argo", &["AnalysisTemplate"][..]),
        ("rollout-gates/flagger", &["MetricTemplate"][..]),
    ] {
        let dir = user_overlay(&[(
            "kustomization.yaml",
            &format!(
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {{repo}}/deploy/kubernetes/overlays/sidecar\ncomponents:\n  - {{repo}}/deploy/kubernetes/components/{component}\n"
            ),
        )]);
        let rendered = kustomize(dir.path());
        validate(component, &rendered);
        let v = check(component, &rendered);
        for kind in ["AnalysisTemplate", "MetricTemplate"] {
            assert_eq!(
                has_kind(&v, kind),
                kinds.contains(&kind),
                "{component}: {kind}"
            );
        }
        if kinds.contains(&"AnalysisTemplate") {
            assert!(rendered.contains("job=\"{{args.job}}\""), "{rendered}");
        }
        if kinds.contains(&"MetricTemplate") {
            assert!(rendered.contains("job=\"{{ target }}\""), "{rendered}");
        }
    }
}

/// Writes a kustomization into a fresh directory under the test target directory, with `{repo}`
/// standing for the repository as a relative path (kustomize takes relative paths only).
fn user_overlay(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let up = "../".repeat(dir.path().components().count() - 1);
    let repo = format!(
        "{up}{}",
        root().display().to_string().trim_start_matches('/')
    );
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text.replace("{repo}", &repo)).unwrap();
    }
    dir
}

/// The second install of docs/deployment.md ("Two installs in one namespace"), as a user copies it.
fn documented_second_install() -> String {
    let doc = std::fs::read_to_string(root().join("docs/deployment.md")).unwrap();
    let start = doc
        .find("```yaml\n# payments/kustomization.yaml\n")
        .expect("docs/deployment.md shows a second install");
    let block = &doc[start + "```yaml\n".len()..];
    block[..block.find("```").unwrap()].replace("../deploy/", "{repo}/deploy/")
}

/// Reads two renders (JSON lines of documents, one install per line) on stdin; prints every
/// collision: a selector of one install matching a pod or Service of the other, or missing its own;
/// two objects of one kind and name; two dashboards with one uid; two consumer groups in one.
const TWO_INSTALLS: &str = r#"
import json, sys, yaml
installs = [[d for d in yaml.safe_load_all(r) if d] for r in json.load(sys.stdin)]
problems = []
def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())
def pods(docs):
    return [d['spec']['template']['metadata']['labels'] for d in docs if d['kind'] == 'Deployment']
def services(docs):
    return [d['metadata'].get('labels', {}) for d in docs if d['kind'] == 'Service']
def selectors(docs):
    for d in docs:
        k = d['kind']
        if k in ('Deployment', 'PodDisruptionBudget'): yield k, 'pods', d['spec']['selector']['matchLabels']
        elif k == 'Service': yield k, 'pods', d['spec']['selector']
        elif k == 'ServiceMonitor': yield k, 'services', d['spec']['selector']['matchLabels']
        elif k == 'PodMonitor': yield k, 'pods', d['spec']['selector']['matchLabels']
for i, mine in enumerate(installs):
    theirs = installs[1 - i]
    for kind, what, sel in selectors(mine):
        targets = (pods if what == 'pods' else services)
        if any(matches(sel, l) for l in targets(theirs)): problems.append(f'install {i}: a {kind} selects the other install: {sel}')
        if kind != 'PodMonitor' and not any(matches(sel, l) for l in targets(mine)): problems.append(f'install {i}: a {kind} selects none of its own: {sel}')
names = [(d['kind'], d['metadata']['name']) for docs in installs for d in docs]
problems += [f'{n} twice' for n in set(names) if names.count(n) > 1]
uids = [json.loads(d['data']['ragwatch.json'])['uid'] for docs in installs for d in docs
        if d['kind'] == 'ConfigMap' and 'ragwatch.json' in d.get('data', {})]
if len(uids) != len(set(uids)): problems.append(f'dashboard uids {uids}')
# What serves every install of a namespace comes once: the rules and the alerts' route.
for kind in ('PrometheusRule', 'AlertmanagerConfig'):
    if sum(d['kind'] == kind for docs in installs for d in docs) != 1: problems.append(f'not one {kind}')
groups = [e['value'] for docs in installs for d in docs if d['kind'] == 'Deployment'
          for c in d['spec']['template']['spec']['containers'] for e in c.get('env', []) if e['name'] == 'RAGWATCH__KAFKA__GROUP_ID']
if len(groups) != len(set(groups)): problems.append(f'consumer groups {groups}')
json.dump({'problems': problems, 'uids': uids, 'kinds': sorted(set(n[0] for n in names))}, sys.stdout)
"#;

/// Two installs in one namespace, the default one (with the dashboard) and the documented second
/// one: no selector of either (Deployment, Services, PodDisruptionBudget, ServiceMonitor) matches
/// the other's pods or Services, no two objects share a kind and name, one dashboard uid, two
/// consumer groups.
#[test]
fn two_installs_in_one_namespace_select_only_their_own_pods() {
    let first = user_overlay(&[(
        "kustomization.yaml",
        "resources: [{repo}/deploy/kubernetes/overlays/standalone]
components:
  - {repo}/deploy/kubernetes/components/monitoring
  - {repo}/deploy/kubernetes/components/dashboard
",
    )]);
    let second = user_overlay(&[("kustomization.yaml", &documented_second_install())]);
    let renders = [kustomize(first.path()), kustomize(second.path())];
    for (name, r) in ["first install", "second install"].iter().zip(&renders) {
        validate(name, r);
        check(name, r);
    }
    let out = pipe(
        Command::new("python3").arg("-c").arg(TWO_INSTALLS),
        &serde_json::to_string(&renders).unwrap(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["problems"], json!([]), "{v}");
    assert_eq!(v["uids"], json!(["ragwatch"]), "{v}");
    for kind in [
        "PodDisruptionBudget",
        "ServiceMonitor",
        "Service",
        "Deployment",
    ] {
        assert!(
            v["kinds"].as_array().unwrap().iter().any(|k| k == kind),
            "{v}"
        );
    }
}

/// The sidecar patches on an application of a user's: its first container stays first and is the
/// one `kubectl` picks, its 120 s grace period, its volumes and its selector stay, and ragwatch has
/// no readiness probe to take the pod out of its Service.
#[test]
fn the_sidecar_patches_leave_the_application_its_pod() {
    let app = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: rag-service\nspec:\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      terminationGracePeriodSeconds: 120\n      containers:\n        - name: web\n          image: example.com/web:1\n          readinessProbe: {httpGet: {path: /ready, port: 8080}}\n      volumes:\n        - name: cache\n          emptyDir: {}\n";
    for overlay in ["sidecar", "native-sidecar"] {
        let src = root().join("deploy/kubernetes/overlays").join(overlay);
        let mut files: Vec<(String, String)> = std::fs::read_dir(&src)
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let name = path.file_name().unwrap().to_str().unwrap().to_owned();
                let text = std::fs::read_to_string(&path).unwrap();
                (name, text)
            })
            .collect();
        for (name, text) in &mut files {
            if name == "kustomization.yaml" {
                assert!(text.contains("  - ../../example-app\n"), "{overlay}");
                *text = text
                    .replace("  - ../../example-app\n", "  - app.yaml\n")
                    .replace("../../base", "{repo}/deploy/kubernetes/base");
            }
        }
        files.push(("app.yaml".into(), app.into()));
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(n, t)| (n.as_str(), t.as_str()))
            .collect();
        let dir = user_overlay(&refs);
        let rendered = kustomize(dir.path());
        validate(overlay, &rendered);
        let v = check(overlay, &rendered);
        let w = &v["workloads"][0];
        assert_eq!(w["grace"], 120, "{overlay}: {w}");
        assert_eq!(w["containers"][0], "web", "{overlay}: {w}");
        assert_eq!(
            w["selector"],
            json!({"matchLabels": {"app": "web"}}),
            "{overlay}"
        );
        assert!(
            w["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == "cache"),
            "{overlay}: {w}"
        );
    }
}

#[test]
fn the_config_shipped_to_the_cluster_is_accepted_by_ragwatch() {
    let path = root().join("deploy/kubernetes/base/ragwatch.toml");
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["check-config", "--config"])
            .arg(&path)
            .env("RAGWATCH__KAFKA__BROKERS", "kafka:9092"),
    );
    let effective = String::from_utf8_lossy(&out.stdout);
    assert!(effective.contains("sampled = \"llm\""), "{effective}");
    assert!(effective.contains("format = \"json\""), "{effective}");
}

// ------------------------------------------------------------------------------------------ image

fn dockerfile() -> Dockerfile {
    Dockerfile::read(&root().join("deploy/Dockerfile"))
}

/// What `.dockerignore` lets into the build context: it excludes everything (`*`) and lets paths
/// back in with `!path`.
fn context_allows(path: &str) -> bool {
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(patterns.first(), Some(&"*"), "the context starts empty");
    let path = path.trim_start_matches("./").trim_end_matches('/');
    patterns
        .iter()
        .filter_map(|p| p.strip_prefix('!'))
        .any(|p| {
            let p = p.trim_end_matches('/');
            path == p || path.starts_with(&format!("{p}/"))
        })
}

/// The build context holds what the stages copy from it, and nothing big: not target/ nor .git.
/// The one file of target/ let in is the binary the `prebuilt` stage copies, there once a release
/// build made it.
#[test]
fn the_build_context_holds_what_the_build_copies_and_no_more() {
    let dockerfile = dockerfile();
    let context: Vec<String> = dockerfile
        .stages
        .iter()
        .flat_map(Stage::copies)
        .filter(|c| c.from.is_none())
        .flat_map(|c| c.sources)
        .collect();
    assert!(context.iter().any(|s| s == "src"), "{context:?}");
    for source in &context {
        if source.starts_with("target/") {
            assert_eq!(source, "target/release/ragwatch", "a build output");
        } else {
            assert!(root().join(source).exists(), "COPY {source}: no such path");
        }
        assert!(
            context_allows(source),
            ".dockerignore keeps {source} out of the context"
        );
    }
    for big in ["target", "target/debug", ".git", "fuzz/corpus", "tests"] {
        assert!(!context_allows(big), ".dockerignore lets {big} in");
    }
}

/// The image builds from what the Dockerfile copies: every file the crate embeds at compile time
/// (`include_str!`, `include_bytes!`) lies under a path the build stage copies from the context.
#[test]
fn the_dockerfile_copies_every_file_the_build_embeds() {
    let dockerfile = dockerfile();
    let copied: Vec<String> = dockerfile
        .stage("build")
        .copies()
        .into_iter()
        .filter(|c| c.from.is_none())
        .flat_map(|c| c.sources)
        .collect();
    let mut embedded = Vec::new();
    let mut stack = vec![root().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, _) in text.match_indices("include_") {
                    let rest = &text[i..];
                    if !(rest.starts_with("include_str!(\"")
                        || rest.starts_with("include_bytes!(\""))
                    {
                        continue;
                    }
                    let start = rest.find('"').unwrap() + 1;
                    let end = start + rest[start..].find('"').unwrap();
                    let target = path.parent().unwrap().join(&rest[start..end]);
                    let target = std::fs::canonicalize(&target)
                        .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
                    embedded.push(target);
                }
            }
        }
    }
    assert!(!embedded.is_empty());
    let repo = std::fs::canonicalize(root()).unwrap();
    for file in embedded {
        let relative = file.strip_prefix(&repo).unwrap().to_str().unwrap();
        assert!(
            copied.iter().any(|c| {
                let c = c.trim_start_matches("./").trim_end_matches('/');
                relative == c || relative.starts_with(&format!("{c}/"))
            }),
            "{relative} is embedded by the build but the Dockerfile does not copy it"
        );
        assert!(context_allows(relative), ".dockerignore drops {relative}");
    }
}

/// Without build arguments the Dockerfile builds what it always built: the binary from source, on
/// distroless cc. `BINARY_STAGE` names a stage that provides the binary (`build` or `prebuilt`),
/// `RUNTIME_BASE` the runtime's base.
#[test]
fn the_default_build_compiles_from_source_onto_distroless() {
    let dockerfile = dockerfile();
    assert_eq!(
        dockerfile.args.get("RUNTIME_BASE").map(String::as_str),
        Some("gcr.io/distroless/cc-debian12:nonroot")
    );
    assert_eq!(
        dockerfile.args.get("BINARY_STAGE").map(String::as_str),
        Some("build")
    );
    assert_eq!(dockerfile.runtime().from, "${RUNTIME_BASE}");
    assert_eq!(dockerfile.stage("binary").from, "${BINARY_STAGE}");
    assert!(dockerfile.stage("binary").instructions.is_empty());
    assert!(
        dockerfile.stage("build").base.starts_with("rust:"),
        "{}",
        dockerfile.stage("build").base
    );
    assert_eq!(dockerfile.stage("prebuilt").base, "scratch");
}

/// The image's default command works: the binary, the config it names and every file that config
/// names are copied into the runtime image, at absolute paths (no working directory to rely on),
/// and the binary comes from either binary stage. Checked without a container engine, from the
/// Dockerfile itself.
#[test]
fn every_path_the_default_command_and_config_name_is_in_the_image() {
    let dockerfile = dockerfile();
    let runtime = dockerfile.runtime();
    assert!(
        runtime
            .base
            .starts_with("gcr.io/distroless/cc-debian12:nonroot"),
        "{}",
        runtime.base
    );
    let copies = runtime.copies();
    for c in &copies {
        assert_eq!(c.sources.len(), 1, "one file per runtime COPY");
    }
    let in_image = |path: &str| copies.iter().any(|c| c.dest == path);

    let command: Vec<String> = runtime
        .exec_form("ENTRYPOINT")
        .into_iter()
        .chain(runtime.exec_form("CMD"))
        .collect();
    for arg in command.iter().filter(|a| a.starts_with('/')) {
        assert!(in_image(arg), "{arg} (default command) is not copied");
    }
    let config_at = command.iter().position(|a| a == "--config").unwrap() + 1;
    let config_in_image = &command[config_at];

    // The image's config, copied from the context, is config/ragwatch.toml but for one line: the
    // sample traces' path, which names the file's place in the image.
    let copied_config = copies.iter().find(|c| &c.dest == config_in_image).unwrap();
    assert_eq!(
        copied_config.from, None,
        "the config comes from the context"
    );
    let image_config_file = &copied_config.sources[0];
    assert!(context_allows(image_config_file), "{image_config_file}");
    let config = std::fs::read_to_string(root().join(image_config_file)).unwrap();
    let original = std::fs::read_to_string(root().join("config/ragwatch.toml")).unwrap();
    let rewrite = "sed 's|^path = \"config/sample-traces.jsonl\"$|path = \"/usr/share/ragwatch/sample-traces.jsonl\"|' config/ragwatch.toml > deploy/image/ragwatch.toml";
    assert_eq!(
        config.lines().count(),
        original.lines().count(),
        "{image_config_file} is not config/ragwatch.toml but for one line: {rewrite}"
    );
    let differ: Vec<(&str, &str)> = original
        .lines()
        .zip(config.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(
        differ.len(),
        1,
        "{image_config_file} is not config/ragwatch.toml but for one line: {rewrite}: {differ:?}"
    );
    let (from, to) = differ[0];
    let value = |line: &str| -> String {
        let (key, value) = line.split_once(" = ").unwrap();
        assert_eq!(key, "path", "{line}");
        value.trim_matches('"').to_owned()
    };
    let sample = copies.iter().find(|c| c.dest == value(to)).unwrap();
    assert_eq!(
        (sample.from.as_deref(), sample.sources[0].clone()),
        (None, value(from)),
        "the image's sample traces are the repository's"
    );

    // Every path-like value in that config is absolute and copied into the image.
    let table: toml::Table = toml::from_str(&config).unwrap();
    let mut paths = Vec::new();
    let mut stack: Vec<(String, &toml::Value)> = table
        .iter()
        .map(|(k, v)| (k.clone(), v))
        .collect::<Vec<_>>();
    while let Some((key, value)) = stack.pop() {
        match value {
            toml::Value::Table(t) => stack.extend(t.iter().map(|(k, v)| (k.clone(), v))),
            toml::Value::String(s)
                if key == "path" || key.ends_with("_path") || key.ends_with("_file") =>
            {
                paths.push((key, s.clone()));
            }
            _ => {}
        }
    }
    assert!(
        !paths.is_empty(),
        "the default config names the sample traces"
    );
    for (key, path) in paths {
        assert!(
            path.starts_with('/'),
            "{key} = {path} is relative in the image"
        );
        assert!(
            in_image(&path),
            "{key} = {path} is not copied into the image"
        );
    }

    // Every runtime COPY from the context copies a file of the repository the context lets in;
    // every runtime COPY from the binary stage copies something each stage BINARY_STAGE may name
    // provides: an output of a RUN, or the destination of a COPY.
    for c in &copies {
        let source = &c.sources[0];
        match c.from.as_deref() {
            None => {
                assert!(root().join(source).is_file(), "{source}");
                assert!(context_allows(source), "{source} is not in the context");
            }
            Some(from) => {
                assert_eq!(from, "binary", "{source}");
                for provider in ["build", "prebuilt"] {
                    let stage = dockerfile.stage(provider);
                    assert!(
                        stage
                            .instructions
                            .iter()
                            .any(|(k, r)| k == "RUN" && r.contains(source.as_str()))
                            || stage.copies().iter().any(|c| &c.dest == source),
                        "the {provider} stage does not provide {source}"
                    );
                }
            }
        }
    }
}

/// Small and lean: a numeric non-root user (so `runAsNonRoot` can verify it), no libcurl, no cmake
/// (librdkafka builds with its own configure script), cargo's caches as BuildKit cache mounts.
#[test]
fn the_image_runs_as_a_numeric_non_root_user_and_builds_lean() {
    let dockerfile = dockerfile();
    let user = dockerfile.runtime().last("USER").unwrap();
    let uid: u32 = user.split(':').next().unwrap().parse().unwrap();
    assert_ne!(uid, 0);
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let runs: Vec<&String> = dockerfile
        .stages
        .iter()
        .flat_map(|s| s.instructions.iter())
        .filter(|(k, _)| k == "RUN")
        .map(|(_, r)| r)
        .collect();
    for r in &runs {
        assert!(!r.contains("curl") && !r.contains("cmake"), "{r}");
    }
    let cargo = runs.iter().find(|r| r.contains("cargo build")).unwrap();
    for cache in ["/usr/local/cargo/registry", "/src/target"] {
        assert!(
            cargo.contains(&format!("--mount=type=cache,target={cache}")),
            "{cargo}"
        );
    }
    assert!(text.starts_with("# syntax=docker/dockerfile:1"));
}

// ------------------------------------------------------------------------------------------- logs

fn start_on_sample(env: &[(&str, String)]) -> Ragwatch {
    let rw = Ragwatch::start(&root().join("config/ragwatch.toml"), env);
    wait_for("a scrape", Duration::from_secs(20), || rw.scrape());
    rw
}

/// In a pod stderr is a pipe: logs are JSON lines with `log.format = "json"`, plain text without
/// ANSI colour codes otherwise; a bad config is one plain line before logging starts.
#[test]
fn logs_are_plain_text_or_json_when_stderr_is_not_a_terminal() {
    let mut rw = start_on_sample(&[("RAGWATCH__LOG__FORMAT", "json".into())]);
    rw.sigterm();
    assert!(rw.wait_exit(Duration::from_secs(30)).success());
    let log = rw.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for line in &lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }

    let mut rw = start_on_sample(&[]);
    rw.sigterm();
    assert!(rw.wait_exit(Duration::from_secs(30)).success());
    let log = rw.log_text();
    assert!(log.contains("INFO"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI codes in a piped log: {log:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[log]\nformat = \"json\"\n[sample]\ndefault_rate = 1.5\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ragwatch"))
        .args(["run", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("ragwatch: "), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains("\"level\""),
        "{stderr}"
    );
}

// -------------------------------------------------------------------------------------- dashboard

fn dashboard() -> Value {
    let text =
        std::fs::read_to_string(root().join("deploy/grafana/ragwatch-dashboard.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn exprs(panel: &Value) -> Vec<&str> {
    panel["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["expr"].as_str().unwrap())
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn dashboard_is_well_formed_described_and_one_unit_per_panel() {
    let d = dashboard();
    let copy: Value = serde_json::from_str(
        &std::fs::read_to_string(
            root().join("deploy/kubernetes/components/dashboard/ragwatch-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(d, copy, "the kustomize copy of the dashboard differs");
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for v in ["cluster", "namespace", "pod", "stratum"] {
        assert!(vars.contains(&v), "variable {v}");
    }
    // The cluster variable works without a cluster label: its All matches a missing label.
    let cluster = &d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "cluster")
        .unwrap();
    assert_eq!(cluster["includeAll"], true);
    assert_eq!(cluster["allValue"], ".*");
    assert_eq!(cluster["current"]["value"], json!(["$__all"]));
    let panels = d["panels"].as_array().unwrap();
    let (rows, graphs): (Vec<&Value>, Vec<&Value>) =
        panels.iter().partition(|p| p["type"] == "row");
    assert!(graphs.len() >= 12);
    for row in &rows {
        // Open rows keep their panels at the top level, where the query checks find them.
        assert_eq!(row["collapsed"], false, "{}", row["title"]);
        assert!(row["targets"].as_array().unwrap().is_empty());
    }
    let mut ids = std::collections::HashSet::new();
    for p in &graphs {
        let title = p["title"].as_str().unwrap();
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id: {title}"
        );
        assert!(!exprs(p).is_empty(), "{title}: no query");
        assert!(
            p["description"].as_str().is_some_and(|s| s.len() > 40),
            "{title}: no description"
        );
        // Exactly one unit: set once for the panel, never overridden per series.
        let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
        assert!(!unit.is_empty(), "{title}: no unit");
        for o in p["fieldConfig"]["overrides"].as_array().unwrap() {
            for prop in o["properties"].as_array().unwrap() {
                assert_ne!(prop["id"], "unit", "{title}: a second unit");
            }
        }
        if unit == "percentunit" {
            for e in exprs(p) {
                assert!(
                    !e.contains("samples") && !e.contains("_total"),
                    "{title}: a count on a ratio axis: {e}"
                );
            }
        }
    }
    // Rates of traces are traces per second, not requests.
    for p in &graphs {
        let unit = &p["fieldConfig"]["defaults"]["unit"];
        assert_ne!(unit, "reqps", "{}", p["title"]);
        if exprs(p).iter().any(|e| {
            ["received", "sampled", "skipped"]
                .iter()
                .any(|c| e.contains(&format!("rate(ragwatch_traces_{c}_total")))
        }) {
            assert_eq!(unit, "suffix: traces/s", "{}", p["title"]);
        }
    }
}

#[test]
fn dashboard_opens_with_an_overview_and_repeats_per_stratum() {
    let d = dashboard();
    let panels = d["panels"].as_array().unwrap();
    assert_eq!(panels[0]["type"], "row");
    let overview: Vec<&Value> = panels[1..]
        .iter()
        .take_while(|p| p["type"] != "row")
        .collect();
    assert!(overview.iter().all(|p| p["type"] == "stat"));
    let all: String = overview
        .iter()
        .flat_map(|p| exprs(p))
        .collect::<Vec<_>>()
        .join("\n");
    for needle in [
        "ragwatch:faithfulness:combined_mean_5m{",
        "ragwatch:threshold_floor:ratio{",
        "ALERTS{alertstate=\"firing\", alertname=~\"Ragwatch.*\"",
        "ragwatch_traces_received_total",
        "ragwatch_judge_tokens_total",
        "ragwatch_budget_remaining_tokens",
    ] {
        assert!(all.contains(needle), "the overview lacks {needle}");
    }
    let repeated: Vec<&Value> = panels
        .iter()
        .filter(|p| p["type"] == "row" && p["repeat"] == "stratum")
        .collect();
    assert_eq!(repeated.len(), 1);
    // The combined estimate with its interval band and its floor, per judge thresholds elsewhere.
    let band = panels
        .iter()
        .find(|p| {
            let e = exprs(p).join("\n");
            e.contains("ragwatch:faithfulness:combined_lower_5m")
                && e.contains("ragwatch:faithfulness:combined_upper_5m")
        })
        .expect("an interval band");
    let e = exprs(band).join("\n");
    assert!(e.contains("ragwatch:faithfulness:combined_mean_5m"), "{e}");
    assert!(e.contains("ragwatch:threshold_floor:ratio") && e.contains("judge=\"combined\""));
    assert!(band.to_string().contains("custom.fillBelowTo"));
    // The headline stat is coloured at the floor: its threshold comes from the floor's series.
    let headline = panels[1..]
        .iter()
        .find(|p| exprs(p).iter().any(|e| e.contains("combined_mean_5m")))
        .unwrap();
    let t = &headline["transformations"][0];
    assert_eq!(t["id"], "configFromData", "{headline}");
    let config_ref = t["options"]["configRefId"].as_str().unwrap();
    let config_query = headline["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["refId"] == config_ref)
        .unwrap();
    assert!(
        config_query["expr"]
            .as_str()
            .unwrap()
            .contains("ragwatch:threshold_floor:ratio"),
        "{config_query}"
    );
    assert_eq!(t["options"]["mappings"][0]["handlerKey"], "threshold1");
    let floors: Vec<&str> = panels
        .iter()
        .flat_map(exprs)
        .filter(|e| e.contains("ragwatch:threshold_floor:ratio"))
        .collect();
    assert!(floors.len() >= 3);
    for f in floors {
        assert!(f.contains("judge"), "a threshold without its judge: {f}");
    }
}

/// The series names a PromQL expression reads (recording rules and ragwatch's own families).
fn series_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("ragwatch") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        // A series, not a label value such as alertname=~"Ragwatch.*" or a word in a string.
        if name.contains(':') || name.starts_with("ragwatch_") {
            names.push(name.to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// Every `combined` number on the dashboard (headline, band, floor, samples) reads a series that an
/// alert of rules.yaml reads, in its expression or its description's queries: the pooled recording
/// rules, never one replica's `ragwatch_window_*` gauges averaged.
#[test]
fn every_combined_number_on_the_dashboard_is_one_an_alert_reads() {
    let read_by_alerts = python(
        "import yaml\nfor g in yaml.safe_load(open('deploy/prometheus/rules.yaml'))['groups']:\n  for r in g['rules']:\n    if 'alert' in r: print(r['expr']); [print(v) for v in r.get('annotations', {}).values()]",
        &[],
    );
    let alert_series = series_names(&read_by_alerts);
    assert!(
        alert_series
            .iter()
            .any(|s| s == "ragwatch:faithfulness:combined_upper_5m")
    );
    let d = dashboard();
    let mut n = 0;
    for p in d["panels"].as_array().unwrap() {
        for e in exprs(p).into_iter().filter(|e| e.contains("combined")) {
            n += 1;
            assert!(!e.contains("ragwatch_window_"), "{}: {e}", p["title"]);
            for s in series_names(e) {
                assert!(
                    alert_series.contains(&s),
                    "{}: {s} is read by no alert: {e}",
                    p["title"]
                );
            }
        }
    }
    assert!(n >= 6, "{n} combined queries");
}

/// No two panels (rows included: a row spans the width, one unit high) share a grid cell.
#[test]
fn dashboard_panels_do_not_overlap() {
    let d = dashboard();
    let rects: Vec<(String, [u64; 4])> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let g = &p["gridPos"];
            let v = |k: &str| g[k].as_u64().unwrap();
            (
                p["title"].as_str().unwrap().to_owned(),
                [v("x"), v("y"), v("w"), v("h")],
            )
        })
        .collect();
    for (title, [x, _, w, _]) in &rects {
        assert!(x + w <= 24, "{title} is wider than the grid");
    }
    for (i, (a, [ax, ay, aw, ah])) in rects.iter().enumerate() {
        for (b, [bx, by, bw, bh]) in &rects[i + 1..] {
            let apart = ax + aw <= *bx || bx + bw <= *ax || ay + ah <= *by || by + bh <= *ay;
            assert!(apart, "{a} overlaps {b}");
        }
    }
}

#[test]
fn dashboard_links_to_runbook_anchors_that_exist() {
    // The headings of a page of the book, as anchors (fenced code skipped: a `#` there is a comment).
    let anchors_of = |page: &str| -> Vec<String> {
        let text = std::fs::read_to_string(root().join(page))
            .unwrap_or_else(|e| panic!("the dashboard links to {page}, which cannot be read: {e}"));
        let mut fenced = false;
        text.lines()
            .filter(|l| {
                if l.trim_start().starts_with("```") {
                    fenced = !fenced;
                }
                !fenced
            })
            .filter_map(|l| l.strip_prefix('#'))
            .map(|h| anchor(h.trim_start_matches('#')))
            .collect()
    };
    let d = dashboard();
    let mut urls: Vec<String> = d["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["url"].as_str().unwrap().to_owned())
        .collect();
    let panels = d["panels"].as_array().unwrap();
    let linked = panels.iter().filter(|p| p["links"].is_array()).count();
    assert!(linked >= 10, "{linked} panels link to the runbook");
    for p in panels {
        for l in p["links"].as_array().into_iter().flatten() {
            urls.push(l["url"].as_str().unwrap().to_owned());
        }
    }
    let runbook = runbook_variable(&d).to_owned();
    for url in urls {
        let url = url.replace("${runbook}", &runbook);
        let (_, target) = url
            .split_once("/blob/main/")
            .unwrap_or_else(|| panic!("{url} is not a link into the repository"));
        let (page, a) = target.split_once('#').unwrap();
        assert!(page.starts_with("docs/"), "{url} points outside the book");
        assert!(
            anchors_of(page).iter().any(|x| x == a),
            "{page} has no #{a}"
        );
    }
}

/// Grafana-only syntax replaced by what the alerts test uses.
fn substitute(expr: &str) -> String {
    expr.replace("$cluster", ".*")
        .replace("$namespace", ".*")
        .replace("$install", ".*")
        .replace("$pod", ".*")
        .replace("$stratum", ".*")
        .replace("$judge", "offline")
        .replace("$__rate_interval", "20s")
}

/// The judge-change annotation: a judge identity new in a namespace that had ragwatch running,
/// never a restart with the same judge nor a first start. (`changes(ragwatch_judge_info[..])` would
/// never fire: the gauge is always 1; a judge change is a new series.) Evaluated by promtool.
#[test]
fn the_judge_change_annotation_fires_on_a_judge_change_only() {
    let d = dashboard();
    let annotation = d["annotations"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "Judge changed")
        .unwrap();
    let expr = substitute(annotation["expr"].as_str().unwrap());
    let info = |pod: &str, judge: &str| {
        format!("ragwatch_judge_info{{namespace=\"ns\", pod=\"{pod}\", model=\"{judge}\"}}")
    };
    let test = format!(
        "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n      - series: '{}'\n        values: '1x20'\n      - series: '{}'\n        values: '_x21 1x20'\n      - series: '{}'\n        values: '_x42 1x20'\n    promql_expr_test:\n{}",
        info("a", "m1"),
        info("b", "m1"),
        info("c", "m2"),
        [
            (2, ""),
            (23, ""),
            (44, "{namespace=\"ns\", model=\"m2\"}"),
            (52, ""),
        ]
        .iter()
        .map(|(at, labels)| {
            let samples = if labels.is_empty() {
                " []".to_owned()
            } else {
                format!("\n          - labels: '{labels}'\n            value: 1")
            };
            format!(
                "      - expr: '{expr}'\n        eval_time: {at}m\n        exp_samples:{samples}\n"
            )
        })
        .collect::<String>()
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("annotation_test.yaml");
    std::fs::write(&file, &test).unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{test}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every dashboard query returns data from a real Prometheus that scrapes ragwatch (with the LLM
/// judge, so the LLM and combined panels have data too) and evaluates deploy/prometheus/rules.yaml
/// with shortened windows; the traces come from a file, so the Kafka panels are left to
/// tests/it/alerts.rs. The tail stratum is unfaithful, so the diagnosis panel has data. On the
/// way, the verdict records rotate at their cap and keep the configured number of files.
#[test]
fn every_dashboard_query_returns_data_and_records_stay_capped() {
    let dir = tempfile::tempdir().unwrap();
    let traces: String = gen_traces(
        2000,
        &[
            "--strata",
            "head,tail,known_failure,out_of_scope",
            "--unfaithful-share",
            "0",
            "--bad-strata",
            "tail",
            "--seed",
            "31",
        ],
    )
    .into_iter()
    .enumerate()
    .map(|(i, (_, line))| {
        // Two indexes the contexts come from, for the what-changed source panel.
        let mut v: Value = serde_json::from_slice(&line).unwrap();
        v["metadata"]["index"] = json!(if i % 3 == 0 { "beta" } else { "alpha" });
        v.to_string() + "\n"
    })
    .collect();
    let trace_file = dir.path().join("traces.jsonl");
    std::fs::write(&trace_file, &traces).unwrap();
    // Canaries, judged at start, for the canary agreement panel.
    let canaries = dir.path().join("canaries.jsonl");
    let canary_lines: String = traces
        .lines()
        .take(3)
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v["label_faithful"] = json!(true);
            v.to_string() + "\n"
        })
        .collect();
    std::fs::write(&canaries, canary_lines).unwrap();
    let server = FakeOpenAi::start();
    let records = dir.path().join("verdicts.jsonl");
    let config = dir.path().join("ragwatch.toml");
    std::fs::write(
        &config,
        format!(
            "[source]\nkind = \"file\"\npath = \"{}\"\nrate_per_sec = 200.0\nloop = true\n\
             [strata]\ndeclared = [\"head\", \"tail\", \"known_failure\", \"out_of_scope\"]\n\
             [sample]\ndefault_rate = 0.2\n[budget]\nrequests_per_minute = 6000\n\
             [judge]\nsampled = \"llm\"\nworkers = 4\n\
             [llm]\nbase_url = \"{}\"\nchat_model = \"judge-2026-01-01\"\nembedding_model = \"embed-1\"\n\
             request_timeout_ms = 2000\nbackoff_base_ms = 20\nrecords_path = \"{}\"\n\
             records_max_bytes = 50000\nrecords_keep_files = 2\ncanary_path = \"{}\"\n\
             [labels]\nenabled = true\nauroc_min_per_class = 5\n\
             [changes]\nmin_traces = 5\n[changes.source]\ndeclared = [\"alpha\", \"beta\"]\n\
             fields = [\"/index\"]\n[changes.coverage]\nlevel = 0.95\n\
             [changes.novelty]\nknown_after_secs = 2\n\
             [review]\nenabled = true\nreviews_per_day = 1000000\n\
             [labels.feedback]\nenabled = true\nauroc_min_per_class = 5\n",
            trace_file.display(),
            server.base_url(),
            records.display(),
            canaries.display()
        ),
    )
    .unwrap();
    // ragwatch, the rules and the dashboard share the tests' windows.
    let rw = Ragwatch::start(
        &config,
        &[
            (
                "RAGWATCH__WINDOWS__WINDOW_SECS",
                format!("[{}, {}, {}]", WINDOWS[0], WINDOWS[1], WINDOWS[2]),
            ),
            ("RAGWATCH__WINDOWS__SHORT_SECS", WINDOWS[0].to_string()),
            ("RAGWATCH__WINDOWS__BASELINE_SECS", WINDOWS[2].to_string()),
        ],
    );
    // A reviewer labels every trace of the file, again every second (the file loops): one in three
    // unfaithful, so every stratum has both classes and the label AUROC panel has data.
    let labels: String = traces
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let id = serde_json::from_str::<Value>(l).unwrap()["trace_id"].clone();
            // And a user's thumbs, for the feedback panel.
            let thumb = if i % 3 == 0 { "thumbs_down" } else { "thumbs_up" };
            format!(
                "{{\"trace_id\": {id}, \"faithful\": {}}}\n{{\"trace_id\": {id}, \"kind\": \"{thumb}\"}}\n",
                i % 3 != 0
            )
        })
        .collect();
    let labelling = Arc::new(AtomicBool::new(true));
    let reviewer = {
        let (labelling, addr) = (Arc::clone(&labelling), rw.write_addr());
        std::thread::spawn(move || {
            while labelling.load(Ordering::Relaxed) {
                // A reviewer's pace: labels keep arriving while the test watches.
                std::thread::sleep(Duration::from_secs(1));
                let _ = std::panic::catch_unwind(|| http_post(addr, "/v1/labels", &labels));
            }
        })
    };

    std::fs::write(dir.path().join("rules.yaml"), test_rules()).unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\nscrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{}\"]\n",
            rw.addr
        ),
    )
    .unwrap();
    let (prom_port, _prom) = start_prometheus(dir.path(), &[]);

    let d = test_dashboard();
    for panel in d["panels"].as_array().unwrap() {
        // Kafka's series need a broker: tests/it/alerts.rs checks those panels over a real one.
        // The variant comparison's need [variants]: tests/it/rollout_gates.rs checks those.
        // The container's memory limit is the kubelet's (cAdvisor), which no test scrapes.
        for expr in exprs(panel).into_iter().filter(|e| {
            !e.contains("ragwatch_kafka_")
                && !e.contains("comparison")
                && !e.contains("container_spec_")
        }) {
            let q = substitute(expr);
            wait_for(
                &format!("data for panel {}: {q}", panel["title"]),
                Duration::from_secs(90),
                || query(prom_port, &q).filter(|r| !r.is_empty()),
            );
        }
    }

    labelling.store(false, Ordering::Relaxed);
    reviewer.join().unwrap();

    // The records rotated at their cap: the live file and two rotated ones, none above the cap.
    wait_for(
        "the records to rotate twice",
        Duration::from_secs(60),
        || std::fs::metadata(PathBuf::from(format!("{}.2", records.display()))).ok(),
    );
    for n in ["", ".1", ".2"] {
        let len = std::fs::metadata(format!("{}{n}", records.display()))
            .unwrap()
            .len();
        assert!(len <= 50_000, "verdicts.jsonl{n}: {len} bytes");
    }
    assert!(!Path::new(&format!("{}.3", records.display())).exists());
}

/// The kustomize path to tuned rules, as docs/operations.md shows it: `ragwatch rules --out` into
/// the user's overlay and the PrometheusRule it writes as a patch over the monitoring component's.
/// The rendered PrometheusRule carries exactly the tuned groups.
#[test]
fn a_kustomize_overlay_patches_in_the_tuned_rules() {
    let doc = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let start = doc
        .find("```yaml\n# my-install/kustomization.yaml\n")
        .expect("docs/operations.md shows the tuned overlay");
    let block = &doc[start + "```yaml\n".len()..];
    let kustomization = block[..block.find("```").unwrap()].replace("../deploy/", "{repo}/deploy/");
    let dir = user_overlay(&[("kustomization.yaml", &kustomization)]);
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["rules", "--out"])
            .arg(dir.path())
            .args([
                "--rule-label",
                "team=rag",
                "--disable-alert",
                "RagwatchNoTraces",
                "--alert-threshold",
                "RagwatchConsumerLagGrowing.lag_messages=50000",
            ]),
    );
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
    assert!(rendered.contains("> 50000\n"));
    check("tuned overlay", &rendered);
}
