//! Generated traces, and the property tests that hold the fast extraction to the reference on
//! them: small traces from a vocabulary of awkward words (stopwords, numbers in several spellings,
//! negations, hedges, citations, non-ASCII words, punctuation, empty contexts and answers), and
//! traces shaped like real RAG traces (several contexts of 100-300 words, answers of 50-200 words,
//! mostly spans of the contexts). Every word is made up here; none comes from a data set.

use proptest::prelude::*;

use super::*;

/// Words of the generated traces: stopwords, numbers in several spellings, negations, hedges,
/// advice and refusal words, names, stems that meet, citations, non-ASCII words, punctuation.
const VOCABULARY: &[&str] = &[
    "the",
    "of",
    "and",
    "is",
    "not",
    "no",
    "never",
    "may",
    "might",
    "possibly",
    "about",
    "also",
    "overall",
    "recommend",
    "consult",
    "note",
    "that",
    "important",
    "to",
    "I",
    "cannot",
    "can't",
    "don't",
    "sorry",
    "unable",
    "provide",
    "information",
    "price",
    "prices",
    "priced",
    "pricing",
    "carbon",
    "contract",
    "Canada",
    "Ada",
    "Lovelace",
    "museum",
    "opens",
    "closes",
    "entry",
    "children",
    "euros",
    "international",
    "internationalization",
    "temperature",
    "boil",
    "boils",
    "water",
    "Water",
    "it's",
    "Bob's",
    "12",
    "1,200",
    "1200",
    "3.5",
    "3.50",
    "$3.50",
    "5%",
    "2023",
    "1999",
    "[1]",
    "[2]",
    "[7]",
    "[doc_1]",
    "[doc_9]",
    "élan",
    "Élan",
    "naïve",
    "Zürich",
    "—",
    "…",
    "ſome",
    "li\u{212A}ely",
    "e.g.",
    "J.",
    "x1",
    "12abc",
    "'",
    "(",
    ")",
];

/// What goes between two words.
const SEPARATORS: &[&str] = &[" ", " ", " ", ", ", ". ", "! ", "? ", ": ", "\n", "; ", ""];

/// Text of up to `max` vocabulary words with separators between them.
fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            prop::sample::select(VOCABULARY),
            prop::sample::select(SEPARATORS),
        ),
        0..max,
    )
    .prop_map(|parts| {
        parts
            .into_iter()
            .flat_map(|(w, sep)| [w, sep])
            .collect::<String>()
    })
}

/// A small trace: a question, up to four contexts (maybe empty) with ids a citation may name,
/// an answer (maybe empty).
fn small_trace() -> impl Strategy<Value = Trace> {
    (text(12), prop::collection::vec(text(60), 0..5), text(40)).prop_map(
        |(query, contexts, answer)| {
            let ids = ["doc_1", "doc_2", "3", "x"];
            let contexts: Vec<(&str, &str)> = contexts
                .iter()
                .enumerate()
                .map(|(i, c)| (ids[i % ids.len()], c.as_str()))
                .collect();
            Trace::of(&query, &contexts, &answer)
        },
    )
}

/// Made-up words from syllables: a vocabulary the size of a topic's, none of it from any data.
fn topic_words() -> Vec<String> {
    let syllables = [
        "ka", "lo", "mi", "ren", "tor", "vas", "pel", "du", "qui", "sen", "bra", "os",
    ];
    let mut words = Vec::new();
    for (i, a) in syllables.iter().enumerate() {
        for (j, b) in syllables.iter().enumerate() {
            let mut w = format!("{a}{b}");
            if (i + j) % 3 == 0 {
                w.push_str(syllables[(i * j) % syllables.len()]);
            }
            if (i * 7 + j) % 5 == 0 {
                w.push_str(["s", "ed", "ing", "ly", "tion"][(i + j) % 5]);
            }
            words.push(w);
        }
    }
    words
}

/// A word of a real-shaped trace: a topic word (sometimes a name), a stopword or a number.
fn real_word(pick: usize, topic: &[String]) -> String {
    match pick % 10 {
        0..=3 => topic[pick / 10 % topic.len()].clone(),
        4 => {
            let w = &topic[pick / 10 % topic.len()];
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect())
                .unwrap_or_default()
        }
        5..=8 => STOPWORDS[pick / 10 % STOPWORDS.len()].to_owned(),
        _ => (pick / 10 % 3000).to_string(),
    }
}

/// Words as sentences of 6 to 24 words, a capital at each start.
fn prose(words: &[String], cuts: &[usize]) -> String {
    let mut out = String::new();
    let mut next_cut = cuts.iter().cycle();
    let mut left = *next_cut.next().unwrap_or(&12);
    let mut start = true;
    for w in words {
        if !out.is_empty() {
            out.push(' ');
        }
        if start {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                out.extend(f.to_uppercase().chain(c));
            }
        } else {
            out.push_str(w);
        }
        start = false;
        left -= 1;
        if left == 0 {
            out.push('.');
            left = *next_cut.next().unwrap_or(&12);
            start = true;
        }
    }
    out
}

