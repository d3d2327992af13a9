//! libFuzzer's entry to the `log_recovery` check of `moldau-fuzz-checks`
//! (`fuzz-checks/src/log_recovery.rs` says what it exercises and asserts).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moldau_fuzz_checks::log_recovery::run(data));
