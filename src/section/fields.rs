//! Helpers every section's config shares: serde defaults and the label check.

pub(crate) fn default_true() -> bool {
    true
}

/// Whether `s` can be a stratum label value: short, lowercase, no surprises in PromQL.
pub(crate) fn valid_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Implements `Default` through serde's field defaults, so the two can never disagree. Each
/// component's config file invokes it for its sections.
macro_rules! default_from_serde {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                toml::from_str("").expect("every field of this section has a default")
            }
        }
    )*};
}
pub(crate) use default_from_serde;
