//! SSL and SASL_SSL client listeners over the real wire (issue 38), with a
//! CA, server and client certificates made at test time (rcgen) and a
//! rustls client: ApiVersions, Metadata, produce and a fetch (whose log
//! bytes go through the TLS session instead of `sendfile`);
//! `ssl.client.auth=required` turns away a client without a certificate
//! or with one of another CA; a client certificate's subject, mapped by
//! `ssl.principal.mapping.rules`, is the principal user quotas meter
//! and ACLs name (`super.users`, TOPIC_AUTHORIZATION_FAILED otherwise);
//! SASL over TLS; and certificate rotation: new
//! connections get the new certificate and trust a CA added to the
//! truststore, a broken file keeps the old ones; two brokers of a
//! cluster replicating over their SSL listeners, and registering with the
//! controller over its TLS endpoint, which takes only certificates of the
//! cluster's CA.

mod tls_common;
mod wire_common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, ProduceRequest,
    ProduceResponse, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use rcgen::DnType;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tls_common::*;
use tokio::io::{AsyncRead, AsyncWrite};
use wire_common::*;

async fn api_versions<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> std::io::Result<i16> {
    let v: ApiVersionsResponse =
        try_call(s, ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()).await?;
    Ok(v.error_code)
}

async fn create<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, topic: &str) -> i16 {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(60_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(1)]);
    let resp: CreateTopicsResponse = call_on(s, ApiKey::CreateTopics, 7, &req).await;
    resp.topics[0].error_code
}

fn ssl_settings(keystore: &Path) -> Vec<String> {
    vec![
        "--set".into(),
        "listeners=SSL://127.0.0.1:0".into(),
        "--set".into(),
        "ssl.keystore.type=PEM".into(),
        "--set".into(),
        format!("ssl.keystore.location={}", keystore.display()),
    ]
}

/// The settings of an SSL listener (see [`ssl_settings`]) with a
/// certificate of `ca` in the keystore `broker.pem` of `dir`, trusting
/// `ca`'s client certificates (the truststore `ca.pem` of `dir`), with
/// `extra` settings on top; and the listener's certificate.
fn ssl_trusting(dir: &Path, ca: &Ca, extra: &[&str]) -> (Vec<String>, String) {
    let keystore = dir.join("broker.pem");
    let truststore = dir.join("ca.pem");
    let cert = ca.write_keystore(&keystore);
    write_atomically(&truststore, &ca.pem());
    let mut args = ssl_settings(&keystore);
    let location = format!("ssl.truststore.location={}", truststore.display());
    for set in std::iter::once(location).chain(extra.iter().map(|s| s.to_string())) {
        args.push("--set".into());
        args.push(set);
    }
    (args, cert)
}

/// Whether `broker` turns away a client trusting `ca` and presenting
/// `identity`: at the handshake or, with TLS 1.3, where the client learns
/// it, at its first request.
async fn refused(broker: &Running, ca: &str, identity: Option<&(String, String)>) -> bool {
    match tls_connect(broker, client_config(ca, identity)).await {
        Err(_) => true,
        Ok(mut s) => api_versions(&mut s).await.is_err(),
    }
}

