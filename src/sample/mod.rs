//! Stratification and sampling: which stratum a trace belongs to, which release served it, and
//! whether the costly judge sees it.

pub mod config;
mod sampler;
mod stratify;
pub mod variant;

pub use sampler::Sampler;
pub(crate) use sampler::SamplerDecision;
pub use stratify::Stratifier;
pub use variant::{VariantId, Variants};
