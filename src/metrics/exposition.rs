//! `/metrics`: every family of the registry, in the Prometheus text format or, with exemplars, in
//! OpenMetrics ([`super::openmetrics`]).

use prometheus::{Encoder, TextEncoder};

use super::{Metrics, openmetrics};

impl Metrics {
    /// The OpenMetrics exposition of every family, with exemplars.
    pub fn render_openmetrics(&self) -> String {
        let mut out = String::with_capacity(96 * 1024);
        openmetrics::encode(&self.registry.gather(), &self.exemplars, &mut out);
        out
    }

    /// The Prometheus text exposition of every family.
    pub fn render(&self) -> String {
        let mut buf = Vec::with_capacity(64 * 1024);
        let families = self.registry.gather();
        if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}
