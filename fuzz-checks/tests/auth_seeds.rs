//! The `auth_exchanges` corpus (issue 38): PLAIN tokens, SCRAM-SHA-256
//! exchanges (a whole valid one among them, its final message built from
//! the server's nonce and a computed proof, see the check's doc), JAAS
//! text, principal mapping rules with a name, and listener TLS configs,
//! committed as `fuzz/corpus/auth_exchanges/<name>.bin`. The corpus also
//! holds `cert-*.bin`, DER certificates made once with `openssl` (random
//! keys, so not rebuilt here).
//!
//! The test checks that the committed files are exactly what this code
//! builds, and that the valid PLAIN and SCRAM seeds do authenticate (so
//! mutations start from a whole exchange). Regenerate them after a change:
//!
//! ```sh
//! MOLDAU_WRITE_SEEDS=1 cargo test -p moldau-fuzz-checks --test auth_seeds
//! ```

use std::path::Path;

use moldau_fuzz_checks::auth_exchanges::authenticated;

fn with_mode(mode: u8, body: &[u8]) -> Vec<u8> {
    [&[mode][..], body].concat()
}

fn scram(first: &str, last: &str) -> Vec<u8> {
    let len = u16::try_from(first.len()).unwrap().to_be_bytes();
    [&[1u8][..], &len, first.as_bytes(), last.as_bytes()].concat()
}

/// `(name, bytes, authenticates)`.
fn seeds() -> Vec<(&'static str, Vec<u8>, bool)> {
    vec![
        ("plain-valid", with_mode(0, b"\0alice\0alice-secret"), true),
        ("plain-authzid", with_mode(0, b"alice\0alice\0alice-secret"), true),
        ("plain-wrong", with_mode(0, b"\0alice\0nope"), false),
        ("plain-other-authzid", with_mode(0, b"bob\0alice\0alice-secret"), false),
        (
            "scram-valid",
            scram("n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL", "c=biws,r={r},p={p}"),
            true,
        ),
        (
            "scram-extension",
            scram(
                "n,,n=alice,r=rOprNGfwEbeRWgbNEkqO,tokenauth=false",
                "c=biws,r={r},p={p}",
            ),
            true,
        ),
        (
            "scram-unknown-user",
            scram("n,,n=bob,r=fyko+d2lbbFgONRv9qkxdawL", "c=biws,r={r},p={p}"),
            false,
        ),
        (
            "scram-bad-proof",
            scram("n,,n=alice,r=abc", "c=biws,r={r},p=AAAAAAAA"),
            false,
        ),
        (
            "scram-channel-binding",
            scram("p=tls-unique,,n=alice,r=abc", "c=biws,r={r},p={p}"),
            false,
        ),
        (
            "jaas-plain",
            with_mode(
                2,
                br#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_alice="alice-secret" user_bob="b\"q";"#,
            ),
            false,
        ),
        (
            "rules-mapped",
            with_mode(
                3,
                b"RULE:^CN=([^,]*),OU=eng,O=acme$/$1/L,RULE:^CN=(.*?),OU=(.*?)$/$1@$2/U,DEFAULT\0CN=Alice,OU=eng,O=acme",
            ),
            false,
        ),
        (
            "configs-pem",
            with_mode(
                5,
                b"ssl.keystore.type=PEM\nssl.keystore.location=/nonexistent/broker.pem\nssl.truststore.type=PEM\nssl.truststore.certificates=-----BEGIN CERTIFICATE-----\nssl.client.auth=required\nssl.enabled.protocols=TLSv1.2,TLSv1.3\nssl.principal.mapping.rules=DEFAULT\n",
            ),
            false,
        ),
    ]
}

#[test]
fn auth_seeds_are_committed_and_reach_their_outcome() {
    let write = std::env::var("MOLDAU_WRITE_SEEDS").is_ok_and(|v| v == "1");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/auth_exchanges");
    if write {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let mut stale = Vec::new();
    for (name, bytes, authenticates) in seeds() {
        assert_eq!(authenticated(&bytes), authenticates, "{name}");
        let path = dir.join(format!("{name}.bin"));
        if write {
            std::fs::write(&path, &bytes).unwrap();
        } else if std::fs::read(&path).ok().as_ref() != Some(&bytes) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "seed files missing or stale (MOLDAU_WRITE_SEEDS=1 cargo test -p moldau-fuzz-checks --test auth_seeds): {stale:?}"
    );
}
