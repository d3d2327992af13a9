//! A SASL_PLAINTEXT client listener over the real wire (issue 38): the
//! handshake offers the listener's mechanisms, PLAIN checks the JAAS
//! config's users, a request before authentication closes the
//! connection, and a failed authentication is answered
//! SASL_AUTHENTICATION_FAILED with Kafka's message after the configured
//! delay, then the connection closes. SCRAM is driven end to end by real
//! clients (`e2e/clients/test_security.py`); its exchange is unit-tested
//! in `security::scram`.

mod wire_common;

use std::time::{Duration, Instant};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use wire_common::*;

const JAAS: &str = r#"listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#;

async fn sasl_broker(dir: &std::path::Path) -> Running {
    start(
        dir,
        &[
            "--set",
            "listeners=SASL_PLAINTEXT://127.0.0.1:0",
            "--set",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
            "--set",
            JAAS,
            "--set",
            "connection.failed.authentication.delay.ms=300",
        ],
    )
    .await
}

async fn handshake(s: &mut TcpStream, mechanism: &'static str) -> SaslHandshakeResponse {
    call(
        s,
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
    )
    .await
}

async fn plain(s: &mut TcpStream, user: &str, password: &str) -> SaslAuthenticateResponse {
    let token = format!("\0{user}\0{password}");
    call(
        s,
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(token.into_bytes().into()),
    )
    .await
}

async fn metadata(s: &mut TcpStream) -> MetadataResponse {
    call(s, ApiKey::Metadata, 12, &MetadataRequest::default()).await
}

