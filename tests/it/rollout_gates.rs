//! The rollout gates of deploy/kubernetes/components/rollout-gates, checked two ways.
//!
//! Against the controllers' own CRD schemas: every field our AnalysisTemplate, MetricTemplate and
//! Canary metric entry carry is one the CRD declares, with its type, its required fields and enum
//! values (a structural CRD drops an unknown field without a word, so a misspelt limit would vanish
//! on apply). The facts are written here from the CRDs as published, not copied:
//!   - argoproj/argo-rollouts, manifests/crds/analysis-template-crd.yaml at commit
//!     bd971dd55ba73f02dec2b1d42be6344a4c8c4c96 (apiextensions.k8s.io/v1, argoproj.io/v1alpha1,
//!     controller-gen v0.7.0): the metric fields and the prometheus provider's.
//!   - fluxcd/flagger, charts/flagger/crds/crd.yaml at commit
//!     fe37bdd9c7b337e804e68988100fc73febcbe90a (flagger.app/v1beta1): MetricTemplate and the
//!     Canary's spec.analysis.metrics items.
//!
//! And live: a real Prometheus scrapes two stand-in replicas serving a synthetic exposition of the
//! `ragwatch_comparison_*` gauges (rewritten as the test goes), runs the shipped rules, and the
//! gates' queries are evaluated the way the controllers evaluate them: Argo Rollouts turns the
//! query's vector into `result`, a list of floats, and evaluates successCondition and
//! failureCondition (the expression forms the template uses, interpreted here); Flagger takes the
//! one value and fails the check outside the Canary's thresholdRange, or without a value.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::prometheus::{query, start_prometheus, test_dashboard, test_rules, unix_secs};
use crate::common::rollout::{
    ANALYSIS_TEMPLATE, CANARY_METRIC, METRIC_TEMPLATE, Phase, argo_query, assess, evaluate,
    flagger_check, flagger_query, load, result,
};
use crate::common::wait_for;

// ----------------------------------------------------------------------------------- CRD schemas

/// A CRD's `int-or-string` (x-kubernetes-int-or-string).
fn int_or_string() -> Value {
    json!({"type": "int-or-string"})
}

/// An object whose inside this test does not check (another provider, ObjectMeta).
fn any_object() -> Value {
    json!({"type": "object"})
}

/// AnalysisTemplate (argoproj.io/v1alpha1) as the Argo Rollouts CRD declares it, down to the
/// prometheus provider; the other providers are named (so that a template may not misspell one)
/// but not opened.
fn analysis_template_schema() -> Value {
    let string = json!({"type": "string"});
    let providers = [
        "cloudWatch",
        "datadog",
        "graphite",
        "influxdb",
        "job",
        "kayenta",
        "newRelic",
        "wavefront",
        "web",
    ];
    let mut provider: serde_json::Map<String, Value> = providers
        .iter()
        .map(|p| (p.to_string(), any_object()))
        .collect();
    provider.insert(
        "prometheus".into(),
        json!({"type": "object", "properties": {"address": string, "query": string}}),
    );
    json!({
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": string,
            "kind": string,
            "metadata": any_object(),
            "spec": {
                "type": "object",
                "required": ["metrics"],
                "properties": {
                    "args": {"type": "array", "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": string,
                            "value": string,
                            "valueFrom": {"type": "object", "properties": {
                                "fieldRef": {"type": "object", "required": ["fieldPath"], "properties": {"fieldPath": string}},
                                "secretKeyRef": {"type": "object", "required": ["key", "name"], "properties": {"key": string, "name": string}}
                            }}
                        }
                    }},
                    "dryRun": {"type": "array", "items": {"type": "object", "required": ["metricName"], "properties": {"metricName": string}}},
                    "measurementRetention": {"type": "array", "items": {
                        "type": "object",
                        "required": ["limit", "metricName"],
                        "properties": {"limit": {"type": "integer"}, "metricName": string}
                    }},
                    "metrics": {"type": "array", "items": {
                        "type": "object",
                        "required": ["name", "provider"],
                        "properties": {
                            "consecutiveErrorLimit": int_or_string(),
                            "count": int_or_string(),
                            "failureCondition": string,
                            "failureLimit": int_or_string(),
                            "inconclusiveLimit": int_or_string(),
                            "initialDelay": string,
                            "interval": string,
                            "name": string,
                            "provider": {"type": "object", "properties": provider},
                            "successCondition": string
                        }
                    }}
                }
            }
        }
    })
}

