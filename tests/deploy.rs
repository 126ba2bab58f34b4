//! deploy/: the rules pass promtool (syntax and unit tests) and the PrometheusRule carries exactly the
//! plain rules; every kustomize overlay renders and validates against the Kubernetes schemas, without
//! traps (no Secret and no Prometheus Operator object unless opted into, a config change rolls the
//! pods, one place for the `release` label), and ragwatch's container is restricted on its own; the
//! config shipped to the cluster is one ragwatch accepts; the image's build context and copy list
//! hold everything the build and the default command need (checked without a Docker engine); logs
//! are plain text or JSON when stderr is not a terminal; and the Grafana dashboard is well formed,
//! and every one of its queries returns data from a real Prometheus scraping ragwatch.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::openai::FakeOpenAi;
use common::{
    Ragwatch, gen_traces, http_get, http_post, pipe, run_ok, spawn_on_free_port, wait_for,
};
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

/// The delta rules subtract the value one evaluation ago: their offset is their group's interval,
/// or the window sums built on them count a step twice or miss one.
#[test]
fn delta_rules_subtract_exactly_their_groups_interval() {
    let verdict = python(
        "import yaml,re\nfor g in yaml.safe_load(open('deploy/prometheus/rules.yaml'))['groups']:\n  for r in g['rules']:\n    if ':delta' not in r.get('record', ''): continue\n    offs=set(re.findall(r'offset (\\w+)', r['expr']))\n    tag=re.search(r':delta(\\w+)$', r['record']).group(1)\n    print(r['record'], g.get('interval'), sorted(offs), tag)",
        &[],
    );
    let mut n = 0;
    for line in verdict.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let (record, interval, offsets, tag) = (parts[0], parts[1], parts[2], parts[3]);
        assert_eq!(
            offsets,
            format!("['{interval}']"),
            "{record}: offsets against interval"
        );
        assert_eq!(tag, interval, "{record}: its name says another interval");
        n += 1;
    }
    assert!(n >= 17, "{n} delta rules");
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

fn validate(name: &str, rendered: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, rendered).unwrap();
    let out = Command::new("kubernetes-validate")
        .arg("--strict")
        .arg(&file)
        .output()
        .expect("kubernetes-validate (pip) is installed by tests/run.sh");
    let report =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: {report}");
    assert!(
        report.matches("passed for resource").count() >= 3,
        "{name}: {report}"
    );
}

/// Reads rendered manifests on stdin; prints what the tests assert on. The ragwatch container is
/// checked against the Kubernetes restricted profile on its own: the pod's settings never count.
const CHECK: &str = r#"
import json, re, sys, tomllib, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
problems = []
def bytes_of(q):
    m = re.fullmatch(r'(\d+)(Ki|Mi|Gi|K|M|G)?', str(q))
    mult = {None: 1, 'Ki': 1024, 'Mi': 1024**2, 'Gi': 1024**3, 'K': 1000, 'M': 1000**2, 'G': 1000**3}
    return int(m.group(1)) * mult[m.group(2)]
