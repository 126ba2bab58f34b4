//! The read-only admin listener (`[http]`).

use std::path::PathBuf;

use crate::section::problems::Problems;
use serde::{Deserialize, Serialize};

/// The admin HTTP server: read-only (metrics and probes); writes go to `[write]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Listen address; port 0 picks a free port (logged, and written to `port_file` if set).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Write the bound address here once listening (used by tests and scripts).
    #[serde(default)]
    pub port_file: Option<PathBuf>,
}

crate::section::fields::default_from_serde!(HttpConfig);

fn default_listen() -> String {
    "0.0.0.0:9464".into()
}

impl HttpConfig {
    /// Checks `[http]`.
    pub(crate) fn validate(&self, p: &mut Problems) {
        if let Err(e) = self.listen.parse::<std::net::SocketAddr>() {
            p.add("http.listen", e.to_string());
        }
    }
}