/// Whether the broker closed the connection (reads end of file).
async fn closed(s: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut byte)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_users_authenticate_and_everyone_else_is_turned_away() {
    let dir = tempfile::tempdir().unwrap();
    let broker = sasl_broker(dir.path()).await;

    // ApiVersions and the handshake come before authentication
    let mut s = broker.connect().await;
    let v: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    assert_eq!(v.error_code, 0);
    let h = handshake(&mut s, "PLAIN").await;
    assert_eq!(h.error_code, 0);
    let offered: Vec<&str> = h.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(offered, vec!["PLAIN", "SCRAM-SHA-256", "MOLDAU-BROKER"]);
    let a = plain(&mut s, "alice", "alice-secret").await;
    assert_eq!(a.error_code, 0, "{:?}", a.error_message);
    assert!(
        !metadata(&mut s).await.brokers.is_empty(),
        "served once authenticated"
    );

    // anything else before authentication closes the connection
    let mut s = broker.connect().await;
    send(&mut s, ApiKey::Metadata, 12, 7, &MetadataRequest::default()).await;
    assert!(closed(&mut s).await, "a request before SASL must close");

    // a mechanism the listener does not offer
    let mut s = broker.connect().await;
    let h = handshake(&mut s, "SCRAM-SHA-512").await;
    assert_eq!(h.error_code, ResponseError::UnsupportedSaslMechanism.code());

    // a wrong password: Kafka's answer, late, then the connection closes
    let mut s = broker.connect().await;
    assert_eq!(handshake(&mut s, "PLAIN").await.error_code, 0);
    let started = Instant::now();
    let a = plain(&mut s, "alice", "wrong").await;
    assert!(started.elapsed() >= Duration::from_millis(300), "delayed");
    assert_eq!(a.error_code, ResponseError::SaslAuthenticationFailed.code());
    assert_eq!(
        a.error_message.as_deref(),
        Some("Authentication failed: Invalid username or password")
    );
    assert!(closed(&mut s).await, "closed after a failed authentication");

    // an unknown user is told the same
    let mut s = broker.connect().await;
    assert_eq!(handshake(&mut s, "PLAIN").await.error_code, 0);
    let a = plain(&mut s, "mallory", "alice-secret").await;
    assert_eq!(a.error_code, ResponseError::SaslAuthenticationFailed.code());

    // SCRAM with no credentials in the metadata fails at the proof
    let mut s = broker.connect().await;
    assert_eq!(handshake(&mut s, "SCRAM-SHA-256").await.error_code, 0);
    let first: SaslAuthenticateResponse = call(
        &mut s,
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default()
            .with_auth_bytes(b"n,,n=bob,r=fyko+d2lbbFgONRv9qkxdawL".to_vec().into()),
    )
    .await;
    assert_eq!(first.error_code, 0, "an unknown user is not told so early");
    let server_first = String::from_utf8(first.auth_bytes.to_vec()).unwrap();
    assert!(
        server_first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"),
        "{server_first}"
    );
    let nonce = server_first.split(',').next().unwrap();
    let last: SaslAuthenticateResponse = call(
        &mut s,
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default().with_auth_bytes(
            format!("c=biws,{nonce},p=dHpbWNgbmsVGu1SMjH1QwjhqR6QUFTXCNwFnQmwrzhQ=")
                .into_bytes()
                .into(),
        ),
    )
    .await;
    assert_eq!(
        last.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );
    assert_eq!(
        last.error_message.as_deref(),
        Some("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256")
    );
    drop(s);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_listener_keeps_clients_anonymous() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut s = broker.connect().await;
    assert!(!metadata(&mut s).await.brokers.is_empty());
    let h = handshake(&mut s, "PLAIN").await;
    assert_eq!(h.error_code, ResponseError::UnsupportedSaslMechanism.code());
    drop(s);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_end_unless_the_same_user_reauthenticates() {
    let dir = tempfile::tempdir().unwrap();
    let jaas = r#"listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";"#;
    let broker = start(
        dir.path(),
        &[
            "--set",
            "listeners=SASL_PLAINTEXT://127.0.0.1:0",
            "--set",
            "sasl.enabled.mechanisms=PLAIN",
            "--set",
            jaas,
            "--set",
            "connections.max.reauth.ms=1000",
        ],
    )
    .await;

    // the session's lifetime is told; the same user re-authenticates on
    // the same connection and is served past the first session's end
    let mut s = broker.connect().await;
    assert_eq!(handshake(&mut s, "PLAIN").await.error_code, 0);
    let a = plain(&mut s, "alice", "alice-secret").await;
    assert_eq!((a.error_code, a.session_lifetime_ms), (0, 1000));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(handshake(&mut s, "PLAIN").await.error_code, 0);
    assert_eq!(plain(&mut s, "alice", "alice-secret").await.error_code, 0);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!metadata(&mut s).await.brokers.is_empty(), "renewed");

    // no re-authentication: the expired session serves nothing more
    tokio::time::sleep(Duration::from_millis(1100)).await;
    send(&mut s, ApiKey::Metadata, 12, 7, &MetadataRequest::default()).await;
    assert!(closed(&mut s).await, "an expired session must close");

    // another user cannot take a session over
    let mut s = broker.connect().await;
    assert_eq!(handshake(&mut s, "PLAIN").await.error_code, 0);
    assert_eq!(plain(&mut s, "alice", "alice-secret").await.error_code, 0);
    assert_eq!(handshake(&mut s, "PLAIN").await.error_code, 0);
    let b = plain(&mut s, "bob", "bob-secret").await;
    assert_eq!(b.error_code, ResponseError::SaslAuthenticationFailed.code());
    assert!(closed(&mut s).await);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_quota_meters_that_user_only() {
    let dir = tempfile::tempdir().unwrap();
    let jaas = r#"listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";"#;
    let broker = start(
        dir.path(),
        &[
            "--set",
            "listeners=SASL_PLAINTEXT://127.0.0.1:0",
            "--set",
            "sasl.enabled.mechanisms=PLAIN",
            "--set",
            jaas,
        ],
    )
    .await;
    let mut alice = broker.login_plain("alice", "alice-secret").await;
    assert_eq!(create_topic(&mut alice, "metered", 1).await.0, 0);
    // a producer byte rate of 1 KiB/s for the user alice
    set_user_producer_quota(&mut alice, "alice", 1024.0).await;
    assert!(
        produce_throttle(&mut alice).await > 0,
        "64 KiB at 1 KiB/s: alice is throttled"
    );
    let mut bob = broker.login_plain("bob", "bob-secret").await;
    assert_eq!(
        produce_throttle(&mut bob).await,
        0,
        "bob has no quota: the user, not the client id, is metered"
    );
    broker.stop().await;
}
