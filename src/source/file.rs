//! The file and stdin source: JSONL, one trace per line, optionally paced and looped. Used by the
//! bundled demo (`ragwatch run` with the default config) and by `replay`.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncSeekExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::SourceError;
use crate::config::{SourceConfig, SourceKind};
use crate::pipeline::Pipeline;

/// Reads one line into `buf` (without the newline), keeping at most `max` bytes; the rest of an
/// over-long line is read and dropped so memory stays bounded. Returns `None` at end of input,
/// else the line's full length.
pub async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<usize>> {
    buf.clear();
    let mut total = 0usize;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if total == 0 { None } else { Some(total) });
        }
        let (line, found) = match memchr(chunk) {
            Some(i) => (&chunk[..i], Some(i)),
            None => (chunk, None),
        };
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&line[..line.len().min(room)]);
        total += line.len();
        let used = found.map_or(chunk.len(), |i| i + 1);
        reader.consume(used);
        if found.is_some() {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(total));
        }
    }
}

fn memchr(s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == b'\n')
}

/// Runs the file or stdin source until the input ends (unless looping) or `stop` is cancelled.
/// Returns the number of lines read.
pub async fn run_file_source(
    config: &SourceConfig,
    max_message_bytes: usize,
    pipeline: &mut Pipeline,
    stop: &CancellationToken,
) -> Result<u64, SourceError> {
    let period =
        (config.rate_per_sec > 0.0).then(|| Duration::from_secs_f64(1.0 / config.rate_per_sec));
    let mut next = tokio::time::Instant::now();
    let mut buf = Vec::with_capacity(8 * 1024);
    // One byte over the limit is enough for the decoder to see the line is too large.
    let keep = max_message_bytes.saturating_add(1);
    let mut lines = 0u64;
    match config.kind {
        SourceKind::Stdin => {
            let mut reader = BufReader::new(tokio::io::stdin());
            read_all(
                &mut reader,
                &mut buf,
                keep,
                period,
                &mut next,
                pipeline,
                stop,
                &mut lines,
            )
            .await?;
        }
        _ => {
            let file = open(&config.path).await?;
            let mut reader = BufReader::with_capacity(64 * 1024, file);
            loop {
                let before = lines;
                let ended = read_all(
                    &mut reader,
                    &mut buf,
                    keep,
                    period,
                    &mut next,
                    pipeline,
                    stop,
                    &mut lines,
                )
                .await?;
                if !ended || !config.loop_file || lines == before {
                    break;
                }
                reader
                    .rewind()
                    .await
                    .map_err(|e| SourceError::Io(config.path.display().to_string(), e))?;
            }
        }
    }
    Ok(lines)
}

async fn open(path: &Path) -> Result<tokio::fs::File, SourceError> {
    tokio::fs::File::open(path)
        .await
        .map_err(|e| SourceError::Io(path.display().to_string(), e))
}

/// Reads to the end; returns true at end of input, false when stopped.
#[allow(clippy::too_many_arguments)]
async fn read_all<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    keep: usize,
    period: Option<Duration>,
    next: &mut tokio::time::Instant,
    pipeline: &mut Pipeline,
    stop: &CancellationToken,
    lines: &mut u64,
) -> Result<bool, SourceError> {
    loop {
        if stop.is_cancelled() {
            return Ok(false);
        }
        if let Some(p) = period {
            *next += p;
            tokio::select! {
                _ = stop.cancelled() => return Ok(false),
                _ = tokio::time::sleep_until(*next) => {}
            }
        }
        match read_line_bounded(reader, buf, keep).await {
            Ok(None) => return Ok(true),
            Ok(Some(_)) => {
                if buf.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                *lines += 1;
                pipeline.ingest(buf, None);
            }
            Err(e) => return Err(SourceError::Io("input".into(), e)),
        }
        // Yield now and then so an unpaced file does not starve the HTTP server.
        if period.is_none() && lines.is_multiple_of(1024) {
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_lines_drop_the_excess() {
        let data = b"short\r\nthis line is long\nlast";
        let mut r = BufReader::with_capacity(4, &data[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_line_bounded(&mut r, &mut buf, 8).await.unwrap(),
            Some(6)
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_line_bounded(&mut r, &mut buf, 8).await.unwrap(),
            Some(17)
        );
        assert_eq!(buf, b"this lin");
        assert_eq!(
            read_line_bounded(&mut r, &mut buf, 8).await.unwrap(),
            Some(4)
        );
        assert_eq!(buf, b"last");
        assert_eq!(read_line_bounded(&mut r, &mut buf, 8).await.unwrap(), None);
    }
}
