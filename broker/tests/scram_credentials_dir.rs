//! SCRAM credentials in cluster mode (issue 38): two broker processes
//! (`--cluster dir`, on 127.0.0.1). AlterUserScramCredentials sent to
//! either broker goes to the active controller over gRPC, which judges it
//! against the cluster record and keeps the credentials there; every
//! broker's image carries them (DescribeUserScramCredentials on the other
//! broker shows them), per-user refusals come back with Kafka's codes, and
//! the credentials outlive a restart of the whole cluster.

mod cluster_common;
mod wire_common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use cluster_common::*;
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use moldau_broker::security::scram::ScramMechanism;
use tokio::net::TcpStream;
use wire_common::call;

const SALT: &[u8] = b"fedcba9876543210";
const DUPLICATE_RESOURCE: i16 = 92;
const RESOURCE_NOT_FOUND: i16 = 91;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn upsert(user: &str, m: ScramMechanism, iterations: i32) -> ScramCredentialUpsertion {
    ScramCredentialUpsertion::default()
        .with_name(s(user))
        .with_mechanism(m.id())
        .with_iterations(iterations)
        .with_salt(Bytes::from_static(SALT))
        .with_salted_password(Bytes::from(m.salted_password(
            b"secret",
            SALT,
            iterations as u32,
        )))
}

async fn alter(
    c: &mut TcpStream,
    deletions: Vec<ScramCredentialDeletion>,
    upsertions: Vec<ScramCredentialUpsertion>,
) -> BTreeMap<String, i16> {
    let req = AlterUserScramCredentialsRequest::default()
        .with_deletions(deletions)
        .with_upsertions(upsertions);
    let r: AlterUserScramCredentialsResponse =
        call(c, ApiKey::AlterUserScramCredentials, 0, &req).await;
    r.results
        .into_iter()
        .map(|u| (u.user.to_string(), u.error_code))
        .collect()
}

/// Every user's (mechanism, iterations).
async fn describe_all(c: &mut TcpStream) -> BTreeMap<String, Vec<(i8, i32)>> {
    let r: DescribeUserScramCredentialsResponse = call(
        c,
        ApiKey::DescribeUserScramCredentials,
        0,
        &DescribeUserScramCredentialsRequest::default().with_users(None),
    )
    .await;
    r.results
        .into_iter()
        .map(|u| {
            let infos = u
                .credential_infos
                .iter()
                .map(|i| (i.mechanism, i.iterations))
                .collect();
            (u.user.to_string(), infos)
        })
        .collect()
}

async fn wait_described(c: &mut TcpStream, want: &BTreeMap<String, Vec<(i8, i32)>>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = describe_all(c).await;
        if &got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never described {want:?}; last {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_go_through_the_controller_to_every_broker_and_survive_a_restart() {
    let dirs = ClusterDirs::new();
    let start = |n: i32| dirs.start(n, &[]);
    let (brokers, mut c0) = two_brokers(start).await;
    let mut c1 = brokers[&1].connect(Duration::from_secs(30)).await;

    // through broker 1, whichever broker is the controller; retried while
    // broker 1 has no controller link yet
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = alter(
            &mut c1,
            vec![],
            vec![
                upsert("alice", ScramMechanism::Sha256, 8192),
                upsert("bob", ScramMechanism::Sha512, 4096),
            ],
        )
        .await;
        if got.values().all(|c| *c == 0) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let want = BTreeMap::from([
        ("alice".to_string(), vec![(1, 8192)]),
        ("bob".to_string(), vec![(2, 4096)]),
    ]);
    // the answering broker shows the change at once; the other soon
    assert_eq!(describe_all(&mut c1).await, want);
    wait_described(&mut c0, &want).await;

    // refusals come back per user from the controller's judgement
    let got = alter(
        &mut c0,
        vec![ScramCredentialDeletion::default()
            .with_name(s("carol"))
            .with_mechanism(1)],
        vec![
            upsert("alice", ScramMechanism::Sha512, 4096),
            upsert("alice", ScramMechanism::Sha256, 4096),
        ],
    )
    .await;
    assert_eq!(
        got,
        BTreeMap::from([
            ("alice".to_string(), DUPLICATE_RESOURCE),
            ("carol".to_string(), RESOURCE_NOT_FOUND),
        ])
    );
    let got = alter(
        &mut c0,
        vec![ScramCredentialDeletion::default()
            .with_name(s("bob"))
            .with_mechanism(2)],
        vec![],
    )
    .await;
    assert_eq!(got, BTreeMap::from([("bob".to_string(), 0)]));
    let want = BTreeMap::from([("alice".to_string(), vec![(1, 8192)])]);
    wait_described(&mut c1, &want).await;

    // kept in the controller's cluster record, not in a broker's own file
    let record = std::fs::read_to_string(dirs.shared().join("cluster.json")).unwrap();
    assert!(
        record.contains("scramCredentials") && record.contains("\"alice\""),
        "{record}"
    );
    assert!(!record.contains("\"bob\""), "{record}");
    for n in 0..2 {
        assert!(!dirs.data(n).join("scram-credentials.json").exists());
    }

    // the whole cluster restarts: the cluster record kept them
    drop((c0, c1));
    let brokers = restart_all(brokers, start).await;
    for b in brokers.values() {
        let mut c = b.connect(Duration::from_secs(30)).await;
        wait_described(&mut c, &want).await;
    }
}
