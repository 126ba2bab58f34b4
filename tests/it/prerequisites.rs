//! The README's first command needs nothing beyond what it lists under **Building**.
//!
//! `cargo run --release -- run` on a fresh machine compiles librdkafka (rdkafka-sys), zstd and the
//! rest of the native code through the crates' build scripts. This test runs every build script of
//! the dependency graph in a clean target directory with a `PATH` from which cmake (and the other
//! build generators a C dependency could creep in with) is hidden, so a dependency or feature that
//! starts to need one fails here rather than on a newcomer's machine. It also checks that the
//! Dockerfile's build stage installs no package the README does not name.
//!
//! It takes a few minutes (librdkafka is compiled from source); `cargo check` keeps the Rust side
//! to metadata only.

use std::collections::BTreeSet;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Programs a build must not need: cmake and the generators that come with it.
const HIDDEN: [&str; 6] = ["cmake", "cmake3", "ctest", "cpack", "ninja", "meson"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A directory of symlinks to every program on `path` except the hidden ones (first match wins,
/// as a shell would find them).
fn path_without_build_generators(path: &str, into: &Path) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut hidden = Vec::new();
    for dir in std::env::split_paths(path) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !seen.insert(name.clone()) {
                continue;
            }
            if HIDDEN.contains(&name.as_str()) {
                hidden.push(entry.path().display().to_string());
                continue;
            }
            symlink(entry.path(), into.join(&name)).unwrap();
        }
    }
    hidden
}

#[test]
fn every_build_script_runs_without_cmake_on_path() {
    let shim = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let hidden = path_without_build_generators(&path, shim.path());
    eprintln!("hidden from PATH: {hidden:?}");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let cmake_found = Command::new("sh")
        .args(["-c", "command -v cmake"])
        .env("PATH", shim.path())
        .status()
        .unwrap();
    assert!(!cmake_found.success(), "cmake is still reachable");

    let out = Command::new(&cargo)
        .args([
            "check",
            "--release",
            "--locked",
            "--offline",
            "--bin",
            "ragwatch",
        ])
        .current_dir(repo())
        .env("PATH", shim.path())
        .env("CARGO_TARGET_DIR", target.path())
        // Build scripts that honour these would otherwise find a cmake elsewhere.
        .env_remove("CMAKE")
        .env_remove("RUSTC_WRAPPER")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the build needs something the README does not list:\n{}",
        stderr
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // librdkafka really was compiled here, by its own configure script and make.
    let built: Vec<PathBuf> = walk(&target.path().join("release/build"))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "librdkafka.a"))
        .collect();
    assert!(!built.is_empty(), "librdkafka.a was not built");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// The package names of the first `apt-get install` in `text` (options skipped).
fn apt_packages(text: &str) -> BTreeSet<String> {
    let joined = text.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.contains("apt-get install"))
        .expect("an apt-get install line");
    let rest = &line[line.find("apt-get install").unwrap() + "apt-get install".len()..];
    rest.split(|c: char| c.is_whitespace() || c == '`' || c == ')')
        .take_while(|w| !w.starts_with("&&"))
        .filter(|w| !w.is_empty() && !w.starts_with('-'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_dockerfile_builds_with_the_readme_prerequisites() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let building = readme
        .split("**Building**")
        .nth(1)
        .expect("a **Building** paragraph in the README");
    let listed = apt_packages(building);
    assert!(
        listed.contains("pkg-config") && listed.contains("libssl-dev"),
        "{listed:?}"
    );
    assert!(
        !building[..building.find("\n\n").unwrap_or(building.len())].contains("cmake ")
            || building.contains("no cmake")
    );
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let installed = apt_packages(&dockerfile);
    // build-essential is the compilers, make and the C library headers.
    let essential = ["build-essential", "gcc", "g++", "make", "libc6-dev"];
    let extra: Vec<&String> = installed
        .iter()
        .filter(|p| !listed.contains(*p) && !essential.contains(&p.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "the Dockerfile installs {extra:?}, which the README's prerequisites do not name"
    );
    assert!(!installed.contains("cmake"), "{installed:?}");
}
