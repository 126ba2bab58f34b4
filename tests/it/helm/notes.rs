//! What the chart tells a user: its notes name the Secret and the headless Service and print the
//! write tokens' Secret line; docs/deployment.md's values table is values.yaml's.

use std::process::Command;

use super::{chart, helm_python, objects, render, values_file};
use crate::common::{repo, run_ok};

/// The notes say where the key comes from and, with OTLP, which Service the Collector's
/// loadbalancing exporter resolves.
#[test]
fn the_notes_name_the_secret_and_the_headless_service() {
    let otlp = chart().join("ci/otlp-values.yaml");
    let (_, notes) = render("payments", &[otlp.to_str().unwrap()]).unwrap();
    assert!(notes.contains("ragwatch-secrets"), "{notes}");
    assert!(notes.contains("payments-ragwatch-otlp.rag"), "{notes}");
}

/// With OTLP, the notes print the exact line that creates the write tokens' Secret, whose absence
/// would leave the pods in ContainerCreating.
#[test]
fn the_notes_print_the_write_tokens_secret_line() {
    let values = values_file("otlp: {enabled: true, tokensSecret: my-tokens}\n");
    let (_, notes) = render("payments", &[values.path().to_str().unwrap()]).unwrap();
    assert!(
        notes.contains(
            "kubectl -n rag create secret generic my-tokens --from-file=tokens=./write-tokens"
        ),
        "{notes}"
    );
    let (_, notes) = render("payments", &[]).unwrap();
    assert!(!notes.contains("--from-file=tokens="), "{notes}");
}

/// docs/deployment.md's values table is the one values.yaml's `# --` comments give: every key,
/// its default and its description (tests/helm_chart.py values-table prints it).
#[test]
fn the_values_table_in_the_docs_is_values_yaml() {
    let python = helm_python();
    let out = run_ok(
        Command::new(python)
            .arg(repo().join("tests/helm_chart.py"))
            .args(["values-table", chart().to_str().unwrap()]),
    );
    let table = String::from_utf8(out.stdout).unwrap();
    let values = objects(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
        .pop()
        .unwrap();
    // Not toothless: every top-level key has its row or rows.
    for key in values.as_object().unwrap().keys() {
        assert!(
            table.contains(&format!("| `{key}` |")) || table.contains(&format!("| `{key}.")),
            "{key}"
        );
    }
    let doc = std::fs::read_to_string(repo().join("docs/deployment.md")).unwrap();
    let start = doc
        .find("<!-- values table: tests/helm_chart.py values-table -->\n")
        .expect("docs/deployment.md has the values table");
    let rest = &doc[start..];
    let body = &rest[rest.find('\n').unwrap() + 1..];
    let end = body.find("<!-- end of the values table -->").unwrap();
    assert_eq!(
        body[..end].trim(),
        table.trim(),
        "run: python tests/helm_chart.py values-table deploy/helm/ragwatch"
    );
}
