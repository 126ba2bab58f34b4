//! Before the first trace, every counter and histogram series a rule reads exists at zero, for
//! every label value it can take: a series born at its first increment would be first scraped
//! already non-zero, and Prometheus could not count what came before that scrape.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use ragwatch::dimensions::Quality;

use crate::common::{Ragwatch, Samples, repo, wait_for};

/// The raw families (`ragwatch_...`, not recorded `ragwatch:...`) that `rules.yaml` reads.
fn families_read_by_rules() -> BTreeSet<String> {
    let rules = std::fs::read_to_string(repo().join("deploy/prometheus/rules.yaml")).unwrap();
    let mut found = BTreeSet::new();
    let bytes = rules.as_bytes();
    let mut i = 0;
    while let Some(at) = rules[i..].find("ragwatch_") {
        let start = i + at;
        let preceded =
            start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b':');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if !preceded {
            found.insert(rules[start..end].to_owned());
        }
        i = end;
    }
    found
}

/// ragwatch with every family a rule reads turned on (the LLM judge, labels and feedback, declared
/// variants, sources and coverage, review), its consumer pointed at a closed port: running, and no
/// trace ever arrives. Its scrape once the evaluator's first pass exported the thresholds, a
/// second after start.
fn scrape_before_any_trace() -> String {
    // A consumer pointed at a closed port: running, and no trace ever arrives.
    let rw = Ragwatch::start(
        &repo().join("config/llm.toml"),
        &[
            ("RAGWATCH__SOURCE__KIND", "kafka".into()),
            ("RAGWATCH__KAFKA__BROKERS", "127.0.0.1:1".into()),
            ("RAGWATCH__KAFKA__TOPICS", "nothing".into()),
            ("RAGWATCH__KAFKA__GROUP_ID", "nothing".into()),
            ("RAGWATCH__LLM__BASE_URL", "http://127.0.0.1:1/v1".into()),
            ("RAGWATCH_LLM_API_KEY", "unused".into()),
            ("RAGWATCH__LABELS__ENABLED", "true".into()),
            ("RAGWATCH__LABELS__FEEDBACK__ENABLED", "true".into()),
            // Variants on, with a declared share: the comparison's families exist only then.
            (
                "RAGWATCH__VARIANTS__DECLARED",
                "[\"stable\", \"canary\"]".into(),
            ),
            ("RAGWATCH__VARIANTS__BASELINE", "stable".into()),
            ("RAGWATCH__VARIANTS__FIELDS", "[\"/release\"]".into()),
            ("RAGWATCH__VARIANTS__SHARE", "{ canary = 0.1 }".into()),
            // Sources and a coverage level: their what-changed families exist only then.
            ("RAGWATCH__CHANGES__SOURCE__DECLARED", "[\"wiki\"]".into()),
            ("RAGWATCH__CHANGES__SOURCE__ID_PATTERN", "^([^/]+)/".into()),
            ("RAGWATCH__CHANGES__COVERAGE__LEVEL", "0.5".into()),
            ("RAGWATCH__REVIEW__ENABLED", "true".into()),
        ],
    );
    wait_for(
        "the evaluator's first pass",
        Duration::from_secs(10),
        || {
            rw.scrape()
                .filter(|t| t.contains("ragwatch_threshold_ratio{"))
        },
    )
}

/// Family types from the TYPE lines.
fn family_types(text: &str) -> BTreeMap<String, String> {
    let mut types = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_owned(), kind.to_owned());
        }
    }
    types
}

/// The family of a series: itself, or a histogram's name before its suffix.
fn family_of(types: &BTreeMap<String, String>, series: &str) -> Option<String> {
    if types.contains_key(series) {
        return Some(series.to_owned());
    }
    ["_bucket", "_count", "_sum"].iter().find_map(|suffix| {
        let base = series.strip_suffix(suffix)?;
        (types.get(base).map(String::as_str) == Some("histogram")).then(|| base.to_owned())
    })
}

/// The label values every series must carry in full: each stratum (declared, `default`, `other`:
/// the set is bounded, so no stratum appears later), judge, metric, score bucket and estimate term.
struct Wanted {
    strata: BTreeSet<String>,
    judges: BTreeSet<String>,
    metrics: BTreeSet<String>,
    buckets: BTreeSet<String>,
    terms: BTreeSet<String>,
}

