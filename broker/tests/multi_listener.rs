//! Several named listeners per broker over the real wire (issue 38): one
//! broker with a PLAINTEXT, a SASL_PLAINTEXT and an SSL listener enforces
//! each listener's own security, and Metadata, DescribeCluster and
//! FindCoordinator asked on a listener name that listener's port; two
//! broker processes with an INTERNAL (PLAINTEXT, inter-broker) and an
//! EXTERNAL (SASL_PLAINTEXT) listener replicate through INTERNAL what a
//! client produced with acks=all through EXTERNAL, and show each other
//! with the endpoints of the listener asked; a broker whose listener
//! configs Kafka would refuse exits with Kafka's message.

mod cluster_common;
mod tls_common;
mod wire_common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, DescribeClusterRequest, DescribeClusterResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, MetadataRequest, MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use wire_common::*;

const PLAIN_JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#;

/// `{node: port}` of the brokers a Metadata answer on `s` shows.
async fn metadata_ports(s: &mut TcpStream) -> BTreeMap<i32, i32> {
    let m: MetadataResponse = call(s, ApiKey::Metadata, 12, &MetadataRequest::default()).await;
    m.brokers
        .iter()
        .inspect(|b| assert_eq!(b.host.as_str(), "127.0.0.1"))
        .map(|b| (b.node_id.0, b.port))
        .collect()
}

/// `{node: port}` of the brokers a DescribeCluster answer on `s` shows.
async fn cluster_ports(s: &mut TcpStream) -> BTreeMap<i32, i32> {
    let d: DescribeClusterResponse = call(
        s,
        ApiKey::DescribeCluster,
        0,
        &DescribeClusterRequest::default(),
    )
    .await;
    assert_eq!(d.error_code, 0);
    d.brokers.iter().map(|b| (b.broker_id.0, b.port)).collect()
}

/// The group coordinator's `(error, node, port)` as FindCoordinator on `s`
/// gives it.
async fn coordinator(s: &mut TcpStream, group: &'static str) -> (i16, i32, i32) {
    let r: FindCoordinatorResponse = call(
        s,
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![StrBytes::from_static_str(group)]),
    )
    .await;
    let c = &r.coordinators[0];
    (c.error_code, c.node_id.0, c.port)
}

