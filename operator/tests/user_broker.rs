//! The KafkaUser planner and the operator's ACL and SCRAM admin calls
//! against a real `moldau-broker` process on 127.0.0.1 with Kafka's
//! StandardAuthorizer. The operator connects without SASL (it has no
//! credentials of its own yet), so its listener is PLAINTEXT and
//! `User:ANONYMOUS` is a super user. Shown: a user's SCRAM-SHA-512
//! credential and ACLs are created, a changed spec adds and removes exactly
//! the difference (another user's ACLs stay), the credential is re-set only
//! when the password or mechanism changes, and removal takes everything of
//! the user; and the credential a reconcile set logs in with SCRAM-SHA-512
//! once the same data directory is served on a SASL_PLAINTEXT listener.

mod support;

use std::time::Duration;

use moldau_operator::crd::KafkaUser;
use moldau_operator::kafka::acl::{operation, pattern, permission, resource, AclBinding};
use moldau_operator::kafka::scram::{ScramMechanism, UserMechanisms};
use moldau_operator::kafka::AdminClient;
use moldau_operator::user::controller::{remove_user, sync_user};
use moldau_operator::user::plan::desired_acls;
use support::start_broker_with_env;

const T: Duration = Duration::from_secs(5);
const AUTHORIZER: &str =
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\nsuper.users=User:ANONYMOUS\n";

fn ku(name: &str, spec: serde_json::Value) -> KafkaUser {
    let mut spec = spec;
    spec["clusterRef"] = "c".into();
    let mut u = KafkaUser::new(name, serde_json::from_value(spec).unwrap());
    u.metadata.namespace = Some("ns".into());
    u
}

fn alice(acls: serde_json::Value) -> Vec<AclBinding> {
    let u = ku(
        "alice",
        serde_json::json!({"authentication": {"type": "scram-sha-512"},
            "authorization": {"type": "simple", "acls": acls}}),
    );
    desired_acls(&u, "alice").unwrap()
}

fn topic_acl(principal: &str, name: &str, op: i8) -> AclBinding {
    AclBinding {
        resource_type: resource::TOPIC,
        resource_name: name.into(),
        pattern_type: pattern::LITERAL,
        principal: principal.into(),
        host: "*".into(),
        operation: op,
        permission: permission::ALLOW,
    }
}

