//! SASL OAUTHBEARER over the real wire (issue 38, KIP-768): signed JWTs
//! checked against a JWKS file, with Kafka 4.4's broker rules (audience,
//! issuer, expiry, the subject as the principal); refused tokens answered
//! with Kafka's error challenge, then SASL_AUTHENTICATION_FAILED; a key
//! added to the JWKS used as soon as a token names it; Kafka's unsecured
//! default for unsigned tokens; and configurations that cannot work
//! refused at start. Real clients drive it in
//! `e2e/clients/test_oauthbearer.py`.

mod wire_common;

use std::path::Path;
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsResponse, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use wire_common::*;

const VALIDATOR: &str =
    "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler";
const AUDIENCE: &str = "kafka";
const ISSUER: &str = "https://idp.test";

/// An ES256 signing key and its JWK.
struct SigningKey {
    kid: String,
    der: Vec<u8>,
    jwk: serde_json::Value,
}

impl SigningKey {
    fn new(kid: &str) -> Self {
        use base64::Engine;
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let point = pair.public_key_raw(); // 0x04 || x || y
        assert_eq!(point.len(), 65);
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        Self {
            kid: kid.into(),
            der: pair.serialize_der(),
            jwk: serde_json::json!({
                "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                "x": b64(&point[1..33]), "y": b64(&point[33..]),
            }),
        }
    }

    fn sign(&self, claims: &serde_json::Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_der(&self.der)).unwrap()
    }
}

fn write_jwks(path: &Path, keys: &[&SigningKey]) {
    let set = serde_json::json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() });
    std::fs::write(path, set.to_string()).unwrap();
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Claims a token of `user` valid for `valid_s` seconds.
fn claims(user: &str, valid_s: i64) -> serde_json::Value {
    serde_json::json!({
        "sub": user, "iat": now_s() - 5, "exp": now_s() + valid_s,
        "aud": AUDIENCE, "iss": ISSUER, "scope": "kafka",
    })
}

fn first_message(token: &str, authzid: &str) -> Vec<u8> {
    let a = if authzid.is_empty() {
        String::new()
    } else {
        format!("a={authzid}")
    };
    format!("n,{a},\u{1}auth=Bearer {token}\u{1}\u{1}").into_bytes()
}

/// A broker whose SASL_PLAINTEXT listener checks tokens against the JWKS
/// at `url`, with `extra` configs besides.
async fn jwks_broker_at(dir: &Path, url: &str, extra: &[&str]) -> Running {
    let url = format!("sasl.oauthbearer.jwks.endpoint.url={url}");
    let audience = format!("sasl.oauthbearer.expected.audience={AUDIENCE}");
    let issuer = format!("sasl.oauthbearer.expected.issuer={ISSUER}");
    let mut args = vec![
        "--set",
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "--set",
        "sasl.enabled.mechanisms=OAUTHBEARER",
        "--set",
        VALIDATOR,
        "--set",
        &url,
        "--set",
        &audience,
        "--set",
        &issuer,
        "--set",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms=50",
        "--set",
        "connection.failed.authentication.delay.ms=0",
    ];
    for e in extra {
        args.extend(["--set", e]);
    }
    start(dir, &args).await
}

async fn jwks_broker(dir: &Path, jwks: &Path, extra: &[&str]) -> Running {
    jwks_broker_at(dir, &format!("file://{}", jwks.display()), extra).await
}

async fn handshake(s: &mut TcpStream) -> SaslHandshakeResponse {
    call(
        s,
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("OAUTHBEARER")),
    )
    .await
}

async fn authenticate(s: &mut TcpStream, bytes: Vec<u8>) -> SaslAuthenticateResponse {
    call(
        s,
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes.into()),
    )
    .await
}

