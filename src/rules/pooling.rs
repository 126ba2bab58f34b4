//! What the rules pool over: one install's replicas, never two installs' or two clusters'.
//!
//! Every recording rule sums the replicas' counters by (cluster, namespace, install, ...): the
//! install is a label that tells two ragwatch deployments apart even when they share a namespace
//! and their strata's names (the scrape's `job`, shipped), and the cluster label, which a global
//! ruler (Thanos, Mimir, a federating Prometheus) or the scrape adds, keeps clusters apart. Where
//! a series has no such label, Prometheus groups it under the empty value: harmless.

/// The label names the rules keep apart, written into every `by (...)` and `on (...)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pooling {
    /// The label that names a cluster (shipped: `cluster`).
    pub cluster_label: String,
    /// The label that names one install of ragwatch (shipped: `job`, the scrape job, which the
    /// Prometheus Operator sets from the Service or PodMonitor of each install).
    pub install_label: String,
}

impl Pooling {
    /// The shipped labels: `cluster` and `job`.
    pub fn shipped() -> Self {
        Self {
            cluster_label: "cluster".into(),
            install_label: "job".into(),
        }
    }

    /// The template variables: the grouping list (`pool`), its label names alone (`cluster`,
    /// `install`), and the matcher and arguments of an annotation's `printf` query that selects
    /// the alert's own install (`pool_match`, `pool_args`).
    pub(super) fn vars(&self) -> Vec<(&'static str, String)> {
        let (c, i) = (&self.cluster_label, &self.install_label);
        vec![
            ("pool", format!("{c}, namespace, {i}")),
            ("cluster", c.clone()),
            ("install", i.clone()),
            ("pool_match", format!("{c}='%s',namespace='%s',{i}='%s'")),
            (
                "pool_args",
                format!("$labels.{c} $labels.namespace $labels.{i}"),
            ),
        ]
    }
}

impl Default for Pooling {
    fn default() -> Self {
        Self::shipped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Windows, generate, rules_yaml};

    /// Every generated file is filled: a placeholder that reaches a shipped file is a broken query.
    #[test]
    fn no_placeholder_is_left_in_any_generated_file() {
        let other = Pooling {
            cluster_label: "k8s_cluster".into(),
            install_label: "app_instance".into(),
        };
        for pooling in [Pooling::shipped(), other] {
            for file in generate(&Windows::SHIPPED, &pooling) {
                assert!(
                    !file.text.contains("@@"),
                    "{} keeps a placeholder",
                    file.path
                );
            }
        }
    }

    /// The label lists of every `by (...)` and `on (...)` in `rules`.
    fn groupings(rules: &str) -> Vec<String> {
        let mut out = Vec::new();
        for key in ["by (", "on ("] {
            let mut rest = rules;
            while let Some(i) = rest.find(key) {
                let after = &rest[i + key.len()..];
                let end = after.find(')').unwrap_or(after.len());
                out.push(after[..end].to_owned());
                rest = &after[end..];
            }
        }
        out
    }

    /// A rule that groups by namespace keeps the cluster and the install too: pooling two installs
    /// or two clusters is a wrong number, however the rule was written.
    #[test]
    fn every_grouping_that_names_the_namespace_keeps_cluster_and_install() {
        for pooling in [
            Pooling::shipped(),
            Pooling {
                cluster_label: "k8s_cluster".into(),
                install_label: "app_instance".into(),
            },
        ] {
            let rules = rules_yaml(&Windows::SHIPPED, &pooling);
            let lists = groupings(&rules);
            let with_namespace: Vec<&String> = lists
                .iter()
                .filter(|l| l.split(", ").any(|x| x == "namespace"))
                .collect();
            assert!(with_namespace.len() > 100, "{}", with_namespace.len());
            for l in with_namespace {
                let labels: Vec<&str> = l.split(", ").collect();
                assert!(
                    labels.contains(&pooling.cluster_label.as_str())
                        && labels.contains(&pooling.install_label.as_str()),
                    "by/on ({l}) pools installs or clusters together"
                );
            }
        }
    }
}
