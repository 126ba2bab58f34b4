//! Every values file renders into manifests that validate against the Kubernetes schemas and pass
//! the overlays' checks, with a config ragwatch accepts; a long release name gives valid names
//! everywhere.

use std::process::Command;

use serde_json::{Value, json};

use super::values::container;
use super::{check, objects, render, values_file, values_files};
use crate::common::manifests::validate;
use crate::common::{repo, run_ok};

/// Every values file renders into manifests that validate, pass the kustomize overlays' checks, and
/// hold a config that ragwatch accepts with the environment the Deployment sets.
#[test]
fn every_values_file_renders_validates_and_configures_ragwatch() {
    let shipped_config = repo().join("deploy/kubernetes/base/ragwatch.toml");
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