async fn closed(s: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// Logs in with `token`; the SaslAuthenticate answer.
async fn login(
    broker: &Running,
    token: &str,
    authzid: &str,
) -> (TcpStream, SaslAuthenticateResponse) {
    let mut s = broker.connect().await;
    let h = handshake(&mut s).await;
    assert_eq!(h.error_code, 0);
    assert!(
        h.mechanisms.iter().any(|m| m.as_str() == "OAUTHBEARER"),
        "{h:?}"
    );
    let a = authenticate(&mut s, first_message(token, authzid)).await;
    (s, a)
}

/// Logs in with `token` again and again until it is accepted (10 s at
/// most, else fails with `why`).
async fn login_within(broker: &Running, token: &str, why: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_s, a) = login(broker, token, "").await;
        if a.error_code == 0 && a.auth_bytes.is_empty() {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{why}: {a:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A refused token: the challenge, the client's %x01, then
/// SASL_AUTHENTICATION_FAILED with the challenge as message, and the
/// connection closes.
async fn assert_refused(broker: &Running, token: &str, why: &str) {
    let (mut s, a) = login(broker, token, "").await;
    assert_eq!(a.error_code, 0, "{why}: the refusal is a challenge first");
    assert_eq!(&a.auth_bytes[..], br#"{"status":"invalid_token"}"#, "{why}");
    let done = authenticate(&mut s, vec![0x01]).await;
    assert_eq!(
        done.error_code,
        ResponseError::SaslAuthenticationFailed.code(),
        "{why}"
    );
    assert_eq!(
        done.error_message
            .as_ref()
            .map(|m| m.to_string())
            .as_deref(),
        Some(r#"{"status":"invalid_token"}"#),
        "{why}"
    );
    assert!(closed(&mut s).await, "{why}: the connection closes");
}

async fn create_topic_as(s: &mut TcpStream, topic: &str) -> i16 {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::CreateTopicsRequest;
    let req = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(1)])
        .with_timeout_ms(10_000);
    let r: CreateTopicsResponse = call(s, ApiKey::CreateTopics, 7, &req).await;
    r.topics[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_tokens_authenticate_as_their_subject_and_bad_ones_get_kafkas_challenge() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    let key = SigningKey::new("k1");
    write_jwks(&jwks, &[&key]);
    let broker = jwks_broker(
        &dir.path().join("data"),
        &jwks,
        &[
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:alice",
            "connections.max.reauth.ms=600000",
        ],
    )
    .await;

    // a good token: its subject is the principal, its expiry bounds the session
    let (mut alice, a) = login(&broker, &key.sign(&claims("alice", 30)), "").await;
    assert_eq!(a.error_code, 0, "{a:?}");
    assert!(
        (1..=30_000).contains(&a.session_lifetime_ms),
        "the session ends with the token: {a:?}"
    );
    assert_eq!(create_topic_as(&mut alice, "alices").await, 0);
    let (mut bob, a) = login(&broker, &key.sign(&claims("bob", 30)), "bob").await;
    assert_eq!(a.error_code, 0, "{a:?}");
    assert_eq!(
        create_topic_as(&mut bob, "bobs").await,
        ResponseError::TopicAuthorizationFailed.code(),
        "bob is no super user: the subject claim is the principal"
    );

    // refused tokens
    let other = SigningKey::new("k1"); // same kid, another key
    assert_refused(
        &broker,
        &other.sign(&claims("alice", 30)),
        "signed by another key",
    )
    .await;
    assert_refused(&broker, &key.sign(&claims("alice", -60)), "expired").await;
    let mut wrong = claims("alice", 30);
    wrong["aud"] = "elsewhere".into();
    assert_refused(&broker, &key.sign(&wrong), "another audience").await;
    let mut wrong = claims("alice", 30);
    wrong["iss"] = "https://evil.test".into();
    assert_refused(&broker, &key.sign(&wrong), "another issuer").await;
    let mut wrong = claims("alice", 30);
    wrong.as_object_mut().unwrap().remove("iat");
    assert_refused(&broker, &key.sign(&wrong), "no iat").await;
    let unknown = SigningKey::new("k9");
    assert_refused(&broker, &unknown.sign(&claims("alice", 30)), "unknown kid").await;
    {
        use base64::Engine;
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let unsigned = format!(
            "{}.{}.",
            b64(serde_json::json!({"alg": "none"})),
            b64(claims("alice", 30))
        );
        assert_refused(&broker, &unsigned, "unsigned").await;
    }

    // an authorization id other than the subject
    let (mut s, a) = login(&broker, &key.sign(&claims("alice", 30)), "bob").await;
    assert_eq!(a.error_code, ResponseError::SaslAuthenticationFailed.code());
    assert!(
        a.error_message
            .as_deref()
            .is_some_and(|m| m.contains("different from the token's principal name (alice)")),
        "{a:?}"
    );
    assert!(closed(&mut s).await);

    // a first message that does not parse
    let mut s = broker.connect().await;
    assert_eq!(handshake(&mut s).await.error_code, 0);
    let a = authenticate(&mut s, b"n,,auth=Bearer x".to_vec()).await;
    assert_eq!(a.error_code, ResponseError::SaslAuthenticationFailed.code());
    assert!(closed(&mut s).await);

    drop((alice, bob));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_added_to_the_jwks_is_used_once_a_token_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    let old = SigningKey::new("2026-11");
    write_jwks(&jwks, &[&old]);
    let broker = jwks_broker(&dir.path().join("data"), &jwks, &[]).await;
    let (_s, a) = login(&broker, &old.sign(&claims("svc", 60)), "").await;
    assert_eq!(a.error_code, 0);

    // the provider rotates: a new key joins the set
    let new = SigningKey::new("2026-12");
    write_jwks(&jwks, &[&old, &new]);
    let token = new.sign(&claims("svc", 60));
    // the first try names an unknown kid and wakes the refresh
    login_within(&broker, &token, "the new key was never loaded").await;
    // and the old key still works
    let (_s, a) = login(&broker, &old.sign(&claims("svc", 60)), "").await;
    assert_eq!(a.error_code, 0);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkas_unsecured_default_takes_unsigned_tokens_only() {
    use base64::Engine;
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &[
            "--set",
            "listeners=SASL_PLAINTEXT://127.0.0.1:0",
            "--set",
            "sasl.enabled.mechanisms=OAUTHBEARER",
            "--set",
            r#"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredValidatorRequiredScope="produce";"#,
            "--set",
            "connection.failed.authentication.delay.ms=0",
        ],
    )
    .await;
    let b64 = |v: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let unsigned = |scope: &str| {
        format!(
            "{}.{}.",
            b64(serde_json::json!({"alg": "none"})),
            b64(serde_json::json!({"sub": "dev", "exp": now_s() + 60, "scope": scope}))
        )
    };
    let (_s, a) = login(&broker, &unsigned("produce consume"), "").await;
    assert_eq!((a.error_code, a.auth_bytes.is_empty()), (0, true), "{a:?}");

    // without the required scope: insufficient_scope, naming it
    let (mut s, a) = login(&broker, &unsigned("consume"), "").await;
    assert_eq!(a.error_code, 0);
    assert_eq!(
        &a.auth_bytes[..],
        br#"{"status":"insufficient_scope", "scope":"produce"}"#
    );
    let done = authenticate(&mut s, vec![0x01]).await;
    assert_eq!(
        done.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );

    // a signed token is not what the unsecured validator takes
    let key = SigningKey::new("k1");
    let (_s, a) = login(&broker, &key.sign(&claims("dev", 60)), "").await;
    assert_eq!(&a.auth_bytes[..], br#"{"status":"invalid_token"}"#);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_settings_that_cannot_work_refuse_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let base = [
        "--set",
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "--set",
        "sasl.enabled.mechanisms=OAUTHBEARER",
        "--set",
        VALIDATOR,
    ];
    let missing = format!(
        "sasl.oauthbearer.jwks.endpoint.url=file://{}",
        dir.path().join("missing.json").display()
    );
    let cases: [(&[&str], &str); 4] = [
        (&[], "sasl.oauthbearer.jwks.endpoint.url"),
        (
            &["--set", "sasl.oauthbearer.jwks.endpoint.url=file:///etc/jwks.json"],
            "sasl.oauthbearer.expected.audience",
        ),
        (
            &[
                "--set",
                &missing,
                "--set",
                "sasl.oauthbearer.allow.unverified.audience=true",
                "--set",
                "sasl.oauthbearer.allow.unverified.issuer=true",
            ],
            "missing.json",
        ),
        (
            &[
                "--set",
                "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=com.example.Custom",
            ],
            "com.example.Custom",
        ),
    ];
    for (i, (extra, expected)) in cases.into_iter().enumerate() {
        let mut args: Vec<&str> = base.to_vec();
        if i == 3 {
            args.truncate(4); // another handler class instead of Kafka's
        }
        args.extend(extra);
        let err = start_error(&dir.path().join(format!("data-{i}")), &args).await;
        assert!(err.contains(expected), "case {i}: {err}");
    }
}

/// Serves `body` at `http://127.0.0.1:<port>/jwks` (503 while it is
/// empty); the identity provider of the HTTP test.
async fn jwks_server(
    body: std::sync::Arc<parking_lot::Mutex<String>>,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use axum::http::StatusCode;
    let app = axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || {
            let body = body.lock().clone();
            async move {
                if body.is_empty() {
                    (StatusCode::SERVICE_UNAVAILABLE, String::new())
                } else {
                    (StatusCode::OK, body)
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_served_over_http_is_fetched_and_outlives_provider_outages() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::new("k1");
    let body = std::sync::Arc::new(parking_lot::Mutex::new(String::new()));
    let (addr, server) = jwks_server(body.clone()).await;
    let broker = jwks_broker_at(
        dir.path(),
        &format!("http://{addr}/jwks"),
        &[
            "sasl.oauthbearer.jwks.endpoint.refresh.ms=1000",
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms=200",
        ],
    )
    .await;
    let token = key.sign(&claims("svc", 60));
    // the provider is down at first: tokens are refused, the broker serves
    let (_s, a) = login(&broker, &token, "").await;
    assert_eq!(&a.auth_bytes[..], br#"{"status":"invalid_token"}"#);

    // it comes up: the retries find it
    *body.lock() = serde_json::json!({ "keys": [key.jwk.clone()] }).to_string();
    login_within(&broker, &token, "never fetched").await;
    // it fails again: the keys fetched before stay in use across refreshes
    body.lock().clear();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (_s, a) = login(&broker, &token, "").await;
    assert_eq!((a.error_code, a.auth_bytes.is_empty()), (0, true), "{a:?}");
    broker.stop().await;
    server.abort();
}
