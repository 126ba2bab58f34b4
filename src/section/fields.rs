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

/// The `[name]` table of a TOML text as its section type (the default when absent), unvalidated:
/// how a test below the config builds the sections it reads without the whole file.
#[cfg(test)]
pub(crate) fn section<T: serde::de::DeserializeOwned + Default>(text: &str, name: &str) -> T {
    let doc: toml::Table = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
    doc.get(name).map_or_else(T::default, |table| {
        table
            .clone()
            .try_into()
            .unwrap_or_else(|e| panic!("[{name}]: {e}"))
    })
}
