//! Fuzz check `auth_exchanges`: what a client sends before it is anyone
//! (issue 38) and the security text the broker reads from its configs.
//!
//! Input: a mode byte, then the bytes of that mode:
//! - `0` PLAIN: a SaslAuthenticate token given to `security::plain::authenticate`
//!   against the one user `alice` / `alice-secret`;
//! - `1` SCRAM-SHA-256: `first length u16 | client-first | client-final`
//!   given to a `ScramServer` whose only user is `alice` / `alice-secret`
//!   (4096 iterations). In the client-final bytes `{r}` is replaced by the
//!   nonce the server answered and `{p}` by the proof a client knowing the
//!   password computes for the bytes before it, so a seed can hold a whole
//!   valid exchange and mutations start from one;
//! - `2` JAAS: text given to `security::jaas::parse` and `plain_users`;
//! - `3` principal mapping: `rules \0 distinguished name`, the rules given
//!   to `PrincipalMapper::parse` (Kafka's `ssl.principal.mapping.rules`)
//!   and the name to the parsed rules' `map`;
//! - `4` certificate: DER bytes given to `security::tls::subject_dn` (what
//!   an mTLS client's certificate becomes);
//! - `5` TLS configs: `key=value` lines given to
//!   `security::tls::tls_settings` (a listener's `ssl.*` configs);
//! - `6` OAUTHBEARER: a client's first message given to
//!   `security::oauthbearer::parse_initial_response`, its token (or the
//!   bytes as text) to the unsecured validator and to a JWKS key cache
//!   holding one EC key.
//!
//! Asserts: no panic, abort or out-of-memory. PLAIN authenticates exactly
//! `alice` with her password (and no other authorization id). SCRAM
//! authenticates only `alice`, only after her client-final message carried
//! the right proof, answers nothing after it ends, and a failed exchange
//! stays failed. A rule set that parses maps a name to a non-empty user or
//! to nothing, and the same name twice to the same user. The unsecured
//! validator accepts only unsigned tokens naming a principal; the key cache
//! accepts no token (the fuzzer cannot sign with its key).

use std::sync::OnceLock;

use hmac::{Hmac, Mac};
use moldau_broker::security::jaas;
use moldau_broker::security::plain;
use moldau_broker::security::scram::{ScramCredential, ScramMechanism, ScramServer, StepOutcome};
use moldau_broker::security::tls::{subject_dn, tls_settings, PrincipalMapper};
use sha2::{Digest, Sha256};

use crate::common::Input;

const USER: &str = "alice";
const PASSWORD: &str = "alice-secret";
const SALT: &[u8] = b"fuzz-salt-16byte";
const ITERATIONS: u32 = 4096;

pub fn run(data: &[u8]) {
    authenticated(data);
}

/// Runs the check on `data`; whether a PLAIN or SCRAM input authenticated
/// (so the seeds can show that theirs do).
pub fn authenticated(data: &[u8]) -> bool {
    let mut input = Input::new(data);
    match input.u8() % 7 {
        0 => return plain_token(input.rest),
        1 => return scram(&mut input),
        2 => jaas_text(input.rest),
        3 => mapping_rules(input.rest),
        4 => {
            let _ = subject_dn(input.rest);
        }
        5 => configs(input.rest),
        _ => oauthbearer(input.rest),
    }
    false
}

fn oauthbearer(message: &[u8]) {
    use moldau_broker::security::jwks::{parse_jwks, KeyCache};
    use moldau_broker::security::oauthbearer::{
        decode_compact, parse_initial_response, validate_unsecured, ClaimRules,
    };
    static KEYS: OnceLock<KeyCache> = OnceLock::new();
    let keys = KEYS.get_or_init(|| {
        let cache = KeyCache::new();
        cache.install(
            parse_jwks(br#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","alg":"ES256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#)
                .expect("the fixed JWKS parses"),
        );
        cache
    });
    let token = match parse_initial_response(message) {
        Ok(r) => r.token,
        Err(_) => String::from_utf8_lossy(message).into_owned(),
    };
    let rules = ClaimRules::default();
    if let Ok(valid) = validate_unsecured(&token, &rules, 0) {
        assert!(
            !valid.principal.trim().is_empty(),
            "a token without a principal"
        );
        let jws = decode_compact(&token).expect("an accepted token decodes");
        assert!(
            !jws.signed && jws.header["alg"] == "none",
            "a signed token passed as unsecured"
        );
    }
    assert!(
        keys.validate(&token, &rules, 0).is_err(),
        "a token the fuzzer made verified with the cache's key"
    );
}

fn plain_token(token: &[u8]) -> bool {
    let verified = plain::authenticate(token, |u, p| u == USER && p == PASSWORD);
    let Ok(user) = verified else {
        return false;
    };
    {
        assert_eq!(user, USER, "PLAIN authenticated someone else");
        let parts: Vec<&[u8]> = token.split(|&b| b == 0).collect();
        assert!(
            parts.len() == 3
                && parts[1] == USER.as_bytes()
                && parts[2] == PASSWORD.as_bytes()
                && (parts[0].is_empty() || parts[0] == USER.as_bytes()),
            "PLAIN accepted a token other than [alice]\\0alice\\0alice-secret"
        );
    }
    true
}

fn credential() -> &'static ScramCredential {
    static CREDENTIAL: OnceLock<ScramCredential> = OnceLock::new();
    CREDENTIAL.get_or_init(|| {
        ScramCredential::from_password(ScramMechanism::Sha256, PASSWORD, SALT, ITERATIONS)
    })
}

