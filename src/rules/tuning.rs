//! Tuning the shipped alerts without editing them: labels on every alert (a team, a routing key
//! for a shared Alertmanager), alerts left out, an alert's pending duration (`for:`), and its named
//! thresholds. `ragwatch rules --out DIR` applies a [`Tuning`] from its flags to the rules file and
//! the PrometheusRule; the Helm chart applies the same from its values (`prometheusRule.*`) to its
//! copy of the rules, in which every threshold stays a marker ([`chart_marker`]).
//!
//! In the rules template a tunable threshold is written `@@threshold:Alert.param=default@@`, in
//! the expression and wherever the annotations quote it, so a tuned alert never describes the
//! shipped number.

use std::collections::{BTreeMap, BTreeSet};

/// What a team changes in the shipped alerts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Labels added to every alert (an alert's own label of the same name is kept).
    pub labels: BTreeMap<String, String>,
    /// Alerts left out of the rules.
    pub disabled: BTreeSet<String>,
    /// An alert's pending duration (`for:`), a Prometheus duration.
    pub pending: BTreeMap<String, String>,
    /// `Alert.param` -> the threshold's value.
    pub thresholds: BTreeMap<String, String>,
    /// Every group's evaluation interval (`interval:`), a Prometheus duration; `None` keeps
    /// Prometheus's global one.
    pub interval: Option<String>,
}

/// A tunable threshold: its alert, its name and its shipped value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Threshold {
    /// The alert that compares against it.
    pub alert: String,
    /// Its name within the alert.
    pub param: String,
    /// The shipped value.
    pub default: String,
}

impl Threshold {
    /// `Alert.param`.
    pub fn key(&self) -> String {
        format!("{}.{}", self.alert, self.param)
    }
}

const OPEN: &str = "@@threshold:";

/// Every threshold marker of `template`, in order of first appearance, each once.
///
/// # Panics
/// On a malformed marker or one key with two defaults: templates are compiled in, so that is a
/// bug the unit tests catch, never input.
pub fn thresholds_of(template: &str) -> Vec<Threshold> {
    let mut out: Vec<Threshold> = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find(OPEN) {
        let after = &rest[start + OPEN.len()..];
        let end = after.find("@@").expect("a threshold marker is closed");
        let body = &after[..end];
        let (key, default) = body
            .split_once('=')
            .expect("a threshold marker has a default");
        let (alert, param) = key.split_once('.').expect("a threshold is Alert.param");
        let t = Threshold {
            alert: alert.to_owned(),
            param: param.to_owned(),
            default: default.to_owned(),
        };
        match out.iter().find(|o| o.key() == t.key()) {
            Some(o) => assert_eq!(o.default, t.default, "{} has two defaults", t.key()),
            None => out.push(t),
        }
        rest = &after[end + 2..];
    }
    out
}

/// `template` with every threshold marker replaced by `value(threshold)`.
pub(super) fn replace_thresholds(template: &str, value: impl Fn(&Threshold) -> String) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        let end = after.find("@@").expect("a threshold marker is closed");
        let t = thresholds_of(&rest[start..start + OPEN.len() + end + 2]).remove(0);
        out.push_str(&value(&t));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The marker a threshold keeps in the Helm chart's copy of the rules, which the chart's
/// PrometheusRule template replaces with `prometheusRule.alerts.<Alert>.thresholds.<param>` or
/// the default written in it: `((threshold:Alert.param=default))`.
pub fn chart_marker(t: &Threshold) -> String {
    format!("((threshold:{}={}))", t.key(), t.default)
}