#[tokio::test]
async fn user_credentials_and_acls_are_reconciled_on_a_real_broker() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.properties");
    std::fs::write(&config, AUTHORIZER).unwrap();
    // started outside the time bound: the first run builds the broker
    let broker = start_broker_with_env(&[("MOLDAU_CONFIG_FILE", config.as_os_str())]).await;
    tokio::time::timeout(Duration::from_secs(120), async {
        let mut admin = AdminClient::connect(broker.addr, T).await.unwrap();
        // bob's ACL, set by hand: never touched by alice's reconciles
        let bob = topic_acl("User:bob", "orders", operation::WRITE);
        let created = admin.create_acls(std::slice::from_ref(&bob)).await.unwrap();
        assert!(created[0].1.is_ok(), "{created:?}");

        let first = alice(serde_json::json!([
            {"resource": {"type": "topic", "name": "orders"}, "operations": ["Read", "Describe"]},
            {"resource": {"type": "group", "name": "orders-", "patternType": "prefix"},
             "operations": ["Read"]},
            {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]}
        ]));
        assert_eq!(first.len(), 4);
        let s = sync_user(
            &mut admin,
            "alice",
            ScramMechanism::Sha512,
            "alice-secret",
            None,
            &first,
        )
        .await
        .unwrap();
        assert!(s.credential_set);
        assert_eq!((s.created, s.deleted), (4, 0));
        assert!(s.refused.is_empty(), "{:?}", s.refused);
        assert_eq!(
            admin
                .describe_user_scram_credentials("alice")
                .await
                .unwrap(),
            UserMechanisms::from([(ScramMechanism::Sha512, 4096)])
        );
        assert_eq!(admin.describe_acls("User:alice").await.unwrap(), first);
        let fingerprint = s.fingerprint;

        // nothing changed: nothing sent
        let s = sync_user(
            &mut admin,
            "alice",
            ScramMechanism::Sha512,
            "alice-secret",
            Some(&fingerprint),
            &first,
        )
        .await
        .unwrap();
        assert!(!s.credential_set);
        assert_eq!((s.created, s.deleted), (0, 0));

        // an ACL of alice added by hand, and a spec without Describe and
        // with Write: exactly the difference changes
        let by_hand = topic_acl("User:alice", "other", operation::ALTER);
        admin
            .create_acls(std::slice::from_ref(&by_hand))
            .await
            .unwrap();
        let second = alice(serde_json::json!([
            {"resource": {"type": "topic", "name": "orders"}, "operations": ["Read", "Write"]},
            {"resource": {"type": "group", "name": "orders-", "patternType": "prefix"},
             "operations": ["Read"]},
            {"resource": {"type": "cluster"}, "operations": ["IdempotentWrite"]}
        ]));
        let s = sync_user(
            &mut admin,
            "alice",
            ScramMechanism::Sha512,
            "alice-secret",
            Some(&fingerprint),
            &second,
        )
        .await
        .unwrap();
        assert!(!s.credential_set);
        assert_eq!((s.created, s.deleted), (1, 2));
        assert_eq!(admin.describe_acls("User:alice").await.unwrap(), second);
        assert_eq!(
            admin.describe_acls("User:bob").await.unwrap(),
            vec![bob.clone()]
        );

        // a new password is set again; a new mechanism replaces the old one
        let s = sync_user(
            &mut admin,
            "alice",
            ScramMechanism::Sha512,
            "new-secret",
            Some(&fingerprint),
            &second,
        )
        .await
        .unwrap();
        assert!(s.credential_set);
        assert_ne!(s.fingerprint, fingerprint);
        let s = sync_user(
            &mut admin,
            "alice",
            ScramMechanism::Sha256,
            "new-secret",
            Some(&s.fingerprint),
            &second,
        )
        .await
        .unwrap();
        assert!(s.credential_set);
        assert_eq!(
            admin
                .describe_user_scram_credentials("alice")
                .await
                .unwrap(),
            UserMechanisms::from([(ScramMechanism::Sha256, 4096)])
        );

        // removal: alice has nothing left, bob keeps his ACL
        remove_user(&mut admin, "alice").await.unwrap();
        assert!(admin
            .describe_user_scram_credentials("alice")
            .await
            .unwrap()
            .is_empty());
        assert!(admin.describe_acls("User:alice").await.unwrap().is_empty());
        assert_eq!(admin.describe_acls("User:bob").await.unwrap(), vec![bob]);
        // removing again is a no-op
        remove_user(&mut admin, "alice").await.unwrap();
    })
    .await
    .expect("test took longer than 120 s");
}

/// A `moldau-broker` on `port` with a data directory that outlives it and
/// the given broker properties.
struct Process(std::process::Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn run_broker(data: &std::path::Path, port: u16, properties: &str) -> Process {
    use std::process::{Command, Stdio};
    let config = data.join("broker.properties");
    std::fs::write(&config, properties).unwrap();
    let addr = format!("127.0.0.1:{port}");
    let http = moldau_e2e::ports::unused_loopback_port();
    let child = Command::new(support::workspace_bin("moldau-broker", "moldau-broker"))
        .env("MOLDAU_LISTEN", &addr)
        .env("MOLDAU_ADVERTISED_LISTENER", &addr)
        .env("MOLDAU_HTTP_LISTEN", format!("127.0.0.1:{http}"))
        .env("MOLDAU_DATA_DIR", data.join("data"))
        .env("MOLDAU_NODE_ID", "0")
        .env("MOLDAU_CONFIG_FILE", &config)
        .args(["--set", "offsets.topic.num.partitions=1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning moldau-broker");
    let process = Process(child);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "broker did not listen on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    process
}

/// One request and its response on a raw connection.
async fn call<R: kafka_protocol::protocol::Request>(
    s: &mut tokio::net::TcpStream,
    req: R,
    version: i16,
) -> R::Response {
    use bytes::Buf;
    use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let key = ApiKey::try_from(R::KEY).unwrap();
    let mut body = bytes::BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("user-test")))
        .encode(&mut body, key.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    s.write_all(&(body.len() as i32).to_be_bytes())
        .await
        .unwrap();
    s.write_all(&body).await.unwrap();
    let len = s.read_i32().await.unwrap() as usize;
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf).await.unwrap();
    let mut buf = bytes::Bytes::from(buf);
    ResponseHeader::decode(&mut buf, key.response_header_version(version)).unwrap();
    let resp = R::Response::decode(&mut buf, version).unwrap();
    assert_eq!(buf.remaining(), 0);
    resp
}

