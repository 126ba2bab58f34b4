//! The one-way layering of `src/lib.rs`'s module map, checked: every `crate::<module>` a module's
//! code names (outside its `#[cfg(test)]` tests) must be in the same layer or one below. An upward
//! edge is how dependency circles start, so this test lists each one it finds.

use std::collections::BTreeSet;
use std::path::Path;

/// Layers from the bottom up; a module may use its own layer and the ones before it.
const LAYERS: &[&[&str]] = &[
    &["section", "dimensions", "clock"],
    &[SECTIONS],
    &["trace", "redact"],
    &["eval", "audit"],
    &["sample", "judge", "window", "changes"],
    &["metrics"],
    &["events", "export"],
    &["recorder", "review"],
    &["pipeline"],
    &["fleet"],
    &["source"],
    &["config"],
    &["http", "app", "replay", "gate", "fuzzing", "rules"],
];

/// The layer of every component's sections, wherever they sit beside their component.
const SECTIONS: &str = "<component>/config.rs";

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's code without its `#[cfg(test)]` items: each such item (a `mod tests { .. }`, a function,
/// a `use`) is cut from the attribute to its closing brace or semicolon, so code that follows a
/// test module is read too. Braces are counted outside string and char literals and comments.
fn non_test_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        rest = &rest[i + "#[cfg(test)]".len()..];
        rest = &rest[item_end(rest)..];
    }
    out.push_str(rest);
    out
}

/// The byte just past the item that starts `text`: its first `;` at depth 0, or its closing brace.
fn item_end(text: &str) -> usize {
    let b = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0);
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                i += text[i..].find('\n').unwrap_or(text.len() - i);
                continue;
            }
            // A raw string: r"..", r#".."#, to its closing quote and hashes.
            b'r' if (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
                && matches!(b.get(i + 1), Some(b'"' | b'#')) =>
            {
                let hashes = text[i + 1..].bytes().take_while(|&c| c == b'#').count();
                if b.get(i + 1 + hashes) == Some(&b'"') {
                    let close = format!("\"{}", "#".repeat(hashes));
                    let body = i + 2 + hashes;
                    i = text[body..]
                        .find(&close)
                        .map_or(b.len(), |j| body + j + close.len());
                    continue;
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                i += text[i + 2..].find('\'').map_or(0, |j| j + 2);
            }
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// The layer a `crate::` path names: its top module, or [`SECTIONS`] for a path through a
/// component's `config` module (`crate::source::kafka::config::KafkaConfig`): a component's
/// sections are plain data on the floor above the ground, wherever they sit beside their
/// component. `crate::config` itself, the whole file, is gathered above the components.
fn named_module(path: &str) -> String {
    let head = path.split('{').next().unwrap_or("");
    let segments: Vec<&str> = head.split("::").map(str::trim).collect();
    if segments[0] != "config" && segments.contains(&"config") {
        SECTIONS.to_owned()
    } else {
        segments[0].to_owned()
    }
}

/// The `crate::<name>` references of a file's non-test code, and `super::` references that climb
/// out of a top-level module's folder are not possible, so `crate::` is the whole story.
fn references(text: &str) -> BTreeSet<String> {
    let code = &non_test_code(text);
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        // Skip `ragwatch::` style and doc links inside comments alike: both name the module too,
        // and a doc link to a higher module is an upward edge in the reader's head.
        let rest = &code[i + "crate::".len()..];
        let path: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        if !path.is_empty() {
            out.insert(named_module(&path));
        }
        if let Some(braced) = rest.strip_prefix('{') {
            // `use crate::{a, b::c, d::{e, f}}`: every item at the top of the braces.
            let mut depth = 0;
            let mut current = String::new();
            for c in braced.chars().take_while(|c| *c != ';') {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(named_module(&current));
                        current.clear();
                        continue;
                    }
                    _ => {}
                }
                current.push(c);
            }
            if !current.trim().is_empty() {
                out.insert(named_module(&current));
            }
        }
    }
    out
}

/// A component's config file (`<component>/config.rs`, or a `config/` folder beside it) is in the
/// [`SECTIONS`] layer: it holds the section's types, defaults and checks, and uses nothing above them.
fn file_layer_module(rel: &Path, top: &str) -> String {
    let in_config = rel.components().any(|c| c.as_os_str() == "config")
        || rel.file_name().is_some_and(|f| f == "config.rs");
    if top != "config" && in_config {
        SECTIONS.to_owned()
    } else {
        top.to_owned()
    }
}

