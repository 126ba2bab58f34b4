//! The shipped rollout gates (deploy/kubernetes/components/rollout-gates) evaluated the way their
//! controllers evaluate them: Argo Rollouts turns the AnalysisTemplate's query result into `result`,
//! a list of floats, and evaluates its successCondition and failureCondition (the expression forms
//! the template uses, interpreted here); Flagger takes the MetricTemplate query's one value and fails
//! the check outside the Canary's thresholdRange, or without a value.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::prometheus::query;
use super::run_ok;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub const ANALYSIS_TEMPLATE: &str =
    "deploy/kubernetes/components/rollout-gates/argo/analysistemplate.yaml";
pub const METRIC_TEMPLATE: &str =
    "deploy/kubernetes/components/rollout-gates/flagger/metrictemplate.yaml";
pub const CANARY_METRIC: &str =
    "deploy/kubernetes/components/rollout-gates/flagger/canary-metric.yaml";

/// A YAML file of the repository, as JSON.
pub fn load(path: &str) -> Value {
    let out = run_ok(
        Command::new("python3")
            .arg("-c")
            .arg("import json, sys, yaml\njson.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)")
            .arg(root().join(path)),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A value of Argo's condition language, as far as the gate's conditions go.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Val {
    Num(f64),
    Bool(bool),
}

/// Evaluates an Argo Rollouts condition over `result` (a Prometheus vector's values): numbers,
/// `len(result)`, `result[i]`, unary minus, the six comparisons, `&&` and `||` (both short-circuit,
/// as in the expr language Argo uses, so `len(result) > 0 && result[0] == 1` never indexes an empty
/// result), parentheses. An index out of range is an error, as it is for Argo (the measurement's
/// phase is then Error).
pub fn evaluate(condition: &str, result: &[f64]) -> Result<bool, String> {
    let tokens = tokenize(condition)?;
    let mut p = Parser {
        tokens,
        at: 0,
        result,
    };
    let v = p.or(true)?;
    if p.at != p.tokens.len() {
        return Err(format!("unexpected {:?} in {condition}", p.tokens[p.at]));
    }
    match v {
        Val::Bool(b) => Ok(b),
        Val::Num(n) => Err(format!("{condition} is the number {n}, not a condition")),
    }
}

fn tokenize(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c.is_ascii_alphabetic() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["==", "!=", "<=", ">=", "&&", "||"].contains(&two.as_str()) {
                out.push(two);
                i += 2;
            } else if "<>()[]-".contains(c) {
                out.push(c.to_string());
                i += 1;
            } else {
                return Err(format!("{c:?} is not in the subset"));
            }
        }
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: Vec<String>,
    at: usize,
    result: &'a [f64],
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn expect(&mut self, t: &str) -> Result<(), String> {
        if self.peek() == Some(t) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("{t} expected, found {:?}", self.peek()))
        }
    }

    fn bool(v: Val) -> Result<bool, String> {
        match v {
            Val::Bool(b) => Ok(b),
            Val::Num(n) => Err(format!("{n} is not a condition")),
        }
    }

    /// `a || b`; with `live` false the operands are parsed but not evaluated (short-circuit).
    fn or(&mut self, live: bool) -> Result<Val, String> {
        let mut v = self.and(live)?;
        while self.peek() == Some("||") {
            self.at += 1;
            let left = if live { Self::bool(v)? } else { false };
            let right = self.and(live && !left)?;
            v = Val::Bool(left || (live && Self::bool(right)?));
        }
        Ok(v)
    }

    fn and(&mut self, live: bool) -> Result<Val, String> {
        let mut v = self.comparison(live)?;
        while self.peek() == Some("&&") {
            self.at += 1;
            let left = if live { Self::bool(v)? } else { false };
            let right = self.comparison(live && left)?;
            v = Val::Bool(left && Self::bool(right)?);
        }
        Ok(v)
    }

    fn comparison(&mut self, live: bool) -> Result<Val, String> {
        let left = self.unary(live)?;
        let op = match self.peek() {
            Some(op @ ("==" | "!=" | "<" | "<=" | ">" | ">=")) => op.to_owned(),
            _ => return Ok(left),
        };
        self.at += 1;
        let right = self.unary(live)?;
        if !live {
            return Ok(Val::Bool(false));
        }
        let (Val::Num(a), Val::Num(b)) = (left, right) else {
            return Err(format!("{left:?} {op} {right:?} compares a condition"));
        };
        Ok(Val::Bool(match op.as_str() {
            "==" => a == b,
            "!=" => a != b,
            "<" => a < b,
            "<=" => a <= b,
            ">" => a > b,
            _ => a >= b,
        }))
    }

    fn unary(&mut self, live: bool) -> Result<Val, String> {
        if self.peek() == Some("-") {
            self.at += 1;
            return match self.unary(live)? {
                Val::Num(n) => Ok(Val::Num(-n)),
                Val::Bool(_) => Err("minus a condition".into()),
            };
        }
        self.primary(live)
    }

    fn primary(&mut self, live: bool) -> Result<Val, String> {
        let t = self.peek().ok_or("unexpected end")?.to_owned();
        self.at += 1;
        match t.as_str() {
            "(" => {
                let v = self.or(live)?;
                self.expect(")")?;
                Ok(v)
            }
            "len" => {
                self.expect("(")?;
                self.expect("result")?;
                self.expect(")")?;
                Ok(Val::Num(self.result.len() as f64))
            }
            "result" => {
                self.expect("[")?;
                let i: usize = self
                    .peek()
                    .and_then(|n| n.parse().ok())
                    .ok_or("an index expected")?;
                self.at += 1;
                self.expect("]")?;
                match (live, self.result.get(i)) {
                    (false, _) => Ok(Val::Num(0.0)),
                    (true, Some(v)) => Ok(Val::Num(*v)),
                    (true, None) => Err(format!(
                        "index out of range: {i} (array of length {})",
                        self.result.len()
                    )),
                }
            }
            n => n
                .parse()
                .map(Val::Num)
                .map_err(|_| format!("{n} is not in the subset")),
        }
    }
}

