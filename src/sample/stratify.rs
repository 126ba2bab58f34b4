//! Stratify: map a trace to one of a bounded set of strata, so label cardinality stays fixed
//! whatever arrives on the topic.

use regex::Regex;

use crate::dimensions::{DEFAULT_STRATUM, OTHER_STRATUM, StratumId};
use crate::sample::config::StrataConfig;
use crate::trace::Trace;

/// Assigns strata: the trace's own field if declared (else `other`), then config rules, else `default`.
#[derive(Debug, Clone)]
pub struct Stratifier {
    names: Vec<String>,
    rules: Vec<Rule>,
    default_id: StratumId,
    other_id: StratumId,
}

#[derive(Debug, Clone)]
struct Rule {
    stratum: StratumId,
    metadata: Option<(String, String)>,
    query: Option<Regex>,
}

impl Stratifier {
    /// Builds from a validated config (regexes were checked by `Config::validate`).
    pub fn new(config: &StrataConfig) -> Self {
        let mut names: Vec<String> = config.declared.clone();
        if !names.iter().any(|n| n == DEFAULT_STRATUM) {
            names.push(DEFAULT_STRATUM.into());
        }
        names.push(OTHER_STRATUM.into());
        let id_of = |names: &[String], s: &str| names.iter().position(|n| n == s);
        let rules = config
            .rules
            .iter()
            .filter_map(|r| {
                Some(Rule {
                    stratum: id_of(&names, &r.stratum)?,
                    metadata: r.metadata_field.clone().zip(r.equals.clone()),
                    query: r
                        .query_regex
                        .as_deref()
                        .map(|re| Regex::new(re).expect("validated by Config::validate")),
                })
            })
            .collect();
        Self {
            default_id: id_of(&names, DEFAULT_STRATUM).expect("default was added above"),
            other_id: names.len() - 1,
            names,
            rules,
        }
    }

    /// Every stratum label value, declared ones first, then `default` and `other`.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The label value of `id`.
    pub fn name(&self, id: StratumId) -> &str {
        &self.names[id]
    }

    /// The id of a label value, if it is one.
    pub fn id(&self, name: &str) -> Option<StratumId> {
        self.names.iter().position(|n| n == name)
    }

    /// The stratum of `trace`.
    pub fn assign(&self, trace: &Trace) -> StratumId {
        if let Some(own) = trace.stratum.as_deref() {
            return self
                .names
                .iter()
                .position(|n| n == own)
                .filter(|&i| i != self.other_id)
                .unwrap_or(self.other_id);
        }
        for rule in &self.rules {
            let meta_ok = rule.metadata.as_ref().is_none_or(|(field, want)| {
                match trace.metadata.field::<serde_json::Value>(field) {
                    Some(serde_json::Value::String(s)) => s == *want,
                    Some(serde_json::Value::Bool(b)) => want == if b { "true" } else { "false" },
                    Some(serde_json::Value::Number(n)) => n.as_f64() == want.parse().ok(),
                    _ => false,
                }
            });
            let query_ok = rule
                .query
                .as_ref()
                .is_none_or(|re| re.is_match(&trace.query));
            if meta_ok && query_ok {
                return rule.stratum;
            }
        }
        self.default_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::config::StratumRule;

    fn trace(stratum: Option<&str>, query: &str, route: &str) -> Trace {
        Trace {
            trace_id: "t".into(),
            timestamp_ms: None,
            query: query.into(),
            contexts: vec![],
            answer: String::new(),
            stratum: stratum.map(Into::into),
            metadata: serde_json::json!({ "route": route }).into(),
            label_faithful: None,
            gold: None,
            span_id: None,
        }
    }

    #[test]
    fn own_field_then_rules_then_default() {
        let s = Stratifier::new(&StrataConfig {
            declared: vec!["head".into(), "out_of_scope".into(), "billing".into()],
            out_of_scope: None,
            rules: vec![
                StratumRule {
                    stratum: "out_of_scope".into(),
                    metadata_field: None,
                    equals: None,
                    query_regex: Some("(?i)weather".into()),
                },
                StratumRule {
                    stratum: "billing".into(),
                    metadata_field: Some("route".into()),
                    equals: Some("billing".into()),
                    query_regex: None,
                },
            ],
        });
        let name = |t: &Trace| s.name(s.assign(t)).to_owned();
        assert_eq!(name(&trace(Some("head"), "x", "")), "head");
        assert_eq!(name(&trace(Some("unknown_thing"), "x", "")), "other");
        assert_eq!(name(&trace(Some("other"), "x", "")), "other");
        assert_eq!(
            name(&trace(None, "What's the Weather?", "billing")),
            "out_of_scope"
        );
        assert_eq!(name(&trace(None, "refund", "billing")), "billing");
        assert_eq!(name(&trace(None, "refund", "support")), "default");
        assert_eq!(
            s.names(),
            ["head", "out_of_scope", "billing", "default", "other"]
        );
    }
}
