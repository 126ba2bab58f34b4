//! Diagnosis: which stage of the RAG pipeline to look at first, from which metrics are below their
//! floor in a stratum.

use crate::dimensions::Quality;

/// The `stage` label values of `ragwatch_diagnosis`.
pub const STAGES: [&str; 3] = ["retrieval", "generation", "prompt"];

/// Which stage to look at, from which metrics have a drift rule firing (only metrics with enough
/// samples are in `low`): contexts irrelevant to the question point at retrieval; relevant contexts with an
/// unfaithful answer point at generation; both fine with an off-topic answer points at the prompt.
pub fn diagnose(low: &[(Quality, bool)]) -> Option<&'static str> {
    let state = |m: Quality| low.iter().find(|(x, _)| *x == m).map(|(_, below)| *below);
    let retrieval_ok = state(Quality::ContextRelevance) != Some(true);
    if state(Quality::ContextRelevance) == Some(true) {
        Some("retrieval")
    } else if retrieval_ok && state(Quality::Faithfulness) == Some(true) {
        Some("generation")
    } else if retrieval_ok
        && state(Quality::Faithfulness) == Some(false)
        && state(Quality::AnswerRelevancy) == Some(true)
    {
        Some("prompt")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Quality::*;

    #[test]
    fn diagnosis_blames_the_first_failing_stage() {
        assert_eq!(
            diagnose(&[(ContextRelevance, true), (Faithfulness, true)]),
            Some("retrieval")
        );
        assert_eq!(
            diagnose(&[(ContextRelevance, false), (Faithfulness, true)]),
            Some("generation")
        );
        assert_eq!(
            diagnose(&[
                (ContextRelevance, false),
                (Faithfulness, false),
                (AnswerRelevancy, true)
            ]),
            Some("prompt")
        );
        assert_eq!(
            diagnose(&[
                (ContextRelevance, false),
                (Faithfulness, false),
                (AnswerRelevancy, false)
            ]),
            None
        );
        // Too few samples of faithfulness: no claim about the prompt.
        assert_eq!(diagnose(&[(AnswerRelevancy, true)]), None);
        assert_eq!(diagnose(&[]), None);
    }
}
