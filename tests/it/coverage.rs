//! No blind spots: every metric family ragwatch exports (the families docs/metrics.md lists, which
//! `docs::the_metrics_page_lists_every_family_that_metrics_exports` holds to `/metrics` and the
//! source) is read by an alerting rule, by a panel of the Grafana dashboard, or is listed in
//! docs/metrics.md's "For debugging" section with a reason. An alert or a panel that reads a
//! recording rule reads what that rule reads, down the chain to the raw families. The rules and the
//! dashboard are the generator's output with the shipped windows (the checked-in copies are held
//! to it by `rules::`). No network, no process.

use std::collections::{BTreeMap, BTreeSet};

use ragwatch::rules::{Pooling, Windows};
use serde_json::Value;

/// The heading of docs/metrics.md's listing of the families only a person debugging reads.
const DEBUG_HEADING: &str = "## For debugging";

/// One rule of the rules file: its name (the record or the alert) and its expression.
#[derive(Debug)]
struct Rule {
    alert: bool,
    name: String,
    expr: String,
}

/// The rules of a rules file, read line by line: each `- record:` or `- alert:` and its `expr`,
/// a one-line value or a block (`expr: |`, `expr: >-`) of the lines indented under it.
fn rules(yaml: &str) -> Vec<Rule> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out: Vec<Rule> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        i += 1;
        let (alert, name) = if let Some(n) = line.strip_prefix("- alert:") {
            (true, n)
        } else if let Some(n) = line.strip_prefix("- record:") {
            (false, n)
        } else {
            continue;
        };
        out.push(Rule {
            alert,
            name: name.trim().to_owned(),
            expr: String::new(),
        });
        // The rule's keys, up to the next rule.
        while i < lines.len() && !lines[i].trim_start().starts_with("- ") {
            let raw = lines[i];
            i += 1;
            let Some(value) = raw.trim_start().strip_prefix("expr:") else {
                continue;
            };
            let indent = raw.len() - raw.trim_start().len();
            let value = value.trim();
            let rule = out.last_mut().unwrap();
            if matches!(value, "|" | "|-" | ">" | ">-") {
                while i < lines.len()
                    && (lines[i].trim().is_empty()
                        || lines[i].len() - lines[i].trim_start().len() > indent)
                {
                    rule.expr.push_str(lines[i]);
                    rule.expr.push('\n');
                    i += 1;
                }
            } else {
                rule.expr = value.to_owned();
            }
        }
    }
    out
}

/// The metric names an expression reads: its identifiers outside strings and comments (label
/// names and function names come along; they name no family and no record).
fn names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in expr.lines() {
        // Strings first: a `#` or a name inside quotes is a label value.
        let mut bare = String::new();
        let mut quote = None;
        for c in line.chars() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
                None => bare.push(c),
            }
        }
        let code = bare.split('#').next().unwrap_or("");
        let mut token = String::new();
        for c in code.chars().chain(std::iter::once(' ')) {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                token.push(c);
            } else if !token.is_empty() {
                if !token.starts_with(|c: char| c.is_ascii_digit()) {
                    out.insert(std::mem::take(&mut token));
                }
                token.clear();
            }
        }
    }
    out
}

/// Everything `start` reads, following each recorded series to the expression that records it.
fn closure(
    start: &BTreeSet<String>,
    records: &BTreeMap<String, BTreeSet<String>>,
) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<String> = start.iter().cloned().collect();
    while let Some(name) = stack.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(reads) = records.get(&name) {
            stack.extend(reads.iter().cloned());
        }
    }
    seen
}

/// The expressions of every panel's queries, rows' nested panels included.
fn panel_exprs(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = stack.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            stack.extend(nested);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                out.push((
                    panel["title"].as_str().unwrap_or("").to_owned(),
                    expr.to_owned(),
                ));
            }
        }
    }
    out
}

/// Whether `name` (a series name an expression reads) is of `family` (`kind` from the docs'
/// table): the family itself, or a histogram's `_bucket`, `_sum` or `_count`.
fn of_family(name: &str, family: &str, kind: &str) -> bool {
    name == family
        || (kind == "histogram"
            && ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.strip_suffix(s) == Some(family)))
}

/// docs/metrics.md's "For debugging" listing: each `- `family`: reason` line of that section.
fn debug_listing() -> BTreeMap<String, String> {
    let page = crate::docs::read(&crate::docs::root().join("docs/metrics.md"));
    let mut out = BTreeMap::new();
    let mut inside = false;
    for (n, line) in crate::docs::prose(&page) {
        if line.starts_with('#') {
            inside = line.trim() == DEBUG_HEADING;
            continue;
        }
        if !inside {
            continue;
        }
        let Some(rest) = line.strip_prefix("- `") else {
            continue;
        };
        let (name, reason) = rest.split_once('`').unwrap();
        let reason = reason.trim_start_matches(':').trim();
        assert!(
            reason.split_whitespace().count() >= 3,
            "docs/metrics.md:{n}: `{name}` is listed for debugging without a reason"
        );
        assert!(
            out.insert(name.to_owned(), reason.to_owned()).is_none(),
            "docs/metrics.md:{n}: `{name}` listed twice"
        );
    }
    assert!(
        !out.is_empty(),
        "docs/metrics.md has no `{DEBUG_HEADING}` section with `- `family`: reason` lines"
    );
    out
}

/// What reads the families: the alerts (with the records they read, transitively) and the panels.
struct Readers {
    /// Every name some alert reads, through recording rules.
    by_alerts: BTreeMap<String, BTreeSet<String>>,
    /// Every name some panel reads, through recording rules.
    by_panels: BTreeMap<String, BTreeSet<String>>,
}

