//! deploy/helm/ragwatch: the chart passes Helm's lint with its own values and every values file in
//! its ci/ folder; each renders (through Helm's own install action) into manifests that validate
//! against the Kubernetes schemas and pass the same checks as the kustomize overlays (ragwatch's
//! container restricted on its own, a config change rolls the pods, the records emptyDir above the
//! records' cap), with a config ragwatch accepts; the PrometheusRule and the AlertmanagerConfig carry
//! exactly what deploy/ ships; two releases in one namespace share no object name, select none of
//! each other's pods, and their dashboards differ in uid, title and file; the runbook's address
//! is one value; and the rollout gates are components/rollout-gates' objects pointed at the release.
//!
//! Helm's library comes from helm-sdkpy (PyPI), in a venv tests/run.sh makes; its python is
//! `RAGWATCH_HELM_PYTHON`, else `~/.cache/ragwatch/helm-venv/bin/python`. tests/helm_chart.py says
//! how it lints and renders without a cluster.

use crate::common::manifests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{pipe, run_ok};
use manifests::validate;
use serde_json::{Value, json};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("deploy/helm/ragwatch")
}

fn helm_python() -> PathBuf {
    std::env::var_os("RAGWATCH_HELM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap())
                .join(".cache/ragwatch/helm-venv/bin/python")
        })
}

fn helm_chart(args: &[&str]) -> Vec<Value> {
    let python = helm_python();
    assert!(
        python.exists(),
        "{} is missing: tests/run.sh installs helm-sdkpy into it",
        python.display()
    );
    let out = run_ok(
        Command::new(python)
            .arg(root().join("tests/helm_chart.py"))
            .args(args)
            .current_dir(root()),
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The chart's test values files (ci/*.yaml), by path from the repository's root.
fn values_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(chart().join("ci"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            p.strip_prefix(root()).unwrap().display().to_string()
        })
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    files
}

/// Helm's rendered manifest for `release` in namespace `rag` with `values` files applied in order
/// (paths from the repository's root), or the install's error.
fn render(release: &str, values: &[&str]) -> Result<(String, String), String> {
    let chart = chart();
    let mut args = vec!["render", chart.to_str().unwrap(), release, "rag"];
    args.extend_from_slice(values);
    let out = helm_chart(&args).pop().unwrap();
    match out["error"].as_str() {
        Some(e) => Err(e.to_owned()),
        None => Ok((
            out["manifest"].as_str().unwrap().to_owned(),
            out["notes"].as_str().unwrap().to_owned(),
        )),
    }
}

/// A values file written for one test.
fn values_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    f
}

/// The rendered objects, as JSON.
fn objects(manifest: &str) -> Vec<Value> {
    let out = pipe(
        Command::new("python3").arg("-c").arg(
            "import json, sys, yaml\njson.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)",
        ),
        manifest,
    );
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn check(name: &str, manifest: &str, external_config: Option<&Path>) -> Value {
    let v = manifests::check(name, manifest, external_config);
    assert_eq!(v["workloads"].as_array().unwrap().len(), 1, "{name}: {v}");
    v
}

/// The chart lints clean (nothing above info) with its own values and every ci/ values file, and
/// the lint is not toothless: a value against the schema is an error.
#[test]
fn the_chart_lints_with_every_values_file() {
    let chart = chart();
    let files = values_files();
    let mut args = vec!["lint", chart.to_str().unwrap(), "default"];
    args.extend(files.iter().map(String::as_str));
    let results = helm_chart(&args);
    assert_eq!(results.len(), files.len() + 1);
    for r in &results {
        let worst = r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[0].as_u64().unwrap())
            .max()
            .unwrap_or(0);
        assert!(worst <= 1, "{r}");
    }
    for bad in [
        "replicas: two\n",
        "serviceMonitor: {enabled: true, interval: soon}\n",
        "runbookBaseUrl: https://wiki.example.com/runbook#top\n",
        "config: {toml: \"[source]\", existingConfigMap: mine}\n",
        "servicemonitor: {enabled: true}\n",
        "rolloutGates: {argo: {enabled: true}, flagger: {enabled: false}, variant: Canary}\n",
        "image: {repository: r, digest: latest}\n",
        "networkPolicy: {enabled: true, writer: []}\n",
        "networkPolicy: {kafka: {ports: [], to: []}}\n",
        "serviceMonitor: {enabled: true, scrapeTimeout: soon}\n",
        "serviceAccount: {create: true, automount: true}\n",
    ] {
        let f = values_file(bad);
        let r = helm_chart(&["lint", chart.to_str().unwrap(), f.path().to_str().unwrap()]);
        let errors: Vec<&Value> = r[0]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m[0] == 3)
            .collect();
        assert!(errors.iter().any(|m| m[1] == "values.yaml"), "{bad}: {r:?}");
    }
}

