//! What the LLM judge reports about its own work. The judge does not hold the metrics (they sit in a
//! layer above it); whoever builds the judge passes an observer, and `metrics::Metrics` is the one
//! `run` and `replay` pass, turning each report into its counters and gauges.

use super::client::Usage;
use crate::judge::llm::config::StructuredOutput;

/// One `ragwatch_judge_info` series: a judge identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentitySeries {
    /// The `model` label.
    pub model: String,
}

/// The LLM judge's reports, one method per fact.
pub trait LlmObserver: Send + Sync + std::fmt::Debug {
    /// Tokens billed by one trace's (or a probe's) calls, and the reason of each retry they made.
    fn spent(&self, usage: &Usage, retries: &[&'static str]);
    /// A part of a verdict (context verdicts, one relevancy question...) was dropped, and why.
    fn part_failed(&self, part: &'static str, reason: &'static str);
    /// Tokens left in the budget.
    fn budget_left(&self, tokens: f64);
    /// A verdict record could not be published to the records topic.
    fn record_not_published(&self);
    /// The structured-output mode now in use.
    fn structured_output(&self, mode: StructuredOutput);
    /// Withdraws the judge-info series naming `identity` (a placeholder while `auto` is settled, so
    /// it is never scraped beside the settled identity); returns them.
    fn hide_identity(&self, identity: &str) -> Vec<IdentitySeries>;
    /// Publishes a judge-info series.
    fn show_identity(&self, series: &IdentitySeries);
    /// The share of canaries the judge got right.
    fn canary_agreement(&self, agreement: f64);
    /// Matches of a redaction pattern replaced in a trace about to be judged.
    fn redacted(&self, pattern: &str, matches: u64);
}

/// An observer that notes nothing: for the judge's own tests, which read the server's side.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct Unobserved;

#[cfg(test)]
impl LlmObserver for Unobserved {
    fn spent(&self, _: &Usage, _: &[&'static str]) {}
    fn part_failed(&self, _: &'static str, _: &'static str) {}
    fn budget_left(&self, _: f64) {}
    fn record_not_published(&self) {}
    fn structured_output(&self, _: StructuredOutput) {}
    fn hide_identity(&self, _: &str) -> Vec<IdentitySeries> {
        Vec::new()
    }
    fn show_identity(&self, _: &IdentitySeries) {}
    fn canary_agreement(&self, _: f64) {}
    fn redacted(&self, _: &str, _: u64) {}
}
