//! The rules' promtool unit tests: the template's tests of the fixed groups, for every
//! per-metric alert a test that it fires where it should (with its exact labels and annotations)
//! and stays quiet where it must: too few samples, a wide interval, a healthy stratum, and an
//! out-of-scope stratum for the metrics that leave those out; the variant comparison's tests,
//! whose input series are written out here from each arm's sums; and the tests of the
//! `ragwatch.changes` and `ragwatch.review` groups and of ragwatch's own operations
//! (`templates/tests/changes.yaml`, `review.yaml`, `operations.yaml`, as written).

use super::alert::{Alert, AlertKind, RUNBOOK_URL, title, words};
use super::template::fill;
use crate::dimensions::Quality;

mod drift;

const TEMPLATE: &str = include_str!("templates/rules_test.yaml");
const FLOOR: &str = include_str!("templates/tests/floor.yaml");
const DRIFT: &str = include_str!("templates/tests/drift.yaml");
const SHIFT: &str = include_str!("templates/tests/shift.yaml");
const COMPARISON: &str = include_str!("templates/tests/comparison.yaml");
const CHANGES: &str = include_str!("templates/tests/changes.yaml");
const REVIEW: &str = include_str!("templates/tests/review.yaml");
const FEEDBACK: &str = include_str!("templates/tests/feedback.yaml");
const OPERATIONS: &str = include_str!("templates/tests/operations.yaml");

/// `deploy/prometheus/rules_test.yaml`.
pub(super) fn rule_tests() -> String {
    let tests: Vec<String> = Quality::ALL
        .into_iter()
        .flat_map(Alert::of_metric)
        .map(|a| test(&a))
        .collect();
    fill(
        TEMPLATE,
        &[
            ("metric_tests", tests.join("\n")),
            ("comparison_tests", comparison_tests()),
            ("changes_tests", CHANGES.to_owned()),
            ("review_tests", REVIEW.to_owned()),
            ("feedback_tests", FEEDBACK.to_owned()),
            ("operations_tests", OPERATIONS.to_owned()),
        ],
    )
}

/// One alert's test: its template with the alerts it must raise.
fn test(alert: &Alert) -> String {
    let m = alert.metric;
    let a = &m.spec().alerts;
    // The out-of-scope stratum fires only for a metric that keeps out-of-scope strata.
    let fires_out_of_scope = !a.in_scope_only;
    let mut extra = Vec::new();
    let (template, expected) = match alert.kind {
        AlertKind::BelowFloor => {
            let description = |stratum: &str, diagnosis: &str| {
                format!(
                    "Over the last 5 minutes, the combined estimate of {} in stratum {stratum} is 40% (interval 37% to 43%, 60 LLM-judged traces): even its upper bound is below the floor of 70%; {}.{diagnosis}",
                    words(m),
                    a.meaning
                )
            };
            let summary =
                |stratum: &str| format!("{} of stratum {stratum} is below its floor", title(m));
            let mut expected = vec![exp_alert(
                alert,
                "tail",
                "combined",
                &summary("tail"),
                &description("tail", " Diagnosis: look at generation."),
            )];
            if fires_out_of_scope {
                expected.push(exp_alert(
                    alert,
                    "chitchat",
                    "combined",
                    &summary("chitchat"),
                    &description("chitchat", ""),
                ));
            }
            (FLOOR, expected)
        }
        AlertKind::Drift => {
            let (vars, description) = drift::vars(m, |window, mean, reference, llr| {
                format!(
                    "The combined estimate of {} in stratum head over the last {window} is {}, against {} over its 24h baseline before the last 160m: the evidence of a drop (log-likelihood ratio {llr:.1}, paging at 15.0) is beyond what a healthy stratum shows once a year.",
                    words(m),
                    drift::humanize_percentage(mean),
                    drift::humanize_percentage(reference),
                )
            });
            extra = vars;
            (
                DRIFT,
                vec![exp_alert(
                    alert,
                    "head",
                    "combined",
                    &format!("{} of stratum head dropped from its 24h baseline", title(m)),
                    &description,
                )],
            )
        }
        AlertKind::Shift => {
            let exp = |stratum: &str| {
                exp_alert(
                    alert,
                    stratum,
                    "offline",
                    &format!(
                        "The offline judge's {} of stratum {stratum} shifted down from its baseline",
                        words(m)
                    ),
                    &format!(
                        "The offline judge's 5-minute mean {} in stratum {stratum} is 0.530 against 0.620 over the rest of the last 24 hours: z = 7.7, 0.44 baseline standard deviations lower (scores on that judge's own scale).",
                        words(m)
                    ),
                )
            };
            let mut expected = vec![exp("tail")];
            if fires_out_of_scope {
                expected.insert(0, exp("chitchat"));
            }
            (SHIFT, expected)
        }
    };
    let scope_title = if a.in_scope_only {
        "; out-of-scope strata left out"
    } else {
        "; out-of-scope strata included"
    };
    let mut vars = vec![
        ("alert", alert.name()),
        ("metric", m.name().to_owned()),
        ("camel", super::alert::camel(m)),
        ("histogram", m.spec().histogram.to_owned()),
        ("scope_title", scope_title.to_owned()),
        ("exp_alerts", expected.join("\n")),
    ];
    vars.extend(extra);
    fill(template, &vars)
}