/// MetricTemplate (flagger.app/v1beta1) as the Flagger CRD declares it.
fn metric_template_schema() -> Value {
    let string = json!({"type": "string"});
    json!({
        "type": "object",
        "properties": {
            "apiVersion": string,
            "kind": string,
            "metadata": any_object(),
            "spec": {
                "type": "object",
                "required": ["provider", "query"],
                "properties": {
                    "provider": {
                        "type": "object",
                        "required": ["type"],
                        "properties": {
                            "type": {"type": "string", "enum": ["prometheus", "influxdb", "datadog", "stackdriver", "cloudwatch", "newrelic", "graphite", "dynatrace"]},
                            "address": string,
                            "secretRef": {"type": "object", "required": ["name"], "properties": {"name": string}},
                            "region": string,
                            "insecureSkipVerify": {"type": "boolean"}
                        }
                    },
                    "query": string
                }
            }
        }
    })
}

/// An item of a Canary's spec.analysis.metrics (flagger.app/v1beta1), as the Flagger CRD declares it.
fn canary_metric_schema() -> Value {
    let string = json!({"type": "string"});
    json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": string,
            "interval": {"type": "string", "pattern": "^[0-9]+(m|s)"},
            "threshold": {"type": "number"},
            "thresholdRange": {"type": "object", "properties": {"min": {"type": "number"}, "max": {"type": "number"}}},
            "query": string,
            "templateRef": {"type": "object", "required": ["name"], "properties": {"name": string, "namespace": string}}
        }
    })
}

/// Where `value` breaks `schema` (the subset of OpenAPI the CRDs above use: type, properties as a
/// closed set, required, enum, pattern as a prefix match), each as `path: what`.
fn violations(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let ty = schema["type"].as_str().unwrap_or("object");
    let ok = match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "int-or-string" => value.is_i64() || value.is_u64() || value.is_string(),
        other => panic!("type {other} is not in the subset"),
    };
    if !ok {
        out.push(format!("{path}: a {ty} expected, found {value}"));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        out.push(format!("{path}: {value} is not one of {allowed:?}"));
    }
    if let Some(pattern) = schema["pattern"].as_str() {
        let re = regex::Regex::new(pattern).unwrap();
        if !re.is_match(value.as_str().unwrap()) {
            out.push(format!("{path}: {value} does not match {pattern}"));
        }
    }
    if let Some(items) = schema.get("items") {
        for (i, item) in value.as_array().unwrap().iter().enumerate() {
            violations(items, item, &format!("{path}[{i}]"), out);
        }
    }
    if ty != "object" {
        return;
    }
    let object = value.as_object().unwrap();
    for name in schema["required"].as_array().into_iter().flatten() {
        if !object.contains_key(name.as_str().unwrap()) {
            out.push(format!("{path}: {name} is required"));
        }
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (name, field) in object {
            match properties.get(name) {
                Some(s) => violations(s, field, &format!("{path}.{name}"), out),
                None => out.push(format!("{path}: {name} is not a field of the CRD")),
            }
        }
    }
}

fn assert_valid(what: &str, schema: &Value, value: &Value) {
    let mut out = Vec::new();
    violations(schema, value, what, &mut out);
    assert!(out.is_empty(), "{out:#?}");
}

/// The checker finds what a CRD would refuse or silently drop: it is not toothless.
#[test]
fn the_schema_check_catches_a_misspelt_field_a_wrong_type_and_a_missing_one() {
    let schema = analysis_template_schema();
    let good = load(ANALYSIS_TEMPLATE);
    let mut bad = good.clone();
    let metric = &mut bad["spec"]["metrics"][0];
    metric["inconclusiveLimits"] = json!(3);
    metric["count"] = json!(1.5);
    metric.as_object_mut().unwrap().remove("name");
    bad["spec"]["metrics"][0]["provider"]["prometheus"]["adress"] = json!("http://p:9090");
    let mut out = Vec::new();
    violations(&schema, &bad, "at", &mut out);
    assert_eq!(out.len(), 4, "{out:#?}");
    let mut out = Vec::new();
    let mut metric = load(METRIC_TEMPLATE);
    metric["spec"]["provider"]["type"] = json!("prom");
    violations(&metric_template_schema(), &metric, "mt", &mut out);
    let mut entry = load(CANARY_METRIC);
    entry["interval"] = json!("one minute");
    violations(&canary_metric_schema(), &entry, "entry", &mut out);
    assert_eq!(out.len(), 2, "{out:#?}");
}