/// FindCoordinator on `s`, retried while the coordinator is not there yet
/// (the offsets topic being created): `(node, port)`.
async fn coordinator_eventually(s: &mut TcpStream, group: &'static str) -> (i32, i32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (code, node, port) = coordinator(s, group).await;
        if code == 0 {
            return (node, port);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no coordinator: error {code}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
async fn each_listener_has_its_own_security_and_answers_with_its_own_port() {
    let dir = tempfile::tempdir().unwrap();
    let jaas = format!("listener.name.client.plain.sasl.jaas.config={PLAIN_JAAS}");
    let ca = tls_common::Ca::new("multi-listener-ca");
    let keystore = dir.path().join("broker.pem");
    ca.write_keystore(&keystore);
    let keystore = format!(
        "listener.name.secure.ssl.keystore.location={}",
        keystore.display()
    );
    let broker = start(
        &dir.path().join("data"),
        &[
            "--set",
            "listeners=PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0,SECURE://127.0.0.1:0",
            "--set",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENT:SASL_PLAINTEXT,SECURE:SSL",
            "--set",
            "listener.name.client.sasl.enabled.mechanisms=PLAIN",
            "--set",
            &jaas,
            // only SECURE has TLS settings: the others need none
            "--set",
            "listener.name.secure.ssl.keystore.type=PEM",
            "--set",
            &keystore,
        ],
    )
    .await;
    let plain_port = i32::from(broker.addrs.listener("PLAINTEXT").unwrap().port());
    let sasl_port = i32::from(broker.addrs.listener("CLIENT").unwrap().port());
    let secure = broker.addrs.listener("SECURE").unwrap();
    let tls_port = i32::from(secure.port());
    assert_ne!(plain_port, sasl_port);

    // PLAINTEXT: anonymous clients are served, and see the PLAINTEXT port
    let mut plain = broker.connect_to("PLAINTEXT").await;
    assert_eq!(
        metadata_ports(&mut plain).await,
        BTreeMap::from([(0, plain_port)])
    );
    assert_eq!(
        cluster_ports(&mut plain).await,
        BTreeMap::from([(0, plain_port)])
    );
    assert_eq!(
        coordinator_eventually(&mut plain, "g").await,
        (0, plain_port)
    );

    // CLIENT (SASL_PLAINTEXT): a request before authenticating closes the
    // connection, as on a broker with that one listener
    let mut early = broker.connect_to("CLIENT").await;
    send(
        &mut early,
        ApiKey::Metadata,
        12,
        1,
        &MetadataRequest::default(),
    )
    .await;
    assert!(
        closed(&mut early).await,
        "unauthenticated Metadata on CLIENT"
    );
    // and authenticated clients see the CLIENT port everywhere
    let mut sasl = login_plain(broker.connect_to("CLIENT").await, "alice", "alice-secret").await;
    assert_eq!(
        metadata_ports(&mut sasl).await,
        BTreeMap::from([(0, sasl_port)])
    );
    assert_eq!(
        cluster_ports(&mut sasl).await,
        BTreeMap::from([(0, sasl_port)])
    );
    assert_eq!(coordinator(&mut sasl, "g").await, (0, 0, sasl_port));

    // the PLAINTEXT listener offers no PLAIN users of CLIENT's: a SASL
    // handshake there names no PLAIN mechanism
    use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};
    let mut other = broker.connect_to("PLAINTEXT").await;
    let h: SaslHandshakeResponse = call(
        &mut other,
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .await;
    assert_ne!(h.error_code, 0, "PLAIN is CLIENT's, not PLAINTEXT's");

    // SECURE (SSL): a TLS client is served and sees the SECURE port; a
    // plaintext request there is not answered
    let mut tls = tls_common::tls_connect_at(secure, tls_common::client_config(&ca.pem(), None))
        .await
        .expect("TLS handshake");
    let m: MetadataResponse =
        wire_common::call_on(&mut tls, ApiKey::Metadata, 12, &MetadataRequest::default()).await;
    let ports: Vec<_> = m.brokers.iter().map(|b| (b.node_id.0, b.port)).collect();
    assert_eq!(ports, [(0, tls_port)]);
    let mut cleartext = TcpStream::connect(secure).await.unwrap();
    send(
        &mut cleartext,
        ApiKey::Metadata,
        12,
        1,
        &MetadataRequest::default(),
    )
    .await;
    // closed, with at most a TLS alert (record type 21) said first
    let mut said = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), cleartext.read_to_end(&mut said))
        .await
        .expect("cleartext Metadata on SECURE: the connection stays open")
        .ok();
    assert!(
        said.is_empty() || said[0] == 21,
        "answered in cleartext: {said:?}"
    );
    broker.stop().await;
}

/// Two listeners per broker: INTERNAL (PLAINTEXT, inter-broker) and
/// EXTERNAL (SASL_PLAINTEXT, PLAIN), on ports chosen here.
struct Ports {
    internal: SocketAddr,
    external: SocketAddr,
}

fn listener_settings(p: &Ports) -> Vec<String> {
    vec![
        format!(
            "listeners=INTERNAL://{},EXTERNAL://{}",
            p.internal, p.external
        ),
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT".into(),
        "inter.broker.listener.name=INTERNAL".into(),
        "listener.name.external.sasl.enabled.mechanisms=PLAIN".into(),
        format!("listener.name.external.plain.sasl.jaas.config={PLAIN_JAAS}"),
        "replica.fetch.wait.max.ms=100".into(),
        // two brokers: the offsets topic cannot have Kafka's three replicas
        "offsets.topic.replication.factor=2".into(),
    ]
}

