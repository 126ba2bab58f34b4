//! The README and the book in `docs/` held to the code: every relative link and anchor resolves,
//! every repository path named in a code span exists, every alert has its runbook section, every config key and every exported metric family has its
//! entry, the architecture page carries `src/lib.rs`'s layer map, and no development diary (work
//! sessions, issue numbers, times of day) is left in what a user reads. No network; one test starts
//! the binary on the bundled sample.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{Ragwatch, wait_for};

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` (recursively) whose name ends with `ext` (all files for `""`).
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(ext) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The README and every page of the book.
fn markdown() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    out.extend(files(&root().join("docs"), ".md"));
    out
}

/// The lines of a Markdown text outside fenced code blocks, with their 1-based numbers.
pub(crate) fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// `line` without its inline code spans.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The anchor mdBook gives a heading: its text without markup, lower case, whitespace to `-`,
/// every character other than letters, digits, `-` and `_` dropped.
fn slug(heading: &str) -> String {
    // Link text stays, the target goes: `[text](target)` -> `text`.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find("](") {
        let close = rest[open..].find(')').map_or(rest.len(), |c| open + c + 1);
        text.push_str(&rest[..open]);
        rest = &rest[close..];
    }
    text.push_str(rest);
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a Markdown file's headings, numbered as mdBook numbers repeated ones.
fn anchors(path: &Path) -> BTreeSet<String> {
    let text = read(path);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(&text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_default();
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` of a Markdown file, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(open) = rest.find("](") {
            let after = &rest[open + 2..];
            let Some(close) = after.find(')') else { break };
            let target = after[..close].split_whitespace().next().unwrap_or("");
            out.push((n, target.to_owned()));
            rest = &after[close..];
        }
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for file in markdown() {
        let text = read(&file);
        let dir = file.parent().unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            let at = format!("{}:{line}: {target}", file.display());
            if !resolved.exists() {
                broken.push(format!("{at}: no such file"));
            } else if !anchor.is_empty() {
                if resolved.extension().is_none_or(|e| e != "md") {
                    broken.push(format!("{at}: an anchor into a file that is not Markdown"));
                } else if !anchors(&resolved).contains(anchor) {
                    broken.push(format!("{at}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The inline code spans of `line`.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// A repository path that a code span names: it starts at one of the top-level folders, and is
/// cut at a test name (`::`), a line number (`:`) or an anchor (`#`). Spans with spaces, globs or
/// placeholders (`<...>`, `{...}`, `$VAR`) are commands or patterns, not paths.
fn named_path(span: &str) -> Option<&str> {
    const TOP: [&str; 8] = [
        "src/", "tests/", "benches/", "deploy/", "config/", "docs/", ".ci/", "fuzz/",
    ];
    if !TOP.iter().any(|t| span.starts_with(t))
        || span.contains(|c: char| c.is_whitespace() || "*<>{}$".contains(c))
    {
        return None;
    }
    let end = span.find([':', '#']).unwrap_or(span.len());
    Some(span[..end].trim_end_matches('/'))
}

#[test]
fn every_repository_path_named_in_the_docs_exists() {
    let mut missing = Vec::new();
    let mut named = 0;
    for file in markdown() {
        for (line, text) in prose(&read(&file)) {
            for path in code_spans(text).into_iter().filter_map(named_path) {
                named += 1;
                if !root().join(path).exists() {
                    missing.push(format!("{}:{line}: {path}", file.display()));
                }
            }
        }
    }
    assert!(
        named > 50,
        "only {named} paths found: the span parser is broken"
    );
    assert!(
        missing.is_empty(),
        "paths the docs name that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let summary = read(&root().join("docs/SUMMARY.md"));
    let listed: BTreeSet<String> = links(&summary).into_iter().map(|(_, t)| t).collect();
    for page in files(&root().join("docs"), ".md") {
        let name = page.strip_prefix(root().join("docs")).unwrap();
        let name = name.to_string_lossy().into_owned();
        if name != "SUMMARY.md" {
            assert!(
                listed.contains(&name),
                "docs/{name} is not in docs/SUMMARY.md"
            );
        }
    }
}

#[test]
fn the_readme_stays_a_front_door() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; the manual is docs/"
    );
}

/// The alerting rules' names, in file order.
fn alerts() -> Vec<String> {
    read(&root().join("deploy/prometheus/rules.yaml"))
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert:"))
        .map(|a| a.trim().to_owned())
        .collect()
}

#[test]
fn every_alert_has_a_runbook_section_at_its_lower_case_anchor() {
    let alerts = alerts();
    assert!(alerts.len() >= 10, "{alerts:?}");
    let runbook = read(&root().join("docs/runbook.md"));
    let sections: BTreeSet<&str> = prose(&runbook)
        .into_iter()
        .filter_map(|(_, l)| l.strip_prefix("## "))
        .map(str::trim)
        .collect();
    let anchors = anchors(&root().join("docs/runbook.md"));
    for alert in &alerts {
        assert!(
            sections.contains(alert.as_str()),
            "docs/runbook.md has no `## {alert}` section"
        );
        let anchor = alert.to_lowercase();
        assert!(
            anchors.contains(&anchor),
            "docs/runbook.md has no #{anchor}"
        );
    }
    // A runbook_url into the book names the alert's own section.
    let rules = read(&root().join("deploy/prometheus/rules.yaml"));
    let mut alert = "";
    for line in rules.lines().map(str::trim) {
        if let Some(a) = line.strip_prefix("- alert:") {
            alert = a.trim();
        } else if let Some(url) = line.strip_prefix("runbook_url:") {
            let url = url.trim().trim_matches('"');
            if let Some((_, target)) = url.split_once("/docs/") {
                let expected = format!("runbook.md#{}", alert.to_lowercase());
                assert_eq!(target, expected, "{alert}'s runbook_url");
            }
        }
    }
    // And no section for an alert that no longer exists.
    for section in sections.iter().filter(|s| s.starts_with("Ragwatch")) {
        assert!(
            alerts.iter().any(|a| a == section),
            "docs/runbook.md has a section for {section}, which deploy/prometheus/rules.yaml does not define"
        );
    }
}

/// The keys of the struct at `path` named by the error that an unknown key there causes, or why
/// there is no struct there.
enum Probe {
    /// A struct with these fields.
    Fields(Vec<String>),
    /// A map keyed by one of these variants.
    Variants(Vec<String>),
    /// Anything else: a value, a list of values, a map of strings.
    Leaf,
}

/// Parses `toml` as a whole config and reads the expected names from the error.
fn probe_text(toml: &str) -> Probe {
    let Err(e) = toml::from_str::<ragwatch::config::Config>(toml) else {
        return Probe::Leaf;
    };
    let message = e.to_string();
    let names = |after: &str| -> Vec<String> {
        let tail = &message[message.find(after).unwrap() + after.len()..];
        let tail = tail.lines().next().unwrap_or("");
        let tail = &tail[tail.find("expected").map_or(tail.len(), |i| i + 8)..];
        tail.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    if message.contains("unknown field `zz_probe`") {
        Probe::Fields(names("unknown field `zz_probe`"))
    } else if message.contains("unknown variant `zz_probe`") {
        Probe::Variants(names("unknown variant `zz_probe`"))
    } else {
        Probe::Leaf
    }
}

/// One step of a key path: its name in TOML, whether it is an array of tables, and how the docs
/// write it.
#[derive(Clone)]
struct Step {
    toml: String,
    array: bool,
    doc: String,
}

/// Probes the table at `path` (as a table, then as an array of tables).
fn probe(path: &[Step]) -> (Probe, bool) {
    let text = |last_array: bool| {
        let mut out = String::new();
        for i in 0..path.len() {
            let name: Vec<&str> = path[..=i].iter().map(|s| s.toml.as_str()).collect();
            let name = name.join(".");
            let array = if i + 1 == path.len() {
                last_array
            } else {
                path[i].array
            };
            if array {
                out.push_str(&format!("[[{name}]]\n"));
            } else if i + 1 == path.len() {
                out.push_str(&format!("[{name}]\n"));
            }
        }
        out.push_str("zz_probe = 1\n");
        out
    };
    match probe_text(&text(false)) {
        Probe::Leaf => match probe_text(&text(true)) {
            Probe::Leaf => (Probe::Leaf, false),
            p => (p, true),
        },
        p => (p, false),
    }
}

/// Every key of the config, as the docs write it (`kafka.brokers`,
/// `drift.rules.<metric>.<judge>.floor`), found from the config types themselves.
fn config_keys() -> BTreeSet<String> {
    let Probe::Fields(sections) = probe_text("zz_probe = 1\n") else {
        panic!("the config rejects unknown top-level keys")
    };
    assert!(sections.len() >= 15, "{sections:?}");
    let mut keys = BTreeSet::new();
    let mut stack: Vec<Vec<Step>> = sections
        .into_iter()
        .map(|s| {
            vec![Step {
                toml: s.clone(),
                array: false,
                doc: s,
            }]
        })
        .collect();
    while let Some(path) = stack.pop() {
        assert!(path.len() < 8, "runaway probe");
        let doc: Vec<&str> = path.iter().map(|s| s.doc.as_str()).collect();
        let doc = doc.join(".");
        let (found, array) = probe(&path);
        let mut path = path;
        path.last_mut().unwrap().array = array;
        match found {
            Probe::Fields(fields) => {
                if path.len() > 1 && !doc.ends_with('>') {
                    keys.insert(doc);
                }
                for f in fields {
                    let mut next = path.clone();
                    next.push(Step {
                        toml: f.clone(),
                        array: false,
                        doc: f,
                    });
                    stack.push(next);
                }
            }
            Probe::Variants(variants) => {
                // A map keyed by an enum (`drift.rules.<metric>`), or a field whose value is an
                // enum, which also names its variants when given a table: only the map has a
                // table under a variant.
                let mut under = path.clone();
                under.push(Step {
                    toml: variants[0].clone(),
                    array: false,
                    doc: String::new(),
                });
                let enum_value = matches!(probe(&under).0, Probe::Leaf);
                if !doc.ends_with('>') {
                    keys.insert(doc);
                }
                if enum_value {
                    continue;
                }
                let placeholder = if variants.iter().any(|v| v == "faithfulness") {
                    "<metric>"
                } else if variants.iter().any(|v| v == "combined") {
                    "<judge>"
                } else {
                    "<key>"
                };
                let mut next = path.clone();
                next.push(Step {
                    toml: variants[0].clone(),
                    array: false,
                    doc: placeholder.to_owned(),
                });
                stack.push(next);
            }
            Probe::Leaf => {
                keys.insert(doc);
            }
        }
    }
    keys
}

#[test]
fn every_config_key_has_an_entry_in_the_configuration_page() {
    let keys = config_keys();
    for expected in [
        "source.kind",
        "kafka.properties",
        "decode.mapping.contexts",
        "strata.rules.query_regex",
        "drift.rules.<metric>.<judge>.floor",
        "llm.trace_deadline_ms",
        "write.tls.cert_file",
        "redact.patterns.regex",
        "audit.families",
    ] {
        assert!(
            keys.contains(expected),
            "the probe missed {expected}: {keys:?}"
        );
    }
    let page = read(&root().join("docs/configuration.md"));
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !page.contains(&format!("`{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md has no entry for {missing:?}"
    );
    // And no entry for a key that does not exist.
    let sections: BTreeSet<&str> = keys.iter().map(|k| k.split('.').next().unwrap()).collect();
    for (n, line) in prose(&page) {
        let Some(cell) = line.strip_prefix("| `") else {
            continue;
        };
        let key = &cell[..cell.find('`').unwrap()];
        if key.contains('.') && sections.contains(key.split('.').next().unwrap()) {
            assert!(
                keys.contains(key) || keys.iter().any(|k| k.starts_with(&format!("{key}."))),
                "docs/configuration.md:{n} documents `{key}`, which the config does not have"
            );
        }
    }
}

/// The metric families the source declares: every `"ragwatch_..."` name in the files that hold them.
fn declared_families() -> BTreeSet<String> {
    let mut sources = files(&root().join("src/metrics"), ".rs");
    sources.push(root().join("src/dimensions.rs"));
    let name = regex::Regex::new(r#""(ragwatch_[a-z0-9_]+)""#).unwrap();
    sources
        .iter()
        .flat_map(|f| {
            name.captures_iter(&read(f))
                .map(|c| c[1].to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The families documented in docs/metrics.md's tables (`ragwatch_*` and `process_*`), with their type.
pub(crate) fn documented_families() -> BTreeMap<String, String> {
    let page = read(&root().join("docs/metrics.md"));
    let mut out = BTreeMap::new();
    for (n, line) in prose(&page) {
        // ragwatch's own families and the standard process ones.
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        if !(rest.starts_with("ragwatch_") || rest.starts_with("process_")) {
            continue;
        }
        let cells: Vec<&str> = rest.split('|').map(str::trim).collect();
        let name = cells[0].trim_end_matches('`').to_owned();
        let kind = cells.get(1).copied().unwrap_or("").to_owned();
        assert!(
            ["counter", "gauge", "histogram"].contains(&kind.as_str()),
            "docs/metrics.md:{n}: `{name}` has no type"
        );
        assert!(
            out.insert(name.clone(), kind).is_none(),
            "docs/metrics.md:{n}: `{name}` twice"
        );
    }
    out
}

#[test]
fn the_metrics_page_lists_every_family_that_metrics_exports() {
    let rw = Ragwatch::start(&root().join("config/ragwatch.toml"), &[]);
    let text = wait_for(
        "the sample's window gauges",
        Duration::from_secs(60),
        || {
            rw.scrape()
                .filter(|t| t.contains("ragwatch_window_mean_ratio{"))
        },
    );
    let exported: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            (name.to_owned(), kind.trim().to_owned())
        })
        .collect();
    assert!(exported.len() >= 30, "{exported:?}");
    let documented = documented_families();
    let declared = declared_families();
    for (name, kind) in &exported {
        let doc = documented.get(name).unwrap_or_else(|| {
            panic!("/metrics exports {name}, which docs/metrics.md does not list")
        });
        assert_eq!(
            doc, kind,
            "{name}: docs/metrics.md says {doc}, /metrics says {kind}"
        );
    }
    for name in documented.keys() {
        assert!(
            exported.contains_key(name) || declared.contains(name),
            "docs/metrics.md lists {name}, which ragwatch neither exports nor declares"
        );
    }
    for name in &declared {
        assert!(
            documented.contains_key(name),
            "the source declares {name}, which docs/metrics.md does not list"
        );
    }
}

#[test]
fn the_architecture_page_carries_the_layer_map_of_lib_rs() {
    let lib = read(&root().join("src/lib.rs"));
    let doc: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let doc = doc.join("\n");
    let layers = &doc[doc
        .find("# Layers")
        .expect("a Layers section in src/lib.rs")..];
    let start = layers.find("```text\n").unwrap() + "```text\n".len();
    let block = &layers[start..start + layers[start..].find("```").unwrap()];
    assert!(block.lines().count() >= 5, "{block}");
    let page = read(&root().join("docs/architecture.md"));
    assert!(
        page.contains(block),
        "docs/architecture.md does not carry src/lib.rs's layer map as it is:\n{block}"
    );
}

/// Phrases of a development diary, which belongs in `git log` and CHANGELOG.md, not in what a user
/// reads: work sessions and rounds, issue numbers, times of day, a slow or fast hour of the
/// machine, build-to-build comparisons.
const DIARY: &[&str] = &[
    r"(?i)\bsessions? \d+",
    r"(?i)\bissues? #?\d+",
    r"(?i)\b(pr|pull request)s? #\d+",
    r"(^|[\s(\[,])#\d+\b",
    r"(?i)\brounds? \d+\b",
    r"(?i)tried and dropped",
    r"(?i)\b(at|around|from|until) ([01]?\d|2[0-3]):[0-5]\d\b",
    r"\b\d{1,2}:\d{2}-\d{1,2}:\d{2}\b",
    r"(?i)\b(slow|fast|busy|quiet)(er)? (quarter-)?hour\b",
    r"(?i)quarter-hour",
    r"(?i)\bthe build before\b",
    r"(?i)\bprevious build\b",
];

#[test]
fn no_development_diary_in_what_a_user_reads() {
    let patterns: Vec<regex::Regex> = DIARY
        .iter()
        .map(|p| regex::Regex::new(p).unwrap())
        .collect();
    let mut scanned: Vec<(PathBuf, bool)> = vec![(root().join("README.md"), false)];
    for dir in ["docs", "config", "deploy"] {
        scanned.extend(files(&root().join(dir), "").into_iter().map(|f| (f, false)));
    }
    // Source: the comments only.
    scanned.extend(
        files(&root().join("src"), ".rs")
            .into_iter()
            .map(|f| (f, true)),
    );
    let mut hits = Vec::new();
    for (file, comments_only) in scanned {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not text
        };
        for (i, line) in text.lines().enumerate() {
            let line = if comments_only {
                match line.find("//") {
                    Some(at) => &line[at..],
                    None => continue,
                }
            } else {
                line
            };
            if patterns.iter().any(|p| p.is_match(line)) {
                let shown = file.strip_prefix(root()).unwrap_or(&file);
                hits.push(format!("{}:{}: {}", shown.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "development history belongs in git log and CHANGELOG.md:\n{}",
        hits.join("\n")
    );
}

#[test]
fn the_slug_is_mdbooks() {
    assert_eq!(
        slug("RagwatchFaithfulnessBelowFloor"),
        "ragwatchfaithfulnessbelowfloor"
    );
    assert_eq!(
        slug("Offline judge (every trace, zero cost)"),
        "offline-judge-every-trace-zero-cost"
    );
    assert_eq!(
        slug("`judge=\"llm\"`: the raw sample"),
        "judgellm-the-raw-sample"
    );
    assert_eq!(slug("Can I trust the judge?"), "can-i-trust-the-judge");
    assert_eq!(slug("[Link](x.md) text"), "link-text");
}

#[test]
fn every_tunable_threshold_is_documented_with_its_shipped_value() {
    let doc = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let thresholds = ragwatch::rules::thresholds();
    assert!(!thresholds.is_empty());
    for t in thresholds {
        let row = format!("| `{}` | `{}` |", t.key(), t.default);
        assert!(doc.contains(&row), "docs/operations.md lacks the row {row}");
    }
}
