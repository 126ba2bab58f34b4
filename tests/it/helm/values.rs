//! The chart's values: every knob lands where it should, the defaults (and the default
//! NetworkPolicy) are what the docs say, a config of yours keeps its Kafka section.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::{Value, json};

use super::{check, objects, render, values_file};
use crate::common::manifests::validate;
use crate::common::run_ok;

/// The one ragwatch container of a render's Deployment.
pub(super) fn container(objects: &[Value]) -> &Value {
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