/// A trace shaped like a real RAG trace: a question of 6 to 15 words, 3 to 6 contexts of 100 to
/// 300 words, an answer of 50 to 200 words, most of it spans copied from the contexts (so pairs
/// and triples match), the rest new words, hedges, citations and numbers.
fn real_trace() -> impl Strategy<Value = Trace> {
    let context = prop::collection::vec(any::<usize>(), 100..300);
    (
        prop::collection::vec(any::<usize>(), 6..15),
        prop::collection::vec(context, 3..6),
        prop::collection::vec((any::<usize>(), any::<usize>(), 1usize..12), 5..30),
        prop::collection::vec(6usize..24, 1..8),
    )
        .prop_map(|(question, contexts, segments, cuts)| {
            let topic = topic_words();
            let contexts: Vec<Vec<String>> = contexts
                .iter()
                .map(|c| c.iter().map(|&p| real_word(p, &topic)).collect())
                .collect();
            let mut answer: Vec<String> = Vec::new();
            for &(a, b, len) in &segments {
                if answer.len() >= 200 {
                    break;
                }
                match a % 8 {
                    // A span of a context.
                    0..=4 => {
                        let c = &contexts[b % contexts.len()];
                        let start = (b / 7) % (c.len() - len);
                        answer.extend(c[start..start + len].iter().cloned());
                    }
                    5 => answer.extend((0..len).map(|k| real_word(b / 3 + k * 131, &topic))),
                    6 => {
                        answer.push(["may", "possibly", "about", "also", "note that"][b % 5].into())
                    }
                    _ => answer.push(format!("[{}]", b % 8)),
                }
            }
            for k in 0.. {
                if answer.len() >= 50 {
                    break;
                }
                let c = &contexts[k % contexts.len()];
                answer.extend(c[k * 10 % 90..][..10].iter().cloned());
            }
            let question: Vec<String> = question.iter().map(|&p| real_word(p, &topic)).collect();
            let texts: Vec<String> = contexts.iter().map(|c| prose(c, &cuts)).collect();
            let pairs: Vec<(String, &str)> = texts
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("doc_{}", i + 1), t.as_str()))
                .collect();
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(id, t)| (id.as_str(), *t)).collect();
            Trace::of(
                &(prose(&question, &[question.len()]) + "?"),
                &pairs,
                &prose(&answer, &cuts),
            )
        })
}

/// The fast extraction equals the reference: counts exactly, every feature to 1e-12.
fn check(trace: &Trace) -> Result<(), TestCaseError> {
    let fast = super::super::extract::extract(trace);
    let plain = extract(trace);
    prop_assert_eq!(fast.citations, plain.citations);
    prop_assert_eq!(fast.sentences, plain.sentences);
    match (fast.context_relevance, plain.context_relevance) {
        (Some(a), Some(b)) => prop_assert!((a - b).abs() <= 1e-12, "context_relevance {a} {b}"),
        (a, b) => prop_assert_eq!(a, b),
    }
    let (a, b) = (fast.features.to_vec(), plain.features.to_vec());
    for (i, name) in Features::NAMES.iter().enumerate() {
        prop_assert!(
            (a[i] - b[i]).abs() <= 1e-12,
            "{}: fast {} reference {}\n{:?}",
            name,
            a[i],
            b[i],
            trace
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn fast_extraction_matches_the_reference_on_small_traces(trace in small_trace()) {
        check(&trace)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn fast_extraction_matches_the_reference_on_real_shaped_traces(trace in real_trace()) {
        let words = crate::judge::word_count(&trace.answer);
        prop_assert!((50..=230).contains(&words), "answer of {} words", words);
        check(&trace)?;
    }
}

#[test]
fn reference_reads_a_hand_case_as_meant() {
    let t = Trace::of(
        "When does the museum open?",
        &[("d1", "The museum opens at 9 am. Entry costs 12 euros.")],
        "The museum opens at 9 am. Entry costs 25 euros [d1] and Paul may help.",
    );
    let e = extract(&t);
    assert_eq!(e.sentences, 2);
    assert_eq!(e.citations, Citations { total: 1, valid: 1 });
    // The second sentence: entry, cost, 25, euro, d1, paul ("help" is a stopword); three of them
    // in the context.
    assert_eq!(e.features.novel_numbers, 1f64.ln_1p());
    assert_eq!(e.features.novel_names, 1f64.ln_1p());
    assert_eq!(e.features.min_support, 0.5);
    check(&t).unwrap();
}