/// Every values file renders into manifests that validate, pass the kustomize overlays' checks, and
/// hold a config that ragwatch accepts with the environment the Deployment sets.
#[test]
fn every_values_file_renders_validates_and_configures_ragwatch() {
    let shipped_config = root().join("deploy/kubernetes/base/ragwatch.toml");
    let mut cases: Vec<Vec<String>> = vec![vec![]];
    cases.extend(values_files().into_iter().map(|f| vec![f]));
    for values in cases {
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        let name = format!("{refs:?}");
        let (manifest, _) = render("ragwatch", &refs).unwrap_or_else(|e| panic!("{name}: {e}"));
        validate(&name, &manifest);
        let external = manifest.contains("name: my-ragwatch-config");
        let v = check(
            &name,
            &manifest,
            external.then_some(shipped_config.as_path()),
        );
        assert_eq!(
            v["secrets"],
            json!([]),
            "{name}: the chart creates no Secret"
        );
        let workload = &v["workloads"][0];
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("ragwatch.toml");
        std::fs::write(&config, workload["config"].as_str().unwrap()).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ragwatch"));
        cmd.args(["check-config", "--config"]).arg(&config);
        for (k, val) in workload["env"].as_object().unwrap() {
            cmd.env(k, val.as_str().unwrap());
        }
        let effective = String::from_utf8(run_ok(&mut cmd).stdout).unwrap();
        let otlp = workload["ports"].as_array().unwrap().contains(&json!(4318));
        let kind = if otlp { "otlp" } else { "kafka" };
        assert!(
            effective.contains(&format!("[source]\nkind = \"{kind}\"")),
            "{name}: {effective}"
        );
        let objects = objects(&manifest);
        let headless = |suffix: &str| -> Vec<&Value> {
            objects
                .iter()
                .filter(|o| {
                    o["kind"] == "Service"
                        && o["spec"]["clusterIP"] == "None"
                        && o["metadata"]["name"].as_str().unwrap().ends_with(suffix)
                })
                .collect()
        };
        // The peers Service, with or without OTLP: ready pods only, no port to scrape or call.
        let peers = headless("-peers");
        assert_eq!(peers.len(), 1, "{name}: one peers Service");
        assert_eq!(
            peers[0]["spec"]["publishNotReadyAddresses"], false,
            "{name}"
        );
        assert!(peers[0]["spec"].get("ports").is_none(), "{name}");
        let peers_name = format!(
            "{}.rag.svc.cluster.local",
            peers[0]["metadata"]["name"].as_str().unwrap()
        );
        if otlp {
            assert!(effective.contains("format = \"otlp_proto\""), "{name}");
            let otlp_services = headless("-otlp");
            assert_eq!(otlp_services.len(), 1, "{name}: one headless OTLP Service");
            assert!(
                otlp_services[0]["spec"]["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["port"] == 4318),
                "{name}"
            );
            assert_eq!(
                workload["env"]["RAGWATCH__FLEET__PEERS"], peers_name,
                "{name}: each replica counts the peers Service's ready pods"
            );
            assert!(
                effective.contains(&format!("peers = \"{peers_name}\"")),
                "{name}: {effective}"
            );
        } else {
            assert!(
                workload["env"].get("RAGWATCH__FLEET__PEERS").is_none(),
                "{name}: a Kafka replica's share is its partitions"
            );
        }
    }
}

/// The PrometheusRule carries exactly deploy/prometheus/rules.yaml's groups, and the
/// AlertmanagerConfig components/monitoring's spec with the hooks Secret the values name; both with
/// the `release` label the values set.
#[test]
fn the_operator_objects_carry_what_deploy_ships() {
    let values = values_file(
        "prometheusRelease: my-prometheus\nprometheusRule: {enabled: true}\nalertmanagerConfig: {enabled: true, hooksSecret: my-hooks}\nserviceMonitor: {enabled: true}\n",
    );
    let (manifest, _) = render("ragwatch", &[values.path().to_str().unwrap()]).unwrap();
    let rendered = objects(&manifest);
    let find = |kind: &str| -> &Value {
        let found: Vec<&Value> = rendered.iter().filter(|o| o["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "{kind}");
        found[0]
    };
    let load = |path: &str| -> Value {
        objects(&std::fs::read_to_string(root().join(path)).unwrap())
            .pop()
            .unwrap()
    };
    let rules = load("deploy/prometheus/rules.yaml");
    assert_eq!(find("PrometheusRule")["spec"]["groups"], rules["groups"]);
    let mut route =
        load("deploy/kubernetes/components/monitoring/alertmanagerconfig.yaml")["spec"].clone();
    for receiver in route["receivers"].as_array_mut().unwrap() {
        for hook in receiver
            .get_mut("webhookConfigs")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            hook["urlSecret"]["name"] = json!("my-hooks");
        }
    }
    assert_eq!(find("AlertmanagerConfig")["spec"], route);
    for kind in ["PrometheusRule", "AlertmanagerConfig", "ServiceMonitor"] {
        assert_eq!(
            find(kind)["metadata"]["labels"]["release"],
            "my-prometheus",
            "{kind}"
        );
    }
}

/// What selects what: (kind, name) -> the labels the object's selector requires.
fn selectors(objects: &[Value]) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for o in objects {
        let sel = match o["kind"].as_str().unwrap() {
            "Service" => &o["spec"]["selector"],
            "Deployment" | "PodDisruptionBudget" | "ServiceMonitor" | "PodMonitor" => {
                &o["spec"]["selector"]["matchLabels"]
            }
            _ => continue,
        };
        let labels = sel
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect();
        out.insert(
            (
                o["kind"].as_str().unwrap().to_owned(),
                o["metadata"]["name"].as_str().unwrap().to_owned(),
            ),
            labels,
        );
    }
    out
}

fn labels_of(o: &Value) -> BTreeMap<String, String> {
    o.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn matches(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Two releases in one namespace, each with everything enabled: no object name twice, every
/// selector of one release (Deployment, Services, budget, monitors) selects its own pods and none
/// of the other's, Service objects select the release's own, the consumer groups differ, and the
/// dashboards differ in uid, title and the file name the Grafana sidecar writes.
#[test]
fn two_releases_in_one_namespace_do_not_collide() {
    let everything = values_file(
        "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\nalertmanagerConfig: {enabled: true}\ndashboard: {enabled: true}\notlp: {enabled: true}\nrolloutGates: {argo: {enabled: true}, flagger: {enabled: true}}\n",
    );
    let everything = everything.path().to_str().unwrap();
    let releases: Vec<(String, Vec<Value>)> = ["ragwatch", "payments"]
        .into_iter()
        .map(|r| (r.to_owned(), objects(&render(r, &[everything]).unwrap().0)))
        .collect();
    let names = |objects: &[Value]| -> BTreeSet<(String, String)> {
        objects
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap().to_owned(),
                    o["metadata"]["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let (a, b) = (&releases[0].1, &releases[1].1);
    assert!(names(a).is_disjoint(&names(b)), "{:?}", names(a));
    assert!(names(a).len() >= 9, "{:?}", names(a));
    let pods = |objects: &[Value]| -> BTreeMap<String, String> {
        let d = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        labels_of(&d["spec"]["template"]["metadata"]["labels"])
    };
    let services = |objects: &[Value]| -> Vec<BTreeMap<String, String>> {
        objects
            .iter()
            .filter(|o| o["kind"] == "Service")
            .map(|o| labels_of(&o["metadata"]["labels"]))
            .collect()
    };
    for ((release, own), (_, other)) in [(&releases[0], &releases[1]), (&releases[1], &releases[0])]
    {
        for ((kind, name), selector) in selectors(own) {
            assert!(!selector.is_empty(), "{release} {kind}/{name}");
            if kind == "ServiceMonitor" {
                assert!(services(own).iter().any(|s| matches(&selector, s)));
                assert!(
                    !services(other).iter().any(|s| matches(&selector, s)),
                    "{release} {kind}/{name} selects the other release's Service"
                );
            } else {
                assert!(matches(&selector, &pods(own)), "{release} {kind}/{name}");
                assert!(
                    !matches(&selector, &pods(other)),
                    "{release} {kind}/{name} selects the other release's pods"
                );
            }
        }
        assert_eq!(pods(own)["app.kubernetes.io/instance"], *release);
        for o in own {
            assert_eq!(
                o["metadata"]["labels"]["app.kubernetes.io/instance"],
                release.as_str(),
                "{release}: {}",
                o["metadata"]["name"]
            );
        }
    }
    let group = |objects: &[Value]| -> String {
        let d = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        d["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "RAGWATCH__KAFKA__GROUP_ID")
            .unwrap()["value"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_ne!(group(a), group(b));
    let dashboard = |objects: &[Value]| -> (String, Value) {
        let cm = objects
            .iter()
            .find(|o| {
                o["kind"] == "ConfigMap"
                    && o["metadata"]["name"]
                        .as_str()
                        .unwrap()
                        .ends_with("-dashboard")
            })
            .unwrap();
        let (file, text) = cm["data"].as_object().unwrap().iter().next().unwrap();
        (
            file.clone(),
            serde_json::from_str(text.as_str().unwrap()).unwrap(),
        )
    };
    let (file_a, dash_a) = dashboard(a);
    let (file_b, dash_b) = dashboard(b);
    assert_ne!(file_a, file_b);
    assert_eq!(
        dash_a["uid"], "ragwatch",
        "the default release keeps the shipped uid"
    );
    assert_ne!(dash_a["uid"], dash_b["uid"]);
    assert_ne!(dash_a["title"], dash_b["title"]);
    // The same dashboard otherwise.
    let shipped: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/grafana/ragwatch-dashboard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(dash_a, shipped);
    assert_eq!(dash_b["panels"], shipped["panels"]);
}

/// Two monitors over the same pods would scrape each twice and double every count: refused.
#[test]
fn a_service_monitor_and_a_pod_monitor_together_are_refused() {
    let both = values_file("serviceMonitor: {enabled: true}\npodMonitor: {enabled: true}\n");
    let err = render("ragwatch", &[both.path().to_str().unwrap()]).unwrap_err();
    assert!(err.contains("scraped twice"), "{err}");
}

/// The notes say where the key comes from and, with OTLP, which Service the Collector's
/// loadbalancing exporter resolves.
#[test]
fn the_notes_name_the_secret_and_the_headless_service() {
    let otlp = chart().join("ci/otlp-values.yaml");
    let (_, notes) = render("payments", &[otlp.to_str().unwrap()]).unwrap();
    assert!(notes.contains("ragwatch-secrets"), "{notes}");
    assert!(notes.contains("payments-ragwatch-otlp.rag"), "{notes}");
}

/// `runbookBaseUrl` is the one place for the runbook's address: set, it is in every alert's
/// runbook_url (before the alert's anchor) and in the dashboard's `runbook` variable, which every
/// runbook link reads, and the shipped address is nowhere in the release.
#[test]
fn the_runbook_address_is_one_value() {
    let shipped = "https://github.com/ragwatch/ragwatch/blob/main/docs/runbook.md";
    let mine = "https://wiki.example.com/ragwatch/runbook";
    let values = values_file(&format!(
        "runbookBaseUrl: {mine}\nprometheusRule: {{enabled: true}}\ndashboard: {{enabled: true}}\n"
    ));
    let (manifest, _) = render("ragwatch", &[values.path().to_str().unwrap()]).unwrap();
    assert!(!manifest.contains(shipped));
    let objects = objects(&manifest);
    let rule = objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .unwrap();
    let alerts: Vec<&Value> = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter(|r| r["alert"].is_string())
        .collect();
    assert!(alerts.len() >= 15, "{} alerts", alerts.len());
    for a in alerts {
        let url = a["annotations"]["runbook_url"].as_str().unwrap();
        let anchor = a["alert"].as_str().unwrap().to_lowercase();
        assert!(
            url == format!("{mine}#{anchor}") || url.starts_with(&format!("{mine}#ragwatch")),
            "{url}"
        );
    }
    let cm = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "ragwatch-dashboard")
        .unwrap();
    let dash: Value = serde_json::from_str(cm["data"]["ragwatch.json"].as_str().unwrap()).unwrap();
    let runbook = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "runbook")
        .unwrap();
    assert_eq!(runbook["query"], mine);
}

/// The rollout gates are components/rollout-gates' AnalysisTemplate and MetricTemplate with the
/// release's namespace, scrape job (the PodMonitor's `<namespace>/<name>`, or the Service's name),
/// candidate and Prometheus: the same metrics, conditions and queries otherwise. Off by default.
#[test]
fn the_rollout_gates_are_the_components_pointed_at_the_release() {
    let (manifest, _) = render("payments", &[]).unwrap();
    let kinds: Vec<Value> = objects(&manifest)
        .iter()
        .map(|o| o["kind"].clone())
        .collect();
    assert!(
        !kinds.contains(&json!("AnalysisTemplate")) && !kinds.contains(&json!("MetricTemplate"))
    );

    let load = |path: &str| -> Value {
        objects(&std::fs::read_to_string(root().join(path)).unwrap())
            .pop()
            .unwrap()
    };
    let analysis = load("deploy/kubernetes/components/rollout-gates/argo/analysistemplate.yaml");
    let metric = load("deploy/kubernetes/components/rollout-gates/flagger/metrictemplate.yaml");
    for (values, job) in [
        (
            "podMonitor: {enabled: true}\nrolloutGates: {argo: {enabled: true}, flagger: {enabled: true}, variant: v2, prometheusAddress: 'http://prom.monitoring:9090'}\n",
            "rag/payments-ragwatch",
        ),
        (
            "serviceMonitor: {enabled: true}\nrolloutGates: {argo: {enabled: true}, flagger: {enabled: true}, variant: v2, prometheusAddress: 'http://prom.monitoring:9090'}\n",
            "payments-ragwatch",
        ),
    ] {
        let values = values_file(values);
        let (manifest, _) = render("payments", &[values.path().to_str().unwrap()]).unwrap();
        let rendered = objects(&manifest);
        let find = |kind: &str| -> &Value { rendered.iter().find(|o| o["kind"] == kind).unwrap() };
        let at = find("AnalysisTemplate");
        assert_eq!(
            at["metadata"]["name"],
            "payments-ragwatch-variant-faithfulness"
        );
        assert_eq!(at["spec"]["metrics"], analysis["spec"]["metrics"]);
        let args: BTreeMap<&str, &str> = at["spec"]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["name"].as_str().unwrap(), a["value"].as_str().unwrap()))
            .collect();
        assert_eq!(
            args,
            BTreeMap::from([
                ("job", job),
                ("namespace", "rag"),
                ("variant", "v2"),
                ("prometheus-address", "http://prom.monitoring:9090"),
            ])
        );
        let mt = find("MetricTemplate");
        assert_eq!(
            mt["metadata"]["name"],
            "payments-ragwatch-variant-faithfulness"
        );
        assert_eq!(mt["spec"]["provider"]["type"], "prometheus");
        assert_eq!(
            mt["spec"]["provider"]["address"],
            "http://prom.monitoring:9090"
        );
        let expected = metric["spec"]["query"]
            .as_str()
            .unwrap()
            .replace("namespace=\"{{ namespace }}\"", "namespace=\"rag\"")
            .replace("job=\"{{ target }}\"", &format!("job=\"{job}\""))
            .replace("variant=\"canary\"", "variant=\"v2\"");
        assert_ne!(expected, metric["spec"]["query"].as_str().unwrap());
        assert_eq!(mt["spec"]["query"], expected.as_str());
        assert!(!expected.contains("{{"), "{expected}");
    }
}

/// The chart's rule tuning (ci/tuned-rules-values.yaml) gives exactly what `ragwatch rules --out`
/// gives with the same tuning as flags, the per-alert labels aside (the chart's own knob); a name
/// that does not exist fails the install and says which.
#[test]
fn the_charts_rule_tuning_is_the_generators() {
    let (manifest, _) = render(
        "ragwatch",
        &["deploy/helm/ragwatch/ci/tuned-rules-values.yaml"],
    )
    .unwrap();
    let rendered = objects(&manifest);
    let rule = rendered
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .args(["rules", "--out"])
            .arg(dir.path())
            .args([
                "--rule-label",
                "team=rag",
                "--disable-alert",
                "RagwatchNoTraces",
                "--alert-for",
                "RagwatchConsumerLagGrowing=30m",
                "--alert-threshold",
                "RagwatchConsumerLagGrowing.lag_messages=50000",
                "--alert-threshold",
                "RagwatchJudgeErrorsHigh.error_ratio=0.3",
                "--group-interval",
                "1m",
            ]),
    );
    let mut expected = objects(&std::fs::read_to_string(dir.path().join("rules.yaml")).unwrap())
        .pop()
        .unwrap()["groups"]
        .clone();
    let mut errors_high = 0;
    for group in expected.as_array_mut().unwrap() {
        for r in group["rules"].as_array_mut().unwrap() {
            if r["alert"] == "RagwatchJudgeErrorsHigh" {
                r["labels"]["severity"] = json!("critical");
                let expr = r["expr"].as_str().unwrap();
                assert!(expr.contains(") > 0.3\n"), "{expr}");
                errors_high += 1;
            }
        }
    }
    assert_eq!(errors_high, 1);
    assert_eq!(rule["spec"]["groups"], expected);

    for (values, says) in [
        (
            "prometheusRule: {enabled: true, disabled: {RagwatchNope: true}}\n",
            "no alert RagwatchNope",
        ),
        (
            "prometheusRule: {enabled: true, alerts: {RagwatchNoTraces: {thresholds: {lag: 1}}}}\n",
            "RagwatchNoTraces has no threshold lag",
        ),
        (
            "prometheusRule: {enabled: true, additionalRuleLabels: {severity: info}}\n",
            "severity is each alert's own",
        ),
    ] {
        let file = values_file(values);
        let e = render("ragwatch", &[file.path().to_str().unwrap()]).unwrap_err();
        assert!(e.contains(says), "{e}");
    }
}

/// The one ragwatch container of a render's Deployment.
fn container(objects: &[Value]) -> &Value {
    let d = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    &d["spec"]["template"]["spec"]["containers"][0]
}

fn env_names(objects: &[Value]) -> Vec<String> {
    container(objects)["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect()
}

/// ci/knobs-values.yaml sets every platform knob; each lands where it should: the extra volume
/// mounted, the named ServiceAccount created with its annotation and used without a token, the
/// image by digest, the spread constraint with the release's selector, the priority class, the
/// Services' annotations and protocols, the monitor's timeout and relabelings, the budget's
/// minAvailable, the startup probe, and a NetworkPolicy letting the Collector's namespace in on
/// both OTLP ports and the brokers out on their port.
#[test]
fn every_knob_lands_where_it_should() {
    let (manifest, _) = render("ragwatch", &["deploy/helm/ragwatch/ci/knobs-values.yaml"]).unwrap();
    let rendered = objects(&manifest);
    let find = |kind: &str| -> &Value {
        let found: Vec<&Value> = rendered.iter().filter(|o| o["kind"] == kind).collect();
        assert_eq!(found.len(), 1, "{kind}");
        found[0]
    };
    let pod = &find("Deployment")["spec"]["template"]["spec"];
    let c = container(&rendered);
    assert_eq!(
        c["image"],
        "ghcr.io/ragwatch/ragwatch@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "ca-bundle", "configMap": {"name": "corporate-ca"}}))
    );
    assert!(c["volumeMounts"].as_array().unwrap().contains(
        &json!({"name": "ca-bundle", "mountPath": "/etc/ssl/corporate", "readOnly": true})
    ));
    let sa = find("ServiceAccount");
    assert_eq!(sa["metadata"]["name"], "ragwatch-judge");
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::123456789012:role/ragwatch"
    );
    assert_eq!(sa["automountServiceAccountToken"], false);
    assert_eq!(pod["serviceAccountName"], "ragwatch-judge");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["priorityClassName"], "observability");
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(
        spread["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"],
        "ragwatch"
    );
    assert_eq!(c["startupProbe"]["httpGet"]["path"], "/livez");
    for svc in rendered.iter().filter(|o| o["kind"] == "Service") {
        let name = svc["metadata"]["name"].as_str().unwrap();
        if name.ends_with("-peers") {
            continue;
        }
        assert_eq!(
            svc["metadata"]["annotations"]["service.kubernetes.io/topology-mode"], "Auto",
            "{name}"
        );
        let protocols: BTreeMap<&str, &str> = svc["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| Some((p["name"].as_str()?, p["appProtocol"].as_str()?)))
            .collect();
        assert_eq!(protocols.get("otlp-grpc"), Some(&"grpc"), "{name}");
        assert_eq!(protocols.get("otlp-http"), Some(&"http"), "{name}");
    }
    let endpoint = &find("ServiceMonitor")["spec"]["endpoints"][0];
    assert_eq!(endpoint["scrapeTimeout"], "10s");
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "node");
    assert_eq!(endpoint["metricRelabelings"][0]["action"], "drop");
    let pdb = &find("PodDisruptionBudget")["spec"];
    assert_eq!(pdb["minAvailable"], 2);
    assert!(pdb.get("maxUnavailable").is_none());

    let np = &find("NetworkPolicy")["spec"];
    assert_eq!(
        np["podSelector"]["matchLabels"],
        find("Deployment")["spec"]["selector"]["matchLabels"]
    );
    // Each port as JSON text: "\"metrics\"" for a name, "4317" for a number.
    let ports = |rules: &Value| -> BTreeSet<String> {
        rules
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["ports"].as_array().unwrap())
            .map(|p| p["port"].to_string())
            .collect()
    };
    let set =
        |ports: &[&str]| -> BTreeSet<String> { ports.iter().map(|p| p.to_string()).collect() };
    assert_eq!(ports(&np["ingress"]), set(&["\"metrics\"", "4317", "4318"]));
    let writers = np["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ports"][0]["port"] == 4318)
        .unwrap();
    assert_eq!(
        writers["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["observability"])
    );
    assert_eq!(ports(&np["egress"]), set(&["53", "443", "9096"]));
    let kafka = np["egress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ports"][0]["port"] == 9096)
        .unwrap();
    assert_eq!(kafka["to"], json!([{"ipBlock": {"cidr": "10.20.0.0/16"}}]));
}

