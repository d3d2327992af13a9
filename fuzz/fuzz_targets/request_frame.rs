//! libFuzzer's entry to the `request_frame` check of `moldau-fuzz-checks`
//! (`fuzz-checks/src/request_frame.rs` says what it exercises and asserts).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moldau_fuzz_checks::request_frame::run(data));
