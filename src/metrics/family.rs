//! How a family is declared and registered: one constructor per kind of family, each registering
//! what it builds on the process's own registry, and [`families!`], which turns a room's table of
//! families into its struct and the constructor that registers them all.

use prometheus::{
    CounterVec, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

/// Declares a room's families: a struct with one field per family (its doc, its type) and
/// `register`, which builds each field from its definition (the expression after `=`, which may
/// name the parameters in the struct's parentheses).
macro_rules! families {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident($($arg:ident: $arg_ty:ty),*) {
            $(
                $(#[$field_meta:meta])*
                $field_vis:vis $field:ident: $ty:ty = $definition:expr,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        $vis struct $name {
            $(
                $(#[$field_meta])*
                $field_vis $field: $ty,
            )*
        }

        impl $name {
            /// Builds every family of the room, registered on the registry.
            pub(super) fn register($($arg: $arg_ty),*) -> Self {
                Self {
                    $($field: $definition,)*
                }
            }
        }
    };
}
pub(super) use families;

/// Registers one unlabelled metric.
pub(super) fn single<M: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    m: prometheus::Result<M>,
) -> M {
    let m = m.expect("valid metric definition");
    r.register(Box::new(m.clone()))
        .expect("metric names are unique");
    m
}

/// Registers a labelled family built by `new` (each `*Vec::new` of the prometheus crate).
fn labelled<V: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    new: fn(Opts, &[&str]) -> prometheus::Result<V>,
    name: &str,
    help: &str,
    labels: &[&str],
) -> V {
    single(r, new(Opts::new(name, help), labels))
}

pub(super) fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    labelled(r, IntCounterVec::new, name, help, labels)
}

pub(super) fn float_counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> CounterVec {
    labelled(r, CounterVec::new, name, help, labels)
}

pub(super) fn gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    labelled(r, GaugeVec::new, name, help, labels)
}

pub(super) fn int_gauge(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    labelled(r, IntGaugeVec::new, name, help, labels)
}

pub(super) fn histogram(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    single(
        r,
        HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels),
    )
}