/// The chart's defaults: a ServiceAccount of the release's with no token, the image by tag, the
/// budget's maxUnavailable, no NetworkPolicy until asked; asked, it lets in the writers on both
/// OTLP ports and out DNS, Kafka on 9092, 9093 and 443, and the judge on 443.
#[test]
fn the_defaults_and_the_default_network_policy() {
    let (manifest, _) = render("payments", &[]).unwrap();
    let rendered = objects(&manifest);
    let pod =
        &rendered.iter().find(|o| o["kind"] == "Deployment").unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "payments-ragwatch");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(
        container(&rendered)["image"],
        "ghcr.io/ragwatch/ragwatch:0.1.0"
    );
    assert!(!rendered.iter().any(|o| o["kind"] == "NetworkPolicy"));
    let pdb = rendered
        .iter()
        .find(|o| o["kind"] == "PodDisruptionBudget")
        .unwrap();
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);

    let values = values_file("networkPolicy: {enabled: true}\notlp: {enabled: true}\n");
    let (manifest, _) = render("payments", &[values.path().to_str().unwrap()]).unwrap();
    validate("default NetworkPolicy", &manifest);
    let rendered = objects(&manifest);
    let np = &rendered
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy")
        .unwrap()["spec"];
    let rules = |dir: &str| -> Vec<(Vec<(String, String)>, Value)> {
        np[dir]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let ports = r["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        (
                            p["protocol"].as_str().unwrap().to_owned(),
                            p["port"].to_string(),
                        )
                    })
                    .collect();
                let peers = r
                    .get("from")
                    .or(r.get("to"))
                    .cloned()
                    .unwrap_or(Value::Null);
                (ports, peers)
            })
            .collect()
    };
    let ingress = rules("ingress");
    let tcp = |ports: &[&str]| -> Vec<(String, String)> {
        ports
            .iter()
            .map(|p| ("TCP".to_owned(), (*p).to_owned()))
            .collect()
    };
    assert_eq!(ingress[0].0, tcp(&["\"metrics\""]));
    assert_eq!(
        ingress[0].1[0]["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["monitoring"])
    );
    assert_eq!(ingress[1].0, tcp(&["4318", "4317"]));
    assert_eq!(
        ingress[1].1[0]["podSelector"]["matchExpressions"][0]["key"],
        "ragwatch.io/writer"
    );
    assert!(
        ingress[1].1[0].get("namespaceSelector").is_none(),
        "writers of the namespace only"
    );
    let egress: Vec<Vec<(String, String)>> = rules("egress").into_iter().map(|r| r.0).collect();
    assert_eq!(
        egress,
        vec![
            vec![("UDP".into(), "53".into()), ("TCP".into(), "53".into())],
            tcp(&["9092", "9093", "443"]),
            tcp(&["443"]),
        ]
    );
}

