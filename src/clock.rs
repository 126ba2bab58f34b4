//! Time, read in one place: the wall clock (the windows' time base) and the monotonic clock
//! (durations and deadlines). Everything below takes `now` as an argument so tests control time.

use std::time::{SystemTime, UNIX_EPOCH};

/// The monotonic clock: tokio's, which reads the system's monotonic clock, inside a runtime or
/// not, and stands still in a paused test runtime (`start_paused`, `tokio::time::pause`).
/// `std::time::Instant` would not, and clippy refuses it (`disallowed-types` in `clippy.toml`).
/// This is the one spelling: `tokio::time::Instant` is the same type, which clippy cannot tell
/// apart, so it is not named elsewhere.
pub use tokio::time::Instant;

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