#[test]
fn no_module_uses_a_module_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = Vec::new();
    let mut unknown = BTreeSet::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "lib" || top == "main" {
            continue;
        }
        let top = file_layer_module(rel, &top);
        let Some(from) = layer(&top) else {
            unknown.insert(top);
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for name in references(&text) {
            let file = rel.to_string_lossy().replace('\\', "/");
            match layer(&name) {
                Some(to) if to > from => {
                    upward.push(format!(
                        "{file} (layer {from}) uses crate::{name} (layer {to})"
                    ));
                }
                Some(_) => {}
                None => {
                    unknown.insert(name);
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "modules missing from the layer table (add them to LAYERS and to the map in src/lib.rs): {unknown:?}"
    );
    assert!(
        upward.is_empty(),
        "upward dependencies:\n{}",
        upward.join("\n")
    );
}

#[test]
fn code_after_a_test_module_is_read() {
    let text = "use crate::dimensions::Quality;\n#[cfg(test)]\nmod tests {\n    use crate::app::X;\n    fn f() { let s = \"}\"; let c = '}'; let r = r#\"}\"#; }\n}\npub fn g() { crate::source::x(); }\n#[cfg(test)]\nuse crate::http::Y;\nfn h() { crate::clock::now_ms(); }\n";
    assert_eq!(
        references(text).into_iter().collect::<Vec<_>>(),
        vec!["clock", "dimensions", "source"]
    );
}

#[test]
fn the_reference_scanner_sees_grouped_imports() {
    let r = references(
        "use crate::{config::Config, dimensions::{Quality, JudgeKind}, source::kafka::config::KafkaConfig};\nfn f() { crate::clock::now_ms(); crate::judge::llm::config::LlmConfig::default(); }",
    );
    assert_eq!(
        r.into_iter().collect::<Vec<_>>(),
        vec![SECTIONS, "clock", "config", "dimensions"]
    );
}

/// The layer table in `src/lib.rs`'s docs, top layer first: the first column of its text block.
fn documented_layers() -> Vec<Vec<String>> {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let after = lib.split("# Layers").nth(1).expect("a # Layers section");
    let block = after
        .split("```text")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    block
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let names = l.split("  ").next().unwrap();
            names.split(',').map(|n| n.trim().to_owned()).collect()
        })
        .collect()
}

#[test]
fn the_documented_layers_are_the_checked_ones() {
    let sorted = |mut l: Vec<String>| {
        l.sort();
        l
    };
    let documented: Vec<Vec<String>> = documented_layers().into_iter().rev().map(sorted).collect();
    let checked: Vec<Vec<String>> = LAYERS
        .iter()
        .map(|l| sorted(l.iter().map(|s| s.to_string()).collect()))
        .collect();
    assert_eq!(
        documented, checked,
        "src/lib.rs's layer table and LAYERS differ"
    );
}

/// The variants of `dimensions::Quality` with their label names, read from `src/dimensions.rs`.
fn metrics() -> Vec<(String, String)> {
    let labels =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/dimensions.rs"))
            .unwrap();
    let body = labels
        .split("pub enum Quality {")
        .nth(1)
        .unwrap()
        .split('}')
        .next()
        .unwrap();
    let variants: Vec<String> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.is_empty())
        .map(|l| l.trim_end_matches(',').to_owned())
        .collect();
    variants
        .into_iter()
        .map(|v| {
            // CamelCase -> snake_case, as `#[serde(rename_all = "snake_case")]` names it.
            let mut name = String::new();
            for (i, c) in v.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_lowercase());
            }
            (v, name)
        })
        .collect()
}

/// Adding a judge metric touches `dimensions.rs` (the variant and its row), the judges that score it
/// and the docs: no other module's code names a particular metric, except the diagnosis, whose
/// rule is about particular metrics by design (a new metric need not join it).
#[test]
fn only_the_dimensions_and_the_judges_name_a_particular_metric() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let metrics = metrics();
    assert!(metrics.len() >= 3, "{metrics:?}");
    let allowed = |rel: &str| {
        rel == "dimensions.rs" || rel.starts_with("judge/") || rel == "window/diagnosis.rs"
    };
    let mut found = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if allowed(&rel) {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let code = non_test_code(&text);
        for (variant, name) in &metrics {
            for needle in [
                format!("Quality::{variant}"),
                format!("\"{name}\""),
                format!("ragwatch_{name}_ratio"),
            ] {
                if code.contains(&needle) {
                    found.push(format!("{rel}: {needle}"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "code outside dimensions.rs and the judges names a metric:\n{}",
        found.join("\n")
    );
}
