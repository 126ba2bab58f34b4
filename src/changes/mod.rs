//! What changed: question novelty.

// Local scaffolding: nothing outside the module calls the index yet.
#![allow(dead_code, unused_imports)]

mod novelty;
pub(crate) use novelty::{Novelty, QuestionIndex};
