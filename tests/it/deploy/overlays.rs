//! The kustomize overlays and components: each renders and validates, carries no trap, restricts
//! ragwatch's container on its own, adds the operator objects with one `release` label, generates
//! its Secrets under hashed names, renders the rollout gates beside a workload, lets two installs
//! share a namespace, and leaves the application its pod.

use std::process::Command;

use serde_json::{Value, json};

use super::{
    WORKLOADS, check, documented_second_install, has_kind, kustomize, python, render,
    render_with_monitoring, user_overlay,
};
use crate::common::manifests::validate;
use crate::common::{pipe, repo};

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
        let src = repo().join("deploy/kubernetes/overlays").join(overlay);
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
