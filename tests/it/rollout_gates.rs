//! The rollout gates of deploy/kubernetes/components/rollout-gates against the controllers' own CRD
//! schemas: every field our AnalysisTemplate, MetricTemplate and
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
//! Their live evaluation against a real Prometheus is in tests/it/rollout_gates_live.rs.

use serde_json::{Value, json};

use crate::common::rollout::{
    ANALYSIS_TEMPLATE, CANARY_METRIC, METRIC_TEMPLATE, Phase, assess, evaluate, load,
};

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
