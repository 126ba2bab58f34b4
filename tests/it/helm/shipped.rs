//! What the chart carries from deploy/: the PrometheusRule and the AlertmanagerConfig exactly as
//! deploy/ ships them, the rule tuning the generator's, the runbook's address one value, and the
//! rollout gates components/rollout-gates' objects pointed at the release.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{objects, render, values_file};
use crate::common::repo;
use crate::generated::{TUNING, rules_out};

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
        objects(&std::fs::read_to_string(repo().join(path)).unwrap())
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
        objects(&std::fs::read_to_string(repo().join(path)).unwrap())
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
    // The values file tunes what `ragwatch rules` does with these flags.
    let flags = [
        &TUNING[..],
        &[
            "--alert-threshold",
            "RagwatchJudgeErrorsHigh.error_ratio=0.3",
        ],
    ]
    .concat();
    let out = rules_out(dir.path(), &flags);
    assert!(out.status.success(), "{out:?}");
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