/// An `exp_alerts` entry.
fn exp_alert(
    alert: &Alert,
    stratum: &str,
    judge: &str,
    summary: &str,
    description: &str,
) -> String {
    let stage = alert
        .metric
        .spec()
        .alerts
        .stage
        .map(|s| format!("\n              stage: {s}"))
        .unwrap_or_default();
    format!(
        "          - exp_labels:\n              severity: {severity}\n              metric: {metric}{stage}\n              stratum: {stratum}\n              judge: {judge}\n            exp_annotations:\n              summary: \"{summary}\"\n              description: \"{description}\"\n              runbook_url: \"{RUNBOOK_URL}#{anchor}\"",
        severity = alert.severity(),
        metric = alert.metric.name(),
        anchor = alert.anchor(),
    )
}

/// One replica's sums of one arm of a comparison, as ragwatch exports them.
struct Arm {
    pod: &'static str,
    stratum: &'static str,
    variant: &'static str,
    arm: &'static str,
    metric: &'static str,
    judge_model: &'static str,
    /// n, w, wy, ww, wwy, wwyy.
    sums: [f64; 6],
}

/// One replica's traffic of one arm: traces arrived and the judged weight.
struct Traffic {
    pod: &'static str,
    stratum: &'static str,
    variant: &'static str,
    arm: &'static str,
    arrived: f64,
    judged_weight: f64,
}

/// The sums of `n` judged scores, `ones` of them 1 and the others 0, each of weight `w`.
fn ones(n: f64, ones: f64, w: f64) -> [f64; 6] {
    [n, n * w, ones * w, n * w * w, ones * w * w, ones * w * w]
}

/// The sums of `n` judged scores of `y`, each of weight 1.
fn same(n: f64, y: f64) -> [f64; 6] {
    [n, n, n * y, n, n * y, n * y * y]
}

const NONE: [f64; 6] = [0.0; 6];

/// A gauge's input series, constant for the test's ten minutes.
fn gauge(name: &str, labels: &str, value: f64) -> String {
    format!(
        "      - series: '{name}{{namespace=\"rag\",job=\"rw\",{labels}}}'\n        values: '{value}x10'\n"
    )
}

