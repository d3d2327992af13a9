//! libFuzzer's entry to the `txn_codecs` check of `moldau-fuzz-checks`
//! (`fuzz-checks/src/txn_codecs.rs` says what it exercises and asserts).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moldau_fuzz_checks::txn_codecs::run(data));
