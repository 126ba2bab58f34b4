//! Replays the decoder fuzz target's seed corpus (`fuzz/corpus/decode`) and every input a fuzzing run
//! ever crashed on (`fuzz/regressions`, where crash artifacts are copied) through the same check, on
//! stable Rust in the normal test run.

use std::path::Path;

#[test]
fn fuzz_corpus_and_past_crashes_decode_without_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut n = 0;
    for dir in ["corpus/decode", "regressions"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() && path.file_name().unwrap() != ".gitkeep" {
                ragwatch::fuzzing::check_decode(&std::fs::read(&path).unwrap());
                n += 1;
            }
        }
    }
    assert!(n >= 10, "the seed corpus is there: {n} inputs");
}
