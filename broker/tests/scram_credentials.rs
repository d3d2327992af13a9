//! The SCRAM credential store over the real wire (issue 38): a standalone
//! broker takes AlterUserScramCredentials (a client's salt and salted
//! password; the broker keeps the salt and the derived StoredKey and
//! ServerKey, never the salted password), answers
//! DescribeUserScramCredentials with mechanisms and iterations, refuses
//! with Kafka's error codes per user, and keeps the credentials across a
//! restart.

mod wire_common;

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    ApiVersionsRequest, ApiVersionsResponse, DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use moldau_broker::security::scram::{ScramCredential, ScramMechanism};
use tokio::net::TcpStream;
use wire_common::*;

const SHA256: i8 = 1;
const SHA512: i8 = 2;
const SALT: &[u8] = b"0123456789abcdef";

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn salted(mechanism: i8, password: &str, iterations: i32) -> Vec<u8> {
    let m = ScramMechanism::from_id(mechanism).unwrap_or(ScramMechanism::Sha256);
    m.salted_password(password.as_bytes(), SALT, iterations.max(1) as u32)
}

fn upsert(user: &str, mechanism: i8, iterations: i32, password: &str) -> ScramCredentialUpsertion {
    ScramCredentialUpsertion::default()
        .with_name(s(user))
        .with_mechanism(mechanism)
        .with_iterations(iterations)
        .with_salt(Bytes::from_static(SALT))
        .with_salted_password(Bytes::from(salted(mechanism, password, iterations)))
}

fn delete(user: &str, mechanism: i8) -> ScramCredentialDeletion {
    ScramCredentialDeletion::default()
        .with_name(s(user))
        .with_mechanism(mechanism)
}

/// Alters; per user, its error code and message.
async fn alter(
    stream: &mut TcpStream,
    deletions: Vec<ScramCredentialDeletion>,
    upsertions: Vec<ScramCredentialUpsertion>,
) -> BTreeMap<String, (i16, Option<String>)> {
    let req = AlterUserScramCredentialsRequest::default()
        .with_deletions(deletions)
        .with_upsertions(upsertions);
    let r: AlterUserScramCredentialsResponse =
        call(stream, ApiKey::AlterUserScramCredentials, 0, &req).await;
    r.results
        .into_iter()
        .map(|u| {
            (
                u.user.to_string(),
                (u.error_code, u.error_message.map(|m| m.to_string())),
            )
        })
        .collect()
}

type Described = BTreeMap<String, Result<Vec<(i8, i32)>, (i16, String)>>;

/// Describes `users` (None: all); per user, its (mechanism, iterations) or
/// its error.
async fn describe(stream: &mut TcpStream, users: Option<&[&str]>) -> Described {
    let req = DescribeUserScramCredentialsRequest::default().with_users(users.map(|users| {
        users
            .iter()
            .map(|u| UserName::default().with_name(s(u)))
            .collect()
    }));
    let r: DescribeUserScramCredentialsResponse =
        call(stream, ApiKey::DescribeUserScramCredentials, 0, &req).await;
    assert_eq!(r.error_code, 0);
    r.results
        .into_iter()
        .map(|u| {
            let result = if u.error_code == 0 {
                Ok(u.credential_infos
                    .iter()
                    .map(|c| (c.mechanism, c.iterations))
                    .collect())
            } else {
                Err((
                    u.error_code,
                    u.error_message.map(|m| m.to_string()).unwrap_or_default(),
                ))
            };
            (u.user.to_string(), result)
        })
        .collect()
}

