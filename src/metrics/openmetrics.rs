//! The OpenMetrics 1.0 text exposition of the registry's families, with exemplars. Prometheus
//! ingests exemplars only from this format, and asks for it first in its `Accept` header; the
//! Prometheus text format (0.0.4) stays the answer to every other scraper.
//!
//! Every series keeps the name and labels it has in the text format: a counter's family is
//! announced without `_total` and its samples keep it (OpenMetrics's rule; a counter whose name
//! lacks `_total` is written as `unknown` so that its name does not change); histograms write
//! `_bucket`, `_count`, `_sum`. One difference is OpenMetrics's own: `le` values are canonical
//! numbers (`1.0` where the text format writes `1`), as every OpenMetrics exposer writes them;
//! Prometheus 3 normalises both formats to this form.

use std::fmt::Write;

use prometheus::proto::{Metric, MetricFamily, MetricType};

use super::exemplars::{Exemplar, Exemplars, TRACE_ID_LABEL};

/// The `Content-Type` of the exposition.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether an `Accept` header prefers OpenMetrics to the Prometheus text format: it names
/// `application/openmetrics-text` with a q above that of `text/plain` (and of `*/*`).
pub(crate) fn wants_openmetrics(accept: &str) -> bool {
    let mut openmetrics = 0.0f64;
    let mut text = 0.0f64;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f64>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(q),
            "text/plain" | "*/*" | "text/*" => text = text.max(q),
            _ => {}
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

/// Writes `families` in the OpenMetrics text format, ending with `# EOF`, the exemplars of
/// `exemplars` on their histograms' buckets.
pub(crate) fn encode(families: &[MetricFamily], exemplars: &Exemplars, out: &mut String) {
    for mf in families {
        let name = mf.name();
        let (family, kind) = match mf.get_field_type() {
            MetricType::COUNTER => match name.strip_suffix("_total") {
                Some(family) => (family, "counter"),
                None => (name, "unknown"),
            },
            MetricType::GAUGE => (name, "gauge"),
            MetricType::HISTOGRAM => (name, "histogram"),
            MetricType::SUMMARY => (name, "summary"),
            MetricType::UNTYPED => (name, "unknown"),
        };
        if !mf.help().is_empty() {
            let _ = writeln!(out, "# HELP {family} {}", escape(mf.help()));
        }
        let _ = writeln!(out, "# TYPE {family} {kind}");
        for m in mf.get_metric() {
            match mf.get_field_type() {
                MetricType::COUNTER => sample(out, name, m, None, m.get_counter().value()),
                MetricType::GAUGE => sample(out, name, m, None, m.get_gauge().value()),
                MetricType::UNTYPED => sample(out, name, m, None, m.untyped.value()),
                MetricType::HISTOGRAM => histogram(out, name, m, exemplars),
                MetricType::SUMMARY => {
                    let s = m.get_summary();
                    for q in s.get_quantile() {
                        let quantile = canonical(q.quantile());
                        sample(out, name, m, Some(("quantile", &quantile)), q.value());
                    }
                    sample_named(out, name, "_sum", m, None, s.sample_sum());
                    sample_named(out, name, "_count", m, None, s.sample_count() as f64);
                }
            }
        }
    }
    out.push_str("# EOF\n");
}

fn histogram(out: &mut String, name: &str, m: &Metric, exemplars: &Exemplars) {
    let h = m.get_histogram();
    let slots = if exemplars.has_family(name) {
        exemplars.series(name, |l| {
            m.get_label()
                .iter()
                .find(|p| p.name() == l)
                .map(|p| p.value())
        })
    } else {
        Vec::new()
    };
    let mut cumulative = 0;
    let mut i = 0;
    for b in h.get_bucket() {
        if b.upper_bound().is_infinite() {
            continue;
        }
        cumulative = b.cumulative_count();
        let le = canonical(b.upper_bound());
        sample_named(
            out,
            name,
            "_bucket",
            m,
            Some(("le", &le)),
            cumulative as f64,
        );
        exemplar(out, slots.get(i));
        out.push('\n');
        i += 1;
    }
    // A concurrent observation may land between the buckets' and the count's reads: the count
    // never reads below a bucket, as OpenMetrics requires.
    let count = h.get_sample_count().max(cumulative);
    sample_named(out, name, "_bucket", m, Some(("le", "+Inf")), count as f64);
    exemplar(out, slots.get(i));
    out.push('\n');
    sample(out, &format!("{name}_count"), m, None, count as f64);
    sample(out, &format!("{name}_sum"), m, None, h.get_sample_sum());
}

fn exemplar(out: &mut String, slot: Option<&Option<Exemplar>>) {
    if let Some(Some(e)) = slot {
        let _ = write!(
            out,
            " # {{{TRACE_ID_LABEL}=\"{}\"}} {} {}.{:03}",
            escape(&e.trace_id),
            number(e.value),
            e.timestamp_ms / 1000,
            e.timestamp_ms % 1000
        );
    }
}

/// One sample line.
fn sample(out: &mut String, name: &str, m: &Metric, extra: Option<(&str, &str)>, value: f64) {
    sample_named(out, name, "", m, extra, value);
    out.push('\n');
}

/// One sample without its line end (an exemplar may follow).
fn sample_named(
    out: &mut String,
    name: &str,
    suffix: &str,
    m: &Metric,
    extra: Option<(&str, &str)>,
    value: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    let pairs = m.get_label().iter().map(|p| (p.name(), p.value()));
    let mut first = true;
    for (k, v) in pairs.chain(extra) {
        out.push(if first { '{' } else { ',' });
        first = false;
        let _ = write!(out, "{k}=\"{}\"", escape(v));
    }
    if !first {
        out.push('}');
    }
    out.push(' ');
    out.push_str(&number(value));
}

/// OpenMetrics escapes `\`, `"` and line feeds in label values and help text alike.
fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\\', '"', '\n']) {
        return s.into();
    }
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o.into()
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        v.to_string()
    }
}

