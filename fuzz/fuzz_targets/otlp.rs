//! Fuzzes the OTLP request decoder (protobuf and OTLP JSON) and the span assembly behind it, under
//! every preset: any bytes give traces within the configured limits, traces not judged with a known
//! reason, or reject reasons; never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ragwatch::fuzzing::check_otlp;

fuzz_target!(|data: &[u8]| {
    check_otlp(data);
});
