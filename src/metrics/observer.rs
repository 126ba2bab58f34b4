//! The LLM judge's reports ([`LlmObserver`]), turned into the counters and gauges of the judge,
//! budget, source and identity families.

use super::Metrics;
use crate::judge::llm::config::StructuredOutput;
use crate::judge::llm::{CHAIN, IdentitySeries, LlmObserver, Usage, mode_name};

/// The LLM judge's reports, as counters and gauges.
impl LlmObserver for Metrics {
    fn redacted(&self, pattern: &str, matches: u64) {
        self.judge
            .redactions
            .with_label_values(&[pattern])
            .inc_by(matches);
    }

    fn spent(&self, usage: &Usage, retries: &[&'static str]) {
        self.judge
            .tokens
            .with_label_values(&["llm", "prompt"])
            .inc_by(usage.prompt_tokens);
        self.judge
            .tokens
            .with_label_values(&["llm", "completion"])
            .inc_by(usage.completion_tokens);
        for reason in retries {
            self.judge.retries.with_label_values(&["llm", reason]).inc();
        }
    }

    fn part_failed(&self, part: &'static str, reason: &'static str) {
        self.judge
            .part_failures
            .with_label_values(&["llm", part, reason])
            .inc();
    }

    fn budget_left(&self, tokens: f64) {
        self.budget.remaining.set(tokens);
    }

    fn record_not_published(&self) {
        self.kafka
            .errors
            .with_label_values(&["records_produce"])
            .inc();
    }

    fn structured_output(&self, mode: StructuredOutput) {
        for m in CHAIN {
            self.judge
                .structured_output
                .with_label_values(&[mode_name(m)])
                .set(i64::from(m == mode));
        }
    }

    fn hide_identity(&self, identity: &str) -> Vec<IdentitySeries> {
        use prometheus::core::Collector;
        let mut found = Vec::new();
        for family in self.identity.judge_info.collect() {
            for m in family.get_metric() {
                let label = |name: &str| {
                    m.get_label()
                        .iter()
                        .find(|l| l.name() == name)
                        .map(|l| l.value().to_owned())
                        .unwrap_or_default()
                };
                let series = IdentitySeries {
                    model: label("model"),
                };
                if series.model.contains(identity) {
                    found.push(series);
                }
            }
        }
        for series in &found {
            let _ = self
                .identity
                .judge_info
                .remove_label_values(&[&series.model]);
        }
        found
    }

    fn show_identity(&self, series: &IdentitySeries) {
        self.identity
            .judge_info
            .with_label_values(&[&series.model])
            .set(1);
    }

    fn canary_agreement(&self, agreement: f64) {
        self.judge.canary_agreement.set(agreement);
        // The first run registers the series; later ones find it there.
        let _ = self
            .registry
            .register(Box::new(self.judge.canary_agreement.clone()));
    }
}
