//! The verdict record: one line of replay output per trace, and the writer that puts it on a line.
//!
//! [`VerdictRecord`]'s `Serialize` is the format. [`Records`] writes the same bytes without serde's
//! map machinery: the keys from bytes escaped once (by serde_json) and copied per record, the values
//! by serde_json's own serialiser, so every number, string and `null` is written as serde_json
//! writes it. A test holds the two alike.

use std::io::Write;

use serde::Serialize;

use crate::dimensions::{JudgeKind, PerQuality, Quality};
use crate::judge::{Citations, FEATURES, Features, OfflineScore, Verdict};

/// One line of replay output.
#[derive(Debug, Serialize)]
pub(crate) struct VerdictRecord<'a> {
    /// The trace id (absent when the line was rejected).
    pub trace_id: Option<&'a str>,
    /// The stratum (absent when rejected).
    pub stratum: Option<&'a str>,
    /// Each metric's score, one key per metric.
    #[serde(flatten)]
    pub scores: PerQuality<Option<f64>>,
    /// The judge.
    pub judge: &'static str,
    /// `judged`, `no_claims`, `skipped` (the LLM judge could not score it), `unjudged` (an
    /// assembled OTLP trace the receiver would not judge either; `reason` says why) or `rejected`.
    pub status: &'static str,
    /// Why, when not judged.
    pub reason: Option<&'static str>,
    /// Line number in its file (1-based).
    pub line: u64,
    /// The human label, when the trace carries one.
    pub label_faithful: Option<bool>,
    /// The whole verdict (refusal, uncertainty, citations, judge details).
    pub details: Option<RecordVerdict<'a>>,
}

/// A verdict as its record writes it: [`Verdict`]'s serialisation, except that an offline verdict's
/// `details` are written straight from the judge's scores (`OfflineScore::details_ref`), the same
/// bytes without building the JSON object (which cost more than writing it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordVerdict<'a> {
    /// The verdict.
    pub verdict: &'a Verdict,
    /// The offline judge's scores behind it, when it is the offline verdict (its `details` left
    /// `null`).
    pub offline: Option<&'a OfflineScore>,
}

impl Serialize for RecordVerdict<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.verdict;
        match self.offline {
            None => v.serialize(s),
            Some(score) => VerdictFields {
                judge: v.judge,
                scores: v.scores,
                refusal: v.refusal,
                uncertain: v.uncertain,
                citations: v.citations,
                details: score.details_ref(),
            }
            .serialize(s),
        }
    }
}

/// [`Verdict`]'s fields in its order, with `details` of another type (a test holds the two alike).
#[derive(Serialize)]
struct VerdictFields<D> {
    judge: JudgeKind,
    #[serde(flatten)]
    scores: PerQuality<Option<f64>>,
    refusal: bool,
    uncertain: bool,
    citations: Citations,
    details: D,
}

/// Output gathered before one write to the destination: records reach it in a few large writes
/// rather than one per record.
const FLUSH_AT: usize = 64 * 1024;

/// Where the verdict records go: each is written into a buffer, as [`VerdictRecord`] serialises,
/// and the buffer goes to `out` when it holds [`FLUSH_AT`] bytes, on [`Records::flush`], and (as
/// far as it can, as `BufWriter` does) when dropped.
pub(super) struct Records<'a> {
    out: &'a mut dyn Write,
    buf: Vec<u8>,
    keys: Keys,
}

/// The keys of a record, each as serde_json writes it with its separators (`,"name":`).
struct Keys {
    /// Per metric, in [`Quality::ALL`] order.
    metrics: [Vec<u8>; Quality::COUNT],
    /// The offline features, by name (as a JSON object orders them): each one's index in
    /// [`Features::NAMES`] and its key, the first without the leading comma.
    features: Vec<(usize, Vec<u8>)>,
}

impl Keys {
    fn new() -> Self {
        // `"name":` as serde_json writes a map key, after `sep`.
        let key = |sep: &str, name: &str| {
            let mut k = sep.as_bytes().to_vec();
            serde_json::to_writer(&mut k, name).expect("a string serialises");
            k.push(b':');
            k
        };
        let mut sorted: [usize; FEATURES] = std::array::from_fn(|i| i);
        sorted.sort_by_key(|&i| Features::NAMES[i]);
        Self {
            metrics: Quality::ALL.map(|m| key(",", m.name())),
            features: sorted
                .iter()
                .enumerate()
                .map(|(n, &i)| (i, key(if n == 0 { "" } else { "," }, Features::NAMES[i])))
                .collect(),
        }
    }
}

/// Writes `v` as serde_json writes it.
fn value<T: Serialize + ?Sized>(buf: &mut Vec<u8>, v: &T) -> serde_json::Result<()> {
    v.serialize(&mut serde_json::Serializer::new(buf))
}

