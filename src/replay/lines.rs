//! The lines a replay reads: every non-blank line of its files (`-` is stdin) with its 1-based line
//! number in its file, a line longer than `keep` bytes cut there (the decoder rejects it as too
//! large). Read without blocking for the LLM judge, whose calls in flight must go on while the
//! reader waits, and with blocking reads for the offline judge, whose replay does nothing else.

use std::io::BufRead;
use std::path::PathBuf;

use tokio::io::{AsyncBufRead, BufReader};

use crate::source::read_line_bounded;

/// Bytes read from a file at a time.
const READ_BUFFER: usize = 256 * 1024;

/// Calls `f` with every line of `files`, read without blocking.
pub(super) async fn for_each_line(
    files: &[PathBuf],
    keep: usize,
    progress: Option<&indicatif::ProgressBar>,
    mut f: impl AsyncFnMut(&[u8], u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(8192);
    for file in files {
        let mut reader: Box<dyn AsyncBufRead + Unpin> = if file.as_os_str() == "-" {
            Box::new(BufReader::new(tokio::io::stdin()))
        } else {
            Box::new(BufReader::with_capacity(
                READ_BUFFER,
                tokio::fs::File::open(file).await?,
            ))
        };
        let mut line = 0u64;
        while let Some(len) = read_line_bounded(&mut reader, &mut buf, keep).await? {
            line += 1;
            if let Some(bar) = progress {
                bar.inc(len as u64 + 1);
            }
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            f(&buf, line).await?;
        }
    }
    Ok(())
}

/// Calls `f` with every line of `files`, the same lines as [`for_each_line`], read with blocking
/// reads. A line that lies whole in the read buffer is handed over from there, not copied.
pub(super) fn for_each_line_blocking(
    files: &[PathBuf],
    keep: usize,
    progress: Option<&indicatif::ProgressBar>,
    mut f: impl FnMut(&[u8], u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut split = Vec::with_capacity(8192);
    for file in files {
        let mut reader = open(file)?;
        lines_of(&mut reader, keep, &mut split, &mut |bytes, line, len| {
            if let Some(bar) = progress {
                bar.inc(len as u64 + 1);
            }
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            f(bytes, line)
        })?;
    }
    Ok(())
}

/// `file` (`-` is stdin) for blocking reads.
pub(super) fn open(file: &std::path::Path) -> std::io::Result<Box<dyn BufRead>> {
    Ok(if file.as_os_str() == "-" {
        Box::new(std::io::BufReader::with_capacity(
            READ_BUFFER,
            std::io::stdin(),
        ))
    } else {
        Box::new(std::io::BufReader::with_capacity(
            READ_BUFFER,
            std::fs::File::open(file)?,
        ))
    })
}

/// What [`lines_of`] calls with each line: its bytes, its number and its full length.
pub(super) type LineFn<'a> = dyn FnMut(&[u8], u64, usize) -> std::io::Result<()> + 'a;

/// Calls `f` with each line of `reader` as [`read_line_bounded`] reads them (its first `keep`
/// bytes, less a final `\r` when a newline ends it), its line number and its full length. `split`
/// holds a line that spans reads.
pub(super) fn lines_of(
    reader: &mut dyn BufRead,
    keep: usize,
    split: &mut Vec<u8>,
    f: &mut LineFn<'_>,
) -> std::io::Result<()> {
    split.clear();
    // The full length of the line in `split` so far.
    let mut split_len = 0usize;
    let mut line = 0u64;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            // The last line, without a newline, as it is.
            if split_len > 0 {
                line += 1;
                f(split, line, split_len)?;
            }
            return Ok(());
        }
        let Some(end) = memchr::memchr(b'\n', chunk) else {
            let room = keep.saturating_sub(split.len());
            split.extend_from_slice(&chunk[..chunk.len().min(room)]);
            split_len += chunk.len();
            let used = chunk.len();
            reader.consume(used);
            continue;
        };
        line += 1;
        if split_len == 0 {
            f(ended(&chunk[..end.min(keep)]), line, end)?;
        } else {
            let room = keep.saturating_sub(split.len());
            split.extend_from_slice(&chunk[..end.min(room)]);
            f(ended(split), line, split_len + end)?;
            split.clear();
            split_len = 0;
        }
        reader.consume(end + 1);
    }
}

/// The first `keep` bytes of a line that a newline ended, less a final `\r`.
fn ended(bytes: &[u8]) -> &[u8] {
    match bytes.split_last() {
        Some((b'\r', rest)) => rest,
        _ => bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(line, number, full length)` as `read_line_bounded` reads `data` through a buffer of
    /// `capacity` bytes.
    async fn bounded(data: &[u8], capacity: usize, keep: usize) -> Vec<(Vec<u8>, u64, usize)> {
        let mut reader = BufReader::with_capacity(capacity, data);
        let (mut buf, mut line, mut out) = (Vec::new(), 0, Vec::new());
        while let Some(len) = read_line_bounded(&mut reader, &mut buf, keep)
            .await
            .unwrap()
        {
            line += 1;
            out.push((buf.clone(), line, len));
        }
        out
    }

    /// The same through [`lines_of`].
    fn blocking(data: &[u8], capacity: usize, keep: usize) -> Vec<(Vec<u8>, u64, usize)> {
        let mut reader = std::io::BufReader::with_capacity(capacity, data);
        let mut out = Vec::new();
        lines_of(&mut reader, keep, &mut Vec::new(), &mut |b, line, len| {
            out.push((b.to_vec(), line, len));
            Ok(())
        })
        .unwrap();
        out
    }

    /// Blocking reads cut, number and measure lines as `read_line_bounded` does, whether a line
    /// lies in one read or spans several: blank lines, `\r\n` ends, a `\r` at the cut, lines over
    /// `keep`, a last line without a newline (its `\r` kept).
    #[tokio::test]
    async fn blocking_lines_are_read_line_bounded_lines() {
        let long = "x".repeat(50);
        let inputs = [
            String::new(),
            "\n".into(),
            "a\n\nb\n".into(),
            "a\r\nb\r\n\r\n".into(),
            format!("{long}\n{long}\r\n{long}"),
            format!("short\n{long}\r"),
            "abcdefghi\rjk\nlast\r".into(),
            "  \n\t\nend".into(),
            "12345678\r\n12345678\n".into(),
        ];
        for data in &inputs {
            for capacity in [1, 2, 3, 7, 8, 9, 64, 1024] {
                for keep in [0, 1, 8, 9, 10, 49, 1000] {
                    assert_eq!(
                        blocking(data.as_bytes(), capacity, keep),
                        bounded(data.as_bytes(), capacity, keep).await,
                        "{data:?} capacity {capacity} keep {keep}"
                    );
                }
            }
        }
    }
}