/// A config of yours that sets [kafka], and no kafka.* values: the chart sets no RAGWATCH__KAFKA__*
/// variable, so the config's brokers, topics and group stand. A kafka.* value that is set wins.
/// With the chart's own config, its brokers (kafka:9092) and the release's group.
#[test]
fn a_config_of_yours_keeps_its_kafka_section() {
    let config = "[source]\nkind = \"kafka\"\n\n[kafka]\nbrokers = \"broker-0.kafka:9093\"\ntopics = [\"mine\"]\ngroup_id = \"my-group\"\n\n[log]\nformat = \"json\"\n\n[llm]\nrecords_path = \"/var/lib/ragwatch/verdicts.jsonl\"\n";
    let values = values_file(&format!(
        "config:\n  toml: |\n{}",
        config
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    ));
    let (manifest, notes) = render("payments", &[values.path().to_str().unwrap()]).unwrap();
    let rendered = objects(&manifest);
    let kafka_env: Vec<String> = env_names(&rendered)
        .into_iter()
        .filter(|n| n.starts_with("RAGWATCH__KAFKA__"))
        .collect();
    assert_eq!(kafka_env, Vec::<String>::new());
    assert!(notes.contains("the config's kafka.topics"), "{notes}");
    let v = check("config of yours", &manifest, None);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ragwatch.toml");
    std::fs::write(&path, v["workloads"][0]["config"].as_str().unwrap()).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ragwatch"));
    cmd.args(["check-config", "--config"]).arg(&path);
    for (k, val) in v["workloads"][0]["env"].as_object().unwrap() {
        cmd.env(k, val.as_str().unwrap());
    }
    let effective = String::from_utf8(run_ok(&mut cmd).stdout).unwrap();
    assert!(
        effective.contains("brokers = \"broker-0.kafka:9093\""),
        "{effective}"
    );
    assert!(effective.contains("group_id = \"my-group\""), "{effective}");

    // The same with the config in a ConfigMap of yours.
    let values = values_file("config: {existingConfigMap: mine}\n");
    let (manifest, _) = render("payments", &[values.path().to_str().unwrap()]).unwrap();
    assert!(
        !env_names(&objects(&manifest))
            .iter()
            .any(|n| n.starts_with("RAGWATCH__KAFKA__"))
    );

    // Set values win, each on its own.
    let values = values_file("kafka: {brokers: 'b:9092'}\nconfig: {existingConfigMap: mine}\n");
    let (manifest, _) = render("payments", &[values.path().to_str().unwrap()]).unwrap();
    let names = env_names(&objects(&manifest));
    assert!(names.contains(&"RAGWATCH__KAFKA__BROKERS".to_owned()));
    assert!(!names.contains(&"RAGWATCH__KAFKA__TOPICS".to_owned()));

    // The chart's own config: its brokers, and the release's group from the environment.
    let (manifest, _) = render("payments", &[]).unwrap();
    let v = check("default", &manifest, None);
    let env = &v["workloads"][0]["env"];
    assert_eq!(env["RAGWATCH__KAFKA__GROUP_ID"], "payments-ragwatch");
    assert!(env.get("RAGWATCH__KAFKA__BROKERS").is_none());
    let config = v["workloads"][0]["config"].as_str().unwrap();
    assert!(config.contains("brokers = \"kafka:9092\""), "{config}");
}