/// Every series of a comparison test: each replica's config (margin 0.05, min_judged 30, the
/// candidates' declared shares), arms and traffic.
fn comparison_series(shares: &[(&str, f64)], arms: &[Arm], traffic: &[Traffic]) -> String {
    let mut out = String::new();
    for pod in ["a", "b"] {
        let p = format!("pod=\"{pod}\"");
        out.push_str(&gauge("ragwatch_comparison_margin_ratio", &p, 0.05));
        out.push_str(&gauge("ragwatch_comparison_min_judged", &p, 30.0));
        out.push_str(&gauge("ragwatch_comparison_deadline_seconds", &p, 7200.0));
        for (variant, share) in shares {
            let labels = format!("{p},variant=\"{variant}\"");
            out.push_str(&gauge(
                "ragwatch_comparison_expected_share_ratio",
                &labels,
                *share,
            ));
        }
    }
    for a in arms {
        for (term, value) in ["n", "w", "wy", "ww", "wwy", "wwyy"].iter().zip(a.sums) {
            let labels = format!(
                "pod=\"{}\",stratum=\"{}\",variant=\"{}\",arm=\"{}\",metric=\"{}\",judge=\"llm\",judge_model=\"{}\",term=\"{term}\"",
                a.pod, a.stratum, a.variant, a.arm, a.metric, a.judge_model
            );
            out.push_str(&gauge("ragwatch_comparison_terms", &labels, value));
        }
    }
    for t in traffic {
        for (state, value) in [("arrived", t.arrived), ("judged_weight", t.judged_weight)] {
            let labels = format!(
                "pod=\"{}\",stratum=\"{}\",variant=\"{}\",arm=\"{}\",state=\"{state}\"",
                t.pod, t.stratum, t.variant, t.arm
            );
            out.push_str(&gauge("ragwatch_comparison_traces", &labels, value));
        }
    }
    out.trim_end_matches('\n').to_owned()
}

fn arm(
    pod: &'static str,
    stratum: &'static str,
    variant: &'static str,
    arm: &'static str,
    metric: &'static str,
    judge_model: &'static str,
    sums: [f64; 6],
) -> Arm {
    Arm {
        pod,
        stratum,
        variant,
        arm,
        metric,
        judge_model,
        sums,
    }
}

/// Traffic whose judged weight is what arrived (coverage 1), or `judged_weight` when given.
fn traffic(
    pod: &'static str,
    stratum: &'static str,
    variant: &'static str,
    arm: &'static str,
    arrived: f64,
    judged_weight: Option<f64>,
) -> Traffic {
    Traffic {
        pod,
        stratum,
        variant,
        arm,
        arrived,
        judged_weight: judged_weight.unwrap_or(arrived),
    }
}

/// The first test's faithfulness arms of `variant` (head worse, tail undecided), pod b judged by
/// `model_b`.
fn worse_faithfulness(variant: &'static str, model_b: &'static str, tail: bool) -> Vec<Arm> {
    let f = Quality::GATED.name();
    let mut arms = vec![
        arm(
            "a",
            "head",
            variant,
            "candidate",
            f,
            "m1",
            ones(300.0, 150.0, 1.0),
        ),
        arm(
            "b",
            "head",
            variant,
            "candidate",
            f,
            model_b,
            ones(200.0, 100.0, 2.0),
        ),
        arm(
            "a",
            "head",
            variant,
            "baseline",
            f,
            "m1",
            ones(500.0, 450.0, 1.0),
        ),
        arm(
            "b",
            "head",
            variant,
            "baseline",
            f,
            model_b,
            ones(500.0, 450.0, 1.0),
        ),
    ];
    if tail {
        arms.extend([
            arm(
                "a",
                "tail",
                variant,
                "candidate",
                f,
                "m1",
                ones(200.0, 150.0, 1.0),
            ),
            arm("b", "tail", variant, "candidate", f, model_b, NONE),
            arm("a", "tail", variant, "baseline", f, "m1", NONE),
            arm(
                "b",
                "tail",
                variant,
                "baseline",
                f,
                model_b,
                ones(400.0, 340.0, 1.0),
            ),
        ]);
    }
    arms
}

