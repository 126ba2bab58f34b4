//! deploy/: the rules pass promtool (syntax and unit tests), the PrometheusRule carries exactly the
//! plain rules, every kustomize overlay renders and validates against the Kubernetes schemas, the
//! workloads are locked down, and the config shipped in the ConfigMap is one ragwatch accepts.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{pipe, run_ok};

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

#[test]
fn prometheus_rule_matches_the_plain_rules_file() {
    let verdict = python(
        "import yaml,sys\nplain=yaml.safe_load(open('deploy/prometheus/rules.yaml'))['groups']\ncr=yaml.safe_load(open('deploy/kubernetes/base/prometheusrule.yaml'))\nprint('same' if cr['spec']['groups']==plain else 'different', len(plain))",
        &[],
    );
    assert!(verdict.starts_with("same"), "{verdict}");
}

fn render(overlay: &str) -> String {
    let out = run_ok(
        Command::new("kubectl")
            .args([
                "kustomize",
                &format!("deploy/kubernetes/overlays/{overlay}"),
            ])
            .current_dir(root()),
    );
    String::from_utf8(out.stdout).unwrap()
}

const CHECK_POD: &str = r#"
import yaml, sys, json
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
kinds = sorted(d['kind'] for d in docs)
problems = []
for d in docs:
    if d['kind'] != 'Deployment':
        continue
    spec = d['spec']['template']['spec']
    pod_sc = spec.get('securityContext', {})
    if pod_sc.get('runAsNonRoot') is not True: problems.append('pod runAsNonRoot')
    if pod_sc.get('seccompProfile', {}).get('type') != 'RuntimeDefault': problems.append('seccomp')
    rw = [c for c in spec.get('containers', []) + spec.get('initContainers', []) if c['name'] == 'ragwatch']
    if len(rw) != 1: problems.append('one ragwatch container'); continue
    c = rw[0]
    sc = c.get('securityContext', {})
    if sc.get('allowPrivilegeEscalation') is not False: problems.append('privilege escalation')
    if sc.get('readOnlyRootFilesystem') is not True: problems.append('read-only root')
    if sc.get('capabilities', {}).get('drop') != ['ALL']: problems.append('capabilities')
    for probe, path in (('livenessProbe', '/livez'), ('readinessProbe', '/readyz')):
        if c.get(probe, {}).get('httpGet', {}).get('path') != path: problems.append(probe)
    if spec.get('terminationGracePeriodSeconds', 30) <= 20: problems.append('grace period')
    if not any(m['mountPath'] == '/tmp' for m in c.get('volumeMounts', [])): problems.append('tmp emptyDir')
    if 'initContainers' in spec and c in spec['initContainers'] and c.get('restartPolicy') != 'Always':
        problems.append('native sidecar restartPolicy')
cm = [d for d in docs if d['kind'] == 'ConfigMap' and d['metadata']['name'] == 'ragwatch-dashboard']
if not cm or cm[0]['metadata'].get('labels', {}).get('grafana_dashboard') != '1': problems.append('dashboard configmap label')
json.dump({'kinds': kinds, 'problems': problems}, sys.stdout)
"#;

#[test]
fn overlays_render_validate_and_are_locked_down() {
    for overlay in ["standalone", "sidecar", "native-sidecar"] {
        let rendered = render(overlay);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rendered.yaml");
        std::fs::write(&file, &rendered).unwrap();
        let out = Command::new("kubernetes-validate")
            .arg("--strict")
            .arg(&file)
            .output()
            .expect("kubernetes-validate (pip) is installed by tests/run.sh");
        let report = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{overlay}: {report}");
        assert!(
            report.matches("passed for resource").count() >= 5,
            "{overlay}: {report}"
        );
        let out = pipe(Command::new("python3").arg("-c").arg(CHECK_POD), &rendered);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["problems"], serde_json::json!([]), "{overlay}: {v}");
        for kind in [
            "ConfigMap",
            "Deployment",
            "PodMonitor",
            "PrometheusRule",
            "Secret",
            "Service",
            "ServiceMonitor",
        ] {
            assert!(
                v["kinds"].as_array().unwrap().iter().any(|k| k == kind),
                "{overlay} lacks {kind}"
            );
        }
    }
}

#[test]
fn configmap_config_is_accepted_by_ragwatch() {
    let toml = python(
        "import yaml\nd=yaml.safe_load(open('deploy/kubernetes/base/configmap.yaml'))\nprint(d['data']['ragwatch.toml'])",
        &[],
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ragwatch.toml");
    std::fs::write(&path, toml).unwrap();
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["check-config", "--config"])
            .arg(&path)
            .env("RAGWATCH__KAFKA__BROKERS", "kafka:9092"),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("sampled = \"llm\""));
}

#[test]
fn dashboard_is_valid_and_every_panel_has_queries() {
    let text =
        std::fs::read_to_string(root().join("deploy/grafana/ragwatch-dashboard.json")).unwrap();
    let d: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 12);
    for p in panels {
        assert!(
            !p["targets"].as_array().unwrap().is_empty(),
            "{}",
            p["title"]
        );
    }
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for v in ["namespace", "pod", "stratum"] {
        assert!(vars.contains(&v), "variable {v}");
    }
}

/// The image builds from what the Dockerfile copies: every file the crate embeds at compile time
/// (`include_str!`, `include_bytes!`) lies under a copied directory. (No Docker engine runs here.)
#[test]
fn the_dockerfile_copies_every_file_the_build_embeds() {
    let dockerfile = std::fs::read_to_string("deploy/Dockerfile").unwrap();
    let copied: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .filter(|l| !l.starts_with("--from"))
        .flat_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            parts[..parts.len() - 1].to_vec()
        })
        .collect();
    let mut embedded = Vec::new();
    let mut stack = vec![std::path::PathBuf::from("src")];
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
    let root = std::fs::canonicalize(".").unwrap();
    for file in embedded {
        let relative = file.strip_prefix(&root).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        assert!(
            copied
                .iter()
                .any(|c| c.trim_end_matches('/') == top || *c == relative.to_str().unwrap()),
            "{} is embedded by the build but the Dockerfile does not copy it",
            relative.display()
        );
    }
}
