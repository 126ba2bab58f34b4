//! The drop scan's recording rules: the combined estimate over each look-back window of
//! [`crate::window::scan`], against the reference (the baseline before the longest look-back, one
//! for every window), and the largest log-likelihood ratio of a drop, per (metric, stratum). The arithmetic is [`crate::window::scan::llr`]'s;
//! the rules' unit tests hold the two together.

use super::window::{Windows, prom_duration, sum_range};
use crate::window::scan::{self, DROP_MULTIPLES};

/// The vector matching of one window's series.
const ON: &str = "on (@@pool@@, metric, stratum, window)";

/// The `window` label of a look-back window: `1m`, `160m`, `20s`.
pub(crate) fn window_label(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 && secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        prom_duration(d)
    }
}

/// The `drop` label of a drop size: `1x` is `max_drop`.
fn drop_label(multiple: f64) -> String {
    format!("{multiple}x")
}

/// Appends one recording rule, with a fixed label when given.
fn push(out: &mut String, name: &str, expr: &str, label: Option<(&str, String)>) {
    out.push_str(&format!("      - record: {name}\n        expr: |\n"));
    for line in expr.trim().lines() {
        out.push_str(&format!("          {line}\n"));
    }
    if let Some((key, value)) = label {
        out.push_str(&format!("        labels:\n          {key}: \"{value}\"\n"));
    }
}