/// Our AnalysisTemplate, MetricTemplate and Canary metric entry against the CRD facts, and what the
/// schemas cannot say: every arg a query or address names is declared, the metric's conditions
/// parse, the template's limits are the ones its comments explain.
#[test]
fn the_gates_fit_their_controllers_crds() {
    let at = load(ANALYSIS_TEMPLATE);
    assert_valid("AnalysisTemplate", &analysis_template_schema(), &at);
    assert_eq!(at["apiVersion"], "argoproj.io/v1alpha1");
    assert_eq!(at["kind"], "AnalysisTemplate");
    let declared: Vec<&str> = at["spec"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    let metric = &at["spec"]["metrics"][0];
    let prometheus = &metric["provider"]["prometheus"];
    for text in [&prometheus["address"], &prometheus["query"]] {
        let text = text.as_str().unwrap();
        let mut rest = text;
        let mut used = 0;
        while let Some(i) = rest.find("{{args.") {
            let after = &rest[i + "{{args.".len()..];
            let name = &after[..after.find("}}").unwrap()];
            assert!(
                declared.contains(&name),
                "{{{{args.{name}}}}} is not declared"
            );
            used += 1;
            rest = after;
        }
        assert!(used > 0, "{text}");
    }
    for condition in ["successCondition", "failureCondition"] {
        let c = metric[condition].as_str().unwrap();
        assert!(
            evaluate(c, &[]).is_ok(),
            "{condition} must not fail on an empty result: {c}"
        );
    }
    assert_eq!(metric["failureLimit"], 0);
    assert_eq!(
        metric["inconclusiveLimit"].as_i64().unwrap(),
        metric["count"].as_i64().unwrap() - 1
    );
    assert!(metric["consecutiveErrorLimit"].as_i64().unwrap() > 0);

    let mt = load(METRIC_TEMPLATE);
    assert_valid("MetricTemplate", &metric_template_schema(), &mt);
    assert_eq!(mt["apiVersion"], "flagger.app/v1beta1");
    assert_eq!(mt["kind"], "MetricTemplate");
    assert_eq!(mt["spec"]["provider"]["type"], "prometheus");
    let entry = load(CANARY_METRIC);
    assert_valid("the Canary's metric", &canary_metric_schema(), &entry);
    assert_eq!(entry["templateRef"]["name"], mt["metadata"]["name"]);
    assert_eq!(entry["thresholdRange"], json!({"min": 0}));
}

#[test]
fn the_condition_interpreter_evaluates_the_forms_the_gate_uses() {
    assert_eq!(
        evaluate("len(result) > 0 && result[0] == 1", &[1.0]),
        Ok(true)
    );
    assert_eq!(
        evaluate("len(result) > 0 && result[0] == 1", &[]),
        Ok(false)
    );
    assert_eq!(
        evaluate("len(result) > 0 && result[0] == -1", &[-1.0]),
        Ok(true)
    );
    assert_eq!(
        evaluate("len(result) == 0 || result[0] >= 0.5", &[]),
        Ok(true)
    );
    assert_eq!(
        evaluate("(result[0] < 2) || result[9] > 0", &[1.0]),
        Ok(true)
    );
    assert_eq!(evaluate("result[0] == 1", &[f64::NAN]), Ok(false));
    assert!(evaluate("result[0] == 1", &[]).is_err());
    assert!(evaluate("result[0] == 1 && len(result) > 0", &[]).is_err());
    assert!(evaluate("result[0] =~ 1", &[1.0]).is_err());
    let at = load(ANALYSIS_TEMPLATE);
    let metric = &at["spec"]["metrics"][0];
    assert_eq!(assess(metric, &[1.0]), Phase::Successful);
    assert_eq!(assess(metric, &[-1.0]), Phase::Failed);
    assert_eq!(assess(metric, &[0.0]), Phase::Inconclusive);
    assert_eq!(assess(metric, &[]), Phase::Inconclusive);
    assert_eq!(assess(metric, &[f64::NAN]), Phase::Inconclusive);
    // Without the guard, an empty result would be an Error.
    let unguarded =
        json!({"successCondition": "result[0] == 1", "failureCondition": "result[0] == -1"});
    assert_eq!(assess(&unguarded, &[]), Phase::Error);
}

// -------------------------------------------------------------- a stand-in ragwatch's exposition

/// An HTTP server on loopback answering every request with the exposition it holds now; stopped
/// when dropped.
struct Exposition {
    addr: SocketAddr,
    text: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
}

impl Exposition {
    fn start() -> Exposition {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let text = Arc::new(Mutex::new(String::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (served, stopped) = (Arc::clone(&text), Arc::clone(&stop));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let body = served.lock().unwrap().clone();
                let _ = answer(&mut stream, &body);
            }
        });
        Exposition { addr, text, stop }
    }

    fn set(&self, text: String) {
        *self.text.lock().unwrap() = text;
    }
}

