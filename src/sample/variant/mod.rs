//! Variants: which release served a trace (`stable`, `canary`), read from its metadata or its
//! OpenTelemetry attributes, mapped onto a bounded set of label values: the declared variants,
//! `other` (an undeclared value) and `unknown` (no value, with `missing = "unknown"`).

pub mod config;

use std::collections::HashMap;

use crate::trace::{MetadataField, Trace};
use config::{Missing, OTHER_VARIANT, UNKNOWN_VARIANT, VariantsConfig};

/// Index into [`Variants::names`].
pub type VariantId = usize;

/// Assigns variants; built only when `[variants]` is on.
#[derive(Debug, Clone)]
pub struct Variants {
    names: Vec<String>,
    baseline: VariantId,
    missing: VariantId,
    other: VariantId,
    fields: Vec<MetadataField>,
    map: HashMap<String, VariantId>,
}

impl Variants {
    /// Builds from a validated config; `None` when variants are off.
    pub fn new(config: &VariantsConfig) -> Option<Self> {
        if !config.enabled() {
            return None;
        }
        let mut names = config.declared.clone();
        names.push(OTHER_VARIANT.into());
        names.push(UNKNOWN_VARIANT.into());
        let id = |name: &str| names.iter().position(|n| n == name);
        let baseline = id(&config.baseline).expect("validated: the baseline is declared");
        let other = names.len() - 2;
        let missing = match config.missing {
            Missing::Baseline => baseline,
            Missing::Unknown => names.len() - 1,
        };
        let map = config
            .map
            .iter()
            .filter_map(|(raw, v)| Some((raw.clone(), id(v)?)))
            .collect();
        let fields = config
            .fields
            .iter()
            .map(|f| MetadataField::of_pointer(f))
            .chain(
                config
                    .attributes
                    .iter()
                    .map(|a| MetadataField::Key(a.clone())),
            )
            .collect();
        Some(Self {
            names,
            baseline,
            missing,
            other,
            fields,
            map,
        })
    }

    /// Every label value: the declared variants, then `other` and `unknown`.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The label value of `id`.
    pub fn name(&self, id: VariantId) -> &str {
        &self.names[id]
    }

    /// The baseline.
    pub fn baseline(&self) -> VariantId {
        self.baseline
    }

    /// The declared variants compared with the baseline.
    pub fn candidates(&self) -> impl Iterator<Item = VariantId> + '_ {
        (0..self.other).filter(|&v| v != self.baseline)
    }

    /// Whether `id` is a declared candidate.
    pub fn is_candidate(&self, id: VariantId) -> bool {
        id < self.other && id != self.baseline
    }

    /// The variant of `trace`: the first field that holds a string or a number, mapped.
    pub fn assign(&self, trace: &Trace) -> VariantId {
        match self.fields.iter().find_map(|f| f.read(&trace.metadata)) {
            Some(raw) => self.of_value(&raw),
            None => self.missing,
        }
    }

    /// The variant a raw value names.
    pub fn of_value(&self, raw: &str) -> VariantId {
        if let Some(&v) = self.map.get(raw) {
            return v;
        }
        self.names[..self.other]
            .iter()
            .position(|n| n == raw)
            .unwrap_or(self.other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::metadata::Metadata;

    fn config(toml: &str) -> VariantsConfig {
        toml::from_str(toml).unwrap()
    }

    fn trace(metadata: &str) -> Trace {
        let mut t = Trace::of("q", &[("c", "x")], "a");
        t.metadata = Metadata::from_checked_text(metadata);
        t
    }

    const BASE: &str = r#"
        declared = ["stable", "canary"]
        baseline = "stable"
        fields = ["/release", "/deploy/role"]
        attributes = ["service.version"]
        map = { "v1.5.0" = "canary" }
    "#;

    #[test]
    fn values_map_onto_declared_names_other_and_the_missing_default() {
        let v = Variants::new(&config(BASE)).unwrap();
        let name = |m: &str| v.name(v.assign(&trace(m))).to_owned();
        assert_eq!(name(r#"{"release": "canary"}"#), "canary");
        assert_eq!(name(r#"{"release": "stable"}"#), "stable");
        assert_eq!(name(r#"{"release": "v1.5.0"}"#), "canary");
        assert_eq!(name(r#"{"release": "v9"}"#), "other");
        assert_eq!(name(r#"{"release": 7}"#), "other");
        assert_eq!(name(r#"{"deploy": {"role": "canary"}}"#), "canary");
        assert_eq!(name(r#"{"service.version": "v1.5.0"}"#), "canary");
        assert_eq!(
            name(r#"{"release": "", "service.version": "canary"}"#),
            "canary"
        );
        assert_eq!(name("{}"), "stable");
        assert_eq!(name("null"), "stable");
        let unknown = Variants::new(&config(&format!("{BASE}\nmissing = \"unknown\""))).unwrap();
        assert_eq!(unknown.name(unknown.assign(&trace("{}"))), "unknown");
    }

    #[test]
    fn the_label_set_is_bounded_and_candidates_exclude_the_baseline() {
        let v = Variants::new(&config(BASE)).unwrap();
        assert_eq!(v.names(), ["stable", "canary", "other", "unknown"]);
        assert_eq!(v.candidates().collect::<Vec<_>>(), [1]);
        assert!(v.is_candidate(1) && !v.is_candidate(0) && !v.is_candidate(2));
        assert!(Variants::new(&VariantsConfig::default()).is_none());
    }

    #[test]
    fn validation_names_every_problem() {
        let mut p = crate::section::problems::Problems::default();
        config(
            r#"declared = ["stable", "other", "Bad"]
               baseline = "main"
               map = { x = "nope" }
               share = { stable = 1.5 }
               margin = 1.0"#,
        )
        .validate(&mut p);
        let text = format!("{p:?}");
        for field in [
            "variants.declared[1]",
            "variants.declared[2]",
            "variants.baseline",
            "variants.fields",
            "variants.map.x",
            "variants.share.stable",
            "variants.margin",
        ] {
            assert!(text.contains(field), "{field} missing from {text}");
        }
        let mut ok = crate::section::problems::Problems::default();
        config(BASE).validate(&mut ok);
        assert!(format!("{ok:?}").matches("field").count() == 0, "{ok:?}");
    }
}