/// A SCRAM-SHA-512 login (RFC 5802) on a fresh connection; the
/// SaslAuthenticate error code of the final message.
async fn scram_sha512_login(addr: &str, user: &str, password: &str) -> i16 {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    use kafka_protocol::protocol::StrBytes;
    use sha2::{Digest, Sha512};
    let b64 = base64::engine::general_purpose::STANDARD;
    let hmac = |key: &[u8], msg: &[u8]| {
        let mut m = <Hmac<Sha512> as Mac>::new_from_slice(key).unwrap();
        m.update(msg);
        m.finalize().into_bytes().to_vec()
    };
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let h = call(
        &mut s,
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-512")),
        1,
    )
    .await;
    assert_eq!(h.error_code, 0, "{h:?}");
    let nonce = "fyko+d2lbbFgONRv9qkxdawL";
    let first_bare = format!("n={user},r={nonce}");
    let r = call(
        &mut s,
        SaslAuthenticateRequest::default().with_auth_bytes(format!("n,,{first_bare}").into()),
        2,
    )
    .await;
    assert_eq!(r.error_code, 0, "{r:?}");
    let server_first = String::from_utf8(r.auth_bytes.to_vec()).unwrap();
    let field = |k: &str| {
        server_first
            .split(',')
            .find_map(|f| f.strip_prefix(&format!("{k}=")))
            .unwrap()
            .to_string()
    };
    let (combined, salt, iterations) = (field("r"), field("s"), field("i"));
    assert!(combined.starts_with(nonce));
    let salted = moldau_operator::kafka::scram::ScramMechanism::Sha512.salted_password(
        password.as_bytes(),
        &b64.decode(salt).unwrap(),
        iterations.parse().unwrap(),
    );
    let client_key = hmac(&salted, b"Client Key");
    let stored_key = Sha512::digest(&client_key);
    let without_proof = format!("c=biws,r={combined}");
    let auth_message = format!("{first_bare},{server_first},{without_proof}");
    let signature = hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(signature)
        .map(|(a, b)| a ^ b)
        .collect();
    let r = call(
        &mut s,
        SaslAuthenticateRequest::default()
            .with_auth_bytes(format!("{without_proof},p={}", b64.encode(proof)).into()),
        2,
    )
    .await;
    if r.error_code == 0 {
        // the server proves it knows the credential too
        let server_key = hmac(&salted, b"Server Key");
        let expected = b64.encode(hmac(&server_key, auth_message.as_bytes()));
        assert_eq!(
            String::from_utf8(r.auth_bytes.to_vec()).unwrap(),
            format!("v={expected}")
        );
    }
    r.error_code
}

#[tokio::test]
async fn a_reconciled_credential_logs_in_with_scram_sha_512() {
    let dir = tempfile::tempdir().unwrap();
    let port = moldau_e2e::ports::unused_loopback_port();
    let addr = format!("127.0.0.1:{port}");
    // the operator's view: PLAINTEXT, ANONYMOUS a super user
    let broker = run_broker(dir.path(), port, AUTHORIZER).await;
    tokio::time::timeout(Duration::from_secs(120), async {
        let mut admin = AdminClient::connect(addr.parse().unwrap(), T)
            .await
            .unwrap();
        sync_user(
            &mut admin,
            "alice",
            ScramMechanism::Sha512,
            "alice-secret",
            None,
            &[],
        )
        .await
        .unwrap();
    })
    .await
    .expect("test took longer than 120 s");
    drop(broker);
    // the same metadata served on a SASL_PLAINTEXT listener
    let sasl = format!(
        "{AUTHORIZER}listeners=SASL_PLAINTEXT://{addr}\nadvertised.listeners=SASL_PLAINTEXT://{addr}\nsasl.enabled.mechanisms=SCRAM-SHA-512\n"
    );
    let _broker = run_broker(dir.path(), port, &sasl).await;
    tokio::time::timeout(Duration::from_secs(60), async {
        assert_eq!(scram_sha512_login(&addr, "alice", "alice-secret").await, 0);
        // SASL_AUTHENTICATION_FAILED
        assert_eq!(scram_sha512_login(&addr, "alice", "wrong").await, 58);
    })
    .await
    .expect("test took longer than 60 s");
}
