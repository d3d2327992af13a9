//! libFuzzer's entry to the `record_batch` check of `moldau-fuzz-checks`
//! (`fuzz-checks/src/record_batch.rs` says what it exercises and asserts).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moldau_fuzz_checks::record_batch::run(data));
