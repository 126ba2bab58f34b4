//! Fuzzes the trace decoder, native and mapped (OpenInference shape), and the stratifier behind it:
//! any bytes give a trace within the configured limits or a reject reason, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ragwatch::fuzzing::check_decode;

fuzz_target!(|data: &[u8]| {
    check_decode(data);
});
