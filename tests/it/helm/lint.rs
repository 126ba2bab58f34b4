//! Helm's lint with the chart's own values and every values file of its ci/ folder, and the
//! combinations the chart refuses.

use serde_json::Value;

use super::{chart, helm_chart, render, values_file, values_files};

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

/// Two monitors over the same pods would scrape each twice and double every count: refused.
#[test]
fn a_service_monitor_and_a_pod_monitor_together_are_refused() {
    let both = values_file("serviceMonitor: {enabled: true}\npodMonitor: {enabled: true}\n");
    let err = render("ragwatch", &[both.path().to_str().unwrap()]).unwrap_err();
    assert!(err.contains("scraped twice"), "{err}");
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
