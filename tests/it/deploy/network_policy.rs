//! The NetworkPolicy: it validates, selects exactly the install's pods, allows in Prometheus and the
//! declared writers only and out DNS, the brokers and HTTPS; the documented patch changes the
//! writers and Kafka.

use std::process::Command;

use serde_json::{Value, json};

use super::{documented_second_install, kustomize, render, user_overlay};
use crate::common::manifests::validate;
use crate::common::{pipe, repo};

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
    let doc = std::fs::read_to_string(repo().join("docs/deployment.md")).unwrap();
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