/// Writes `v` as serde_json writes it; 0 and 1, half of an offline record's numbers, from their
/// bytes (a test holds them to serde_json's).
fn number(buf: &mut Vec<u8>, v: f64) -> serde_json::Result<()> {
    if v.to_bits() == 0f64.to_bits() {
        buf.extend_from_slice(b"0.0");
    } else if v == 1.0 {
        buf.extend_from_slice(b"1.0");
    } else {
        value(buf, &v)?;
    }
    Ok(())
}

/// A score as serde_json writes it.
fn score(buf: &mut Vec<u8>, v: Option<f64>) -> serde_json::Result<()> {
    match v {
        Some(v) => number(buf, v),
        None => {
            buf.extend_from_slice(b"null");
            Ok(())
        }
    }
}

impl<'a> Records<'a> {
    /// Records written to `out`.
    pub(super) fn new(out: &'a mut dyn Write) -> Self {
        Self {
            out,
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            keys: Keys::new(),
        }
    }

    /// Writes `record` and a newline.
    pub(super) fn write(&mut self, record: &VerdictRecord<'_>) -> std::io::Result<()> {
        let start = self.buf.len();
        if let Err(e) = self.put(record) {
            self.buf.truncate(start);
            return Err(e.into());
        }
        self.buf.push(b'\n');
        if self.buf.len() >= FLUSH_AT {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Writes what is buffered and flushes `out`.
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }

    /// `record` without its newline, in [`VerdictRecord`]'s field order.
    fn put(&mut self, r: &VerdictRecord<'_>) -> serde_json::Result<()> {
        let b = &mut self.buf;
        b.extend_from_slice(br#"{"trace_id":"#);
        value(b, &r.trace_id)?;
        b.extend_from_slice(br#","stratum":"#);
        value(b, &r.stratum)?;
        put_scores(b, &self.keys, &r.scores)?;
        b.extend_from_slice(br#","judge":"#);
        value(b, r.judge)?;
        b.extend_from_slice(br#","status":"#);
        value(b, r.status)?;
        b.extend_from_slice(br#","reason":"#);
        value(b, &r.reason)?;
        b.extend_from_slice(br#","line":"#);
        value(b, &r.line)?;
        b.extend_from_slice(br#","label_faithful":"#);
        value(b, &r.label_faithful)?;
        b.extend_from_slice(br#","details":"#);
        match r.details {
            None => b.extend_from_slice(b"null"),
            Some(RecordVerdict {
                verdict: v,
                offline: Some(offline),
            }) => put_offline_verdict(b, &self.keys, v, offline)?,
            Some(other) => value(b, &other)?,
        }
        b.push(b'}');
        Ok(())
    }
}

impl Drop for Records<'_> {
    /// Hands what is buffered to `out` when a replay stops early (its error is what the caller
    /// reports; this one, like `BufWriter`'s on drop, is dropped).
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            let _ = self.out.write_all(&self.buf);
        }
    }
}

/// `,"metric":score` for each metric.
fn put_scores(
    b: &mut Vec<u8>,
    keys: &Keys,
    scores: &PerQuality<Option<f64>>,
) -> serde_json::Result<()> {
    for ((_, &v), key) in scores.iter().zip(&keys.metrics) {
        b.extend_from_slice(key);
        score(b, v)?;
    }
    Ok(())
}

/// An offline verdict as [`RecordVerdict`] serialises it, its details from `offline`.
fn put_offline_verdict(
    b: &mut Vec<u8>,
    keys: &Keys,
    v: &Verdict,
    offline: &OfflineScore,
) -> serde_json::Result<()> {
    b.extend_from_slice(br#"{"judge":"#);
    value(b, &v.judge)?;
    put_scores(b, keys, &v.scores)?;
    b.extend_from_slice(br#","refusal":"#);
    value(b, &v.refusal)?;
    b.extend_from_slice(br#","uncertain":"#);
    value(b, &v.uncertain)?;
    b.extend_from_slice(br#","citations":{"total":"#);
    value(b, &v.citations.total)?;
    b.extend_from_slice(br#","valid":"#);
    value(b, &v.citations.valid)?;
    b.extend_from_slice(br#"},"details":{"features":{"#);
    let features = offline.extraction.features.to_vec();
    for (i, key) in &keys.features {
        b.extend_from_slice(key);
        number(b, features[*i])?;
    }
    b.extend_from_slice(br#"},"sentences":"#);
    value(b, &offline.extraction.sentences)?;
    b.extend_from_slice(b"}}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::Trace;

    fn scores() -> Vec<OfflineScore> {
        let judge = crate::judge::OfflineJudge::default();
        let ctx = "The Eiffel Tower is in Paris. It was completed in 1889 [doc_1].";
        [
            Trace::of(
                "Where is the tower?",
                &[("d1", ctx)],
                "The tower is in Paris [1].",
            ),
            Trace::of(
                "When?",
                &[("d1", ctx)],
                "It was built in 1925 by Ann Smith.",
            ),
            Trace::of("When?", &[("d1", ctx)], "I'm sorry, I cannot answer that."),
            Trace::of("q", &[], "Paris is the capital of France."),
            Trace::of("q", &[("d1", ctx)], "  ...  "),
            Trace::of("", &[("d1", "")], ""),
        ]
        .iter()
        .map(|t| judge.score(t))
        .collect()
    }

    /// The record's offline verdict, written from the scores, is byte for byte the verdict with
    /// its `details` JSON object.
    #[test]
    fn offline_record_verdict_writes_the_verdicts_bytes() {
        for score in scores() {
            let written = RecordVerdict {
                verdict: &score.verdict_without_details(),
                offline: Some(&score),
            };
            assert_eq!(
                serde_json::to_string(&written).unwrap(),
                serde_json::to_string(&score.verdict()).unwrap()
            );
        }
    }

    /// Numbers are written as serde_json writes them, 0 and 1 included.
    #[test]
    fn numbers_are_serde_jsons() {
        for v in [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            1e-300,
            1e300,
            f64::NAN,
            f64::INFINITY,
        ] {
            let mut b = Vec::new();
            number(&mut b, v).unwrap();
            assert_eq!(
                String::from_utf8(b).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
            for v in [Some(v), None] {
                let mut b = Vec::new();
                score(&mut b, v).unwrap();
                assert_eq!(
                    String::from_utf8(b).unwrap(),
                    serde_json::to_string(&v).unwrap()
                );
            }
        }
    }

    /// What [`Records`] writes for `record`.
    fn written(record: &VerdictRecord<'_>) -> String {
        let mut out = Vec::new();
        {
            let mut records = Records::new(&mut out);
            records.write(record).unwrap();
            records.flush().unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    /// The writer's line is `VerdictRecord`'s serialisation and a newline, whatever the record
    /// holds: rejected, skipped, offline and other verdicts, strings to escape, non-finite scores.
    #[test]
    fn records_write_the_records_serialisation() {
        let scores = scores();
        let verdicts: Vec<(Verdict, OfflineScore)> = scores
            .iter()
            .map(|s| (s.verdict_without_details(), *s))
            .collect();
        let mut llm = scores[0].verdict();
        llm.judge = JudgeKind::Llm;
        llm.details = serde_json::json!({"raw": "a \"quoted\"\n\u{1} é", "claims": [1, 2.5]});
        let mut details: Vec<Option<RecordVerdict<'_>>> = vec![None];
        details.extend(verdicts.iter().map(|(v, s)| {
            Some(RecordVerdict {
                verdict: v,
                offline: Some(s),
            })
        }));
        details.push(Some(RecordVerdict {
            verdict: &llm,
            offline: None,
        }));
        let metric_scores = [
            PerQuality::default(),
            PerQuality::from_fn(|_| Some(0.1 + 0.2)),
            PerQuality::from_fn(|m| [f64::NAN, -0.0, 1e300][m.index() % 3].into()),
        ];
        for (n, d) in details.into_iter().enumerate() {
            let record = VerdictRecord {
                trace_id: [None, Some("t-1"), Some("a\"b\\c\n\u{7f}\u{1f}é😀")][n % 3],
                stratum: [Some("head"), None, Some("out\tof scope")][n % 3],
                scores: metric_scores[n % 3],
                judge: ["offline", "llm"][n % 2],
                status: ["judged", "no_claims", "rejected"][n % 3],
                reason: [None, Some("refusal"), Some("invalid_json")][n % 3],
                line: [1, 0, u64::MAX][n % 3],
                label_faithful: [None, Some(true), Some(false)][n % 3],
                details: d,
            };
            let mut want = serde_json::to_string(&record).unwrap();
            want.push('\n');
            assert_eq!(written(&record), want, "record {n}");
        }
    }

    /// Records are all written, in order, across flushes of the buffer, and a dropped writer hands
    /// over what it holds.
    #[test]
    fn records_reach_the_output_across_flushes_and_on_drop() {
        let record = |line| VerdictRecord {
            trace_id: Some("t"),
            stratum: Some("head"),
            scores: PerQuality::default(),
            judge: "offline",
            status: "rejected",
            reason: Some("empty"),
            line,
            label_faithful: None,
            details: None,
        };
        let n = 2 * FLUSH_AT / 100;
        let mut out = Vec::new();
        {
            let mut records = Records::new(&mut out);
            for line in 0..n as u64 {
                records.write(&record(line)).unwrap();
            }
        }
        let want: String = (0..n as u64)
            .map(|line| serde_json::to_string(&record(line)).unwrap() + "\n")
            .collect();
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
