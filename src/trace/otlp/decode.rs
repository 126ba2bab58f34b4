//! Bytes to an OTLP `ExportTraceServiceRequest`: protobuf through prost, OTLP JSON through the
//! crate's serde form (hex ids, string-encoded 64-bit integers), with the decoder's limits.
//!
//! A protobuf message's spans are counted from its wire structure before it is decoded, so a
//! message with a million spans is refused without first allocating a million spans.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

use crate::trace::otlp::config::TraceFormat;
use crate::trace::{DecodeError, RejectReason};

/// Decodes one OTLP request of `format`, at most `max_bytes` long and carrying at most `max_spans`
/// spans. An empty payload is an empty request only where the caller allows it; here it is
/// rejected as `empty` (a Kafka tombstone is not a batch).
pub fn decode_request(
    bytes: &[u8],
    format: TraceFormat,
    max_bytes: usize,
    max_spans: usize,
) -> Result<ExportTraceServiceRequest, DecodeError> {
    if bytes.is_empty() || (format == TraceFormat::OtlpJson && bytes.trim_ascii().is_empty()) {
        return Err(DecodeError::new(RejectReason::Empty, "empty payload"));
    }
    if bytes.len() > max_bytes {
        return Err(DecodeError::new(
            RejectReason::TooLarge,
            format!("{} bytes", bytes.len()),
        ));
    }
    match format {
        TraceFormat::OtlpJson => {
            let req: ExportTraceServiceRequest =
                serde_json::from_slice(bytes).map_err(super::super::decode::classify_json)?;
            let spans = req
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len())
                .sum::<usize>();
            if spans > max_spans {
                return Err(too_many(spans, max_spans));
            }
            Ok(req)
        }
        // Native bytes never reach here; read them as protobuf if they do.
        TraceFormat::OtlpProto | TraceFormat::Native => {
            let spans = count_spans(bytes)?;
            if spans > max_spans {
                return Err(too_many(spans, max_spans));
            }
            ExportTraceServiceRequest::decode(bytes).map_err(|e| protobuf_error(&e.to_string()))
        }
    }
}

fn too_many(spans: usize, max: usize) -> DecodeError {
    DecodeError::new(
        RejectReason::TooManySpans,
        format!("{spans} spans in one message (max {max})"),
    )
}

fn protobuf_error(detail: &str) -> DecodeError {
    let reason = if detail.contains("buffer underflow") || detail.contains("unexpected end") {
        RejectReason::Truncated
    } else {
        RejectReason::InvalidProtobuf
    };
    DecodeError::new(reason, detail.to_owned())
}

/// Spans in a protobuf `ExportTraceServiceRequest`, from its wire structure alone
/// (`resource_spans` = 1, `scope_spans` = 2, `spans` = 2), without decoding any span.
pub(crate) fn count_spans(bytes: &[u8]) -> Result<usize, DecodeError> {
    let mut total = 0usize;
    for_each_field(bytes, 1, &mut |resource| {
        for_each_field(resource, 2, &mut |scope| {
            for_each_field(scope, 2, &mut |_span| {
                total += 1;
                Ok(())
            })
        })
    })?;
    Ok(total)
}

/// Calls `f` with the payload of every length-delimited field numbered `tag` in `buf`, skipping the
/// others.
fn for_each_field(
    mut buf: &[u8],
    tag: u64,
    f: &mut dyn FnMut(&[u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let (field, wire) = (key >> 3, key & 7);
        let skip = match wire {
            0 => {
                varint(&mut buf)?;
                0
            }
            1 => 8,
            5 => 4,
            2 => {
                let len = usize::try_from(varint(&mut buf)?)
                    .map_err(|_| protobuf_error("length does not fit"))?;
                if len > buf.len() {
                    return Err(protobuf_error("buffer underflow"));
                }
                if field == tag {
                    f(&buf[..len])?;
                }
                len
            }
            w => return Err(protobuf_error(&format!("invalid wire type {w}"))),
        };
        if skip > buf.len() {
            return Err(protobuf_error("buffer underflow"));
        }
        buf = &buf[skip..];
    }
    Ok(())
}

fn varint(buf: &mut &[u8]) -> Result<u64, DecodeError> {
    let mut value = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Ok(value);
        }
    }
    if buf.len() < 10 {
        Err(protobuf_error("buffer underflow"))
    } else {
        Err(protobuf_error("invalid varint"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn request(spans_per_scope: &[usize]) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: spans_per_scope
                    .iter()
                    .map(|&n| ScopeSpans {
                        spans: (0..n)
                            .map(|i| Span {
                                trace_id: vec![1; 16],
                                span_id: vec![i as u8 + 1; 8],
                                name: "s".into(),
                                ..Default::default()
                            })
                            .collect(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
        }
    }

    #[test]
    fn counts_spans_without_decoding_them() {
        let bytes = request(&[3, 0, 4]).encode_to_vec();
        assert_eq!(count_spans(&bytes).unwrap(), 7);
        let r = decode_request(&bytes, TraceFormat::OtlpProto, 1 << 20, 100).unwrap();
        assert_eq!(r.resource_spans[0].scope_spans[2].spans.len(), 4);
        let e = decode_request(&bytes, TraceFormat::OtlpProto, 1 << 20, 6).unwrap_err();
        assert_eq!(e.reason, RejectReason::TooManySpans);
    }

    #[test]
    fn malformed_protobuf_has_its_reason() {
        let bytes = request(&[5]).encode_to_vec();
        let cut = &bytes[..bytes.len() - 3];
        let e = decode_request(cut, TraceFormat::OtlpProto, 1 << 20, 100).unwrap_err();
        assert_eq!(e.reason, RejectReason::Truncated, "{e}");
        let e = decode_request(b"\x0f\xff", TraceFormat::OtlpProto, 1 << 20, 100).unwrap_err();
        assert_eq!(e.reason, RejectReason::InvalidProtobuf, "{e}");
        let e = decode_request(b"", TraceFormat::OtlpProto, 1 << 20, 100).unwrap_err();
        assert_eq!(e.reason, RejectReason::Empty);
        let e = decode_request(&bytes, TraceFormat::OtlpProto, 10, 100).unwrap_err();
        assert_eq!(e.reason, RejectReason::TooLarge);
    }

    #[test]
    fn otlp_json_reads_hex_ids_and_string_integers() {
        let json = br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"rag"}}]},
            "scopeSpans":[{"scope":{"name":"x"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
            "parentSpanId":"","name":"q","kind":1,"startTimeUnixNano":"1544712660000000000","endTimeUnixNano":"1544712661000000000",
            "attributes":[{"key":"n","value":{"intValue":"42"}},{"key":"d","value":{"doubleValue":0.5}}]}]}]}]}"#;
        let r = decode_request(json, TraceFormat::OtlpJson, 1 << 20, 10).unwrap();
        let span = &r.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.trace_id.len(), 16);
        assert_eq!(span.trace_id[0], 0x5b);
        assert_eq!(span.end_time_unix_nano, 1_544_712_661_000_000_000);
        let e = decode_request(b"{\"resourceSpans\":[", TraceFormat::OtlpJson, 1 << 20, 10)
            .unwrap_err();
        assert_eq!(e.reason, RejectReason::Truncated);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode_request(&bytes, TraceFormat::OtlpProto, 1 << 20, 1000);
            let _ = decode_request(&bytes, TraceFormat::OtlpJson, 1 << 20, 1000);
        }
    }
}