impl Readers {
    fn shipped() -> Readers {
        let (w, p) = (Windows::SHIPPED, Pooling::shipped());
        let rules = rules(&ragwatch::rules::rules_yaml(&w, &p));
        let mut records: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in rules.iter().filter(|r| !r.alert) {
            records
                .entry(r.name.clone())
                .or_default()
                .extend(names(&r.expr));
        }
        let by_alerts = rules
            .iter()
            .filter(|r| r.alert)
            .map(|r| (r.name.clone(), closure(&names(&r.expr), &records)))
            .collect();
        let dashboard: Value =
            serde_json::from_str(&ragwatch::rules::dashboard_json(&w, &p)).unwrap();
        let mut by_panels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (title, expr) in panel_exprs(&dashboard) {
            by_panels
                .entry(title)
                .or_default()
                .extend(closure(&names(&expr), &records));
        }
        Readers {
            by_alerts,
            by_panels,
        }
    }

    /// The alerts and the panels that read `family`.
    fn of(&self, family: &str, kind: &str) -> (Vec<&String>, Vec<&String>) {
        (
            reading(&self.by_alerts, family, kind),
            reading(&self.by_panels, family, kind),
        )
    }
}

/// The keys of `readers` whose names read `family`.
fn reading<'a>(
    readers: &'a BTreeMap<String, BTreeSet<String>>,
    family: &str,
    kind: &str,
) -> Vec<&'a String> {
    readers
        .iter()
        .filter(|(_, reads)| reads.iter().any(|n| of_family(n, family, kind)))
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn every_exported_family_is_on_an_alert_a_panel_or_the_debugging_list() {
    let families = crate::docs::documented_families();
    assert!(families.len() >= 70, "{families:?}");
    let readers = Readers::shipped();
    assert!(
        readers.by_alerts.len() >= 30,
        "{:?}",
        readers.by_alerts.keys()
    );
    assert!(
        readers.by_panels.len() >= 40,
        "{:?}",
        readers.by_panels.keys()
    );
    let debug = debug_listing();
    let mut blind = Vec::new();
    let mut stale = Vec::new();
    for (family, kind) in &families {
        let (alerts, panels) = readers.of(family, kind);
        let watched = !alerts.is_empty() || !panels.is_empty();
        match (watched, debug.contains_key(family)) {
            (false, false) => blind.push(family.as_str()),
            (true, true) => stale.push(format!("{family} (alerts {alerts:?}, panels {panels:?})")),
            _ => {}
        }
    }
    for name in debug.keys() {
        assert!(
            families.contains_key(name),
            "docs/metrics.md lists {name} for debugging, which its tables do not document"
        );
    }
    assert!(
        blind.is_empty(),
        "families no alert and no dashboard panel reads: add an alert or a panel, or list them \
         under `{DEBUG_HEADING}` in docs/metrics.md with a reason:\n{}",
        blind.join("\n")
    );
    assert!(
        stale.is_empty(),
        "families listed for debugging that an alert or a panel reads: take them off the list:\n{}",
        stale.join("\n")
    );
}

/// The chain is followed: the combined estimate's terms reach the floor alerts only through the
/// `ragwatch.deltas` and `ragwatch.estimate` records, and a panel of recorded means reaches the
/// score histograms the same way.
#[test]
fn alerts_and_panels_read_raw_families_through_recording_rules() {
    let readers = Readers::shipped();
    let floor = &readers.by_alerts["RagwatchFaithfulnessBelowFloor"];
    assert!(floor.contains("ragwatch:estimate:upper_5m"), "{floor:?}");
    assert!(floor.contains("ragwatch_estimate_terms_total"), "{floor:?}");
    let (alerts, _) = readers.of("ragwatch_estimate_terms_total", "counter");
    assert!(
        alerts.iter().any(|a| *a == "RagwatchFaithfulnessDrift"),
        "{alerts:?}"
    );
    let means = &readers.by_panels["Faithfulness: 5m against the 24h baseline"];
    assert!(
        means.contains("ragwatch_faithfulness_ratio_sum"),
        "{means:?}"
    );
    assert!(of_family(
        "ragwatch_faithfulness_ratio_count",
        "ragwatch_faithfulness_ratio",
        "histogram"
    ));
    assert!(!of_family(
        "ragwatch_faithfulness_ratio_count",
        "ragwatch_faithfulness_ratio",
        "gauge"
    ));
}

#[test]
fn names_skip_strings_comments_and_numbers() {
    let found = names(
        "sum by (le) (rate(ragwatch_x_bucket{judge=\"ragwatch_y\"}[5m])) > 0.5 # ragwatch_z\n  or ragwatch:w:max",
    );
    let want: BTreeSet<String> = [
        "sum",
        "by",
        "le",
        "rate",
        "ragwatch_x_bucket",
        "judge",
        "or",
        "ragwatch:w:max",
    ]
    .map(String::from)
    .into();
    assert_eq!(found, want);
}

#[test]
fn rules_are_read_with_their_block_expressions() {
    let yaml = "groups:\n  - name: g\n    rules:\n      - record: a:b:c\n        expr: ragwatch_one\n      - alert: X\n        expr: |\n          a:b:c > 0\n          and ragwatch_two\n        for: 5m\n        labels:\n          severity: warning\n";
    let r = rules(yaml);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].alert, r[0].name.as_str(), r[0].expr.as_str()),
        (false, "a:b:c", "ragwatch_one")
    );
    assert!(r[1].alert && r[1].expr.contains("ragwatch_two") && !r[1].expr.contains("5m"));
}