fn answer(stream: &mut TcpStream, body: &str) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

impl Drop for Exposition {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

const STRATA: [&str; 2] = ["head", "tail"];
const METRICS: [&str; 2] = ["faithfulness", "answer_relevancy"];
const ARMS: [&str; 2] = ["candidate", "baseline"];
const TERMS: [&str; 6] = ["n", "w", "wy", "ww", "wwy", "wwyy"];
const PODS: [&str; 2] = ["a", "b"];

/// The sums of `n` scores, `ones` of them 1 and the others 0, each of weight `w`.
fn ones(n: f64, ones: f64, w: f64) -> [f64; 6] {
    [n, n * w, ones * w, n * w * w, ones * w * w, ones * w * w]
}

/// The sums of `n` scores of `y`, each of weight 1.
fn same(n: f64, y: f64) -> [f64; 6] {
    [n, n, n * y, n, n * y, n * y * y]
}

/// What one replica exports about one candidate: per (stratum, arm, metric) the judge identity and
/// the sums, per (stratum, arm) the traces arrived (judged weight the same), and when its comparison
/// started (0: not yet). Anything not listed is exported at 0, as ragwatch creates every series at
/// start.
#[derive(Default, Clone)]
struct Replica {
    terms: BTreeMap<(&'static str, &'static str, &'static str), (&'static str, [f64; 6])>,
    arrived: BTreeMap<(&'static str, &'static str), f64>,
    started: f64,
}

impl Replica {
    /// An arm's faithfulness sums in a stratum, judged by `model`.
    fn sums(
        mut self,
        stratum: &'static str,
        arm: &'static str,
        model: &'static str,
        s: [f64; 6],
    ) -> Self {
        self.terms
            .insert((stratum, arm, "faithfulness"), (model, s));
        self
    }

    /// An arm's sums of another metric in a stratum, judged by m1.
    fn metric_sums(
        mut self,
        stratum: &'static str,
        arm: &'static str,
        metric: &'static str,
        s: [f64; 6],
    ) -> Self {
        self.terms.insert((stratum, arm, metric), ("m1", s));
        self
    }

    /// The traces of an arm that arrived in a stratum; the judged weight is the same (coverage 1).
    fn arrived(mut self, stratum: &'static str, arm: &'static str, n: f64) -> Self {
        self.arrived.insert((stratum, arm), n);
        self
    }