/// The records, in the order Prometheus must evaluate them (within the `ragwatch.estimate` group,
/// after the baseline's records).
pub(super) fn records(windows: &Windows) -> String {
    let looks = scan::windows(windows.short, windows.baseline);
    let horizon = looks.last().map(|w| window_label(*w));
    let mut out = format!(
        "      # The drop scan (src/window/scan.rs): for each look-back window, the combined estimate with the\n      # reference's lambda against the reference, and the log-likelihood ratio of a drop of 1, 2 and 4\n      # times max_drop against no change. Its largest value pages. The reference is the last {baseline}\n      # without the last {horizon} (the longest look-back), the same for every window: a drop younger than\n      # {horizon} is in no reference. With less history than {baseline}, the reference is what Prometheus\n      # holds before the last {horizon}: none at first (no window qualifies, the scan is silent), then a\n      # growing one, its variance weighed; a window is compared only with a reference holding at least\n      # min_samples pairs and at least as many as the window.\n",
        baseline = prom_duration(windows.baseline),
        horizon = horizon.as_deref().unwrap_or("window"),
    );
    macro_rules! record {
        ($name:expr, $expr:expr $(,)?) => {
            push(&mut out, $name, $expr, None)
        };
    }
    for &w in &looks {
        push(
            &mut out,
            "ragwatch:scan_terms:increase",
            &format!(
                "sum by (@@pool@@, metric, stratum, term) (sum_over_time(ragwatch:estimate_terms_total:delta[{}]))",
                sum_range(w),
            ),
            Some(("window", window_label(w))),
        );
    }
    // The reference, written once for each window (its `window` label) so that every rule below
    // matches a window's series with its reference's one to one.
    let reference = match &horizon {
        Some(h) => format!(
            "(\n  ragwatch:estimate_terms:increase24h\n    - on (@@pool@@, metric, stratum, term) ragwatch:scan_terms:increase{{window=\"{h}\"}}\n)\n+ on (@@pool@@, metric, stratum, term) group_right () (0 * ragwatch:scan_terms:increase)"
        ),
        None => "ragwatch:estimate_terms:increase24h + on (@@pool@@, metric, stratum, term) group_right () (0 * ragwatch:scan_terms:increase)".to_owned(),
    };
    record!("ragwatch:scan_terms:rest", &reference);
    let t = |part: &str, term: &str| format!("ragwatch:scan_terms:{part}{{term=\"{term}\"}}");
    let rest = |term: &str| t("rest", term);
    let inc = |term: &str| t("increase", term);
    let ratio = |num: String, den: String| format!("{num} / {ON} ({den} > 0)");
    // The reference: Yh, Fh, the mean offline score, Saa, Sbb, Sab, lambda, the mean and its
    // variance, as ragwatch:estimate:*_24h computes them for the baseline.
    record!("ragwatch:scan:rest_yhat", &ratio(rest("wy"), rest("w")));
    record!("ragwatch:scan:rest_fhat", &ratio(rest("wf"), rest("w")));
    record!("ragwatch:scan:rest_fbar", &ratio(rest("f"), rest("n")));
    for (name, a, b, ta, tb) in [
        ("saa", "yhat", "yhat", "y", "y"),
        ("sbb", "fhat", "fhat", "f", "f"),
        ("sab", "yhat", "fhat", "y", "f"),
    ] {
        let cross = |m: &str, term: &str| {
            format!(
                "{ON} (ragwatch:scan:rest_{m} * {ON} {})",
                rest(&format!("c{term}"))
            )
        };
        record!(
            &format!("ragwatch:scan:rest_{name}"),
            &format!(
                "{}\n  - {}\n  - {}\n  + {ON} (ragwatch:scan:rest_{a} * {ON} ragwatch:scan:rest_{b} * {ON} {})",
                rest(&format!("c{ta}{tb}")),
                cross(a, tb),
                cross(b, ta),
                rest("c"),
            ),
        );
    }
    record!(
        "ragwatch:scan:rest_lambda",
        &format!(
            "(\n  clamp(ragwatch:scan:rest_sab / {ON} (ragwatch:scan:rest_sbb > 0), 0, {max})\n    and {ON} ({kr} >= {min})\n)\nor {ON} (0 * ragwatch:scan:rest_yhat)",
            max = crate::window::estimate::LAMBDA_MAX,
            kr = rest("kr"),
            min = crate::window::estimate::MIN_PAIRS_FOR_TUNING,
        ),
    );
    let theta = |part: &str, lambda: &str| {
        format!(
            "clamp(\n  (\n    ragwatch:scan:{part}_yhat\n      + {ON} ({lambda} * {ON} (ragwatch:scan:{part}_fbar - {ON} ragwatch:scan:{part}_fhat))\n  )\n  or {ON} ragwatch:scan:{part}_yhat,\n  0, 1\n)"
        )
    };
    record!(
        "ragwatch:scan:rest_mean",
        &theta("rest", "ragwatch:scan:rest_lambda")
    );
    record!(
        "ragwatch:scan:rest_variance",
        &format!(
            "clamp_min(\n  (\n    ragwatch:scan:rest_saa\n      - {ON} (2 * ragwatch:scan:rest_lambda * {ON} ragwatch:scan:rest_sab)\n      + {ON} (ragwatch:scan:rest_lambda ^ 2 * {ON} ragwatch:scan:rest_sbb)\n  )\n  or {ON} ragwatch:scan:rest_saa,\n  0\n)\n/ {ON} ({} ^ 2 > 0)",
            rest("w")
        ),
    );
    // The window: its estimate with the rest's lambda (cross-fitted).
    record!("ragwatch:scan:window_yhat", &ratio(inc("wy"), inc("w")));
    record!("ragwatch:scan:window_fhat", &ratio(inc("wf"), inc("w")));
    record!("ragwatch:scan:window_fbar", &ratio(inc("f"), inc("n")));
    record!(
        "ragwatch:scan:window_mean",
        &theta("window", "ragwatch:scan:rest_lambda"),
    );
    // The window's variance is the reference's scaled by their judged pairs, plus the
    // reference's own; the window and its reference each hold at least min_samples pairs, the
    // reference at least the window's.
    record!(
        "ragwatch:scan:variance",
        &format!(
            "ragwatch:scan:rest_variance * {ON} ({k_rest} / {ON} ({k} > 0) + 1)\n  and {ON} ({k} >= on (@@pool@@, metric, stratum) group_left () ragwatch:threshold_min_samples:count{{judge=\"combined\"}})\n  and {ON} ({k_rest} >= on (@@pool@@, metric, stratum) group_left () ragwatch:threshold_min_samples:count{{judge=\"combined\"}})\n  and {ON} ({k_rest} >= {ON} {k})",
            k_rest = rest("k"),
            k = inc("k"),
        ),
    );
    let max_drop = "max by (@@pool@@, metric, stratum) (ragwatch:threshold_max_drop:ratio{judge=\"combined\"})";
    for m in DROP_MULTIPLES {
        push(
            &mut out,
            "ragwatch:scan:llr",
            &format!(
                "(\n  (ragwatch:scan:rest_mean - {ON} ragwatch:scan:window_mean)\n    * on (@@pool@@, metric, stratum) group_left () ({m} * {max_drop})\n    - on (@@pool@@, metric, stratum) group_left () (({m} * {max_drop}) ^ 2 / 2)\n)\n/ {ON} (ragwatch:scan:variance > 0)",
            ),
            Some(("drop", drop_label(m))),
        );
    }
    record!(
        "ragwatch:estimate:scan_llr",
        "max by (@@pool@@, metric, stratum) (ragwatch:scan:llr)",
    );
    out
}
