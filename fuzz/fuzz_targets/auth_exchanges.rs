//! libFuzzer's entry to the `auth_exchanges` check of `moldau-fuzz-checks`
//! (`fuzz-checks/src/auth_exchanges.rs` says what it exercises and asserts).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moldau_fuzz_checks::auth_exchanges::run(data));
