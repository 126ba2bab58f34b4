//! The plain reference for the offline judge's feature extraction: standard sets and loops over
//! the tokens of each sentence and each context, no streaming, no filters, no reused buffers, the
//! phrases and citations by regular expressions. The property tests hold the fast extractor
//! ([`super::features::extract`]) equal to it, feature for feature, on generated traces, on traces
//! shaped like real RAG answers (about 140 words, lists, names, numbers, copied and invented
//! sentences) and, when the development set is beside the checkout, on every trace of it.

use std::collections::HashSet;

use super::Citations;
use super::citations::reference_citations;
use super::features::{Extraction, Features};
use super::phrases::reference_phrases;
use super::tokenizer::{Token, content_tokens};
use crate::judge::sentences::sentences;
use crate::trace::Trace;

fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    content_tokens(text, &mut out);
    out
}

/// What the offline judge reads off one trace, the plain way.
pub(super) fn reference_extract(trace: &Trace) -> Extraction {
    let contexts: Vec<Vec<Token>> = trace.contexts.iter().map(|c| tokens(&c.text)).collect();
    let mut in_context = HashSet::new();
    let mut prefixes = HashSet::new();
    let mut pairs = HashSet::new();
    let mut triples = HashSet::new();
    for c in &contexts {
        for t in c {
            in_context.insert(t.hash);
            prefixes.insert(t.prefix);
        }
        // Pairs stay within one context.
        for w in c.windows(2) {
            pairs.insert((w[0].hash, w[1].hash));
        }
    }
    // Triples are read over the contexts one after the other (as the fast extractor's stream
    // does, and the committed model was trained with).
    let stream: Vec<&Token> = contexts.iter().flatten().collect();
    for w in stream.windows(3) {
        triples.insert((w[0].hash, w[1].hash, w[2].hash));
    }
    let query = tokens(&trace.query);
    let query_set: HashSet<u64> = query.iter().map(|t| t.hash).collect();
    let answer: Vec<Vec<Token>> = sentences(&trace.answer)
        .into_iter()
        .map(tokens)
        .filter(|s| !s.is_empty())
        .collect();
    let all: Vec<&Token> = answer.iter().flatten().collect();
    let distinct: HashSet<u64> = all.iter().map(|t| t.hash).collect();
    let found = |t: &Token| in_context.contains(&t.hash);
    let novel = |t: &Token| !found(t) && !query_set.contains(&t.hash);
    let share = |part: usize, whole: usize| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64
        }
    };
    let count = |keep: &dyn Fn(&Token) -> bool| all.iter().filter(|t| keep(t)).count();
    let novel_distinct: HashSet<u64> = all.iter().filter(|t| novel(t)).map(|t| t.hash).collect();
    let novel_long: HashSet<u64> = all
        .iter()
        .filter(|t| novel(t) && t.long)
        .map(|t| t.hash)
        .collect();
    let mut f = Features {
        supported_tokens: share(count(&|t| found(t)), all.len()),
        novel_tokens: share(count(&|t| novel(t)), all.len()),
        novel_prefixes: share(count(&|t| !prefixes.contains(&t.prefix)), all.len()),
        novel_distinct: share(novel_distinct.len(), distinct.len()),
        novel_long_words: share(novel_long.len(), distinct.len()),
        novel_numbers: share(count(&|t| t.number && !found(t)), all.len()),
        novel_names: share(count(&|t| t.name && !t.number && !found(t)), all.len()),
        ..Features::default()
    };
    let (mut support_sum, mut novel_sum, mut run_sum) = (0.0, 0.0, 0.0);
    let (mut weak, mut clean) = (0, 0);
    let (mut pair_total, mut pair_found, mut triple_total, mut triple_found) = (0, 0, 0, 0);
    for sentence in &answer {
        let len = sentence.len() as f64;
        let supported = sentence.iter().filter(|t| found(t)).count();
        let novel_here = sentence.iter().filter(|t| novel(t)).count();
        let mut longest = 0;
        let mut run = 0;
        for t in sentence {
            run = if found(t) { 0 } else { run + 1 };
            longest = longest.max(run);
        }
        let support = supported as f64 / len;
        support_sum += support;
        novel_sum += novel_here as f64 / len;
        run_sum += longest as f64 / len;
        weak += usize::from(support < 0.5);
        clean += usize::from(novel_here == 0);
        for w in sentence.windows(2) {
            pair_total += 1;
            pair_found += usize::from(pairs.contains(&(w[0].hash, w[1].hash)));
        }
        for w in sentence.windows(3) {
            triple_total += 1;
            triple_found += usize::from(triples.contains(&(w[0].hash, w[1].hash, w[2].hash)));
        }
    }
    let phrases = reference_phrases(&trace.answer);
    if !answer.is_empty() {
        let n = answer.len() as f64;
        f.mean_support = support_sum / n;
        f.mean_novel = novel_sum / n;
        f.novel_run = run_sum / n;
        f.weak_sentences = weak as f64 / n;
        f.clean_sentences = clean as f64 / n;
        f.hedges = phrases.hedges as f64 / n;
        f.advice = phrases.advice as f64 / n;
    }
    f.pair_support = if pair_total > 0 {
        share(pair_found, pair_total)
    } else {
        f.mean_support
    };
    f.triple_support = if triple_total > 0 {
        share(triple_found, triple_total)
    } else {
        f.pair_support
    };
    f.query_context_overlap = share(query.iter().filter(|t| found(t)).count(), query.len());
    f.query_overlap = share(
        query.iter().filter(|t| distinct.contains(&t.hash)).count(),
        query.len(),
    );
    let citations: Citations = reference_citations(trace);
    f.bad_citations = share(
        (citations.total - citations.valid) as usize,
        citations.total as usize,
    );
    // Context relevance: each context's share of the question's distinct terms, weighted 1/rank.
    let context_relevance = (!query_set.is_empty() && !contexts.is_empty()).then(|| {
        let (mut weighted, mut weights) = (0.0, 0.0);
        for (rank, c) in contexts.iter().enumerate() {
            let here: HashSet<u64> = c.iter().map(|t| t.hash).collect();
            let hits = query_set.iter().filter(|h| here.contains(h)).count();
            let w = 1.0 / (rank + 1) as f64;
            weighted += w * hits as f64 / query_set.len() as f64;
            weights += w;
        }
        weighted / weights
    });
    Extraction {
        features: f,
        citations,
        sentences: answer.len(),
        refusal: all.len() <= 60 && phrases.refusal,
        context_relevance,
    }
}

