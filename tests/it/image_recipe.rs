//! The image's recipe, read without a container engine: the build context holds what the
//! Dockerfile's stages copy and nothing big, every file the crate embeds is copied, the default
//! build compiles from source onto distroless, every path the default command and its config name
//! is in the runtime image, and the image runs as a numeric non-root user and builds lean.
//! (tests/it/image.rs builds the image itself, with buildah.)

use crate::common::dockerfile::{Dockerfile, Stage};
use crate::common::repo;

fn dockerfile() -> Dockerfile {
    Dockerfile::read(&repo().join("deploy/Dockerfile"))
}

/// What `.dockerignore` lets into the build context: it excludes everything (`*`) and lets paths
/// back in with `!path`.
fn context_allows(path: &str) -> bool {
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(patterns.first(), Some(&"*"), "the context starts empty");
    let path = path.trim_start_matches("./").trim_end_matches('/');
    patterns
        .iter()
        .filter_map(|p| p.strip_prefix('!'))
        .any(|p| {
            let p = p.trim_end_matches('/');
            path == p || path.starts_with(&format!("{p}/"))
        })
}

/// The build context holds what the stages copy from it, and nothing big: not target/ nor .git.
/// The one file of target/ let in is the binary the `prebuilt` stage copies, there once a release
/// build made it.
#[test]
fn the_build_context_holds_what_the_build_copies_and_no_more() {
    let dockerfile = dockerfile();
    let context: Vec<String> = dockerfile
        .stages
        .iter()
        .flat_map(Stage::copies)
        .filter(|c| c.from.is_none())
        .flat_map(|c| c.sources)
        .collect();
    assert!(context.iter().any(|s| s == "src"), "{context:?}");
    for source in &context {
        if source.starts_with("target/") {
            assert_eq!(source, "target/release/ragwatch", "a build output");
        } else {
            assert!(repo().join(source).exists(), "COPY {source}: no such path");
        }
        assert!(
            context_allows(source),
            ".dockerignore keeps {source} out of the context"
        );
    }
    for big in ["target", "target/debug", ".git", "fuzz/corpus", "tests"] {
        assert!(!context_allows(big), ".dockerignore lets {big} in");
    }
}

/// The image builds from what the Dockerfile copies: every file the crate embeds at compile time
/// (`include_str!`, `include_bytes!`) lies under a path the build stage copies from the context.
#[test]
fn the_dockerfile_copies_every_file_the_build_embeds() {
    let dockerfile = dockerfile();
    let copied: Vec<String> = dockerfile
        .stage("build")
        .copies()
        .into_iter()
        .filter(|c| c.from.is_none())
        .flat_map(|c| c.sources)
        .collect();
    let mut embedded = Vec::new();
    let mut stack = vec![repo().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, _) in text.match_indices("include_") {
                    let rest = &text[i..];
                    if !(rest.starts_with("include_str!(\"")
                        || rest.starts_with("include_bytes!(\""))
                    {
                        continue;
                    }
                    let start = rest.find('"').unwrap() + 1;
                    let end = start + rest[start..].find('"').unwrap();
                    let target = path.parent().unwrap().join(&rest[start..end]);
                    let target = std::fs::canonicalize(&target)
                        .unwrap_or_else(|e| panic!("{}: {e}", target.display()));
                    embedded.push(target);
                }
            }
        }
    }
    assert!(!embedded.is_empty());
    let repo = std::fs::canonicalize(repo()).unwrap();
    for file in embedded {
        let relative = file.strip_prefix(&repo).unwrap().to_str().unwrap();
        assert!(
            copied.iter().any(|c| {
                let c = c.trim_start_matches("./").trim_end_matches('/');
                relative == c || relative.starts_with(&format!("{c}/"))
            }),
            "{relative} is embedded by the build but the Dockerfile does not copy it"
        );
        assert!(context_allows(relative), ".dockerignore drops {relative}");
    }
}

/// Without build arguments the Dockerfile builds what it always built: the binary from source, on
/// distroless cc. `BINARY_STAGE` names a stage that provides the binary (`build` or `prebuilt`),
/// `RUNTIME_BASE` the runtime's base.
#[test]
fn the_default_build_compiles_from_source_onto_distroless() {
    let dockerfile = dockerfile();
    assert_eq!(
        dockerfile.args.get("RUNTIME_BASE").map(String::as_str),
        Some("gcr.io/distroless/cc-debian12:nonroot")
    );
    assert_eq!(
        dockerfile.args.get("BINARY_STAGE").map(String::as_str),
        Some("build")
    );
    assert_eq!(dockerfile.runtime().from, "${RUNTIME_BASE}");
    assert_eq!(dockerfile.stage("binary").from, "${BINARY_STAGE}");
    assert!(dockerfile.stage("binary").instructions.is_empty());
    assert!(
        dockerfile.stage("build").base.starts_with("rust:"),
        "{}",
        dockerfile.stage("build").base
    );
    assert_eq!(dockerfile.stage("prebuilt").base, "scratch");
}

/// Every path-like value of a config (`path`, `*_path`, `*_file`), with its key.
fn config_paths(config: &str) -> Vec<(String, String)> {
    let table: toml::Table = toml::from_str(config).unwrap();
    let mut paths = Vec::new();
    let mut stack: Vec<(String, &toml::Value)> = table
        .iter()
        .map(|(k, v)| (k.clone(), v))
        .collect::<Vec<_>>();
    while let Some((key, value)) = stack.pop() {
        match value {
            toml::Value::Table(t) => stack.extend(t.iter().map(|(k, v)| (k.clone(), v))),
            toml::Value::String(s)
                if key == "path" || key.ends_with("_path") || key.ends_with("_file") =>
            {
                paths.push((key, s.clone()));
            }
            _ => {}
        }
    }
    paths
}

