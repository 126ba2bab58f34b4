//! The example Alertmanager configuration and its Prometheus Operator twin. Their inhibit rule
//! lets a page about a stratum silence the warnings about the same stratum; both of its alert
//! lists follow from the metric list, so a new metric's alerts join them.

use super::metric_alerts;
use super::pooling::Pooling;
use super::template::fill;

const ALERTMANAGER: &str = include_str!("templates/alertmanager.yml");
const ALERTMANAGER_CONFIG: &str = include_str!("templates/alertmanagerconfig.yaml");

/// The alert that says which stage to look at first; a page about the stratum already does.
const DIAGNOSIS: &str = "RagwatchDiagnosis";

/// `deploy/alertmanager/alertmanager.yml`.
pub(super) fn alertmanager_yml(pooling: &Pooling) -> String {
    fill(ALERTMANAGER, &vars(pooling))
}

/// `deploy/kubernetes/components/monitoring/alertmanagerconfig.yaml`.
pub(super) fn alertmanager_config(pooling: &Pooling) -> String {
    fill(ALERTMANAGER_CONFIG, &vars(pooling))
}

/// The inhibit lists and the labels an install is told apart by.
fn vars(pooling: &Pooling) -> Vec<(&'static str, String)> {
    let mut vars = pooling.vars();
    vars.extend(inhibit_lists());
    vars
}

/// The inhibit rule's regex alternations: the per-metric pages (its sources) and the per-metric
/// warnings with the diagnosis (its targets).
fn inhibit_lists() -> [(&'static str, String); 2] {
    let alerts = metric_alerts();
    let named = |severity: &str| {
        alerts
            .iter()
            .filter(|a| a.severity() == severity)
            .map(|a| a.name())
            .collect::<Vec<_>>()
    };
    let mut warnings = vec![DIAGNOSIS.to_owned()];
    warnings.extend(named("warning"));
    [
        ("pages", named("critical").join("|")),
        ("warnings", warnings.join("|")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_per_metric_alert_is_a_source_or_a_target_of_the_inhibit_rule() {
        let [(_, pages), (_, warnings)] = inhibit_lists();
        for alert in metric_alerts() {
            let name = alert.name();
            let in_pages = pages.split('|').any(|a| a == name);
            let in_warnings = warnings.split('|').any(|a| a == name);
            assert!(
                in_pages != in_warnings,
                "{name}: pages {in_pages}, warnings {in_warnings}"
            );
        }
        let pooling = Pooling::shipped();
        for text in [alertmanager_yml(&pooling), alertmanager_config(&pooling)] {
            assert!(text.contains(&pages) && text.contains(&warnings));
        }
    }
}
