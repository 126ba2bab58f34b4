//! Replays the fuzz targets' seed corpora (`fuzz/corpus/decode`, `fuzz/corpus/otlp`) and every input
//! a fuzzing run ever crashed on (`fuzz/regressions/<target>`, where crash artifacts are copied;
//! files directly in `fuzz/regressions` are the decoder's) through the same checks, on stable Rust
//! in the normal test run.

use std::path::Path;

/// The files of `dir` (none when it does not exist), less `.gitkeep`.
fn inputs(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().unwrap() != ".gitkeep")
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

#[test]
fn fuzz_corpus_and_past_crashes_decode_without_panic() {
    let root = root();
    let mut n = 0;
    for dir in ["corpus/decode", "regressions", "regressions/decode"] {
        for input in inputs(&root.join(dir)) {
            ragwatch::fuzzing::check_decode(&input);
            n += 1;
        }
    }
    assert!(n >= 10, "the seed corpus is there: {n} inputs");
}

#[test]
fn otlp_corpus_and_past_crashes_assemble_without_panic() {
    let root = root();
    let mut n = 0;
    for dir in ["corpus/otlp", "regressions/otlp"] {
        for input in inputs(&root.join(dir)) {
            ragwatch::fuzzing::check_otlp(&input);
            n += 1;
        }
    }
    assert!(n >= 10, "the seed corpus is there: {n} inputs");
}
