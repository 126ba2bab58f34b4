//! OTLP files for a replay: what the OpenTelemetry Collector's file exporter writes, read back and
//! assembled into traces as the live receiver assembles them.
//!
//! Each file's form is told by its first byte: OTLP JSON lines (`format: json`, one
//! `ExportTraceServiceRequest` per line, the exporter's default) start with `{`; protobuf
//! (`format: proto`) is a big-endian u32 length before each message, whose first byte is 0 for any
//! message under 16 MiB. One span assembly spans every file (a capture rotated across files keeps
//! its traces whole); a trace completes when its root span arrives, else at the end of the input.
//! Each trace comes back with the number (1-based, in its file) of the message that completed it.

use std::io::{BufRead, Read};
use std::path::PathBuf;

use crate::config::Config;
use crate::trace::otlp::config::TraceFormat;
use crate::trace::otlp::{Assembler, Completed, Outcome, SpanDrop, decode_request};

use super::lines::{LineFn, lines_of, open};

/// What one span of the files became, besides the traces: dropped spans by reason.
pub(super) type Dropped = [(SpanDrop, u64); 3];

/// Reads the OTLP `files` (`-` is stdin) and calls `f` with every assembled trace's outcome and its
/// message number, and with every message that could not be read (as a rejected outcome). Returns
/// the messages read and the spans dropped.
pub(super) fn for_each_trace(
    files: &[PathBuf],
    config: &Config,
    progress: Option<&indicatif::ProgressBar>,
    mut f: impl FnMut(Outcome, u64) -> std::io::Result<()>,
) -> std::io::Result<(u64, Dropped)> {
    let decode = &config.decode;
    let mut assembler: Assembler<u64> = Assembler::new(decode, &config.assembly)
        .copying_attributes(config.variants.metadata_attributes());
    let mut completed: Vec<Completed<u64>> = Vec::new();
    let mut messages = 0u64;
    let mut dropped = SpanDrop::ALL.map(|d| (d, 0u64));
    let keep = decode.max_message_bytes.saturating_add(1);
    let mut buf = Vec::with_capacity(8192);
    for file in files {
        let mut reader = open(file)?;
        let json = first_byte(&mut reader)?.is_none_or(|b| b == b'{' || b.is_ascii_whitespace());
        let format = if json {
            TraceFormat::OtlpJson
        } else {
            TraceFormat::OtlpProto
        };
        let mut message = |bytes: &[u8], n: u64, len: usize| -> std::io::Result<()> {
            if let Some(bar) = progress {
                bar.inc(len as u64 + if json { 1 } else { 4 });
            }
            if json && bytes.iter().all(u8::is_ascii_whitespace) {
                return Ok(());
            }
            messages += 1;
            let max_spans = config.assembly.max_spans_per_message;
            match decode_request(bytes, format, decode.max_message_bytes, max_spans) {
                Ok(req) => {
                    let stats = assembler.add_request(req, Some(n), 0, &mut completed);
                    for (d, (_, total)) in stats.dropped.iter().zip(dropped.iter_mut()) {
                        *total += *d as u64;
                    }
                }
                Err(e) => f(Outcome::Rejected(e), n)?,
            }
            emit(&mut completed, &mut f)
        };
        if json {
            lines_of(&mut *reader, keep, &mut buf, &mut message)?;
        } else {
            frames_of(&mut *reader, keep, &mut buf, &mut message)?;
        }
    }
    assembler.finish(&mut completed);
    emit(&mut completed, &mut f)?;
    Ok((messages, dropped))
}

