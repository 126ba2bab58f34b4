//! Stratification and sampling: which stratum a trace belongs to, and whether the costly judge sees it.

pub mod config;
mod sampler;
mod stratify;

pub use sampler::Sampler;
pub(crate) use sampler::SamplerDecision;
pub use stratify::Stratifier;