fn ok() -> (i16, Option<String>) {
    (0, None)
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_altered_described_refused_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut c = broker.connect().await;

    // both APIs are advertised, v0 only
    let versions: ApiVersionsResponse = call(
        &mut c,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    for api in [
        ApiKey::DescribeUserScramCredentials,
        ApiKey::AlterUserScramCredentials,
    ] {
        let v = versions
            .api_keys
            .iter()
            .find(|k| k.api_key == api as i16)
            .unwrap_or_else(|| panic!("{api:?} not advertised"));
        assert_eq!((v.min_version, v.max_version), (0, 0));
    }

    // nothing yet
    assert!(describe(&mut c, None).await.is_empty());
    let got = describe(&mut c, Some(&["alice"])).await;
    assert_eq!(
        got["alice"],
        Err((
            code(ResponseError::ResourceNotFound),
            "Attempt to describe a user credential that does not exist: alice".into()
        ))
    );

    // one mechanism per user and request, several users at once
    let got = alter(
        &mut c,
        vec![],
        vec![
            upsert("alice", SHA256, 8192, "alice-secret"),
            upsert("bob", SHA512, 4096, "bob-secret"),
        ],
    )
    .await;
    assert_eq!(
        got,
        BTreeMap::from([("alice".into(), ok()), ("bob".into(), ok())])
    );
    let got = alter(
        &mut c,
        vec![],
        vec![upsert("alice", SHA512, 16384, "alice-secret")],
    )
    .await;
    assert_eq!(got["alice"], ok());

    let all = describe(&mut c, None).await;
    assert_eq!(
        all,
        BTreeMap::from([
            (
                "alice".to_string(),
                Ok(vec![(SHA256, 8192), (SHA512, 16384)])
            ),
            ("bob".to_string(), Ok(vec![(SHA512, 4096)])),
        ])
    );
    assert_eq!(
        describe(&mut c, Some(&[])).await,
        all,
        "an empty list is all users"
    );
    let got = describe(&mut c, Some(&["bob", "nobody", "bob"])).await;
    assert_eq!(got.len(), 2);
    assert_eq!(
        got["bob"],
        Err((
            code(ResponseError::DuplicateResource),
            "Cannot describe SCRAM credentials for the same user twice in a single request: bob"
                .into()
        ))
    );
    assert!(matches!(got["nobody"], Err((e, _)) if e == code(ResponseError::ResourceNotFound)));

    // refusals, each with Kafka's code; other users' changes go on
    let got = alter(
        &mut c,
        vec![
            delete("carol", SHA256),
            delete("dan", 0),
            delete("", SHA256),
        ],
        vec![
            upsert("erin", 3, 4096, "x"),
            upsert("fay", SHA256, 4095, "x"),
            upsert("gus", SHA512, 16385, "x"),
            upsert("hal", SHA256, 4096, "x"),
            upsert("hal", SHA512, 4096, "x"),
            upsert("ivy", SHA256, 4096, "ivy-secret"),
        ],
    )
    .await;
    let expect = |e: ResponseError, m: &str| (code(e), Some(m.to_string()));
    assert_eq!(
        got,
        BTreeMap::from([
            (
                "carol".into(),
                expect(
                    ResponseError::ResourceNotFound,
                    "Attempt to delete a user credential that does not exist"
                )
            ),
            (
                "dan".into(),
                expect(
                    ResponseError::UnsupportedSaslMechanism,
                    "Unknown SCRAM mechanism"
                )
            ),
            (
                "".into(),
                expect(
                    ResponseError::UnacceptableCredential,
                    "Username must not be empty"
                )
            ),
            (
                "erin".into(),
                expect(
                    ResponseError::UnsupportedSaslMechanism,
                    "Unknown SCRAM mechanism"
                )
            ),
            (
                "fay".into(),
                expect(ResponseError::UnacceptableCredential, "Too few iterations")
            ),
            (
                "gus".into(),
                expect(ResponseError::UnacceptableCredential, "Too many iterations")
            ),
            (
                "hal".into(),
                expect(
                    ResponseError::DuplicateResource,
                    "A user credential cannot be altered twice in the same request"
                )
            ),
            ("ivy".into(), ok()),
        ])
    );
    // a deletion and an upsertion of the same user and mechanism
    let got = alter(
        &mut c,
        vec![delete("bob", SHA512)],
        vec![upsert("bob", SHA512, 4096, "new")],
    )
    .await;
    assert_eq!(got["bob"].0, code(ResponseError::DuplicateResource));
    // a salted password of the wrong length is unacceptable
    let mut short = upsert("jay", SHA512, 4096, "x");
    short.salted_password = Bytes::from_static(b"short");
    let got = alter(&mut c, vec![], vec![short]).await;
    assert_eq!(got["jay"].0, code(ResponseError::UnacceptableCredential));

    // deleting one mechanism leaves the other; the last one, the user
    assert_eq!(
        alter(&mut c, vec![delete("alice", SHA256)], vec![]).await["alice"],
        ok()
    );
    assert_eq!(
        alter(&mut c, vec![delete("ivy", SHA256)], vec![]).await["ivy"],
        ok()
    );
    let got = alter(&mut c, vec![delete("ivy", SHA256)], vec![]).await;
    assert_eq!(got["ivy"].0, code(ResponseError::ResourceNotFound));
    let expected = BTreeMap::from([
        ("alice".to_string(), Ok(vec![(SHA512, 16384)])),
        ("bob".to_string(), Ok(vec![(SHA512, 4096)])),
    ]);
    assert_eq!(describe(&mut c, None).await, expected);

    // what is stored: salt and derived keys, never the salted password
    let file = std::fs::read_to_string(dir.path().join("scram-credentials.json"))
        .expect("the standalone broker keeps its credentials in its data directory");
    let alice_salted = salted(SHA512, "alice-secret", 16384);
    assert!(!file.contains(&B64.encode(&alice_salted)), "{file}");
    assert!(!file.contains("alice-secret"), "{file}");
    let want =
        ScramCredential::from_salted_password(ScramMechanism::Sha512, &alice_salted, SALT, 16384);
    assert!(file.contains(&B64.encode(&want.stored_key)), "{file}");
    assert!(file.contains(&B64.encode(&want.server_key)), "{file}");

    drop(c);
    broker.stop().await;

    // a restart keeps them
    let broker = start(dir.path(), &[]).await;
    let mut c = broker.connect().await;
    assert_eq!(describe(&mut c, None).await, expected);
    // and they can still change
    let got = alter(&mut c, vec![delete("bob", SHA512)], vec![]).await;
    assert_eq!(got["bob"], ok());
    assert_eq!(
        describe(&mut c, None).await.keys().collect::<Vec<_>>(),
        ["alice"]
    );
    drop(c);
    broker.stop().await;
}