/// A release name of 53 characters (Helm's longest) with everything on: every object validates,
/// every Service name is a DNS-1035 label of at most 63 characters and keeps its suffix, and the
/// peers name in the environment is the peers Service's.
#[test]
fn a_long_release_name_gives_valid_names_everywhere() {
    let release = "payments-retrieval-augmented-generation-eu-west-prod1";
    assert_eq!(release.len(), 53);
    let everything = values_file(
        "serviceMonitor: {enabled: true}\nprometheusRule: {enabled: true}\nalertmanagerConfig: {enabled: true}\ndashboard: {enabled: true}\notlp: {enabled: true}\nnetworkPolicy: {enabled: true}\nrolloutGates: {argo: {enabled: true}, flagger: {enabled: true}}\n",
    );
    let (manifest, notes) = render(release, &[everything.path().to_str().unwrap()]).unwrap();
    validate("long release name", &manifest);
    check("long release name", &manifest, None);
    let rendered = objects(&manifest);
    let label = regex::Regex::new("^[a-z]([-a-z0-9]*[a-z0-9])?$").unwrap();
    let services: Vec<&str> = rendered
        .iter()
        .filter(|o| o["kind"] == "Service")
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(services.len(), 3, "{services:?}");
    for name in &services {
        assert!(name.len() <= 63 && label.is_match(name), "{name}");
    }
    for suffix in ["-otlp", "-peers"] {
        let name = services.iter().find(|n| n.ends_with(suffix)).unwrap();
        assert!(name.starts_with(&release[..40]), "{name}");
        if suffix == "-otlp" {
            assert!(notes.contains(&format!("{name}.rag")), "{notes}");
        } else {
            assert!(
                container(&rendered)["env"]
                    .as_array()
                    .unwrap()
                    .contains(&json!({"name": "RAGWATCH__FLEET__PEERS", "value": format!("{name}.rag.svc.cluster.local")}))
            );
        }
    }
    for o in &rendered {
        let name = o["metadata"]["name"].as_str().unwrap();
        assert!(name.len() <= 253, "{name}");
    }
}