/// The comparison's tests.
fn comparison_tests() -> String {
    let f = Quality::GATED.name();
    // Another metric than the gated one, whose arms are not worse.
    let r = Quality::ALL
        .into_iter()
        .find(|q| *q != Quality::GATED)
        .expect("more than one metric")
        .name();
    let worse_traffic = |variant| {
        vec![
            traffic("a", "head", variant, "candidate", 300.0, None),
            traffic("b", "head", variant, "candidate", 400.0, None),
            traffic("a", "head", variant, "baseline", 500.0, None),
            traffic("b", "head", variant, "baseline", 500.0, None),
            traffic("a", "tail", variant, "candidate", 200.0, None),
            traffic("b", "tail", variant, "baseline", 400.0, None),
        ]
    };
    let mut worse = worse_faithfulness("canary", "m1", true);
    worse.extend([
        arm(
            "a",
            "head",
            "canary",
            "candidate",
            r,
            "m1",
            same(400.0, 0.9),
        ),
        arm(
            "b",
            "head",
            "canary",
            "baseline",
            r,
            "m1",
            same(400.0, 0.88),
        ),
        arm("a", "tail", "canary", "candidate", r, "m1", NONE),
        arm("a", "tail", "canary", "baseline", r, "m1", NONE),
    ]);
    let quiet = [
        arm(
            "a",
            "head",
            "canary",
            "candidate",
            f,
            "m1",
            same(400.0, 0.88),
        ),
        arm("a", "head", "canary", "baseline", f, "m1", same(400.0, 0.9)),
        arm("a", "head", "thin", "candidate", f, "m1", same(10.0, 0.2)),
        arm("a", "head", "thin", "baseline", f, "m1", same(400.0, 0.9)),
        arm("a", "head", "fresh", "candidate", f, "m1", NONE),
        arm("a", "head", "fresh", "baseline", f, "m1", NONE),
    ];
    let quiet_traffic = [
        traffic("a", "head", "canary", "candidate", 400.0, None),
        traffic("a", "head", "canary", "baseline", 400.0, None),
        traffic("a", "head", "thin", "candidate", 10.0, None),
        traffic("a", "head", "thin", "baseline", 400.0, None),
        traffic("a", "head", "fresh", "candidate", 0.0, None),
        traffic("a", "head", "fresh", "baseline", 0.0, None),
    ];
    let mut mix = worse_faithfulness("canary", "m2", true);
    mix.extend([
        arm(
            "a",
            "head",
            "canary",
            "candidate",
            r,
            "m1",
            same(400.0, 0.9),
        ),
        arm(
            "a",
            "head",
            "canary",
            "baseline",
            r,
            "m1",
            same(400.0, 0.88),
        ),
        arm("b", "head", "canary", "candidate", r, "m2", NONE),
        arm("b", "head", "canary", "baseline", r, "m2", NONE),
    ]);
    let mut mismatch = worse_faithfulness("canary", "m1", false);
    mismatch.extend(worse_faithfulness("skewed", "m1", false));
    mismatch.extend(worse_faithfulness("even", "m1", false));
    let split = |variant, candidate: f64, baseline: f64| {
        [
            traffic("a", "head", variant, "candidate", candidate / 2.0, None),
            traffic("b", "head", variant, "candidate", candidate / 2.0, None),
            traffic("a", "head", variant, "baseline", baseline / 2.0, None),
            traffic("b", "head", variant, "baseline", baseline / 2.0, None),
        ]
    };
    let mut mismatch_traffic: Vec<Traffic> = split("canary", 3000.0, 7000.0).into();
    mismatch_traffic.extend(split("even", 1000.0, 9000.0));
    mismatch_traffic.extend([
        traffic("a", "head", "skewed", "candidate", 250.0, Some(125.0)),
        traffic("b", "head", "skewed", "candidate", 250.0, Some(125.0)),
        traffic("a", "head", "skewed", "baseline", 500.0, None),
        traffic("b", "head", "skewed", "baseline", 500.0, None),
    ]);
    fill(
        COMPARISON,
        &[
            (
                "worse_series",
                comparison_series(&[], &worse, &worse_traffic("canary")),
            ),
            (
                "quiet_series",
                comparison_series(&[], &quiet, &quiet_traffic),
            ),
            (
                "mix_series",
                comparison_series(&[], &mix, &worse_traffic("canary")),
            ),
            (
                "mismatch_series",
                comparison_series(
                    &[("canary", 0.1), ("even", 0.1)],
                    &mismatch,
                    &mismatch_traffic,
                ),
            ),
        ],
    )
}
