//! The file and stdin source: JSONL, one trace per line, optionally paced and looped. Used by the
//! bundled demo (`ragwatch run` with the default config) and by `replay`. With `decode.format =
//! "otlp_json"` each line is an OTLP JSON request (the Collector's file exporter); with
//! `"otlp_proto"` each message is a big-endian u32 length and that many bytes of protobuf.

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, BufReader};
use tokio_util::sync::CancellationToken;

use super::{Ingest, SourceError};
use crate::clock::Instant;
use crate::source::config::{SourceConfig, SourceKind};
use crate::trace::config::DecodeConfig;
use crate::trace::otlp::config::TraceFormat;

/// Reads one line into `buf` (without the newline), keeping at most `max` bytes; the rest of an
/// over-long line is read and dropped so memory stays bounded. Returns `None` at end of input,
/// else the line's full length.
pub(crate) async fn read_line_bounded<R: AsyncBufRead + Unpin>(
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
        let (line, found) = match memchr::memchr(b'\n', chunk) {
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

/// Reads one length-prefixed message (a big-endian u32, then that many bytes) into `buf`, keeping
/// at most `max` bytes and discarding the rest. Returns `None` at a clean end of input, else the
/// message's full length. A message cut short by the end of input is returned as far as it goes,
/// with the length there was, and so is a length prefix cut short (its bytes are the message): the
/// decoder rejects either as malformed or truncated, never silently.
pub(crate) async fn read_frame_bounded<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Option<usize>> {
    buf.clear();
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = reader.read(&mut header[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            buf.extend_from_slice(&header[..got.min(max)]);
            return Ok(Some(got));
        }
        got += n;
    }
    let len = u32::from_be_bytes(header) as usize;
    let mut left = len;
    while left > 0 {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len().min(left);
        let room = max.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..n.min(room)]);
        reader.consume(n);
        left -= n;
    }
    Ok(Some(len - left))
}

/// A JSONL (or length-framed OTLP) file, or stdin: `source.kind = "file" | "stdin"`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileSource<'a> {
    /// Path, pacing and looping.
    pub config: &'a SourceConfig,
    /// The format, for framing and the message size limit.
    pub decode: &'a DecodeConfig,
}

impl<I: Ingest> super::Source<I> for FileSource<'_> {
    fn run(
        self,
        ingest: &mut I,
        stop: &CancellationToken,
    ) -> impl std::future::Future<Output = Result<u64, SourceError>> {
        run_file_source(self.config, self.decode, ingest, stop)
    }
}

/// Runs the file or stdin source until the input ends (unless looping) or `stop` is cancelled.
/// Returns the number of messages read.
async fn run_file_source<I: Ingest>(
    config: &SourceConfig,
    decode: &DecodeConfig,
    pipeline: &mut I,
    stop: &CancellationToken,
) -> Result<u64, SourceError> {
    let framed = decode.format == TraceFormat::OtlpProto;
    let max_message_bytes = decode.max_message_bytes;
    let period =
        (config.rate_per_sec > 0.0).then(|| Duration::from_secs_f64(1.0 / config.rate_per_sec));
    let mut next = Instant::now();
    let mut buf = Vec::with_capacity(8 * 1024);
    // One byte over the limit is enough for the decoder to see the line is too large.
    let keep = max_message_bytes.saturating_add(1);
    let mut lines = 0u64;
    match config.kind {
        Some(SourceKind::Stdin) => {
            let mut reader = BufReader::new(tokio::io::stdin());
            let ended = read_all(
                &mut reader,
                &mut buf,
                keep,
                period,
                &mut next,
                pipeline,
                stop,
                &mut lines,
                framed,
            )
            .await?;
            if ended {
                pipeline.end_of_input();
            }
        }
        _ => {
            let path = config.path.as_deref().unwrap_or(Path::new(""));
            let file = open(path).await?;
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
                    framed,
                )
                .await?;
                if ended {
                    // Whatever waits for more spans gets none: complete it.
                    pipeline.end_of_input();
                }
                if !ended || !config.loop_file || lines == before {
                    break;
                }
                reader
                    .rewind()
                    .await
                    .map_err(|e| SourceError::Io(path.display().to_string(), e))?;
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
async fn read_all<R: AsyncBufRead + Unpin, I: Ingest>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    keep: usize,
    period: Option<Duration>,
    next: &mut Instant,
    pipeline: &mut I,
    stop: &CancellationToken,
    lines: &mut u64,
    framed: bool,
) -> Result<bool, SourceError> {
    let mut released = Vec::new();
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
        let read = if framed {
            read_frame_bounded(reader, buf, keep).await
        } else {
            read_line_bounded(reader, buf, keep).await
        };
        match read {
            Ok(None) => return Ok(true),
            Ok(Some(_)) => {
                if !framed && buf.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                *lines += 1;
                pipeline.message(buf, None, &mut released);
                released.clear();
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
