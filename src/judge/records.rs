//! Verdict records: one JSON line per LLM-judged trace (claims, raw outputs, usage, latency),
//! appended to `llm.records_path` and rotated by size, so they can live on a small `emptyDir`.
//!
//! When a line would take the live file past `llm.records_max_bytes`, the live file becomes
//! `path.1`, `path.1` becomes `path.2`, and so on; the file that would become
//! `path.{records_keep_files + 1}` is deleted. On disk the records therefore never take more than
//! `records_max_bytes * (records_keep_files + 1)`; a single record larger than the cap gets a file of
//! its own. The bound matters: a full `emptyDir` gets the whole pod evicted, and in sidecar mode that
//! pod is the RAG service's.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

/// A size-capped, rotating JSON-lines file of verdict records.
#[derive(Debug)]
pub(crate) struct RecordsFile {
    path: PathBuf,
    max_bytes: u64,
    keep_files: u32,
    state: Mutex<State>,
}

/// The open live file and its length.
#[derive(Debug)]
struct State {
    /// `None` after a failed rotation: the next append reopens.
    file: Option<File>,
    len: u64,
    /// The last append failed (a failure is logged once per run of failures, not per record).
    failing: bool,
}

impl RecordsFile {
    /// Opens `path` for appending (its current length counts towards the cap) and deletes rotated
    /// files beyond `keep_files` that an earlier, larger setting left behind.
    pub(crate) fn open(path: &Path, max_bytes: u64, keep_files: u32) -> io::Result<Self> {
        let file = open_append(path)?;
        let len = file.metadata()?.len();
        let records = Self {
            path: path.to_owned(),
            max_bytes,
            keep_files,
            state: Mutex::new(State {
                file: Some(file),
                len,
                failing: false,
            }),
        };
        let mut n = keep_files.saturating_add(1);
        while remove_if_present(&records.rotated(n))? {
            n = n.saturating_add(1);
        }
        Ok(records)
    }

    /// The `n`-th rotated file: `path.n`, `path.1` the most recent.
    pub(crate) fn rotated(&self, n: u32) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    /// Appends one record as a line, rotating first when the line would take the live file past the
    /// cap. A record is written whole or not at all.
    pub(crate) fn append(&self, record: &Value) -> io::Result<()> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let line_len = line.len() as u64;
        if state.file.is_none() || (state.len > 0 && state.len + line_len > self.max_bytes) {
            self.rotate(&mut state)?;
        }
        let file = state
            .file
            .as_mut()
            .ok_or_else(|| io::Error::other("records file not open"))?;
        file.write_all(&line)?;
        state.len += line_len;
        Ok(())
    }

    /// Appends one record; a failure is logged when it starts and when it ends, never per record.
    pub(crate) fn write(&self, record: &Value) {
        let result = self.append(record);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(()) if state.failing => {
                state.failing = false;
                tracing::info!(path = %self.path.display(), "writing verdict records again");
            }
            Err(e) if !state.failing => {
                state.failing = true;
                tracing::warn!(path = %self.path.display(), error = %e, "cannot write verdict records; dropping them until this clears");
            }
            _ => {}
        }
    }

    /// Shifts `path.n` to `path.{n+1}` (deleting the oldest beyond `keep_files`), moves the live file
    /// to `path.1` and opens a fresh one. With `keep_files` 0 the live file is simply started again.
    fn rotate(&self, state: &mut State) -> io::Result<()> {
        state.file = None;
        if self.keep_files == 0 {
            remove_if_present(&self.path)?;
        } else {
            remove_if_present(&self.rotated(self.keep_files))?;
            for n in (1..self.keep_files).rev() {
                rename_if_present(&self.rotated(n), &self.rotated(n + 1))?;
            }
            rename_if_present(&self.path, &self.rotated(1))?;
        }
        let file = open_append(&self.path)?;
        state.len = file.metadata()?.len();
        state.file = Some(file);
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Removes `path`; `Ok(false)` when it was not there.
fn remove_if_present(path: &Path) -> io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn rename_if_present(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn ids(path: &Path) -> Vec<u64> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["id"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    }

    fn record(id: u64) -> Value {
        // 40 bytes as a line: {"id":NNNN,"pad":"..................."}
        json!({"id": id, "pad": "x".repeat(19)})
    }

    #[test]
    fn filling_the_cap_rotates_keeps_n_files_and_deletes_the_oldest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("verdicts.jsonl");
        let (max_bytes, keep) = (200, 2);
        let records = RecordsFile::open(&path, max_bytes, keep).unwrap();
        assert_eq!(serde_json::to_vec(&record(1000)).unwrap().len() + 1, 40);
        for id in 1000..1100 {
            records.append(&record(id)).unwrap();
        }
        // The live file and exactly `keep` rotated ones, none above the cap.
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["verdicts.jsonl", "verdicts.jsonl.1", "verdicts.jsonl.2"]
        );
        let files = [records.rotated(2), records.rotated(1), path.clone()];
        let mut total = 0;
        for f in &files {
            let len = std::fs::metadata(f).unwrap().len();
            assert!(len <= max_bytes, "{} is {len} bytes", f.display());
            total += len;
        }
        assert!(total <= max_bytes * (u64::from(keep) + 1));
        // Oldest to newest, the files hold the most recent records in order, ending with the last.
        let kept: Vec<u64> = files.iter().flat_map(|f| ids(f)).collect();
        assert_eq!(kept.last(), Some(&1099));
        assert!(kept.windows(2).all(|w| w[1] == w[0] + 1), "{kept:?}");
        // Five 40-byte lines fill a 200-byte file: 100 records make 20 files, of which 3 are left.
        assert_eq!(kept.len(), 15);
        assert_eq!(ids(&records.rotated(1)), (1090..1095).collect::<Vec<_>>());
    }

    #[test]
    fn with_no_rotated_files_kept_the_live_file_starts_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.jsonl");
        let records = RecordsFile::open(&path, 100, 0).unwrap();
        for id in 1000..1011 {
            records.append(&record(id)).unwrap();
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(ids(&path), [1010]);
    }

    #[test]
    fn reopening_counts_the_existing_file_and_trims_extra_rotated_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.jsonl");
        {
            let records = RecordsFile::open(&path, 80, 4).unwrap();
            for id in 1000..1011 {
                records.append(&record(id)).unwrap();
            }
            assert!(records.rotated(4).exists());
        }
        assert_eq!(ids(&path), [1010]);
        // A smaller setting deletes what it would no longer keep.
        let records = RecordsFile::open(&path, 80, 2).unwrap();
        assert!(records.rotated(2).exists());
        assert!(!records.rotated(3).exists() && !records.rotated(4).exists());
        // The live file already holds one 40-byte line: one more fits, the next rotates.
        records.append(&record(1011)).unwrap();
        assert_eq!(ids(&path), [1010, 1011]);
        records.append(&record(1012)).unwrap();
        assert_eq!(ids(&path), [1012]);
        assert_eq!(ids(&records.rotated(1)), [1010, 1011]);
    }

    #[test]
    fn a_record_larger_than_the_cap_gets_a_file_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.jsonl");
        let records = RecordsFile::open(&path, 50, 1).unwrap();
        records.append(&record(1000)).unwrap();
        records
            .append(&json!({"id": 1001, "pad": "y".repeat(100)}))
            .unwrap();
        assert_eq!(ids(&path), [1001]);
        assert_eq!(ids(&records.rotated(1)), [1000]);
        records.append(&record(1002)).unwrap();
        assert_eq!(ids(&path), [1002]);
        assert_eq!(ids(&records.rotated(1)), [1001]);
    }
}
