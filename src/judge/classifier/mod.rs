//! The classifier judge (`judge.sampled = "classifier"`): a small model between the free lexical
//! judge and the paid LLM judge. A BERT-family sentence encoder embeds the answer, the question and
//! each context; a logistic head over how close they sit gives the probability that the answer is
//! supported, its faithfulness score.
//!
//! - [`config`]: the `[classifier]` section (plain data, built without the feature too).
//! - `tokens`: the model directory's tokenizer; both paths tokenize here.
//! - `window`: long inputs cut into overlapping windows, each embedded on its own.
//! - `model`: the encoder run in process on the CPU (candle).
//! - `served`: the encoder run by a model server (text-embeddings-inference, vLLM), sent the
//!   same token ids.
//! - `encoder`: texts to pooled vectors through either.
//! - `features`, `head`: the head's inputs and the head.
//!
//! Everything but the config needs the cargo feature `classifier`.

pub mod config;
#[cfg(feature = "classifier")]
pub mod encoder;
#[cfg(feature = "classifier")]
pub mod features;
#[cfg(feature = "classifier")]
pub mod head;
#[cfg(feature = "classifier")]
pub mod model;
#[cfg(feature = "classifier")]
pub mod served;
#[cfg(feature = "classifier")]
pub mod tokens;
#[cfg(feature = "classifier")]
pub mod window;

#[cfg(feature = "classifier")]
mod judge;

#[cfg(feature = "classifier")]
pub use encoder::TextEncoder;
#[cfg(feature = "classifier")]
pub use features::pair_features;
#[cfg(feature = "classifier")]
pub use head::Head;
#[cfg(feature = "classifier")]
pub use judge::{Classifier, ClassifierError};
#[cfg(feature = "classifier")]
pub use tokens::Tokens;
#[cfg(feature = "classifier")]
pub use window::Window;

/// The classifier's identity, as `ragwatch_judge_info{model}` records it: the model directory's
/// name and a hash of the head's file (a new head is a new judge, and a metric reset).
pub fn identity(config: &config::ClassifierConfig) -> String {
    let name = config
        .model_dir
        .as_deref()
        .and_then(std::path::Path::file_name)
        .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned());
    let head = config
        .head
        .as_deref()
        .and_then(|p| std::fs::read(p).ok())
        .unwrap_or_default();
    let served = if config.served.is_some() {
        "-served"
    } else {
        ""
    };
    format!(
        "classifier-{name}-{:08x}{served}",
        xxhash_rust::xxh3::xxh3_64(&head) as u32
    )
}
