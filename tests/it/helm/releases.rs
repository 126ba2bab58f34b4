//! Two releases in one namespace share no object name, select none of each other's pods, and their
//! dashboards differ in uid, title and file.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{objects, render, values_file};
use crate::common::repo;

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
        &std::fs::read_to_string(repo().join("deploy/grafana/ragwatch-dashboard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(dash_a, shipped);
    assert_eq!(dash_b["panels"], shipped["panels"]);
}