/// Both a maxUnavailable and a minAvailable: refused, naming the two.
#[test]
fn a_budget_with_both_bounds_is_refused() {
    let both = values_file("podDisruptionBudget: {maxUnavailable: 1, minAvailable: 1}\n");
    let err = render("ragwatch", &[both.path().to_str().unwrap()]).unwrap_err();
    assert!(
        err.contains("maxUnavailable and minAvailable are both set"),
        "{err}"
    );
}

/// With OTLP, the notes print the exact line that creates the write tokens' Secret, whose absence
/// would leave the pods in ContainerCreating.
#[test]
fn the_notes_print_the_write_tokens_secret_line() {
    let values = values_file("otlp: {enabled: true, tokensSecret: my-tokens}\n");
    let (_, notes) = render("payments", &[values.path().to_str().unwrap()]).unwrap();
    assert!(
        notes.contains(
            "kubectl -n rag create secret generic my-tokens --from-file=tokens=./write-tokens"
        ),
        "{notes}"
    );
    let (_, notes) = render("payments", &[]).unwrap();
    assert!(!notes.contains("--from-file=tokens="), "{notes}");
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
    walk(&root().join("deploy/helm"), &mut links);
    assert_eq!(links, Vec::<PathBuf>::new());
    let mut copied = BTreeSet::new();
    for (copy, source) in ragwatch::rules::CHART_COPIES {
        assert_eq!(
            std::fs::read_to_string(root().join(copy)).unwrap(),
            std::fs::read_to_string(root().join(source)).unwrap(),
            "{copy} is not {source}: run `cargo run -- rules`"
        );
        copied.insert(root().join(copy));
    }
    // The rules are the generator's own chart flavour (each threshold a marker), not a copy.
    copied.insert(chart().join("files/rules.yaml"));
    let files: BTreeSet<PathBuf> = std::fs::read_dir(chart().join("files"))
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
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ragwatch"))
            .arg("rules")
            .arg("--root")
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
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

/// docs/deployment.md's values table is the one values.yaml's `# --` comments give: every key,
/// its default and its description (tests/helm_chart.py values-table prints it).
#[test]
fn the_values_table_in_the_docs_is_values_yaml() {
    let python = helm_python();
    let out = run_ok(
        Command::new(python)
            .arg(root().join("tests/helm_chart.py"))
            .args(["values-table", chart().to_str().unwrap()]),
    );
    let table = String::from_utf8(out.stdout).unwrap();
    let values = objects(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
        .pop()
        .unwrap();
    // Not toothless: every top-level key has its row or rows.
    for key in values.as_object().unwrap().keys() {
        assert!(
            table.contains(&format!("| `{key}` |")) || table.contains(&format!("| `{key}.")),
            "{key}"
        );
    }
    let doc = std::fs::read_to_string(root().join("docs/deployment.md")).unwrap();
    let start = doc
        .find("<!-- values table: tests/helm_chart.py values-table -->\n")
        .expect("docs/deployment.md has the values table");
    let rest = &doc[start..];
    let body = &rest[rest.find('\n').unwrap() + 1..];
    let end = body.find("<!-- end of the values table -->").unwrap();
    assert_eq!(
        body[..end].trim(),
        table.trim(),
        "run: python tests/helm_chart.py values-table deploy/helm/ragwatch"
    );
}