configmaps = {d['metadata']['name']: d for d in docs if d['kind'] == 'ConfigMap'}
workloads = []
for d in docs:
    if d['kind'] != 'Deployment':
        continue
    spec = d['spec']['template']['spec']
    rw = [c for c in spec.get('containers', []) + spec.get('initContainers', []) if c['name'] == 'ragwatch']
    if len(rw) != 1: problems.append('one ragwatch container'); continue
    c = rw[0]
    sc = c.get('securityContext', {})
    if sc.get('runAsNonRoot') is not True: problems.append('container runAsNonRoot')
    if sc.get('runAsUser', 1) == 0: problems.append('container runAsUser 0')
    if sc.get('seccompProfile', {}).get('type') != 'RuntimeDefault': problems.append('container seccomp')
    if sc.get('allowPrivilegeEscalation') is not False: problems.append('privilege escalation')
    if sc.get('privileged'): problems.append('privileged')
    if sc.get('readOnlyRootFilesystem') is not True: problems.append('read-only root')
    if sc.get('capabilities', {}).get('drop') != ['ALL']: problems.append('capabilities drop')
    if sc.get('capabilities', {}).get('add'): problems.append('capabilities add')
    if any('hostPort' in p for p in c.get('ports', [])): problems.append('hostPort')
    for probe, path in (('livenessProbe', '/livez'), ('readinessProbe', '/readyz')):
        if c.get(probe, {}).get('httpGet', {}).get('path') != path: problems.append(probe)
    if spec.get('terminationGracePeriodSeconds', 30) <= 20: problems.append('grace period')
    if 'initContainers' in spec and c in spec['initContainers'] and c.get('restartPolicy') != 'Always':
        problems.append('native sidecar restartPolicy')
    mounts = {m['name']: m['mountPath'] for m in c.get('volumeMounts', [])}
    volumes = {v['name']: v for v in spec.get('volumes', []) if v['name'] in mounts}
    if '/tmp' not in mounts.values(): problems.append('tmp emptyDir')
    for name, v in volumes.items():
        if not ({'configMap', 'secret', 'emptyDir'} & v.keys()): problems.append('volume type ' + name)
    config_volumes = [v for v in volumes.values() if 'configMap' in v and mounts[v['name']] == '/etc/ragwatch']
    if len(config_volumes) != 1: problems.append('config volume'); continue
    cm_name = config_volumes[0]['configMap']['name']
    if not cm_name.startswith('ragwatch-config-') or cm_name not in configmaps:
        problems.append('config from a generated (hash-named) ConfigMap: ' + cm_name); continue
    config = tomllib.loads(configmaps[cm_name]['data']['ragwatch.toml'])
    if config.get('log', {}).get('format') != 'json': problems.append('json logs')
    llm = config.get('llm', {})
    cap = llm.get('records_max_bytes', 64 << 20) * (llm.get('records_keep_files', 3) + 1)
    records_dir = llm['records_path'].rsplit('/', 1)[0]
    records = [v for v in volumes.values() if mounts[v['name']] == records_dir]
    if len(records) != 1 or 'emptyDir' not in records[0]: problems.append('records emptyDir'); continue
    limit = bytes_of(records[0]['emptyDir'].get('sizeLimit', 0))
    if limit <= cap: problems.append(f'records emptyDir {limit} <= records cap {cap}')
    workloads.append({'name': d['metadata']['name'], 'labels': d['spec']['template']['metadata'].get('labels', {}),
                      'pod_security_context': spec.get('securityContext')})
dash = configmaps.get('ragwatch-dashboard')
if not dash or dash['metadata'].get('labels', {}).get('grafana_dashboard') != '1': problems.append('dashboard configmap label')
json.dump({
    'kinds': sorted(d['kind'] for d in docs),
    'problems': problems,
    'workloads': workloads,
    'secrets': [d['metadata']['name'] for d in docs if d['kind'] == 'Secret'],
    'release': {d['kind']: d['metadata'].get('labels', {}).get('release') for d in docs
                if d['apiVersion'].startswith('monitoring.coreos.com/')},
    'pdbs': [d['spec'] for d in docs if d['kind'] == 'PodDisruptionBudget'],
}, sys.stdout)
"#;

fn check(name: &str, rendered: &str) -> Value {
    let out = pipe(Command::new("python3").arg("-c").arg(CHECK), rendered);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["problems"], json!([]), "{name}: {v}");
    assert!(
        !v["workloads"].as_array().unwrap().is_empty(),
        "{name}: no ragwatch workload"
    );
    v
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
    let all = json!({"PodMonitor": release, "PrometheusRule": release, "ServiceMonitor": release});
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
        json!({"PodMonitor": "my-prometheus", "PrometheusRule": "my-prometheus", "ServiceMonitor": "my-prometheus"})
    );
}

