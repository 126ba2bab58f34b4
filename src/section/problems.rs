//! What can be wrong with a configuration: the error a load returns, and the list of invalid
//! fields each section's `validate` adds to.

use std::path::PathBuf;

/// Why a configuration could not be loaded. Each variant names the offending field or file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file that was asked for.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TOML did not parse or had an unknown or wrong-typed field.
    #[error("invalid config: {0}")]
    Parse(String),
    /// An environment override could not be applied.
    #[error("invalid environment override {var}: {reason}")]
    Env {
        /// The variable name.
        var: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Values out of range or inconsistent with others: every problem found, each naming its field.
    #[error("invalid config:{}", .0.iter().map(|p| format!("\n  `{}`: {}", p.field, p.reason)).collect::<String>())]
    Invalid(Vec<FieldProblem>),
}

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// Dotted path of the field.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Problems found while validating, in the order found.
#[derive(Debug, Default)]
pub(crate) struct Problems(Vec<FieldProblem>);

impl Problems {
    pub(crate) fn add(&mut self, field: &str, reason: impl Into<String>) {
        self.0.push(FieldProblem {
            field: field.into(),
            reason: reason.into(),
        });
    }

    /// Adds "must be > 0" for `field` when `v` is zero.
    pub(crate) fn positive(&mut self, field: &str, v: impl Into<u64>) {
        if v.into() == 0 {
            self.add(field, "must be > 0");
        }
    }

    pub(crate) fn ratio(&mut self, field: &str, v: f64) {
        if !(0.0..=1.0).contains(&v) {
            self.add(field, format!("{v} is not in [0, 1]"));
        }
    }

    pub(crate) fn into_result(self) -> Result<(), ConfigError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(self.0))
        }
    }
}
