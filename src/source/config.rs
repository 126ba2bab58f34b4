//! The trace source: which kind, and for files and stdin the path, pace and looping.

use std::path::PathBuf;

use crate::section::problems::Problems;
use serde::{Deserialize, Serialize};

/// The kind of trace source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A JSONL file, optionally paced and looped.
    File,
    /// JSONL on standard input.
    Stdin,
    /// A Kafka topic, read as a consumer group.
    Kafka,
    /// OTLP/HTTP requests pushed to `[otlp] listen`.
    Otlp,
}

/// Where traces come from. Nothing is assumed: `ragwatch run` refuses a config that does not name
/// its source (the bundled demo, `config/ragwatch.toml`, names the sample file).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceConfig {
    /// `file`, `stdin`, `kafka` or `otlp`; required by `ragwatch run`.
    pub kind: Option<SourceKind>,
    /// JSONL (or length-framed OTLP) file for `kind = "file"`; required there.
    pub path: Option<PathBuf>,
    /// Traces per second for file and stdin sources; 0 reads as fast as possible.
    pub rate_per_sec: f64,
    /// Start again at the top of the file when it ends.
    #[serde(rename = "loop")]
    pub loop_file: bool,
}

impl SourceConfig {
    /// Checks `[source]`.
    pub(crate) fn validate(&self, p: &mut Problems) {
        if self.rate_per_sec < 0.0 || !self.rate_per_sec.is_finite() {
            p.add("source.rate_per_sec", "must be >= 0");
        }
        if self.kind == Some(SourceKind::File) && self.path.is_none() {
            p.add("source.path", "names the file to read for kind = \"file\"");
        }
    }
}
