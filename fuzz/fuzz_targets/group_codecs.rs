//! libFuzzer's entry to the `group_codecs` check of `moldau-fuzz-checks`
//! (`fuzz-checks/src/group_codecs.rs` says what it exercises and asserts).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moldau_fuzz_checks::group_codecs::run(data));