fn salted_password() -> &'static [u8] {
    static SALTED: OnceLock<Vec<u8>> = OnceLock::new();
    SALTED.get_or_init(|| {
        ScramMechanism::Sha256.salted_password(PASSWORD.as_bytes(), SALT, ITERATIONS)
    })
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// The base64 proof of RFC 5802 a client knowing the password sends for
/// `auth_message`.
fn proof(auth_message: &[u8]) -> String {
    use base64::Engine;
    let client_key = hmac(salted_password(), b"Client Key");
    let stored_key = Sha256::digest(&client_key);
    let signature = hmac(&stored_key, auth_message);
    let proof: Vec<u8> = client_key
        .iter()
        .zip(signature)
        .map(|(k, s)| k ^ s)
        .collect();
    base64::engine::general_purpose::STANDARD.encode(proof)
}

fn scram(input: &mut Input<'_>) -> bool {
    let first_len = usize::from(input.u16());
    let client_first = input.bytes(first_len);
    let template = input.rest;
    let mut server = ScramServer::new(ScramMechanism::Sha256, |user: &str| {
        (user == USER).then(|| credential().clone())
    });
    let server_first = match server.step(client_first) {
        Ok(StepOutcome::Challenge(challenge)) => challenge,
        Ok(StepOutcome::Authenticated(_)) => panic!("SCRAM authenticated on its first message"),
        Err(_) => {
            assert!(server.is_failed());
            assert!(server.step(template).is_err(), "a failed exchange went on");
            return false;
        }
    };
    let nonce = std::str::from_utf8(&server_first)
        .ok()
        .and_then(|s| s.split(',').find_map(|f| f.strip_prefix("r=")))
        .unwrap_or("")
        .to_string();
    let mut client_final = replace(template, b"{r}", nonce.as_bytes());
    let mut proved = false;
    if let Some(at) = find(&client_final, b"{p}") {
        // AuthMessage = client-first-bare "," server-first ","
        // client-final-without-proof (the bytes before ",p=")
        let bare = client_first_bare(client_first);
        let without_proof = client_final[..at]
            .strip_suffix(b",p=")
            .unwrap_or(&client_final[..at]);
        let auth_message = [bare, b",", &server_first, b",", without_proof].concat();
        let p = proof(&auth_message);
        client_final.splice(at..at + 3, p.bytes());
        proved = true;
    }
    let done = match server.step(&client_final) {
        Ok(StepOutcome::Authenticated(done)) => {
            assert_eq!(done.username, USER, "SCRAM authenticated someone else");
            assert!(proved, "SCRAM authenticated without the proof");
            assert!(server.is_complete());
            true
        }
        Ok(StepOutcome::Challenge(_)) => panic!("SCRAM asked a third question"),
        Err(_) => {
            assert!(server.is_failed());
            false
        }
    };
    assert!(
        server.step(b"n,,n=alice,r=x").is_err(),
        "an ended exchange went on"
    );
    done
}

/// The client-first message without its GS2 header (up to the second
/// comma), as RFC 5802's AuthMessage takes it.
fn client_first_bare(first: &[u8]) -> &[u8] {
    let mut commas = first.iter().enumerate().filter(|(_, &b)| b == b',');
    match commas.nth(1) {
        Some((i, _)) => &first[i + 1..],
        None => first,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn replace(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    while let Some(at) = find(rest, from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

fn jaas_text(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let _ = jaas::parse(&text);
    let _ = jaas::plain_users(&text);
}

fn mapping_rules(bytes: &[u8]) {
    let (rules, dn) = match bytes.iter().position(|&b| b == 0) {
        Some(at) => (&bytes[..at], &bytes[at + 1..]),
        None => (bytes, &b"CN=alice,OU=eng,O=acme"[..]),
    };
    let Ok(mapper) = PrincipalMapper::parse(&String::from_utf8_lossy(rules)) else {
        return;
    };
    let dn = String::from_utf8_lossy(dn);
    let first = mapper.map(&dn);
    assert_eq!(
        first,
        mapper.map(&dn),
        "the same name mapped twice differently"
    );
}

fn configs(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let pairs: Vec<(&str, &str)> = text.lines().filter_map(|l| l.split_once('=')).collect();
    let _ = tls_settings(|key| pairs.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v));
}
