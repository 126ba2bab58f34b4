//! deploy/ against the tools that read it: the rules pass promtool (syntax and unit tests) and the
//! PrometheusRule carries exactly the plain rules (`rules.rs`); the Alertmanager example routes
//! only ragwatch's alerts (`alertmanager.rs`); every kustomize overlay renders and validates
//! against the Kubernetes schemas, without traps (no Secret and no Prometheus Operator object
//! unless opted into, a config change rolls the pods, one place for the `release` label), and
//! ragwatch's container is restricted on its own (`overlays.rs`); the runbook's address is one
//! setting (`runbook.rs`); the NetworkPolicy selects the install (`network_policy.rs`); and every
//! dashboard query returns data from a real Prometheus scraping ragwatch (`dashboard.rs`).
//!
//! What needs no tool is in the plain tier: the image's recipe (tests/it/image_recipe.rs), the
//! logs (tests/it/logs.rs), the dashboard as a file (tests/it/dashboard.rs) and the shipped
//! config (tests/it/cli.rs).

mod alertmanager;
mod dashboard;
mod network_policy;
mod overlays;
mod rules;
mod runbook;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::manifests;
use crate::common::{repo, run_ok};

fn python(script: &str, args: &[&str]) -> String {
    let out = run_ok(
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .current_dir(repo()),
    );
    String::from_utf8(out.stdout).unwrap()
}

const WORKLOADS: [&str; 3] = ["standalone", "sidecar", "native-sidecar"];

fn kustomize(dir: &Path) -> String {
    let out = run_ok(Command::new("kubectl").arg("kustomize").arg(dir));
    String::from_utf8(out.stdout).unwrap()
}

fn render(overlay: &str) -> String {
    kustomize(&repo().join("deploy/kubernetes/overlays").join(overlay))
}

/// Renders `overlay` as a user's own overlay would use it: with the monitoring component, and
/// `extra` appended to the kustomization (e.g. the user's own `release` patch).
fn render_with_monitoring(overlay: &str, extra: &str) -> String {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Kustomize takes relative paths only: climb from the temporary directory to `/`.
    let up = "../".repeat(dir.path().components().count() - 1);
    let repo = format!(
        "{up}{}",
        repo().display().to_string().trim_start_matches('/')
    );
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {repo}/deploy/kubernetes/overlays/{overlay}\ncomponents:\n  - {repo}/deploy/kubernetes/components/monitoring\n{extra}"
        ),
    )
    .unwrap();
    kustomize(dir.path())
}

fn check(name: &str, rendered: &str) -> Value {
    manifests::check(name, rendered, None)
}

fn has_kind(v: &Value, kind: &str) -> bool {
    v["kinds"].as_array().unwrap().iter().any(|k| k == kind)
}

/// Writes a kustomization into a fresh directory under the test target directory, with `{repo}`
/// standing for the repository as a relative path (kustomize takes relative paths only).
fn user_overlay(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let up = "../".repeat(dir.path().components().count() - 1);
    let repo = format!(
        "{up}{}",
        repo().display().to_string().trim_start_matches('/')
    );
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text.replace("{repo}", &repo)).unwrap();
    }
    dir
}

/// The second install of docs/deployment.md ("Two installs in one namespace"), as a user copies it.
fn documented_second_install() -> String {
    let doc = std::fs::read_to_string(repo().join("docs/deployment.md")).unwrap();
    let start = doc
        .find("```yaml\n# payments/kustomization.yaml\n")
        .expect("docs/deployment.md shows a second install");
    let block = &doc[start + "```yaml\n".len()..];
    block[..block.find("```").unwrap()].replace("../deploy/", "{repo}/deploy/")
}