/// A canonical number for `le` and `quantile`: Python's `repr` of the float with Go's earlier
/// switch to exponents, as OpenMetrics's reference parser checks it (`1.0`, `0.25`, `1e-05`,
/// `1e+06`).
fn canonical(v: f64) -> String {
    if !v.is_finite() {
        return number(v);
    }
    let s = format!("{v:?}");
    if let Some((mantissa, exp)) = s.split_once('e') {
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    match s.find('.') {
        Some(dot) if v > 0.0 && dot > 6 => {
            let digits = format!("{}{}", &s[1..dot], &s[dot + 1..]);
            let mantissa = format!("{}.{digits}", &s[..1]);
            let mantissa = mantissa.trim_end_matches(['0', '.']);
            format!("{mantissa}e+{:02}", dot - 1)
        }
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

    #[test]
    fn canonical_numbers_follow_the_reference_parser() {
        for (v, s) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (0.25, "0.25"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (30.0, "30.0"),
            (123456.0, "123456.0"),
            (1e6, "1e+06"),
            (1.5e6, "1.5e+06"),
            (1e16, "1e+16"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(canonical(v), s, "{v}");
        }
    }

    #[test]
    fn negotiation_follows_the_accept_header() {
        // Prometheus 2.x's default.
        assert!(wants_openmetrics(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(!wants_openmetrics(""));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics("text/plain;version=0.0.4"));
        assert!(!wants_openmetrics(
            "text/plain;version=0.0.4,application/openmetrics-text;q=0.5"
        ));
        assert!(!wants_openmetrics("application/openmetrics-text;q=0"));
    }

    #[test]
    fn counters_histograms_and_exemplars_are_written_as_openmetrics() {
        let r = Registry::new();
        let c = IntCounterVec::new(Opts::new("x_requests_total", "Calls \"quoted\"."), &["k"])
            .expect("valid");
        r.register(Box::new(c.clone())).expect("unique");
        c.with_label_values(&["a\nb"]).inc_by(3);
        let h = HistogramVec::new(
            HistogramOpts::new("x_score_ratio", "Scores.").buckets(vec![0.5, 1.0]),
            &["stratum", "judge"],
        )
        .expect("valid");
        r.register(Box::new(h.clone())).expect("unique");
        let dropped = IntCounterVec::new(Opts::new("d_total", "d"), &["reason"]).expect("valid");
        let mut ex = Exemplars::new(dropped);
        ex.family("x_score_ratio", &["stratum", "judge"], &[0.5, 1.0]);
        h.with_label_values(&["s", "llm"]).observe(0.2);
        ex.record(
            "x_score_ratio",
            &["s", "llm"],
            0.2,
            "t\"1",
            1_700_000_000_123,
        );
        h.with_label_values(&["s", "llm"]).observe(0.7);
        let mut out = String::new();
        encode(&r.gather(), &ex, &mut out);
        assert_eq!(
            out,
            "# HELP x_requests Calls \\\"quoted\\\".\n\
             # TYPE x_requests counter\n\
             x_requests_total{k=\"a\\nb\"} 3\n\
             # HELP x_score_ratio Scores.\n\
             # TYPE x_score_ratio histogram\n\
             x_score_ratio_bucket{judge=\"llm\",stratum=\"s\",le=\"0.5\"} 1 # {trace_id=\"t\\\"1\"} 0.2 1700000000.123\n\
             x_score_ratio_bucket{judge=\"llm\",stratum=\"s\",le=\"1.0\"} 2\n\
             x_score_ratio_bucket{judge=\"llm\",stratum=\"s\",le=\"+Inf\"} 2\n\
             x_score_ratio_count{judge=\"llm\",stratum=\"s\"} 2\n\
             x_score_ratio_sum{judge=\"llm\",stratum=\"s\"} 0.8999999999999999\n\
             # EOF\n"
        );
    }
}