/// The example overlay has everything, and its generated Secret can never overwrite the real one.
#[test]
fn the_example_overlay_generates_a_secret_under_a_hashed_name() {
    let rendered = render("example");
    validate("example", &rendered);
    let v = check("example", &rendered);
    let secrets = v["secrets"].as_array().unwrap();
    assert_eq!(secrets.len(), 1);
    let name = secrets[0].as_str().unwrap();
    assert!(
        name.starts_with("ragwatch-secrets-") && name.len() > "ragwatch-secrets-".len(),
        "{name}"
    );
    for kind in [
        "PodMonitor",
        "PrometheusRule",
        "ServiceMonitor",
        "PodDisruptionBudget",
    ] {
        assert!(has_kind(&v, kind), "example lacks {kind}");
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

/// One Dockerfile instruction: the keyword and the rest, continuation lines joined.
fn instructions(dockerfile: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let (keyword, rest) = current.split_once(' ').unwrap_or((&current, ""));
        out.push((keyword.to_ascii_uppercase(), rest.trim().to_owned()));
        current.clear();
    }
    out
}

/// A COPY: `--from` stage (None for the build context), sources, destination.
struct Copy {
    from: Option<String>,
    sources: Vec<String>,
    dest: String,
}

/// The Dockerfile's stages, in order: (base image, instructions).
fn stages() -> Vec<(String, Vec<(String, String)>)> {
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let mut stages: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (keyword, rest) in instructions(&text) {
        if keyword == "FROM" {
            stages.push((rest, Vec::new()));
        } else {
            stages.last_mut().unwrap().1.push((keyword, rest));
        }
    }
    stages
}

fn copies(stage: &[(String, String)]) -> Vec<Copy> {
    stage
        .iter()
        .filter(|(k, _)| k == "COPY")
        .map(|(_, rest)| {
            let mut words: Vec<&str> = rest.split_whitespace().collect();
            let dest = words.pop().unwrap().to_owned();
            let from = words
                .iter()
                .find_map(|w| w.strip_prefix("--from="))
                .map(str::to_owned);
            let sources = words
                .iter()
                .filter(|w| !w.starts_with("--"))
                .map(|w| w.to_string())
                .collect();
            Copy {
                from,
                sources,
                dest,
            }
        })
        .collect()
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

/// The build context holds what the build stage copies, and nothing big: not target/ nor .git.
#[test]
fn the_build_context_holds_what_the_build_copies_and_no_more() {
    let stages = stages();
    let context: Vec<String> = stages
        .iter()
        .flat_map(|(_, s)| copies(s))
        .filter(|c| c.from.is_none())
        .flat_map(|c| c.sources)
        .collect();
    assert!(context.iter().any(|s| s == "src"), "{context:?}");
    for source in &context {
        assert!(root().join(source).exists(), "COPY {source}: no such path");
        assert!(
            context_allows(source),
            ".dockerignore keeps {source} out of the context"
        );
    }
    for big in ["target", ".git", "fuzz/corpus", "tests"] {
        assert!(!context_allows(big), ".dockerignore lets {big} in");
    }
}

/// The image builds from what the Dockerfile copies: every file the crate embeds at compile time
/// (`include_str!`, `include_bytes!`) lies under a path copied from the context.
#[test]
fn the_dockerfile_copies_every_file_the_build_embeds() {
    let copied: Vec<String> = stages()
        .iter()
        .flat_map(|(_, s)| copies(s))
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

/// The JSON array of an exec-form instruction (`CMD ["run", ...]`).
fn exec_form(stage: &[(String, String)], keyword: &str) -> Vec<String> {
    let (_, rest) = stage.iter().rev().find(|(k, _)| k == keyword).unwrap();
    serde_json::from_str(rest).unwrap_or_else(|e| panic!("{keyword} is not exec form: {e}"))
}

/// The image's default command works: the binary, the config it names and every file that config
/// names are copied into the runtime image, at absolute paths (no working directory to rely on).
/// Checked without a Docker engine, from the Dockerfile itself.
#[test]
fn every_path_the_default_command_and_config_name_is_in_the_image() {
    let stages = stages();
    let (runtime_base, runtime) = stages.last().unwrap();
    let (_, build) = &stages[0];
    assert!(
        runtime_base.starts_with("gcr.io/distroless/cc-debian12:nonroot"),
        "{runtime_base}"
    );
    let image_files: Vec<String> = copies(runtime)
        .into_iter()
        .map(|c| {
            assert_eq!(c.sources.len(), 1, "one file per runtime COPY");
            c.dest
        })
        .collect();
    let in_image = |path: &str| image_files.iter().any(|f| f == path);

    let command: Vec<String> = exec_form(runtime, "ENTRYPOINT")
        .into_iter()
        .chain(exec_form(runtime, "CMD"))
        .collect();
    for arg in command.iter().filter(|a| a.starts_with('/')) {
        assert!(in_image(arg), "{arg} (default command) is not copied");
    }
    let config_at = command.iter().position(|a| a == "--config").unwrap() + 1;
    let config_in_image = &command[config_at];

    // The image's config is config/ragwatch.toml with one line rewritten by sed in the build stage:
    // apply the same substitution here.
    let sed = build
        .iter()
        .find(|(k, r)| k == "RUN" && r.contains("config/ragwatch.toml"))
        .map(|(_, r)| r.clone())
        .expect("the build stage writes the image's config");
    let expr = sed.split('\'').nth(1).unwrap();
    let parts: Vec<&str> = expr.split('|').collect();
    assert_eq!(parts[0], "s", "{expr}");
    let (from, to) = (
        parts[1].trim_start_matches('^').trim_end_matches('$'),
        parts[2],
    );
    let original = std::fs::read_to_string(root().join("config/ragwatch.toml")).unwrap();
    assert_eq!(
        original.lines().filter(|l| *l == from).count(),
        1,
        "config/ragwatch.toml no longer has the line the Dockerfile rewrites: {from}"
    );
    let config: String = original
        .lines()
        .map(|l| if l == from { to } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    let config_out = sed.rsplit('>').next().unwrap().split_whitespace().next();
    let copied_config = copies(runtime)
        .into_iter()
        .find(|c| &c.dest == config_in_image)
        .unwrap();
    assert_eq!(
        Some(copied_config.sources[0].as_str()),
        config_out,
        "{config_in_image} is the config the build stage writes"
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

    // Every runtime COPY from the build stage copies something the build stage has: a file of the
    // context under the working directory, or an output of a RUN.
    let workdir = build
        .iter()
        .rev()
        .find(|(k, _)| k == "WORKDIR")
        .map(|(_, r)| r.clone())
        .unwrap();
    for c in copies(runtime).into_iter().filter(|c| c.from.is_some()) {
        let source = &c.sources[0];
        match source.strip_prefix(&format!("{workdir}/")) {
            Some(relative) => {
                assert!(root().join(relative).is_file(), "{source}");
                assert!(context_allows(relative), "{source} is not in the context");
            }
            None => assert!(
                build
                    .iter()
                    .any(|(k, r)| k == "RUN" && r.contains(source.as_str())),
                "no RUN in the build stage writes {source}"
            ),
        }
    }
}

/// Small and lean: a numeric non-root user (so `runAsNonRoot` can verify it), no libcurl, no cmake
/// (librdkafka builds with its own configure script), cargo's caches as BuildKit cache mounts.
#[test]
fn the_image_runs_as_a_numeric_non_root_user_and_builds_lean() {
    let stages = stages();
    let (_, runtime) = stages.last().unwrap();
    let (_, user) = runtime.iter().rev().find(|(k, _)| k == "USER").unwrap();
    let uid: u32 = user.split(':').next().unwrap().parse().unwrap();
    assert_ne!(uid, 0);
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let runs: Vec<&String> = stages
        .iter()
        .flat_map(|(_, s)| s.iter())
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
        &std::fs::read_to_string(root().join("deploy/kubernetes/base/ragwatch-dashboard.json"))
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
    for v in ["namespace", "pod", "stratum"] {
        assert!(vars.contains(&v), "variable {v}");
    }
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
        "ragwatch_window_mean_ratio{",
        "judge=\"combined\", metric=\"faithfulness\", window=\"5m\"",
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
            e.contains("ragwatch_window_ci_lower_ratio")
                && e.contains("ragwatch_window_ci_upper_ratio")
        })
        .expect("an interval band");
    let e = exprs(band).join("\n");
    assert!(e.matches("judge=\"combined\"").count() >= 3, "{e}");
    assert!(e.contains("ragwatch_threshold_ratio") && e.contains("rule=\"floor\""));
    assert!(band.to_string().contains("custom.fillBelowTo"));
    let floors: Vec<&str> = panels
        .iter()
        .flat_map(exprs)
        .filter(|e| e.contains("ragwatch_threshold_ratio"))
        .collect();
    assert!(floors.len() >= 3);
    for f in floors {
        assert!(f.contains("judge"), "a threshold without its judge: {f}");
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
    for url in urls {
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
    expr.replace("$namespace", ".*")
        .replace("$pod", ".*")
        .replace("$stratum", ".*")
        .replace("$__rate_interval", "20s")
}

/// The judge-change annotation: a judge identity new in a namespace that had ragwatch running,
/// never a restart with the same judge nor a first start. (`changes(ragwatch_build_info[..])` would
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
        format!(
            "ragwatch_build_info{{namespace=\"ns\", pod=\"{pod}\", version=\"0.1.0\", judge_model=\"{judge}\"}}"
        )
    };
    let test = format!(
        "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n      - series: '{}'\n        values: '1x20'\n      - series: '{}'\n        values: '_x21 1x20'\n      - series: '{}'\n        values: '_x42 1x20'\n    promql_expr_test:\n{}",
        info("a", "m1"),
        info("b", "m1"),
        info("c", "m2"),
        [
            (2, ""),
            (23, ""),
            (44, "{namespace=\"ns\", judge_model=\"m2\"}"),
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

fn shorten_windows(s: &str) -> String {
    let mut s = s.to_owned();
    for (from, to) in [
        ("[5m]", "[20s]"),
        ("[1h]", "[40s]"),
        ("[24h]", "[60s]"),
        ("[10m]", "[20s]"),
        ("[15m]", "[20s]"),
    ] {
        s = s.replace(from, to);
    }
    for d in ["5m", "10m", "15m"] {
        s = s.replace(&format!("for: {d}"), "for: 3s");
    }
    s
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn query(prom: u16, q: &str) -> Option<Vec<Value>> {
    let (code, body) = http_get(
        ([127, 0, 0, 1], prom).into(),
        &format!("/api/v1/query?query={}", urlencode(q)),
    )?;
    if code != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"].as_array().cloned()
}

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every dashboard query returns data from a real Prometheus that scrapes ragwatch (with the LLM
/// judge, so the LLM and combined panels have data too) and evaluates deploy/prometheus/rules.yaml
/// with shortened windows; the traces come from a file, so the Kafka panels are left to
/// tests/alerts.rs. The tail stratum is unfaithful, so the diagnosis panel has data. On the
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
    .map(|(_, line)| String::from_utf8(line).unwrap() + "\n")
    .collect();
    let trace_file = dir.path().join("traces.jsonl");
    std::fs::write(&trace_file, &traces).unwrap();
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
             records_max_bytes = 50000\nrecords_keep_files = 2\n\
             [labels]\nenabled = true\nauroc_min_per_class = 5\n",
            trace_file.display(),
            server.base_url(),
            records.display()
        ),
    )
    .unwrap();
    let rw = Ragwatch::start(&config, &[]);
    // A reviewer labels every trace of the file, again every second (the file loops): one in three
    // unfaithful, so every stratum has both classes and the label AUROC panel has data.
    let labels: String = traces
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let id = serde_json::from_str::<Value>(l).unwrap()["trace_id"].clone();
            format!("{{\"trace_id\": {id}, \"faithful\": {}}}\n", i % 3 != 0)
        })
        .collect();
    let labelling = Arc::new(AtomicBool::new(true));
    let reviewer = {
        let (labelling, addr) = (Arc::clone(&labelling), rw.addr);
        std::thread::spawn(move || {
            while labelling.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                let _ = std::panic::catch_unwind(|| http_post(addr, "/v1/labels", &labels));
            }
        })
    };

    let rules = std::fs::read_to_string(root().join("deploy/prometheus/rules.yaml")).unwrap();
    std::fs::write(dir.path().join("rules.yaml"), shorten_windows(&rules)).unwrap();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\nscrape_configs:\n  - job_name: ragwatch\n    static_configs:\n      - targets: [\"{}\"]\n",
            rw.addr
        ),
    )
    .unwrap();
    let (prom_port, child) = spawn_on_free_port(
        "prometheus",
        Duration::from_secs(30),
        |port| {
            Command::new("prometheus")
                .arg(format!(
                    "--config.file={}",
                    dir.path().join("prometheus.yml").display()
                ))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("tsdb").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("prometheus is installed by tests/run.sh")
        },
        |port| {
            http_get(([127, 0, 0, 1], port).into(), "/-/ready").is_some_and(|(code, _)| code == 200)
        },
    );
    let _prom = Killed(child);

    let d = dashboard();
    for panel in d["panels"].as_array().unwrap() {
        // Kafka's series need a broker: tests/alerts.rs checks those panels over a real one.
        for expr in exprs(panel)
            .into_iter()
            .filter(|e| !e.contains("ragwatch_kafka_"))
        {
            let q = shorten_windows(&substitute(expr));
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
