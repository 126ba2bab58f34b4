//! Stratification and sampling: which stratum a trace belongs to, and whether the costly judge sees it.

pub mod config;
mod sampler;
mod stratify;

pub use crate::dimensions::{DEFAULT_STRATUM, OTHER_STRATUM, StratumId};
pub use sampler::{Sampler, SamplerDecision};
pub use stratify::Stratifier;
