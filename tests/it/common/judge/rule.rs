//! The stand-in's default model, a deterministic rule: a claim is supported when every word of
//! four letters or more appears in the contexts, contradicted when it carries a number the
//! contexts do not have, else unsupported; a context is relevant when it shares a word of five
//! letters or more with the question; the generated questions repeat the answer's gist, and are
//! noncommittal when the answer refuses.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::chat::Asked;
use super::markup::{between, first, given_claims, questions_asked, sentences, words};

/// The rule's reply content to `asked`.
pub(super) fn content(asked: &Asked) -> String {
    let contexts = between(asked.user, "<context", "</context>").join(" ");
    let answer = first(asked.user, "answer");
    match asked.schema {
        "faithfulness" => {
            let claims = if asked.user.contains("<claims>") {
                given_claims(asked.user)
            } else {
                sentences(&answer)
            };
            let items: Vec<Value> = claims
                .iter()
                .map(|c| json!({"claim": c, "verdict": verdict(c, &contexts)}))
                .collect();
            with_contexts(asked, items)
        }
        "claims" => json!({"claims": sentences(&answer)}).to_string(),
        "relevancy" => relevancy(asked.system, &answer),
        _ => "{}".to_owned(),
    }
}

fn verdict(claim: &str, contexts: &str) -> &'static str {
    let ctx: HashSet<String> = words(contexts).into_iter().collect();
    let w = words(claim);
    if w.iter()
        .any(|w| w.chars().all(|c| c.is_ascii_digit()) && !ctx.contains(w))
    {
        "contradicted"
    } else if w.iter().filter(|w| w.len() >= 4).all(|w| ctx.contains(w)) {
        "supported"
    } else {
        "unsupported"
    }
}

/// `{"claims": items}`, with every context rated when the request asks for them.
pub(super) fn with_contexts(asked: &Asked, items: Vec<Value>) -> String {
    if asked.wants_contexts {
        json!({"claims": items, "contexts": rated_contexts(asked.user)}).to_string()
    } else {
        json!({"claims": items}).to_string()
    }
}

/// Each context of the request, numbered from 1, relevant when it shares a word of five letters
/// or more with the question.
fn rated_contexts(user: &str) -> Vec<Value> {
    let topic: Vec<String> = words(&first(user, "question"))
        .into_iter()
        .filter(|w| w.len() >= 5)
        .collect();
    between(user, "<context", "</context>")
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let relevant = words(c).iter().any(|w| topic.contains(w));
            json!({"n": i + 1, "relevant": relevant})
        })
        .collect()
}

/// Questions built from the answer's words of four letters or more, noncommittal when the answer
/// apologises or says it cannot answer.
fn relevancy(system: &str, answer: &str) -> String {
    let lower = answer.to_lowercase();
    let noncommittal = ["sorry", "cannot", "do not contain", "unable"]
        .iter()
        .any(|p| lower.contains(p));
    let gist: Vec<String> = words(answer)
        .into_iter()
        .filter(|w| w.len() >= 4)
        .take(8)
        .collect();
    let qs: Vec<Value> = (0..questions_asked(system))
        .map(|i| json!({"question": format!("what {} {}", gist.join(" "), i), "noncommittal": noncommittal}))
        .collect();
    json!({"questions": qs}).to_string()
}