/// Hands each completed trace's outcome to `f` with the number of the last message that carried its
/// spans.
fn emit(
    completed: &mut Vec<Completed<u64>>,
    f: &mut dyn FnMut(Outcome, u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    for c in completed.drain(..) {
        let at = c.tokens.iter().copied().max().unwrap_or(0);
        f(c.outcome, at)?;
    }
    Ok(())
}

/// The first byte of `reader`, without consuming it (`None` for an empty input).
fn first_byte(reader: &mut dyn BufRead) -> std::io::Result<Option<u8>> {
    loop {
        match reader.fill_buf() {
            Ok(b) => return Ok(b.first().copied()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Calls `f` with each length-prefixed message of `reader` (a big-endian u32, then that many bytes):
/// its first `keep` bytes (the decoder rejects a longer one as too large), its number and its full
/// length. A message cut short by the end of the input is passed on as far as it goes (rejected as
/// truncated), and so is a length prefix cut short.
pub(super) fn frames_of(
    reader: &mut dyn BufRead,
    keep: usize,
    buf: &mut Vec<u8>,
    f: &mut LineFn<'_>,
) -> std::io::Result<()> {
    let mut n = 0u64;
    loop {
        let mut prefix = [0u8; 4];
        let got = read_up_to(reader, &mut prefix)?;
        if got == 0 {
            return Ok(());
        }
        n += 1;
        if got < 4 {
            return f(&prefix[..got.min(keep)], n, got);
        }
        let len = u32::from_be_bytes(prefix) as usize;
        buf.clear();
        let kept = (&mut *reader).take(len.min(keep) as u64).read_to_end(buf)?;
        let skipped = std::io::copy(
            &mut (&mut *reader).take((len - kept.min(len)) as u64),
            &mut std::io::sink(),
        )? as usize;
        if kept + skipped < len {
            // Cut short by the end of the input: what there is, which the decoder rejects.
            return f(buf, n, kept + skipped);
        }
        f(buf, n, len)?;
    }
}

/// Fills `out` as far as `reader` goes; returns the bytes read.
fn read_up_to(reader: &mut dyn BufRead, out: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < out.len() {
        match reader.read(&mut out[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::read_frame_bounded;
    use crate::trace::otlp::build::{request, span, str_attr};
    use prost::Message;

    fn frames(data: &[u8], keep: usize) -> Vec<(Vec<u8>, u64, usize)> {
        let mut out = Vec::new();
        let mut reader = std::io::BufReader::with_capacity(3, data);
        frames_of(&mut reader, keep, &mut Vec::new(), &mut |b, n, len| {
            out.push((b.to_vec(), n, len));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn length_prefixed_messages_are_cut_as_written() {
        let mut data = Vec::new();
        for m in [&b"abc"[..], b"", b"0123456789"] {
            data.extend_from_slice(&(m.len() as u32).to_be_bytes());
            data.extend_from_slice(m);
        }
        let got = frames(&data, 5);
        assert_eq!(
            got,
            vec![
                (b"abc".to_vec(), 1, 3),
                (vec![], 2, 0),
                (b"01234".to_vec(), 3, 10)
            ]
        );
        // A body cut short, and then a prefix cut short.
        let mut cut = data[..data.len() - 4].to_vec();
        assert_eq!(
            frames(&cut, 100).last().unwrap(),
            &(b"012345".to_vec(), 3, 6)
        );
        cut.truncate(7 + 4 + 2);
        assert_eq!(frames(&cut, 100).last().unwrap(), &(vec![0, 0], 3, 2));
    }

    /// `(message, number, length)` as the file source's `read_frame_bounded` reads `data`
    /// through a buffer of `capacity` bytes.
    async fn bounded(data: &[u8], capacity: usize, keep: usize) -> Vec<(Vec<u8>, u64, usize)> {
        let mut reader = tokio::io::BufReader::with_capacity(capacity, data);
        let (mut buf, mut n, mut out) = (Vec::new(), 0, Vec::new());
        while let Some(len) = read_frame_bounded(&mut reader, &mut buf, keep)
            .await
            .unwrap()
        {
            n += 1;
            out.push((buf.clone(), n, len));
        }
        out
    }

    /// Replay cuts, numbers and measures length-prefixed messages as `ragwatch run` does: whole,
    /// empty and over-`keep` messages, a body cut short, a prefix cut short, through reads of any
    /// size.
    #[tokio::test]
    async fn replayed_frames_are_the_file_sources_frames() {
        let mut whole = Vec::new();
        for m in [&b"abc"[..], b"", b"0123456789", &[0xff; 40]] {
            whole.extend_from_slice(&(m.len() as u32).to_be_bytes());
            whole.extend_from_slice(m);
        }
        let mut inputs = vec![Vec::new(), whole.clone()];
        for cut in 1..whole.len() {
            inputs.push(whole[..cut].to_vec());
        }
        for data in &inputs {
            for capacity in [1, 3, 4, 5, 64] {
                for keep in [0, 1, 3, 8, 100] {
                    let mut reader = std::io::BufReader::with_capacity(capacity, &data[..]);
                    let mut blocking = Vec::new();
                    frames_of(&mut reader, keep, &mut Vec::new(), &mut |b, n, len| {
                        blocking.push((b.to_vec(), n, len));
                        Ok(())
                    })
                    .unwrap();
                    assert_eq!(
                        blocking,
                        bounded(data, capacity, keep).await,
                        "{} bytes, capacity {capacity}, keep {keep}",
                        data.len()
                    );
                }
            }
        }
    }

    #[test]
    fn both_forms_assemble_the_same_traces() {
        let id = [7u8; 16];
        let root = span(
            &id,
            1,
            0,
            vec![
                str_attr("openinference.span.kind", "CHAIN"),
                str_attr("input.value", "What boils water?"),
                str_attr("output.value", "The kettle boils water."),
            ],
        );
        let retriever = span(
            &id,
            2,
            1,
            vec![
                str_attr("openinference.span.kind", "RETRIEVER"),
                str_attr(
                    "retrieval.documents.0.document.content",
                    "The kettle boils water.",
                ),
            ],
        );
        let (first, second) = (request(vec![retriever]), request(vec![root]));
        let dir = tempfile::tempdir().unwrap();
        let (proto, json) = (dir.path().join("spans.pb"), dir.path().join("spans.json"));
        let mut p = Vec::new();
        let mut j = String::new();
        for r in [&first, &second] {
            let b = r.encode_to_vec();
            p.extend_from_slice(&(b.len() as u32).to_be_bytes());
            p.extend_from_slice(&b);
            j.push_str(&serde_json::to_string(r).unwrap());
            j.push('\n');
        }
        std::fs::write(&proto, p).unwrap();
        std::fs::write(&json, j).unwrap();
        let config = Config::from_toml_with_env(
            "[decode]\nformat = \"otlp_proto\"\n",
            &std::collections::HashMap::new(),
        )
        .unwrap();
        for file in [proto, json] {
            let mut got = Vec::new();
            let (messages, _) = for_each_trace(&[file], &config, None, |o, n| {
                got.push((o, n));
                Ok(())
            })
            .unwrap();
            assert_eq!(messages, 2);
            assert_eq!(got.len(), 1);
            let (Outcome::Trace(t), 2) = &got[0] else {
                panic!("{:?}", got[0]);
            };
            assert_eq!(t.query, "What boils water?");
            assert_eq!(t.contexts[0].text, "The kettle boils water.");
        }
    }
}
