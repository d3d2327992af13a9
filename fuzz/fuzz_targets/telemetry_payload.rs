//! libFuzzer's entry to the `telemetry_payload` check of `moldau-fuzz-checks`
//! (`fuzz-checks/src/telemetry_payload.rs` says what it exercises and asserts).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moldau_fuzz_checks::telemetry_payload::run(data));
