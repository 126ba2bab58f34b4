//! What every configuration section is built from: the problems its check finds (and the error a
//! load returns), serde defaults and the label check. The sections live with what they configure;
//! `config` gathers them into one file's worth.

pub(crate) mod fields;
pub mod problems;