/// A measurement's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Successful,
    Failed,
    Inconclusive,
    Error,
}

/// How Argo Rollouts assesses one measurement of a metric with both conditions: Error when a
/// condition cannot be evaluated, Failed when the failure condition holds (it wins over success),
/// Successful when the success condition holds, Inconclusive when neither does.
pub fn assess(metric: &Value, result: &[f64]) -> Phase {
    let eval = |key: &str| evaluate(metric[key].as_str().unwrap(), result);
    match (eval("successCondition"), eval("failureCondition")) {
        (Err(_), _) | (_, Err(_)) => Phase::Error,
        (_, Ok(true)) => Phase::Failed,
        (Ok(true), _) => Phase::Successful,
        _ => Phase::Inconclusive,
    }
}

/// The Argo query with the Rollout's args (`namespace`, `job`, `variant`), the way an AnalysisRun resolves them.
pub fn argo_query(at: &Value, namespace: &str, job: &str, variant: &str) -> String {
    let q = at["spec"]["metrics"][0]["provider"]["prometheus"]["query"]
        .as_str()
        .unwrap()
        .replace("{{args.namespace}}", namespace)
        .replace("{{args.job}}", job)
        .replace("{{args.variant}}", variant);
    assert!(!q.contains("{{"), "{q}");
    q
}

/// The Flagger query for a Canary in our namespace whose target is the install, with the
/// template's candidate set to `variant` (as a user sets it).
pub fn flagger_query(mt: &Value, namespace: &str, job: &str, variant: &str) -> String {
    let q = mt["spec"]["query"]
        .as_str()
        .unwrap()
        .replace("{{ namespace }}", namespace)
        .replace("{{ target }}", job)
        .replace("variant=\"canary\"", &format!("variant=\"{variant}\""));
    assert!(!q.contains("{{"), "{q}");
    q
}

/// Argo's `result`: the values of the query's vector.
pub fn result(prom: u16, q: &str) -> Vec<f64> {
    query(prom, q)
        .unwrap_or_else(|| panic!("Prometheus refused {q}"))
        .iter()
        .map(|r| r["value"][1].as_str().unwrap().parse().unwrap())
        .collect()
}

/// Flagger's check: the query's one value inside thresholdRange passes; a value outside, or no
/// value at all (or NaN, which Flagger reads as none), fails. Returns the value and the verdict.
pub fn flagger_check(prom: u16, q: &str, range: &Value) -> (Option<f64>, bool) {
    let values = result(prom, q);
    assert!(values.len() <= 1, "{q}: {values:?}");
    let Some(v) = values.first().copied().filter(|v| !v.is_nan()) else {
        return (None, false);
    };
    let below = range["min"].as_f64().is_some_and(|min| v < min);
    let above = range["max"].as_f64().is_some_and(|max| v > max);
    (Some(v), !below && !above)
}
