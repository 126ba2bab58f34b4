//! The runbook's address is one setting: an annotation of the monitoring component for the
//! PrometheusRule, one documented `sed` for the plain rules and the dashboard; the anchors stay.

use std::process::Command;

use serde_json::Value;

use super::{kustomize, render, user_overlay};
use crate::common::{repo, run_ok};
use crate::dashboard::{RUNBOOK, runbook_variable};

/// The `runbook_url`s of rendered manifests, one per alert.
fn runbook_urls(rendered: &str) -> Vec<String> {
    rendered
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook_url:"))
        .map(|u| u.trim().trim_matches('"').to_owned())
        .collect()
}

/// The runbook's address is one setting for the PrometheusRule (an annotation the component's
/// replacement writes into every runbook_url) and one documented `sed` for the plain rules and the
/// dashboard; the anchors stay.
#[test]
fn the_runbook_address_is_one_setting() {
    // kustomize: as shipped, then with the setting changed in a copy of the component.
    let shipped = runbook_urls(&render("example"));
    assert!(shipped.len() >= 15, "{shipped:?}");
    for url in &shipped {
        assert!(url.starts_with(&format!("{RUNBOOK}#ragwatch")), "{url}");
    }
    let component = repo().join("deploy/kubernetes/components/monitoring");
    let kustomization = std::fs::read_to_string(component.join("kustomization.yaml")).unwrap();
    let setting = format!("ragwatch.io/runbook-base-url: {RUNBOOK}");
    assert_eq!(kustomization.matches(&setting).count(), 1);
    let mine = "https://wiki.example.com/ragwatch/runbook";
    let mut files: Vec<(String, String)> = std::fs::read_dir(&component)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    for (name, text) in &mut files {
        if name == "kustomization.yaml" {
            *text = text.replace(&setting, &format!("ragwatch.io/runbook-base-url: {mine}"));
        }
    }
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let copy = user_overlay(&refs);
    let user = user_overlay(&[(
        "kustomization.yaml",
        &format!(
            "resources: [{{repo}}/deploy/kubernetes/overlays/standalone]\ncomponents: [{}]\n",
            copy.path().display()
        ),
    )]);
    // kustomize takes relative paths: the component copy's, from the user's overlay.
    let relative = format!("../{}", copy.path().file_name().unwrap().to_str().unwrap());
    std::fs::write(
        user.path().join("kustomization.yaml"),
        std::fs::read_to_string(user.path().join("kustomization.yaml"))
            .unwrap()
            .replace(&copy.path().display().to_string(), &relative),
    )
    .unwrap();
    let moved = runbook_urls(&kustomize(user.path()));
    assert_eq!(moved.len(), shipped.len());
    for (url, before) in moved.iter().zip(&shipped) {
        assert_eq!(url, &before.replace(RUNBOOK, mine));
    }

    // The documented sed, on copies of the plain files.
    let doc = std::fs::read_to_string(repo().join("docs/deployment.md")).unwrap();
    let sed = doc
        .lines()
        .find(|l| l.starts_with("sed -i 's|") && l.contains(RUNBOOK))
        .expect("docs/deployment.md documents the sed");
    let dir = tempfile::tempdir().unwrap();
    let files = [
        "deploy/prometheus/rules.yaml",
        "deploy/kubernetes/components/dashboard/ragwatch-dashboard.json",
    ];
    for f in files {
        assert!(sed.contains(f), "{sed}");
        let to = dir.path().join(f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(repo().join(f), &to).unwrap();
    }
    run_ok(
        Command::new("sh")
            .arg("-c")
            .arg(sed)
            .current_dir(dir.path()),
    );
    let rules = dir.path().join(files[0]);
    run_ok(
        Command::new("promtool")
            .arg("check")
            .arg("rules")
            .arg(&rules),
    );
    let rules = std::fs::read_to_string(&rules).unwrap();
    let dash = std::fs::read_to_string(dir.path().join(files[1])).unwrap();
    for text in [&rules, &dash] {
        assert!(!text.contains(RUNBOOK));
    }
    assert_eq!(
        rules.matches(&format!("{mine}#ragwatch")).count(),
        shipped.len()
    );
    let dash: Value = serde_json::from_str(&dash).unwrap();
    assert_eq!(runbook_variable(&dash), mine);
}