    /// When this replica's comparison started (Unix seconds).
    fn started(mut self, at: f64) -> Self {
        self.started = at;
        self
    }
}

/// One replica's exposition of every candidate in `candidates`: config gauges and every series.
fn exposition(candidates: &[(&str, Replica)]) -> String {
    let mut out = String::new();
    out.push_str(
        "# TYPE ragwatch_comparison_margin_ratio gauge\nragwatch_comparison_margin_ratio 0.05\n",
    );
    out.push_str(
        "# TYPE ragwatch_comparison_min_judged gauge\nragwatch_comparison_min_judged 30\n",
    );
    out.push_str(
        "# TYPE ragwatch_comparison_deadline_seconds gauge\nragwatch_comparison_deadline_seconds 7200\n",
    );
    out.push_str("# TYPE ragwatch_comparison_started_timestamp_seconds gauge\n");
    for (variant, r) in candidates {
        out.push_str(&format!(
            "ragwatch_comparison_started_timestamp_seconds{{variant=\"{variant}\"}} {}\n",
            r.started
        ));
    }
    out.push_str("# TYPE ragwatch_comparison_traces gauge\n");
    for (variant, r) in candidates {
        for stratum in STRATA {
            for arm in ARMS {
                let n = r.arrived.get(&(stratum, arm)).copied().unwrap_or(0.0);
                for state in ["arrived", "judged_weight"] {
                    out.push_str(&format!(
                        "ragwatch_comparison_traces{{stratum=\"{stratum}\",variant=\"{variant}\",arm=\"{arm}\",state=\"{state}\"}} {n}\n"
                    ));
                }
            }
        }
    }
    out.push_str("# TYPE ragwatch_comparison_terms gauge\n");
    for (variant, r) in candidates {
        for stratum in STRATA {
            for arm in ARMS {
                for metric in METRICS {
                    let (model, sums) = r
                        .terms
                        .get(&(stratum, arm, metric))
                        .copied()
                        .unwrap_or(("m1", [0.0; 6]));
                    for (term, v) in TERMS.iter().zip(sums) {
                        out.push_str(&format!(
                            "ragwatch_comparison_terms{{stratum=\"{stratum}\",variant=\"{variant}\",arm=\"{arm}\",metric=\"{metric}\",judge=\"llm\",judge_model=\"{model}\",term=\"{term}\"}} {v}\n"
                        ));
                    }
                }
            }
        }
    }
    out
}

// ------------------------------------------------------------------------ the plain reference

/// The comparison over all strata, computed from the replicas' sums the way the spec writes it:
/// (difference, lower, upper, judged candidate, judged baseline), or None when no stratum has
/// judged traces in both arms.
fn reference(replicas: &[&Replica], metric: &str) -> Option<(f64, f64, f64, f64, f64)> {
    let pooled = |stratum: &str, arm: &str| -> [f64; 6] {
        let mut s = [0.0; 6];
        for r in replicas {
            if let Some((_, sums)) = r.terms.get(&(stratum, arm, metric)) {
                for (a, b) in s.iter_mut().zip(sums) {
                    *a += b;
                }
            }
        }
        s
    };
    let arm = |s: [f64; 6]| -> Option<(f64, f64)> {
        let [n, w, a, b, c, d] = s;
        (w > 0.0).then(|| {
            let m = a / w;
            (m, (d - 2.0 * m * c + m * m * b + 0.25 * b / n) / (w * w))
        })
    };
    let mut compared = Vec::new();
    for stratum in STRATA {
        let (c, b) = (pooled(stratum, "candidate"), pooled(stratum, "baseline"));
        if let (Some((mc, vc)), Some((mb, vb))) = (arm(c), arm(b)) {
            let t: f64 = replicas
                .iter()
                .flat_map(|r| ARMS.map(|a| r.arrived.get(&(stratum, a)).copied().unwrap_or(0.0)))
                .sum();
            compared.push((mc - mb, vc + vb, t, c[0], b[0]));
        }
    }
    let total: f64 = compared.iter().map(|s| s.2).sum();
    if compared.is_empty() || total <= 0.0 {
        return None;
    }
    let delta: f64 = compared.iter().map(|s| s.2 / total * s.0).sum();
    let v: f64 = compared.iter().map(|s| (s.2 / total).powi(2) * s.1).sum();
    let tau2 = 0.01;
    let h = (2.0 * v * (v + tau2) / tau2 * (((v + tau2) / v).sqrt() / 0.05).ln()).sqrt();
    let nc = compared.iter().map(|s| s.3).sum();
    let nb = compared.iter().map(|s| s.4).sum();
    Some((delta, delta - h, delta + h, nc, nb))
}

// ------------------------------------------------------------------------------ the live test

const NAMESPACE: &str = "rag";
const JOB: &str = "rw";

fn verdict(prom: u16, variant: &str) -> Option<f64> {
    result(
        prom,
        &format!("ragwatch:comparison_verdict{{variant=\"{variant}\", stratum=\"*\", metric=\"faithfulness\"}}"),
    )
    .first()
    .copied()
}

#[test]
fn the_gates_read_the_verdicts_of_a_real_prometheus() {
    let at = load(ANALYSIS_TEMPLATE);
    let mt = load(METRIC_TEMPLATE);
    let range = load(CANARY_METRIC)["thresholdRange"].clone();
    let metric = at["spec"]["metrics"][0].clone();

    let servers = [Exposition::start(), Exposition::start()];
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yaml"), test_rules()).unwrap();
    let targets: String = servers
        .iter()
        .zip(PODS)
        .map(|(s, pod)| {
            format!(
                "      - targets: [\"{}\"]\n        labels: {{namespace: {NAMESPACE}, pod: {pod}}}\n",
                s.addr
            )
        })
        .collect();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n{targets}"
        ),
    )
    .unwrap();

    // At start, every candidate's series are at 0: nothing judged, nothing started.
    let variants = ["worse", "fine", "thin", "blank", "mixed", "late"];
    let fresh: Vec<(&str, Replica)> = variants.iter().map(|v| (*v, Replica::default())).collect();
    for s in &servers {
        s.set(exposition(&fresh));
    }
    let (prom, _prom) = start_prometheus(dir.path(), &[]);

    // A verdict for every stratum (and "*") x candidate x metric x judge, all 0, none NaN.
    let all = wait_for("every verdict", Duration::from_secs(60), || {
        let r = query(prom, "ragwatch:comparison_verdict").unwrap_or_default();
        (r.len() == variants.len() * (STRATA.len() + 1) * METRICS.len()).then_some(r)
    });
    for r in &all {
        assert_eq!(r["value"][1], "0", "{r}");
    }
    for variant in variants {
        assert_eq!(
            assess(
                &metric,
                &result(prom, &argo_query(&at, NAMESPACE, JOB, variant))
            ),
            Phase::Inconclusive,
            "{variant} at start"
        );
        assert_eq!(
            flagger_check(prom, &flagger_query(&mt, NAMESPACE, JOB, variant), &range),
            (Some(0.0), true),
            "{variant} at start"
        );
    }

    // The traffic arrives. `worse` and `mixed` carry the promtool test's worse faithfulness (head
    // -0.4, tail -0.1) split over the two replicas; in `mixed`, replica b judged with another model.
    let now = unix_secs();
    let worse = |model_b: &'static str| {
        [
            Replica::default()
                .sums("head", "candidate", "m1", ones(300.0, 150.0, 1.0))
                .sums("head", "baseline", "m1", ones(500.0, 450.0, 1.0))
                .sums("tail", "candidate", "m1", ones(200.0, 150.0, 1.0))
                .arrived("head", "candidate", 300.0)
                .arrived("head", "baseline", 500.0)
                .arrived("tail", "candidate", 200.0)
                .started(now - 600.0),
            Replica::default()
                .sums("head", "candidate", model_b, ones(200.0, 100.0, 2.0))
                .sums("head", "baseline", model_b, ones(500.0, 450.0, 1.0))
                .sums("tail", "baseline", model_b, ones(400.0, 340.0, 1.0))
                .arrived("head", "candidate", 400.0)
                .arrived("head", "baseline", 500.0)
                .arrived("tail", "baseline", 400.0)
                .started(now - 590.0),
        ]
    };
    // `fine`: faithfulness 0.88 against 0.9 in 400 scores each, answer relevancy 0.8 in both arms:
    // not worse.
    let fine = [
        Replica::default()
            .sums("head", "candidate", "m1", same(200.0, 0.88))
            .sums("head", "baseline", "m1", same(200.0, 0.9))
            .metric_sums("head", "candidate", "answer_relevancy", same(100.0, 0.8))
            .metric_sums("head", "baseline", "answer_relevancy", same(100.0, 0.8))
            .arrived("head", "candidate", 200.0)
            .arrived("head", "baseline", 200.0)
            .started(now - 300.0),
        Replica::default()
            .sums("head", "candidate", "m1", same(200.0, 0.88))
            .sums("head", "baseline", "m1", same(200.0, 0.9))
            .arrived("head", "candidate", 200.0)
            .arrived("head", "baseline", 200.0)
            .started(now - 300.0),
    ];
    // `thin`: the baseline is judged, the candidate not yet (its mean is 0/0).
    let thin = [
        Replica::default()
            .sums("head", "baseline", "m1", same(400.0, 0.9))
            .arrived("head", "candidate", 3.0)
            .arrived("head", "baseline", 400.0)
            .started(now - 60.0),
        Replica::default().started(now - 60.0),
    ];
    // `late`: the promtool test's undecided tail (-0.1 in [-0.208, 0.008]), three hours after the
    // comparison started: past the 7200 s deadline.
    let late = [
        Replica::default()
            .sums("tail", "candidate", "m1", ones(200.0, 150.0, 1.0))
            .sums("tail", "baseline", "m1", ones(400.0, 340.0, 1.0))
            .arrived("tail", "candidate", 200.0)
            .arrived("tail", "baseline", 400.0)
            .started(now - 3.0 * 3600.0),
        Replica::default().started(now - 3.0 * 3600.0 + 30.0),
    ];
    let [worse_a, worse_b] = worse("m1");
    let [mixed_a, mixed_b] = worse("m2");
    let replicas: [Vec<(&str, Replica)>; 2] = [
        vec![
            ("worse", worse_a.clone()),
            ("fine", fine[0].clone()),
            ("thin", thin[0].clone()),
            ("blank", Replica::default()),
            ("mixed", mixed_a),
            ("late", late[0].clone()),
        ],
        vec![
            ("worse", worse_b.clone()),
            ("fine", fine[1].clone()),
            ("thin", thin[1].clone()),
            ("blank", Replica::default()),
            ("mixed", mixed_b),
            ("late", late[1].clone()),
        ],
    ];
    for (s, r) in servers.iter().zip(&replicas) {
        s.set(exposition(r));
    }
    // Both replicas' new sums are in once the worse candidate's baseline count over all strata
    // holds replica a's head and replica b's head and tail.
    wait_for("both replicas' sums", Duration::from_secs(60), || {
        let judged = result(
            prom,
            "ragwatch:comparison_judged:sum{variant=\"worse\", stratum=\"*\", arm=\"baseline\", metric=\"faithfulness\"}",
        );
        (judged == vec![1400.0]).then_some(())
    });

    // Prometheus's numbers are the plain reference's, to rounding.
    for (variant, pair) in [
        ("worse", [&worse_a, &worse_b]),
        ("fine", [&fine[0], &fine[1]]),
    ] {
        let (delta, lower, upper, nc, nb) = reference(&pair, "faithfulness").unwrap();
        for (record, expected) in [("difference", delta), ("lower", lower), ("upper", upper)] {
            let got = result(
                prom,
                &format!(
                    "ragwatch:comparison_{record}:ratio{{variant=\"{variant}\", stratum=\"*\", metric=\"faithfulness\"}}"
                ),
            );
            assert_eq!(got.len(), 1, "{variant} {record}");
            assert!(
                (got[0] - expected).abs() < 1e-9,
                "{variant} {record}: Prometheus {} against {expected}",
                got[0]
            );
        }
        for (arm, n) in [("candidate", nc), ("baseline", nb)] {
            let got = result(
                prom,
                &format!(
                    "ragwatch:comparison_judged:sum{{variant=\"{variant}\", stratum=\"*\", arm=\"{arm}\", metric=\"faithfulness\"}}"
                ),
            );
            assert_eq!(got, vec![n], "{variant} {arm}");
        }
        eprintln!(
            "{variant}: difference {delta:.4} in [{lower:.4}, {upper:.4}], {nc} and {nb} judged"
        );
    }
    assert!(reference(&[&thin[0], &thin[1]], "faithfulness").is_none());

    // Each candidate through both gates.
    let cases = [
        // (candidate, verdict, Argo's phase, Flagger's value, Flagger passes)
        ("worse", -1.0, Phase::Failed, -1.0, false),
        ("fine", 1.0, Phase::Successful, 1.0, true),
        // No judged candidate trace yet: undecided, inside the range before the deadline.
        ("thin", 0.0, Phase::Inconclusive, 0.0, true),
        // Nothing judged in either arm, every mean 0/0: 0, not NaN.
        ("blank", 0.0, Phase::Inconclusive, 0.0, true),
        // Two judge identities in the sums: undecided, however worse it looks.
        ("mixed", 0.0, Phase::Inconclusive, 0.0, true),
        // Undecided past the deadline: Argo waits (its own count ends the run), Flagger fails it.
        ("late", 0.0, Phase::Inconclusive, -1.0, false),
    ];
    for (variant, expected, phase, value, passes) in cases {
        // The verdict is a chain of records across groups Prometheus evaluates concurrently: on a
        // busy machine its latest evaluation may trail the sums by a round.
        let settled = wait_for(
            &format!("{variant}'s verdict"),
            Duration::from_secs(30),
            || {
                let v = verdict(prom, variant)?;
                (v == expected).then_some(v)
            },
        );
        assert_eq!(Some(settled), Some(expected), "{variant}");
        let r = result(prom, &argo_query(&at, NAMESPACE, JOB, variant));
        assert_eq!(r, vec![expected], "{variant}: Argo's result");
        assert_eq!(assess(&metric, &r), phase, "{variant}: Argo");
        assert_eq!(
            flagger_check(prom, &flagger_query(&mt, NAMESPACE, JOB, variant), &range),
            (Some(value), passes),
            "{variant}: Flagger"
        );
    }
    let nan = "label_replace({__name__=~\"ragwatch:comparison_.+\"}, \"record\", \"$1\", \"__name__\", \"(.+)\") != label_replace({__name__=~\"ragwatch:comparison_.+\"}, \"record\", \"$1\", \"__name__\", \"(.+)\")";
    assert_eq!(query(prom, nan), Some(vec![]), "a NaN among the records");

    // A candidate Prometheus has no series of (ragwatch not scraped, [variants] off, a typo): the
    // query still answers one value, so Argo measures Inconclusive, never Error; an empty answer
    // would be Inconclusive too. Flagger has nothing that judges the canary: a failed check.
    let absent = result(prom, &argo_query(&at, NAMESPACE, JOB, "absent"));
    assert_eq!(absent, vec![0.0]);
    assert_eq!(assess(&metric, &absent), Phase::Inconclusive);
    assert_eq!(assess(&metric, &[]), Phase::Inconclusive);
    assert_eq!(
        flagger_check(prom, &flagger_query(&mt, NAMESPACE, JOB, "absent"), &range),
        (Some(-1.0), false)
    );

    // The page is for the worse candidate alone.
    let firing = wait_for("RagwatchVariantWorse", Duration::from_secs(30), || {
        let r = query(
            prom,
            "ALERTS{alertname=\"RagwatchVariantWorse\", alertstate=\"firing\"}",
        )
        .unwrap_or_default();
        (!r.is_empty()).then_some(r)
    });
    let paged: Vec<(&str, &str)> = firing
        .iter()
        .map(|r| {
            (
                r["metric"]["variant"].as_str().unwrap(),
                r["metric"]["metric"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(paged, vec![("worse", "faithfulness")]);

    // The dashboard's Variants row has data.
    let d = test_dashboard();
    let mut checked = 0;
    for panel in d["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().unwrap();
            if !e.contains("comparison") || e.contains("mismatch") {
                continue;
            }
            let q = e
                .replace("$cluster", ".*")
                .replace("$namespace", ".*")
                .replace("$install", ".*")
                .replace("$variant", "worse");
            assert!(
                !result(prom, &q).is_empty(),
                "no data for panel {}: {q}",
                panel["title"]
            );
            checked += 1;
        }
    }
    assert!(checked >= 6, "{checked} queries");

    // Replica b restarts: its sums start again from 0. The interval widens; the verdict of the
    // worse candidate stays trustworthy either way (here replica a's half alone is still worse).
    servers[1].set(exposition(&fresh));
    let (_, lower, upper, _, _) = reference(&[&worse_a], "faithfulness").unwrap();
    wait_for(
        "the pool without replica b",
        Duration::from_secs(30),
        || {
            let got = result(
                prom,
                "ragwatch:comparison_upper:ratio{variant=\"worse\", stratum=\"*\", metric=\"faithfulness\"}",
            );
            (got.len() == 1 && (got[0] - upper).abs() < 1e-9).then_some(())
        },
    );
    let got = result(
        prom,
        "ragwatch:comparison_lower:ratio{variant=\"worse\", stratum=\"*\", metric=\"faithfulness\"}",
    );
    assert!((got[0] - lower).abs() < 1e-9, "{got:?} against {lower}");
    let expected = if upper < -0.05 { -1.0 } else { 0.0 };
    wait_for(
        "the verdict without replica b",
        Duration::from_secs(30),
        || (verdict(prom, "worse") == Some(expected)).then_some(()),
    );
}