async fn start_with(dir: &Path, args: Vec<String>) -> Running {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    start(dir, &args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssl_listener_serves_tls_clients_including_fetches() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("moldau-test-ca");
    let keystore = dir.path().join("broker.pem");
    ca.write_keystore(&keystore);
    let broker = start_with(&dir.path().join("data"), ssl_settings(&keystore)).await;

    let mut s = tls_session(&broker, &ca.pem(), None).await;
    assert_eq!(api_versions(&mut s).await.unwrap(), 0);
    let m: MetadataResponse =
        call_on(&mut s, ApiKey::Metadata, 12, &MetadataRequest::default()).await;
    assert_eq!(m.brokers.len(), 1);
    assert_eq!(create(&mut s, "secure").await, 0);

    // produce, then fetch back: the log bytes come from the segment file
    // through the TLS session
    let values: Vec<Vec<u8>> = (0..200)
        .map(|i| vec![b'a' + (i % 26) as u8; 1000])
        .collect();
    let records = batch(&values);
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name("secure"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records.clone()))])]);
    let p: ProduceResponse = call_on(&mut s, ApiKey::Produce, 9, &req).await;
    assert_eq!(p.responses[0].partition_responses[0].error_code, 0);
    let req = FetchRequest::default()
        .with_max_wait_ms(100)
        .with_max_bytes(10 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name("secure"))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(10 << 20)])]);
    let f: FetchResponse = call_on(&mut s, ApiKey::Fetch, 12, &req).await;
    let part = &f.responses[0].partitions[0];
    assert_eq!(part.error_code, 0);
    let fetched = part.records.as_ref().expect("records");
    // the batch comes back byte for byte but for its base offset and
    // partition leader epoch
    assert_eq!(fetched.len(), records.len());
    assert!(fetched[16..] == records[16..], "the fetched batch differs");

    // a connection closed before its handshake (a TCP health check) is
    // no bad connection; a plaintext client on the TLS port is, and gets
    // no Kafka answer
    let bad = || async {
        metric(
            &metrics_page(broker.addrs.http).await,
            "moldau_closed_bad_connections_total",
        )
        .unwrap_or(0)
    };
    drop(broker.connect().await);
    // nor is a client going away without TLS's close_notify (as
    // librdkafka does)
    drop(s);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        bad().await,
        0,
        "a health check, a client gone: no bad connection"
    );
    let mut plain = broker.connect().await;
    assert!(api_versions(&mut plain).await.is_err());
    let started = Instant::now();
    while bad().await != 1 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a plaintext request is a bad connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_client_certificates_are_checked_and_name_the_principal() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("moldau-test-ca");
    let (args, _) = ssl_trusting(
        dir.path(),
        &ca,
        &[
            "ssl.truststore.type=PEM",
            "ssl.client.auth=required",
            // CN=Alice,OU=eng,O=acme is user `alice`; other subjects of acme
            // keep their whole DN; nothing else maps (no DEFAULT)
            "ssl.principal.mapping.rules=RULE:^CN=([^,]*),OU=eng,O=acme$/$1/L,RULE:^.*,O=acme$/$0/",
        ],
    );
    let broker = start_with(&dir.path().join("data"), args).await;
    let acme = |cn| {
        ca.issue(
            &[],
            &[
                (DnType::OrganizationName, "acme"),
                (DnType::OrganizationalUnitName, "eng"),
                (DnType::CommonName, cn),
            ],
        )
    };

    // alice's certificate maps to User:alice, whom a user quota meters
    let alice = acme("Alice");
    let mut s = tls_session(&broker, &ca.pem(), Some(&alice)).await;
    assert_eq!(create(&mut s, "metered").await, 0);
    set_user_producer_quota(&mut s, "alice", 1024.0).await;
    assert!(
        produce_throttle(&mut s).await > 0,
        "64 KiB at 1 KiB/s: User:alice (CN=Alice,OU=eng,O=acme) is throttled"
    );
    // bob's maps to User:bob, who has no quota
    let bob = acme("Bob");
    let mut s = tls_session(&broker, &ca.pem(), Some(&bob)).await;
    assert_eq!(produce_throttle(&mut s).await, 0, "User:bob is not metered");

    // no rule applies to a subject outside acme: the connection closes
    let stranger = ca.issue(&[], &[(DnType::CommonName, "stranger")]);
    assert!(
        refused(&broker, &ca.pem(), Some(&stranger)).await,
        "a subject no rule maps is turned away"
    );

    // no certificate, or one of another CA: the handshake fails (with TLS
    // 1.3 the client learns it at its first read)
    let other_ca = Ca::new("other-ca");
    let foreign = other_ca.issue(
        &[],
        &[
            (DnType::OrganizationName, "acme"),
            (DnType::CommonName, "alice"),
        ],
    );
    for identity in [None, Some(&foreign)] {
        assert!(
            refused(&broker, &ca.pem(), identity).await,
            "refused without a trusted certificate"
        );
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_name_the_mapped_certificate_principal() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("moldau-test-ca");
    let (args, _) = ssl_trusting(
        dir.path(),
        &ca,
        &[
            "ssl.client.auth=required",
            "ssl.principal.mapping.rules=RULE:^CN=([^,]*),O=acme$/$1/L",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin",
        ],
    );
    let broker = start_with(&dir.path().join("data"), args).await;
    let person = |cn| {
        ca.issue(
            &[],
            &[(DnType::OrganizationName, "acme"), (DnType::CommonName, cn)],
        )
    };
    // CN=Admin,O=acme is User:admin, a super user
    let mut s = tls_session(&broker, &ca.pem(), Some(&person("Admin"))).await;
    assert_eq!(create(&mut s, "admins").await, 0);
    // CN=bob,O=acme is User:bob, whom no ACL allows anything
    let mut s = tls_session(&broker, &ca.pem(), Some(&person("bob"))).await;
    assert_eq!(
        create(&mut s, "bobs").await,
        kafka_protocol::error::ResponseError::TopicAuthorizationFailed.code()
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_over_tls_authenticates_the_sasl_user() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("moldau-test-ca");
    let (chain, key) = ca.issue(
        &["localhost", "127.0.0.1"],
        &[(DnType::CommonName, "broker")],
    );
    let jaas = r#"listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#;
    let broker = start_with(
        &dir.path().join("data"),
        vec![
            "--set".into(),
            "listeners=SASL_SSL://127.0.0.1:0".into(),
            "--set".into(),
            "sasl.enabled.mechanisms=PLAIN".into(),
            "--set".into(),
            jaas.into(),
            // the key and chain inline, as Kafka's PEM configs allow
            "--set".into(),
            format!("listener.name.sasl_ssl.ssl.keystore.certificate.chain={chain}"),
            "--set".into(),
            format!("listener.name.sasl_ssl.ssl.keystore.key={key}"),
        ],
    )
    .await;
    let mut s = tls_session(&broker, &ca.pem(), None).await;
    assert_eq!(api_versions(&mut s).await.unwrap(), 0);
    // nothing before SASL: the connection closes
    let early: std::io::Result<MetadataResponse> =
        try_call(&mut s, ApiKey::Metadata, 12, &MetadataRequest::default()).await;
    assert!(
        early.is_err(),
        "a request before SASL closes the connection"
    );

    let mut s = tls_session(&broker, &ca.pem(), None).await;
    let h: SaslHandshakeResponse = call_on(
        &mut s,
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await;
    assert_eq!(h.error_code, 0);
    let a: SaslAuthenticateResponse = call_on(
        &mut s,
        ApiKey::SaslAuthenticate,
        2,
        &SaslAuthenticateRequest::default()
            .with_auth_bytes(Bytes::from_static(b"\0alice\0alice-secret")),
    )
    .await;
    assert_eq!(a.error_code, 0, "{:?}", a.error_message);
    let m: MetadataResponse =
        call_on(&mut s, ApiKey::Metadata, 12, &MetadataRequest::default()).await;
    assert_eq!(m.brokers.len(), 1);
    broker.stop().await;
}

/// The certificate a new connection is shown.
async fn served_certificate(broker: &Running, ca: &str) -> Vec<u8> {
    let s = tls_connect(broker, client_config(ca, None))
        .await
        .expect("TLS handshake");
    s.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificates_reach_new_connections_and_broken_ones_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("moldau-test-ca");
    let keystore = dir.path().join("broker.pem");
    let truststore = dir.path().join("ca.pem");
    let (args, first) = ssl_trusting(
        dir.path(),
        &ca,
        &["ssl.reload.interval.ms=100", "ssl.client.auth=requested"],
    );
    let broker = start_with(&dir.path().join("data"), args).await;
    let der = |pem: &str| {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    };
    assert_eq!(served_certificate(&broker, &ca.pem()).await, der(&first));
    let mut open = tls_connect(&broker, client_config(&ca.pem(), None))
        .await
        .unwrap();

    // a new certificate (and key) in the file: new connections get it
    let second = ca.write_keystore(&keystore);
    let started = Instant::now();
    while served_certificate(&broker, &ca.pem()).await != der(&second) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the rotated certificate was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // the connection opened before goes on
    assert_eq!(api_versions(&mut open).await.unwrap(), 0);

    // a new client CA: refused until the truststore names it, then served
    let new_ca = Ca::new("moldau-next-ca");
    let carol = new_ca.issue(&[], &[(DnType::CommonName, "carol")]);
    assert!(
        refused(&broker, &ca.pem(), Some(&carol)).await,
        "an unknown CA's client"
    );
    write_atomically(&truststore, &format!("{}{}", ca.pem(), new_ca.pem()));
    let started = Instant::now();
    while refused(&broker, &ca.pem(), Some(&carol)).await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the new CA was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // a broken file: the last good certificate stays
    write_atomically(&keystore, "-----BEGIN PRIVATE KEY-----\nbroken\n");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(served_certificate(&broker, &ca.pem()).await, der(&second));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_listener_without_usable_files_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let keystore = dir.path().join("missing.pem");
    let args = ssl_settings(&keystore);
    let cli = <moldau_broker::config::Cli as clap::Parser>::parse_from(
        [
            "moldau-broker",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
            "--data-dir",
            &dir.path().join("data").display().to_string(),
        ]
        .into_iter()
        .map(String::from)
        .chain(args),
    );
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let err = moldau_broker::server::run(cli, rx, false)
        .await
        .expect_err("must not start");
    assert!(err.to_string().contains("ssl.keystore.location"), "{err:#}");
}

/// A broker process of a `--cluster dir` cluster whose client listener
/// (the one brokers dial each other on) is SSL with required client
/// certificates; killed on drop.
struct TlsBroker(
    std::process::Child,
    std::net::SocketAddr,
    /// The controller endpoint's address, served while it leads.
    std::net::SocketAddr,
);

impl Drop for TlsBroker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_tls_broker(node: i32, root: &Path, ca: &Ca) -> TlsBroker {
    let addr = unused_loopback_addr();
    let controller = unused_loopback_addr();
    let keystore = root.join(format!("broker-{node}.pem"));
    ca.write_keystore(&keystore);
    let truststore = root.join("ca.pem");
    std::fs::write(&truststore, ca.pem()).unwrap();
    let log = std::fs::File::create(root.join(format!("broker-{node}.log"))).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_moldau-broker"));
    cmd.args(["--listen", &addr.to_string()])
        .args(["--http-listen", &unused_loopback_addr().to_string()])
        .arg("--data-dir")
        .arg(root.join(format!("data-{node}")))
        .args(["--cluster", "dir", "--cluster-dir"])
        .arg(root.join("cluster"))
        .args(["--node-id", &node.to_string()])
        .args(["--controller-listen", &controller.to_string()])
        .env("NO_COLOR", "1")
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    for set in [
        format!("listeners=SSL://{addr}"),
        "ssl.keystore.type=PEM".into(),
        format!("ssl.keystore.location={}", keystore.display()),
        format!("ssl.truststore.location={}", truststore.display()),
        "ssl.client.auth=required".into(),
        "offsets.topic.num.partitions=1".into(),
        "broker.heartbeat.interval.ms=100".into(),
        "broker.session.timeout.ms=6000".into(),
        "replica.fetch.wait.max.ms=100".into(),
        "replica.fetch.backoff.ms=100".into(),
    ] {
        cmd.args(["--set", &set]);
    }
    TlsBroker(cmd.spawn().expect("spawn moldau-broker"), addr, controller)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_replicate_over_their_tls_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("moldau-cluster-ca");
    let brokers = [
        spawn_tls_broker(1, dir.path(), &ca),
        spawn_tls_broker(2, dir.path(), &ca),
    ];
    let client = ca.issue(&[], &[(DnType::CommonName, "admin")]);
    let config = client_config(&ca.pem(), Some(&client));
    let logs = || {
        (1..=2)
            .map(|n| {
                std::fs::read_to_string(dir.path().join(format!("broker-{n}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    // a topic on both brokers, once both are registered; every record
    // acknowledged with acks=all has reached the follower, which fetched
    // it over TLS as a broker (MOLDAU-BROKER)
    let mut s = loop {
        if let Ok(mut s) = tls_connect_at(brokers[0].1, config.clone()).await {
            let req = CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(vec![CreatableTopic::default()
                    .with_name(name("replicated"))
                    .with_num_partitions(1)
                    .with_replication_factor(2)
                    .with_configs(vec![
                    kafka_protocol::messages::create_topics_request::CreatableTopicConfig::default(
                    )
                    .with_name(StrBytes::from_static_str("min.insync.replicas"))
                    .with_value(Some(StrBytes::from_static_str("2"))),
                ])]);
            let created: std::io::Result<CreateTopicsResponse> =
                try_call(&mut s, ApiKey::CreateTopics, 7, &req).await;
            if created.is_ok_and(|r| r.topics[0].error_code == 0) {
                break s;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no replicated topic; logs:\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    loop {
        let m: MetadataResponse = call_on(
            &mut s,
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(None),
        )
        .await;
        let leader = m
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == "replicated"))
            .and_then(|t| t.partitions.first())
            .map(|p| p.leader_id.0);
        let acked = match leader.and_then(|l| brokers.iter().zip(1..).find(|(_, n)| *n == l)) {
            Some((b, _)) => match tls_connect_at(b.1, config.clone()).await {
                Ok(mut p) => {
                    let req = ProduceRequest::default()
                        .with_acks(-1)
                        .with_timeout_ms(5000)
                        .with_topic_data(vec![TopicProduceData::default()
                            .with_name(name("replicated"))
                            .with_partition_data(vec![PartitionProduceData::default()
                                .with_index(0)
                                .with_records(Some(batch(&[b"over tls".to_vec()])))])]);
                    let r: std::io::Result<ProduceResponse> =
                        try_call(&mut p, ApiKey::Produce, 9, &req).await;
                    r.is_ok_and(|r| r.responses[0].partition_responses[0].error_code == 0)
                }
                Err(_) => false,
            },
            None => false,
        };
        if acked {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acks=all with min.insync.replicas=2 never acknowledged; logs:\n{}",
            logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        logs().contains("fetching from the leader"),
        "the follower fetched; logs:\n{}",
        logs()
    );
    // the brokers registered with the controller (the topic has a
    // replica on each) over its TLS endpoint, the only one it serves
    assert!(
        logs().contains("controller_address=https://127.0.0.1:"),
        "the controller serves TLS; logs:\n{}",
        logs()
    );
    assert!(
        !logs().contains("controller_address=http://"),
        "no controller serves in the clear; logs:\n{}",
        logs()
    );
}

/// Whether the TLS server at `addr` ends a session opened with `config`
/// by itself (an alert or a close) within a few seconds of its
/// handshake, rather than waiting for the client's first request.
async fn session_refused(addr: std::net::SocketAddr, config: Arc<rustls::ClientConfig>) -> bool {
    use tokio::io::AsyncReadExt;
    let Ok(mut s) = tls_connect_at(addr, config).await else {
        return true;
    };
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_endpoint_serves_only_brokers_over_tls() {
    use moldau_broker::controller::rpc::pb::controller_client::ControllerClient;
    use moldau_broker::controller::rpc::pb::DescribeQuorumRequest;
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("moldau-cluster-ca");
    let broker = spawn_tls_broker(1, dir.path(), &ca);
    let log = || std::fs::read_to_string(dir.path().join("broker-1.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log().contains("controller term begins") {
        assert!(
            Instant::now() < deadline,
            "never controller; log:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A client of the same CA with a certificate is served: the
    // handshake completes and the server waits for its HTTP/2 preface.
    let brokerlike = ca.issue(&[], &[(DnType::CommonName, "broker-2")]);
    assert!(
        !session_refused(broker.2, client_config(&ca.pem(), Some(&brokerlike))).await,
        "a certificate of the cluster's CA is accepted"
    );
    // Without a client certificate, or with one of another CA: refused.
    assert!(
        session_refused(broker.2, client_config(&ca.pem(), None)).await,
        "no client certificate"
    );
    let other = Ca::new("another-ca");
    let foreign = other.issue(&[], &[(DnType::CommonName, "broker-2")]);
    assert!(
        session_refused(broker.2, client_config(&ca.pem(), Some(&foreign))).await,
        "a certificate of another CA"
    );
    // gRPC in the clear gets no answer.
    let plain = async {
        let mut c = ControllerClient::connect(format!("http://{}", broker.2)).await?;
        c.describe_quorum(DescribeQuorumRequest::default())
            .await
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
    };
    let answered = tokio::time::timeout(Duration::from_secs(10), plain).await;
    assert!(
        !matches!(answered, Ok(Ok(_))),
        "a plaintext gRPC call was answered"
    );
    // The endpoint still serves after those: the broker's own session
    // heartbeats on (it would be fenced otherwise), and a new
    // certificate-holding session is taken.
    assert!(
        !session_refused(broker.2, client_config(&ca.pem(), Some(&brokerlike))).await,
        "still serving"
    );
    assert!(
        log().contains("TLS handshake refused"),
        "refusals are logged; log:\n{}",
        log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_or_garbled_handshake_is_closed_and_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("moldau-test-ca");
    let keystore = dir.path().join("broker.pem");
    ca.write_keystore(&keystore);
    let mut args = ssl_settings(&keystore);
    args.extend(["--set".into(), "socket.request.read.timeout.ms=500".into()]);
    let broker = start_with(&dir.path().join("data"), args).await;
    // closed: the broker's end reads as end of file (or a reset)
    async fn closed_within(s: &mut tokio::net::TcpStream, limit: Duration) -> bool {
        let mut buf = [0u8; 512];
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }

    // half a ClientHello record, then nothing: closed after the read
    // timeout, not held open
    let mut stalled = broker.connect().await;
    stalled
        .write_all(&[
            0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
        ])
        .await
        .unwrap();
    let started = Instant::now();
    assert!(
        closed_within(&mut stalled, Duration::from_secs(10)).await,
        "a stalled handshake is closed"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "closed by the timeout, not at once: {:?}",
        started.elapsed()
    );

    // records of garbage: the handshake fails and the connection closes
    let mut garbled = broker.connect().await;
    let mut junk = Vec::new();
    for i in 0..64u8 {
        junk.extend_from_slice(&[0x16, 0x03, 0x03, 0x00, 0x40]);
        junk.extend(std::iter::repeat_n(i.wrapping_mul(37), 64));
    }
    let _ = garbled.write_all(&junk).await;
    assert!(
        closed_within(&mut garbled, Duration::from_secs(10)).await,
        "a garbled handshake is closed"
    );

    // meanwhile the listener serves a real client
    let mut s = tls_session(&broker, &ca.pem(), None).await;
    assert_eq!(api_versions(&mut s).await.unwrap(), 0);
    broker.stop().await;
}