impl Tuning {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
            && self.disabled.is_empty()
            && self.pending.is_empty()
            && self.thresholds.is_empty()
            && self.interval.is_none()
    }

    /// Every name it uses is an alert of `rules` (a threshold one of `thresholds`), every label a
    /// Prometheus label name other than `severity`, every duration a Prometheus duration and
    /// every threshold a finite number; else what is wrong, with what exists.
    pub fn validate(&self, rules: &str, thresholds: &[Threshold]) -> Result<(), String> {
        let alerts = alert_names(rules);
        let unknown: Vec<&String> = self
            .disabled
            .iter()
            .chain(self.pending.keys())
            .filter(|a| !alerts.contains(a.as_str()))
            .collect();
        if let Some(a) = unknown.first() {
            return Err(format!(
                "no alert {a}; the alerts are: {}",
                alerts.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
        for (k, v) in &self.thresholds {
            if !thresholds.iter().any(|t| &t.key() == k) {
                return Err(format!(
                    "no threshold {k}; the thresholds are: {}",
                    thresholds
                        .iter()
                        .map(Threshold::key)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if !v.parse::<f64>().is_ok_and(f64::is_finite) {
                return Err(format!("threshold {k} = {v:?} is not a finite number"));
            }
        }
        if let Some(d) = &self.interval
            && !is_prom_duration(d)
        {
            return Err(format!(
                "the group interval {d:?} is not a Prometheus duration (like 30s, 1m)"
            ));
        }
        for (a, d) in &self.pending {
            if !is_prom_duration(d) {
                return Err(format!(
                    "{a}'s pending duration {d:?} is not a Prometheus duration (like 30s, 10m, 1h)"
                ));
            }
        }
        for (k, v) in &self.labels {
            if !is_label_name(k) || k.starts_with("__") {
                return Err(format!("{k:?} is not a label name"));
            }
            if k == "severity" {
                return Err(
                    "severity is each alert's own; change one alert's in its routing instead"
                        .to_owned(),
                );
            }
            if v.contains(['\n', '"', '\\']) {
                return Err(format!(
                    "label {k}'s value {v:?} holds a quote or a line break"
                ));
            }
        }
        Ok(())
    }

    /// The threshold's value: the tuned one, else the shipped default.
    pub(super) fn threshold(&self, t: &Threshold) -> String {
        self.thresholds
            .get(&t.key())
            .cloned()
            .unwrap_or_else(|| t.default.clone())
    }

    /// `rules` (the generated rules file) with the disabled alerts left out (and any group left
    /// without rules), the pending durations replaced and the labels added. The file's layout is
    /// the generator's: an alert is `      - alert: NAME` and everything indented under it.
    pub(super) fn apply(&self, rules: &str) -> String {
        let lines: Vec<&str> = rules.lines().collect();
        let mut out: Vec<String> = Vec::with_capacity(lines.len());
        let mut i = 0;
        while i < lines.len() {
            let Some(name) = lines[i].strip_prefix("      - alert: ") else {
                out.push(lines[i].to_owned());
                if let Some(d) = &self.interval
                    && lines[i].starts_with("  - name: ")
                {
                    out.push(format!("    interval: {d}"));
                }
                i += 1;
                continue;
            };
            let end = (i + 1..lines.len())
                .find(|&j| indent(lines[j]).is_some_and(|n| n <= 6))
                .unwrap_or(lines.len());
            if !self.disabled.contains(name.trim()) {
                out.extend(self.alert_block(name.trim(), &lines[i..end]));
            }
            i = end;
        }
        let mut text = drop_empty_groups(&out).join("\n");
        text.push('\n');
        text
    }

    /// One alert's lines, tuned.
    fn alert_block(&self, name: &str, block: &[&str]) -> Vec<String> {
        let mut out = Vec::with_capacity(block.len() + self.labels.len());
        let own: BTreeSet<&str> = block
            .iter()
            .filter_map(|l| l.strip_prefix("          "))
            .filter(|l| !l.starts_with(' '))
            .filter_map(|l| l.split_once(':').map(|(k, _)| k))
            .collect();
        for line in block {
            match (line.strip_prefix("        for: "), self.pending.get(name)) {
                (Some(_), Some(d)) => out.push(format!("        for: {d}")),
                _ => out.push((*line).to_owned()),
            }
            if *line == "        labels:" {
                for (k, v) in &self.labels {
                    if !own.contains(k.as_str()) {
                        out.push(format!("          {k}: \"{v}\""));
                    }
                }
            }
        }
        if let Some(d) = self.pending.get(name)
            && !block.iter().any(|l| l.starts_with("        for: "))
        {
            let at = out
                .iter()
                .position(|l| l == "        labels:" || l == "        annotations:")
                .unwrap_or(out.len());
            out.insert(at, format!("        for: {d}"));
        }
        out
    }
}

/// The alert names of a rules file.
pub fn alert_names(rules: &str) -> BTreeSet<&str> {
    rules
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("- alert: "))
        .map(str::trim)
        .collect()
}

/// Leading spaces of a line that holds anything, `None` for a blank one.
fn indent(line: &str) -> Option<usize> {
    let n = line.len() - line.trim_start().len();
    (!line.trim().is_empty()).then_some(n)
}

/// The lines without any group (`  - name:` at two spaces) that holds no rule (`      - `).
fn drop_empty_groups(lines: &[String]) -> Vec<String> {
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("  - name: "))
        .map(|(i, _)| i)
        .collect();
    let mut keep = vec![true; lines.len()];
    for (k, &s) in starts.iter().enumerate() {
        // The next group's own comment lines sit just above it: they are not this group's.
        let mut end = starts.get(k + 1).copied().unwrap_or(lines.len());
        while end > s + 1 && lines[end - 1].starts_with("  #") {
            end -= 1;
        }
        if !lines[s..end].iter().any(|l| l.starts_with("      - ")) {
            let mut first = s;
            while first > 0 && lines[first - 1].starts_with("  #") {
                first -= 1;
            }
            keep[first..end].iter_mut().for_each(|k| *k = false);
        }
    }
    lines
        .iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(l, _)| l.clone())
        .collect()
}

fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One number and one unit, as a pending duration is written: `30s`, `10m`, `1h`.
fn is_prom_duration(s: &str) -> bool {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && matches!(&s[digits..], "ms" | "s" | "m" | "h" | "d" | "w")
}

/// `KEY=VALUE` of a flag.
pub fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: &str = "groups:
  - name: a
    rules:
      - record: x
        expr: y
  # The alerts.
  - name: b
    rules:
      - alert: One
        # A comment.
        expr: |
          z > 0.2
        for: 10m
        labels:
          severity: warning
        annotations:
          summary: s
      - alert: Two
        expr: w
        labels:
          severity: critical
          team: core
";

    #[test]
    fn markers_are_listed_once_and_replaced_everywhere() {
        let t = "a @@threshold:One.ratio=0.2@@ b {{ @@threshold:One.ratio=0.2@@ | humanizePercentage }} @@threshold:Two.n=20@@";
        let found = thresholds_of(t);
        assert_eq!(
            found.iter().map(Threshold::key).collect::<Vec<_>>(),
            ["One.ratio", "Two.n"]
        );
        let tuning = Tuning {
            thresholds: [("One.ratio".to_owned(), "0.3".to_owned())].into(),
            ..Tuning::default()
        };
        assert_eq!(
            replace_thresholds(t, |t| tuning.threshold(t)),
            "a 0.3 b {{ 0.3 | humanizePercentage }} 20"
        );
        assert_eq!(
            replace_thresholds(t, chart_marker),
            "a ((threshold:One.ratio=0.2)) b {{ ((threshold:One.ratio=0.2)) | humanizePercentage }} ((threshold:Two.n=20))"
        );
    }

    #[test]
    fn an_empty_tuning_changes_nothing() {
        assert_eq!(Tuning::default().apply(RULES), RULES);
    }

    #[test]
    fn labels_pending_and_disabling_land_in_the_alerts_only() {
        let tuning = Tuning {
            labels: [
                ("team".to_owned(), "rag".to_owned()),
                ("cluster_route".to_owned(), "eu".to_owned()),
            ]
            .into(),
            pending: [("Two".to_owned(), "30m".to_owned())].into(),
            ..Tuning::default()
        };
        let out = tuning.apply(RULES);
        assert!(out.contains("        for: 10m\n        labels:\n          cluster_route: \"eu\"\n          team: \"rag\"\n          severity: warning\n"), "{out}");
        // Two keeps its own team label and gets a for: before its labels.
        assert!(out.contains("      - alert: Two\n        expr: w\n        for: 30m\n        labels:\n          cluster_route: \"eu\"\n          severity: critical\n          team: core\n"), "{out}");
        assert!(out.contains("      - record: x\n        expr: y\n  # The alerts."));
    }

    #[test]
    fn the_interval_lands_on_every_group() {
        let tuning = Tuning {
            interval: Some("1m".to_owned()),
            ..Tuning::default()
        };
        let out = tuning.apply(RULES);
        assert_eq!(
            out.matches("\n    interval: 1m\n    rules:\n").count(),
            2,
            "{out}"
        );
        let bad = Tuning {
            interval: Some("1 minute".to_owned()),
            ..Tuning::default()
        };
        assert!(bad.validate(RULES, &[]).is_err());
    }

    #[test]
    fn a_group_left_without_rules_goes_with_its_comment() {
        let tuning = Tuning {
            disabled: ["One".to_owned(), "Two".to_owned()].into(),
            ..Tuning::default()
        };
        assert_eq!(
            tuning.apply(RULES),
            "groups:\n  - name: a\n    rules:\n      - record: x\n        expr: y\n"
        );
        let one = Tuning {
            disabled: ["One".to_owned()].into(),
            ..Tuning::default()
        };
        let out = one.apply(RULES);
        assert!(!out.contains("One") && !out.contains("A comment") && out.contains("alert: Two"));
    }

    #[test]
    fn unknown_names_and_bad_values_are_refused_with_what_exists() {
        let ts = thresholds_of("@@threshold:One.ratio=0.2@@");
        let bad = |t: Tuning| t.validate(RULES, &ts).unwrap_err();
        let e = bad(Tuning {
            disabled: ["Three".to_owned()].into(),
            ..Tuning::default()
        });
        assert!(
            e.contains("no alert Three") && e.contains("One, Two"),
            "{e}"
        );
        let e = bad(Tuning {
            thresholds: [("One.n".to_owned(), "1".to_owned())].into(),
            ..Tuning::default()
        });
        assert!(e.contains("One.ratio"), "{e}");
        for v in ["NaN", "inf", "x"] {
            bad(Tuning {
                thresholds: [("One.ratio".to_owned(), v.to_owned())].into(),
                ..Tuning::default()
            });
        }
        for d in ["10", "5 m", "1h30m", ""] {
            bad(Tuning {
                pending: [("One".to_owned(), d.to_owned())].into(),
                ..Tuning::default()
            });
        }
        for l in ["severity", "1team", "__x", "a-b"] {
            bad(Tuning {
                labels: [(l.to_owned(), "v".to_owned())].into(),
                ..Tuning::default()
            });
        }
        Tuning {
            labels: [("team".to_owned(), "rag".to_owned())].into(),
            pending: [("One".to_owned(), "30m".to_owned())].into(),
            thresholds: [("One.ratio".to_owned(), "0.25".to_owned())].into(),
            disabled: ["Two".to_owned()].into(),
            interval: Some("30s".to_owned()),
        }
        .validate(RULES, &ts)
        .unwrap();
    }
}