impl Wanted {
    fn new() -> Wanted {
        Wanted {
            strata: [
                "head",
                "tail",
                "known_failure",
                "out_of_scope",
                "default",
                "other",
            ]
            .map(String::from)
            .into(),
            // The judges this config runs (config/llm.toml: the offline and the LLM judge).
            judges: ragwatch::judge::config::SampledJudge::Llm
                .verdict_judges()
                .iter()
                .map(|j| j.name().to_owned())
                .collect(),
            metrics: Quality::ALL.iter().map(|m| m.name().to_owned()).collect(),
            buckets: ragwatch::eval::LABEL_SCORE_BOUNDS
                .iter()
                .map(|b| b.to_string())
                .collect(),
            terms: ragwatch::window::EstimateSums::TERMS
                .map(String::from)
                .into(),
        }
    }
}

/// What is wrong with the series `series_name` of `samples`: a value not zero, a combination of
/// its label values missing, a wanted label value missing.
fn problems_of(series_name: &str, samples: &Samples, wanted: &Wanted) -> Vec<String> {
    let mut problems = Vec::new();
    let rows: Vec<&HashMap<String, String>> = samples
        .0
        .iter()
        .filter(|(n, _, _)| *n == series_name)
        .map(|(_, l, _)| l)
        .collect();
    for (n, l, v) in samples.0.iter().filter(|(n, _, _)| *n == series_name) {
        if *v != 0.0 {
            problems.push(format!("{n}{l:?} = {v} before any trace"));
        }
    }
    // Every label's values seen, and every combination of them present.
    let mut values: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for l in &rows {
        for (k, v) in *l {
            values.entry(k.clone()).or_default().insert(v.clone());
        }
    }
    let combinations: usize = values.values().map(BTreeSet::len).product();
    let distinct: BTreeSet<Vec<(&String, &String)>> = rows
        .iter()
        .map(|l| l.iter().collect::<BTreeMap<_, _>>().into_iter().collect())
        .collect();
    if distinct.len() != combinations {
        problems.push(format!(
            "{series_name}: {} series, not every combination of {values:?} ({combinations})",
            distinct.len()
        ));
    }
    let mut expect = |label: &str, want: &BTreeSet<String>| {
        if let Some(have) = values.get(label)
            && !want.is_subset(have)
        {
            problems.push(format!(
                "{series_name}: {label} {have:?}, wants all of {want:?}"
            ));
        }
    };
    expect("stratum", &wanted.strata);
    expect("metric", &wanted.metrics);
    expect("bucket", &wanted.buckets);
    if !series_name.starts_with("ragwatch_judge_") {
        expect("judge", &wanted.judges);
    }
    if series_name == "ragwatch_estimate_terms_total" {
        expect("term", &wanted.terms);
    }
    problems
}

/// Before the first trace, every counter and histogram series a rule reads exists at zero, for
/// every label value it can take: each stratum, judge, metric, estimate term, length term, score
/// bucket and reason.
#[test]
fn every_series_a_rule_reads_exists_at_zero_before_the_first_trace() {
    let text = scrape_before_any_trace();
    let types = family_types(&text);
    let samples = Samples::parse(&text);
    let wanted = Wanted::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for series_name in families_read_by_rules() {
        // A gauge per assigned partition: none while the consumer holds no partition.
        if series_name == "ragwatch_kafka_consumer_lag_messages" {
            continue;
        }
        // The canary agreement: none before the first canary run, rather than a made-up value.
        if series_name == "ragwatch_judge_canary_agreement_ratio" {
            continue;
        }
        let Some(family) = family_of(&types, &series_name) else {
            problems.push(format!(
                "{series_name}: read by a rule, not exported before the first trace"
            ));
            continue;
        };
        if !matches!(types[&family].as_str(), "counter" | "histogram") {
            continue;
        }
        checked += 1;
        problems.extend(problems_of(&series_name, &samples, &wanted));
    }
    assert!(
        checked >= 15,
        "only {checked} counter and histogram families found in the rules"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
