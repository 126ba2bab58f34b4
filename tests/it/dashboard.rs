//! The Grafana dashboard as a file: well formed, every panel described with one unit, an overview
//! first and a row repeated per stratum, no two panels on one grid cell, every runbook link an
//! anchor that exists, and the runbook's address named once. (Its queries against a real
//! Prometheus, and what the alerts read, are in tests/it/deploy/dashboard.rs.)

use serde_json::{Value, json};

use crate::common::repo;

pub(crate) fn dashboard() -> Value {
    let text =
        std::fs::read_to_string(repo().join("deploy/grafana/ragwatch-dashboard.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub(crate) fn exprs(panel: &Value) -> Vec<&str> {
    panel["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["expr"].as_str().unwrap())
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn dashboard_is_well_formed_described_and_one_unit_per_panel() {
    let d = dashboard();
    let copy: Value = serde_json::from_str(
        &std::fs::read_to_string(
            repo().join("deploy/kubernetes/components/dashboard/ragwatch-dashboard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(d, copy, "the kustomize copy of the dashboard differs");
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for v in ["cluster", "namespace", "pod", "stratum"] {
        assert!(vars.contains(&v), "variable {v}");
    }
    // The cluster variable works without a cluster label: its All matches a missing label.
    let cluster = &d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "cluster")
        .unwrap();
    assert_eq!(cluster["includeAll"], true);
    assert_eq!(cluster["allValue"], ".*");
    assert_eq!(cluster["current"]["value"], json!(["$__all"]));
    let panels = d["panels"].as_array().unwrap();
    let (rows, graphs): (Vec<&Value>, Vec<&Value>) =
        panels.iter().partition(|p| p["type"] == "row");
    assert!(graphs.len() >= 12);
    for row in &rows {
        // Open rows keep their panels at the top level, where the query checks find them.
        assert_eq!(row["collapsed"], false, "{}", row["title"]);
        assert!(row["targets"].as_array().unwrap().is_empty());
    }
    let mut ids = std::collections::HashSet::new();
    for p in &graphs {
        let title = p["title"].as_str().unwrap();
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "duplicate id: {title}"
        );
        assert!(!exprs(p).is_empty(), "{title}: no query");
        assert!(
            p["description"].as_str().is_some_and(|s| s.len() > 40),
            "{title}: no description"
        );
        // Exactly one unit: set once for the panel, never overridden per series.
        let unit = p["fieldConfig"]["defaults"]["unit"].as_str().unwrap_or("");
        assert!(!unit.is_empty(), "{title}: no unit");
        for o in p["fieldConfig"]["overrides"].as_array().unwrap() {
            for prop in o["properties"].as_array().unwrap() {
                assert_ne!(prop["id"], "unit", "{title}: a second unit");
            }
        }
        if unit == "percentunit" {
            for e in exprs(p) {
                assert!(
                    !e.contains("samples") && !e.contains("_total"),
                    "{title}: a count on a ratio axis: {e}"
                );
            }
        }
    }
    // Rates of traces are traces per second, not requests.
    for p in &graphs {
        let unit = &p["fieldConfig"]["defaults"]["unit"];
        assert_ne!(unit, "reqps", "{}", p["title"]);
        if exprs(p).iter().any(|e| {
            ["received", "sampled", "skipped"]
                .iter()
                .any(|c| e.contains(&format!("rate(ragwatch_traces_{c}_total")))
        }) {
            assert_eq!(unit, "suffix: traces/s", "{}", p["title"]);
        }
    }
}

#[test]
fn dashboard_opens_with_an_overview_and_repeats_per_stratum() {
    let d = dashboard();
    let panels = d["panels"].as_array().unwrap();
    assert_eq!(panels[0]["type"], "row");
    let overview: Vec<&Value> = panels[1..]
        .iter()
        .take_while(|p| p["type"] != "row")
        .collect();
    assert!(overview.iter().all(|p| p["type"] == "stat"));
    let all: String = overview
        .iter()
        .flat_map(|p| exprs(p))
        .collect::<Vec<_>>()
        .join("\n");
    for needle in [
        "ragwatch:faithfulness:combined_mean_5m{",
        "ragwatch:threshold_floor:ratio{",
        "ALERTS{alertstate=\"firing\", alertname=~\"Ragwatch.*\"",
        "ragwatch_traces_received_total",
        "ragwatch_judge_tokens_total",
        "ragwatch_budget_remaining_tokens",
    ] {
        assert!(all.contains(needle), "the overview lacks {needle}");
    }
    let repeated: Vec<&Value> = panels
        .iter()
        .filter(|p| p["type"] == "row" && p["repeat"] == "stratum")
        .collect();
    assert_eq!(repeated.len(), 1);
    // The combined estimate with its interval band and its floor, per judge thresholds elsewhere.
    let band = panels
        .iter()
        .find(|p| {
            let e = exprs(p).join("\n");
            e.contains("ragwatch:faithfulness:combined_lower_5m")
                && e.contains("ragwatch:faithfulness:combined_upper_5m")
        })
        .expect("an interval band");
    let e = exprs(band).join("\n");
    assert!(e.contains("ragwatch:faithfulness:combined_mean_5m"), "{e}");
    assert!(e.contains("ragwatch:threshold_floor:ratio") && e.contains("judge=\"combined\""));
    assert!(band.to_string().contains("custom.fillBelowTo"));
    // The headline stat is coloured at the floor: its threshold comes from the floor's series.
    let headline = panels[1..]
        .iter()
        .find(|p| exprs(p).iter().any(|e| e.contains("combined_mean_5m")))
        .unwrap();
    let t = &headline["transformations"][0];
    assert_eq!(t["id"], "configFromData", "{headline}");
    let config_ref = t["options"]["configRefId"].as_str().unwrap();
    let config_query = headline["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["refId"] == config_ref)
        .unwrap();
    assert!(
        config_query["expr"]
            .as_str()
            .unwrap()
            .contains("ragwatch:threshold_floor:ratio"),
        "{config_query}"
    );
    assert_eq!(t["options"]["mappings"][0]["handlerKey"], "threshold1");
    let floors: Vec<&str> = panels
        .iter()
        .flat_map(exprs)
        .filter(|e| e.contains("ragwatch:threshold_floor:ratio"))
        .collect();
    assert!(floors.len() >= 3);
    for f in floors {
        assert!(f.contains("judge"), "a threshold without its judge: {f}");
    }
}

/// No two panels (rows included: a row spans the width, one unit high) share a grid cell.
#[test]
fn dashboard_panels_do_not_overlap() {
    let d = dashboard();
    let rects: Vec<(String, [u64; 4])> = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let g = &p["gridPos"];
            let v = |k: &str| g[k].as_u64().unwrap();
            (
                p["title"].as_str().unwrap().to_owned(),
                [v("x"), v("y"), v("w"), v("h")],
            )
        })
        .collect();
    for (title, [x, _, w, _]) in &rects {
        assert!(x + w <= 24, "{title} is wider than the grid");
    }
    for (i, (a, [ax, ay, aw, ah])) in rects.iter().enumerate() {
        for (b, [bx, by, bw, bh]) in &rects[i + 1..] {
            let apart = ax + aw <= *bx || bx + bw <= *ax || ay + ah <= *by || by + bh <= *ay;
            assert!(apart, "{a} overlaps {b}");
        }
    }
}

#[test]
fn dashboard_links_to_runbook_anchors_that_exist() {
    // The headings of a page of the book, as anchors (fenced code skipped: a `#` there is a comment).
    let anchors_of = |page: &str| -> Vec<String> {
        let text = std::fs::read_to_string(repo().join(page))
            .unwrap_or_else(|e| panic!("the dashboard links to {page}, which cannot be read: {e}"));
        let mut fenced = false;
        text.lines()
            .filter(|l| {
                if l.trim_start().starts_with("```") {
                    fenced = !fenced;
                }
                !fenced
            })
            .filter_map(|l| l.strip_prefix('#'))
            .map(|h| anchor(h.trim_start_matches('#')))
            .collect()
    };
    let d = dashboard();
    let mut urls: Vec<String> = d["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["url"].as_str().unwrap().to_owned())
        .collect();
    let panels = d["panels"].as_array().unwrap();
    let linked = panels.iter().filter(|p| p["links"].is_array()).count();
    assert!(linked >= 10, "{linked} panels link to the runbook");
    for p in panels {
        for l in p["links"].as_array().into_iter().flatten() {
            urls.push(l["url"].as_str().unwrap().to_owned());
        }
    }
    let runbook = runbook_variable(&d).to_owned();
    for url in urls {
        let url = url.replace("${runbook}", &runbook);
        let (_, target) = url
            .split_once("/blob/main/")
            .unwrap_or_else(|| panic!("{url} is not a link into the repository"));
        let (page, a) = target.split_once('#').unwrap();
        assert!(page.starts_with("docs/"), "{url} points outside the book");
        assert!(
            anchors_of(page).iter().any(|x| x == a),
            "{page} has no #{a}"
        );
    }
}

pub(crate) const RUNBOOK: &str = "https://github.com/ragwatch/ragwatch/blob/main/docs/runbook.md";

/// The dashboard's hidden constant variable `runbook`: the runbook's address, the one place the
/// dashboard names it.
pub(crate) fn runbook_variable(dash: &Value) -> &str {
    let found: Vec<&Value> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["name"] == "runbook")
        .collect();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["type"], "constant");
    assert_eq!(found[0]["hide"], 2, "hidden");
    found[0]["query"].as_str().unwrap()
}

/// The dashboard names the runbook's address once, in its `runbook` variable, and every runbook
/// link is that variable and an anchor: no literal runbook address in a link.
#[test]
fn the_dashboard_names_the_runbook_address_once() {
    let text =
        std::fs::read_to_string(repo().join("deploy/grafana/ragwatch-dashboard.json")).unwrap();
    assert_eq!(text.matches(RUNBOOK).count(), 1);
    assert!(!text.contains("runbook.md#"), "a literal runbook link");
    let d = dashboard();
    assert_eq!(runbook_variable(&d), RUNBOOK);
    let links = text.matches("\"url\": \"${runbook}#").count();
    assert!(links >= 15, "{links} runbook links");
}