/// The development set's traces, read from `../shared/data` beside the checkout (as on the
/// developers' machines and in CI); `None`, said on stderr, when it is not there outside CI.
#[cfg(test)]
pub(super) fn development_set() -> Option<Vec<Trace>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/ragtruth_qa_train.jsonl");
    let Ok(text) = std::fs::read_to_string(&path) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have {}",
            path.display()
        );
        eprintln!("skipped: {} not present", path.display());
        return None;
    };
    let decoder = crate::trace::Decoder::new(&Default::default());
    Some(
        text.lines()
            .map(|l| {
                decoder
                    .decode(l.as_bytes())
                    .expect("the development set decodes")
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::judge::features::{Scratch, extract, extract_with};

    /// Fragments that exercise every signal: words shared by the question, contexts and answer,
    /// names, numbers (and list numbers), phrases, citations, sentence ends, non-ASCII text.
    const WORDS: &[&str] = &[
        "carbon",
        "price",
        "prices",
        "pricing",
        "Canada",
        "Ottawa",
        "introduced",
        "contract",
        "difference",
        "investors",
        "2023",
        "1,200",
        "12",
        "3.5",
        "the",
        "a",
        "of",
        "and",
        "is",
        "internationalization",
        "guarantee",
        "Smith",
        "élan",
        "naïve",
        "may",
        "also",
        "consult",
        "recommend",
        "it is important to",
        "in summary",
        "I'm sorry",
        "does not mention",
        "no information",
        "[1]",
        "[doc_2]",
        "[9]",
        "[x]",
        "e.g.",
        "J.",
        "well",
        "about",
    ];
    const GLUE: &[&str] = &[
        " ", " ", " ", ", ", ". ", ".\n", "\n1. ", "\n2) ", "! ", "? ", ": ",
    ];

    fn text(max_words: usize) -> impl Strategy<Value = String> {
        prop::collection::vec(
            (prop::sample::select(WORDS), prop::sample::select(GLUE)),
            0..max_words,
        )
        .prop_map(|parts| parts.into_iter().map(|(w, g)| format!("{w}{g}")).collect())
    }

    fn generated() -> impl Strategy<Value = Trace> {
        (text(12), prop::collection::vec(text(40), 0..4), text(60)).prop_map(
            |(query, contexts, answer)| {
                let contexts: Vec<(String, String)> = contexts
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| (format!("doc_{}", i + 1), c))
                    .collect();
                let refs: Vec<(&str, &str)> = contexts
                    .iter()
                    .map(|(i, c)| (i.as_str(), c.as_str()))
                    .collect();
                Trace::of(&query, &refs, &answer)
            },
        )
    }

    /// A trace shaped like a real RAG answer: three passages of 40 to 90 words from a vocabulary of
    /// a few hundred, and an answer of about 140 words in 6 to 12 sentences, some copied from a
    /// passage (with a word or two changed), some invented, some as a numbered list.
    fn real_shaped() -> impl Strategy<Value = Trace> {
        let word = (0u32..400).prop_map(|i| match i % 9 {
            0 => format!("Name{}", i / 9),
            1 => format!("{}", 1900 + i),
            _ => format!("word{i}"),
        });
        let passage = prop::collection::vec(word.clone(), 40..90);
        let sentence = (
            prop::bool::ANY,
            0usize..3,
            0usize..60,
            prop::collection::vec(word.clone(), 8..20),
            prop::bool::ANY,
        );
        (
            prop::collection::vec(passage, 3),
            prop::collection::vec(word, 3..8),
            prop::collection::vec(sentence, 6..12),
        )
            .prop_map(|(passages, query, sentences)| {
                let mut answer = String::new();
                for (n, (copied, which, at, invented, listed)) in sentences.into_iter().enumerate()
                {
                    let words: Vec<String> = if copied {
                        let p = &passages[which];
                        let at = at.min(p.len() - 8);
                        let mut w = p[at..(at + 14).min(p.len())].to_vec();
                        w[3] = invented[0].clone();
                        w
                    } else {
                        invented
                    };
                    if listed {
                        answer.push_str(&format!("\n{}. ", n + 1));
                    }
                    answer.push_str(&words.join(" "));
                    answer.push_str(if n % 3 == 0 {
                        ". It may also help. "
                    } else {
                        ". "
                    });
                }
                let contexts: Vec<String> = passages.iter().map(|p| p.join(" ") + ".").collect();
                let refs: Vec<(&str, &str)> = contexts.iter().map(|c| ("d", c.as_str())).collect();
                Trace::of(&format!("{}?", query.join(" ")), &refs, &answer)
            })
    }

    fn check(trace: &Trace, scratch: &mut Scratch) -> Result<(), TestCaseError> {
        let want = reference_extract(trace);
        prop_assert_eq!(extract(trace), want, "{:?}", trace);
        // And again with buffers that judged other traces before.
        prop_assert_eq!(extract_with(trace, scratch), want, "{:?}", trace);
        Ok(())
    }

    proptest! {
        #[test]
        fn fast_extractor_equals_the_reference_on_generated_traces(trace in generated()) {
            check(&trace, &mut Scratch::default())?;
        }

        #[test]
        fn fast_extractor_equals_the_reference_on_real_shaped_traces(
            traces in prop::collection::vec(real_shaped(), 1..4),
        ) {
            let mut scratch = Scratch::default();
            for t in &traces {
                check(t, &mut scratch)?;
            }
        }
    }

    /// Every trace of the development set, when it is beside the checkout (CI has it).
    #[test]
    fn fast_extractor_equals_the_reference_on_the_development_set() {
        let Some(traces) = development_set() else {
            return;
        };
        let mut scratch = Scratch::default();
        let mut checked = 0;
        for trace in traces {
            assert_eq!(
                extract_with(&trace, &mut scratch),
                reference_extract(&trace),
                "{}",
                trace.trace_id
            );
            checked += 1;
        }
        assert_eq!(checked, 3292);
    }
}