/// The image's default command works: the binary, the config it names and every file that config
/// names are copied into the runtime image, at absolute paths (no working directory to rely on),
/// and the binary comes from either binary stage. Checked without a container engine, from the
/// Dockerfile itself.
#[test]
fn every_path_the_default_command_and_config_name_is_in_the_image() {
    let dockerfile = dockerfile();
    let runtime = dockerfile.runtime();
    assert!(
        runtime
            .base
            .starts_with("gcr.io/distroless/cc-debian12:nonroot"),
        "{}",
        runtime.base
    );
    let copies = runtime.copies();
    for c in &copies {
        assert_eq!(c.sources.len(), 1, "one file per runtime COPY");
    }
    let in_image = |path: &str| copies.iter().any(|c| c.dest == path);

    let command: Vec<String> = runtime
        .exec_form("ENTRYPOINT")
        .into_iter()
        .chain(runtime.exec_form("CMD"))
        .collect();
    for arg in command.iter().filter(|a| a.starts_with('/')) {
        assert!(in_image(arg), "{arg} (default command) is not copied");
    }
    let config_at = command.iter().position(|a| a == "--config").unwrap() + 1;
    let config_in_image = &command[config_at];

    // The image's config, copied from the context, is config/ragwatch.toml but for one line: the
    // sample traces' path, which names the file's place in the image.
    let copied_config = copies.iter().find(|c| &c.dest == config_in_image).unwrap();
    assert_eq!(
        copied_config.from, None,
        "the config comes from the context"
    );
    let image_config_file = &copied_config.sources[0];
    assert!(context_allows(image_config_file), "{image_config_file}");
    let config = std::fs::read_to_string(repo().join(image_config_file)).unwrap();
    let original = std::fs::read_to_string(repo().join("config/ragwatch.toml")).unwrap();
    let rewrite = "sed 's|^path = \"config/sample-traces.jsonl\"$|path = \"/usr/share/ragwatch/sample-traces.jsonl\"|' config/ragwatch.toml > deploy/image/ragwatch.toml";
    assert_eq!(
        config.lines().count(),
        original.lines().count(),
        "{image_config_file} is not config/ragwatch.toml but for one line: {rewrite}"
    );
    let differ: Vec<(&str, &str)> = original
        .lines()
        .zip(config.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(
        differ.len(),
        1,
        "{image_config_file} is not config/ragwatch.toml but for one line: {rewrite}: {differ:?}"
    );
    let (from, to) = differ[0];
    let value = |line: &str| -> String {
        let (key, value) = line.split_once(" = ").unwrap();
        assert_eq!(key, "path", "{line}");
        value.trim_matches('"').to_owned()
    };
    let sample = copies.iter().find(|c| c.dest == value(to)).unwrap();
    assert_eq!(
        (sample.from.as_deref(), sample.sources[0].clone()),
        (None, value(from)),
        "the image's sample traces are the repository's"
    );

    // Every path-like value in that config is absolute and copied into the image.
    let paths = config_paths(&config);
    assert!(
        !paths.is_empty(),
        "the default config names the sample traces"
    );
    for (key, path) in paths {
        assert!(
            path.starts_with('/'),
            "{key} = {path} is relative in the image"
        );
        assert!(
            in_image(&path),
            "{key} = {path} is not copied into the image"
        );
    }

    // Every runtime COPY from the context copies a file of the repository the context lets in;
    // every runtime COPY from the binary stage copies something each stage BINARY_STAGE may name
    // provides: an output of a RUN, or the destination of a COPY.
    for c in &copies {
        let source = &c.sources[0];
        match c.from.as_deref() {
            None => {
                assert!(repo().join(source).is_file(), "{source}");
                assert!(context_allows(source), "{source} is not in the context");
            }
            Some(from) => {
                assert_eq!(from, "binary", "{source}");
                for provider in ["build", "prebuilt"] {
                    let stage = dockerfile.stage(provider);
                    assert!(
                        stage
                            .instructions
                            .iter()
                            .any(|(k, r)| k == "RUN" && r.contains(source.as_str()))
                            || stage.copies().iter().any(|c| &c.dest == source),
                        "the {provider} stage does not provide {source}"
                    );
                }
            }
        }
    }
}

/// Small and lean: a numeric non-root user (so `runAsNonRoot` can verify it), no libcurl, no cmake
/// (librdkafka builds with its own configure script), cargo's caches as BuildKit cache mounts.
#[test]
fn the_image_runs_as_a_numeric_non_root_user_and_builds_lean() {
    let dockerfile = dockerfile();
    let user = dockerfile.runtime().last("USER").unwrap();
    let uid: u32 = user.split(':').next().unwrap().parse().unwrap();
    assert_ne!(uid, 0);
    let text = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let runs: Vec<&String> = dockerfile
        .stages
        .iter()
        .flat_map(|s| s.instructions.iter())
        .filter(|(k, _)| k == "RUN")
        .map(|(_, r)| r)
        .collect();
    for r in &runs {
        assert!(!r.contains("curl") && !r.contains("cmake"), "{r}");
    }
    let cargo = runs.iter().find(|r| r.contains("cargo build")).unwrap();
    for cache in ["/usr/local/cargo/registry", "/src/target"] {
        assert!(
            cargo.contains(&format!("--mount=type=cache,target={cache}")),
            "{cargo}"
        );
    }
    assert!(text.starts_with("# syntax=docker/dockerfile:1"));
}
