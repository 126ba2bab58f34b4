//! The stand-in's label-following model: faithfulness verdicts that follow human labels, with
//! noise. The server is given a label per answer text (built by the test from a labelled data
//! file) and looks up the answer of every faithfulness request in it. Its verdict model is the one
//! `tests/it/detection.rs` uses in process: the judge reads an answer the way the humans did 90 %
//! of the time; an answer it reads as faithful gets a score of 1 (70 %) or uniform in [0.6, 1], one
//! it reads as unfaithful a score uniform in [0.2, 0.7]. The score is realised as claims: the
//! answer's sentences, each supported with the score's probability on average (so the share of
//! supported claims, ragwatch's faithfulness, has the score as its expectation). Contexts sharing a
//! word of five letters or more with the question are relevant. Answer relevancy is not what it is
//! for: the generated questions are the real question and variants of it, never noncommittal.
//!
//! Only the one-call faithfulness form carries the answer; a request whose answer is not in the map
//! is answered as faithful and counted in [`LabelCounts::unknown_answers`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use super::chat::Asked;
use super::markup::{claims_of, first, given_claims, questions_asked, words};
use super::rule::with_contexts;

/// The share of answers the judge reads against their human label.
pub const DISAGREEMENT: f64 = 0.1;

/// What the label-following model was asked, by the human label of the answer.
#[derive(Default)]
pub struct LabelCounts {
    /// Faithfulness requests by the human label of their answer.
    pub labelled_faithful: AtomicU64,
    pub labelled_unfaithful: AtomicU64,
    /// Faithfulness requests whose verdict went against the human label.
    pub disagreements: AtomicU64,
    /// Faithfulness requests whose answer was not in the map.
    pub unknown_answers: AtomicU64,
}

/// The labels and the noise drawn for them.
pub(super) struct Labels {
    labels: HashMap<String, bool>,
    rng: Mutex<StdRng>,
}

/// The key an answer is looked up by: ragwatch fences `<` and `>` inside data as `‹` and `›`, and
/// whitespace is not a difference.
pub fn answer_key(answer: &str) -> String {
    answer
        .replace('‹', "<")
        .replace('›', ">")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

impl Labels {
    pub(super) fn new(labels: impl IntoIterator<Item = (String, bool)>, seed: u64) -> Labels {
        Labels {
            labels: labels
                .into_iter()
                .map(|(a, l)| (answer_key(&a), l))
                .collect(),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    /// The model's reply content to `asked`, counted in `counts`.
    pub(super) fn content(&self, asked: &Asked, counts: &LabelCounts) -> String {
        let (question, answer) = (first(asked.user, "question"), first(asked.user, "answer"));
        match asked.schema {
            "faithfulness" => self.faithfulness(asked, &answer, counts),
            "claims" => json!({"claims": claims_of(&answer)}).to_string(),
            "relevancy" => relevancy(asked.system, &question),
            _ => "{}".to_owned(),
        }
    }

    fn faithfulness(&self, asked: &Asked, answer: &str, counts: &LabelCounts) -> String {
        let label = self.labels.get(&answer_key(answer)).copied();
        match label {
            Some(true) => counts.labelled_faithful.fetch_add(1, Ordering::SeqCst),
            Some(false) => counts.labelled_unfaithful.fetch_add(1, Ordering::SeqCst),
            None => counts.unknown_answers.fetch_add(1, Ordering::SeqCst),
        };
        let claims = if answer.is_empty() {
            // The verification call of the two-call form: the claims come with the request.
            given_claims(asked.user)
        } else {
            claims_of(answer)
        };
        let items = {
            let mut rng = self.rng.lock().unwrap();
            let (s, agrees) = score(&mut rng, label.unwrap_or(true));
            if label.is_some() && !agrees {
                counts.disagreements.fetch_add(1, Ordering::SeqCst);
            }
            verdicts(&mut rng, &claims, s)
        };
        with_contexts(asked, items)
    }
}

/// The judge's score for an answer with human label `faithful`: the model of tests/it/detection.rs.
fn score(rng: &mut StdRng, faithful: bool) -> (f64, bool) {
    let agrees = rng.random::<f64>() >= DISAGREEMENT;
    let s = if faithful == agrees {
        if rng.random::<f64>() < 0.7 {
            1.0
        } else {
            0.6 + 0.4 * rng.random::<f64>()
        }
    } else {
        0.2 + 0.5 * rng.random::<f64>()
    };
    (s, agrees)
}

/// Verdicts for `claims` whose share of supported ones is `score` in expectation: round(score * n)
/// up or down at random, the unsupported ones at random places.
fn verdicts(rng: &mut StdRng, claims: &[String], score: f64) -> Vec<Value> {
    let n = claims.len();
    let exact = score * n as f64;
    let mut supported = exact.floor() as usize;
    if rng.random::<f64>() < exact - exact.floor() {
        supported += 1;
    }
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let unsupported: Vec<usize> = order[..n - supported.min(n)].to_vec();
    claims
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let verdict = if !unsupported.contains(&i) {
                "supported"
            } else if rng.random::<f64>() < 1.0 / 3.0 {
                "contradicted"
            } else {
                "unsupported"
            };
            json!({"claim": c, "verdict": verdict})
        })
        .collect()
}

/// The question itself, then the question without one of its words; never noncommittal.
fn relevancy(system: &str, question: &str) -> String {
    let q = words(question);
    let questions: Vec<Value> = (0..questions_asked(system))
        .map(|i| {
            let variant: Vec<&str> = q
                .iter()
                .enumerate()
                .filter(|&(j, _)| i == 0 || j != (i - 1) % q.len().max(1))
                .map(|(_, w)| w.as_str())
                .collect();
            json!({"question": format!("{}?", variant.join(" ")), "noncommittal": false})
        })
        .collect();
    json!({"questions": questions}).to_string()
}
