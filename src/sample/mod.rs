//! Stratification and sampling: which stratum a trace belongs to, and whether the costly judge sees it.

mod sampler;
mod stratify;

pub use sampler::{Sampler, SamplerDecision};
pub use stratify::{Stratifier, StratumId};

/// The stratum of traces that name none and match no rule.
pub const DEFAULT_STRATUM: &str = "default";
/// The stratum of traces that name a stratum this deployment did not declare.
pub const OTHER_STRATUM: &str = "other";