/// A SASL PLAIN login as alice on `addr`, retried while the broker starts.
async fn login_eventually(addr: SocketAddr) -> TcpStream {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = TcpStream::connect(addr).await {
            return login_plain(s, "alice", "alice-secret").await;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} never accepted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_replicate_through_the_inter_broker_listener_and_clients_see_theirs() {
    use cluster_common::*;
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let ports: Vec<Ports> = (0..2)
        .map(|_| Ports {
            internal: unused_loopback_addr(),
            external: unused_loopback_addr(),
        })
        .collect();
    let brokers: Vec<wire_common::Child> = ports
        .iter()
        .enumerate()
        .map(|(n, p)| {
            let settings = listener_settings(p);
            let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
            let data = root.path().join(format!("data-{n}"));
            spawn(&n.to_string(), &data, &shared, root.path(), &settings)
        })
        .collect();
    let mut internal = brokers[0]
        .connect_at(ports[0].internal, Duration::from_secs(30))
        .await;
    wait_until(&mut internal, "t", "two brokers", |v| v.0.len() == 2).await;
    let port = |a: SocketAddr| i32::from(a.port());
    let internal_ports =
        BTreeMap::from([(0, port(ports[0].internal)), (1, port(ports[1].internal))]);
    let external_ports =
        BTreeMap::from([(0, port(ports[0].external)), (1, port(ports[1].external))]);
    assert_eq!(metadata_ports(&mut internal).await, internal_ports);

    let mut external = BTreeMap::from([
        (0, login_eventually(ports[0].external).await),
        (1, login_eventually(ports[1].external).await),
    ]);
    for s in external.values_mut() {
        assert_eq!(metadata_ports(s).await, external_ports);
        assert_eq!(cluster_ports(s).await, external_ports);
    }

    // an RF=2 topic, created and produced to through EXTERNAL
    let s0 = external.get_mut(&0).unwrap();
    let (code, message) = create_replicated(s0, "t", 1, 2, &[("min.insync.replicas", "2")]).await;
    assert_eq!(code, 0, "{message:?}");
    wait_for_partitions(s0, "t", "both in sync", |v| {
        v.get(&0).is_some_and(|p| p.isr == [0, 1])
    })
    .await;
    for n in 0..3 {
        // acks=all with min.insync.replicas=2: acknowledged only once the
        // follower, fetching through INTERNAL, has it
        produce_acked(&mut external, 0, "t", 0, &format!("record-{n}")).await;
    }
    let leader = partitions(external.get_mut(&0).unwrap(), "t").await[&0].leader;
    let values = cluster_common::values(external.get_mut(&leader).unwrap(), "t", 0).await;
    assert_eq!(values.len(), 3);
    let after = partitions(external.get_mut(&0).unwrap(), "t").await;
    assert_eq!(after[&0].isr, [0, 1], "the follower stayed in sync");

    // the group coordinator, found through EXTERNAL, is given on EXTERNAL
    let (node, port_given) = coordinator_eventually(external.get_mut(&1).unwrap(), "g").await;
    assert_eq!(port_given, external_ports[&node]);
    let (node, port_given) = coordinator_eventually(&mut internal, "g").await;
    assert_eq!(port_given, internal_ports[&node]);
    drop(brokers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_configs_kafka_refuses_stop_the_start_with_kafka_s_message() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (unused_loopback_addr(), unused_loopback_addr());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                format!("listeners=INTERNAL://{a},EXTERNAL://127.0.0.1:{}", a.port()),
                "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT".into(),
                "inter.broker.listener.name=INTERNAL".into(),
            ],
            "Each listener must have a different port",
        ),
        (
            vec![
                format!("listeners=PLAINTEXT://{a}"),
                format!("advertised.listeners=PLAINTEXT://{a},EXTERNAL://{b}"),
            ],
            "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners",
        ),
        (
            vec![
                format!("listeners=INTERNAL://{a},EXTERNAL://{b}"),
                "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT".into(),
            ],
            "inter.broker.listener.name must be a listener name defined in advertised.listeners",
        ),
    ];
    for (i, (settings, message)) in cases.into_iter().enumerate() {
        let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
        let mut child = Child::spawn(
            &root.path().join(format!("data-{i}")),
            root.path().join(format!("broker-{i}.log")),
            ChildOptions {
                settings: &settings,
                ..Default::default()
            },
        );
        let status = child.exited(Duration::from_secs(30)).await;
        assert!(!status.success(), "{settings:?} started");
        let log = child.log();
        assert!(log.contains(message), "{settings:?}: {log}");
    }
}
