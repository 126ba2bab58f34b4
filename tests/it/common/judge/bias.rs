//! The stand-in's biased models, for the judge audit: faithfulness that depends on what an honest
//! judge ignores.
//!
//! - [`Bias::Length`]: the score is the answer's length in words over `full_words` (at most 1),
//!   realised as ten claims of which that share (rounded) is supported. Labels play no part, so the
//!   score correlates with length inside each label class; the contexts play no part either.
//! - [`Bias::Order`]: every claim is supported when the first context contains `marker`, four in
//!   ten otherwise. The answer plays no part: reversing the contexts flips the verdict of every
//!   trace whose marker context was first and not last.
//!
//! Every context is rated relevant; the generated questions are the question itself, never
//! noncommittal.

use serde_json::{Value, json};

use super::chat::Asked;
use super::markup::{between, claims_of, first, questions_asked};

/// What the stand-in's faithfulness depends on.
#[derive(Debug, Clone)]
pub enum Bias {
    /// Longer answers score higher, up to 1 at `full_words` words.
    Length { full_words: usize },
    /// Faithful when the first context contains `marker`.
    Order { marker: String },
}

impl Bias {
    /// The model's reply content to `asked`.
    pub(super) fn content(&self, asked: &Asked) -> String {
        let (question, answer) = (first(asked.user, "question"), first(asked.user, "answer"));
        match asked.schema {
            "faithfulness" => self.faithfulness(asked, &answer),
            "claims" => json!({"claims": claims_of(&answer)}).to_string(),
            "relevancy" => {
                let questions: Vec<Value> = (0..questions_asked(asked.system))
                    .map(|_| json!({"question": question, "noncommittal": false}))
                    .collect();
                json!({"questions": questions}).to_string()
            }
            _ => "{}".to_owned(),
        }
    }

    fn faithfulness(&self, asked: &Asked, answer: &str) -> String {
        let contexts = between(asked.user, "<context", "</context>");
        let supported = match self {
            Bias::Length { full_words } => {
                let words = answer.split_whitespace().count() as f64;
                (10.0 * (words / *full_words as f64).min(1.0)).round() as usize
            }
            Bias::Order { marker } => {
                if contexts
                    .first()
                    .is_some_and(|c| c.contains(marker.as_str()))
                {
                    10
                } else {
                    4
                }
            }
        };
        let mut reply = json!({"claims": claims(supported)});
        if asked.wants_contexts {
            let rated: Vec<Value> = (0..contexts.len())
                .map(|i| json!({"n": i + 1, "relevant": true}))
                .collect();
            reply["contexts"] = Value::from(rated);
        }
        reply.to_string()
    }
}

/// Ten claims of which `supported` are supported.
fn claims(supported: usize) -> Vec<Value> {
    (0..10)
        .map(|i| {
            let verdict = if i < supported {
                "supported"
            } else {
                "unsupported"
            };
            json!({"claim": format!("Claim {i}."), "verdict": verdict})
        })
        .collect()
}
