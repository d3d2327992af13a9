//! ACLs in cluster mode (issue 38): two broker processes (`--cluster dir`,
//! on 127.0.0.1) with Kafka's StandardAuthorizer. CreateAcls sent to either
//! broker goes to the active controller over gRPC, which keeps the ACLs in
//! the cluster record; every broker's image carries them (DescribeAcls on
//! the other broker lists them), DeleteAcls through the other broker
//! removes them everywhere, and they outlive a restart of the whole
//! cluster.

mod cluster_common;
mod wire_common;

use std::time::Duration;

use cluster_common::*;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use wire_common::call;

const SETTINGS: &[&str] = &[
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users=User:ANONYMOUS",
];
const TOPIC: i8 = 2;
const ANY: i8 = 1;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn creation(name: &str, pt: i8, who: &str, op: i8, perm: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(TOPIC)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pt)
        .with_principal(s(who))
        .with_host(s("*"))
        .with_operation(op)
        .with_permission_type(perm)
}

async fn create(c: &mut TcpStream, creations: Vec<AclCreation>) -> Vec<i16> {
    let r: CreateAclsResponse = call(
        c,
        ApiKey::CreateAcls,
        3,
        &CreateAclsRequest::default().with_creations(creations),
    )
    .await;
    r.results.iter().map(|r| r.error_code).collect()
}

/// Every ACL as `(name, pattern type, principal)`.
async fn list(c: &mut TcpStream) -> Vec<(String, i8, String)> {
    let req = DescribeAclsRequest::default()
        .with_resource_type_filter(ANY)
        .with_resource_name_filter(None)
        .with_pattern_type_filter(ANY)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY);
    let r: DescribeAclsResponse = call(c, ApiKey::DescribeAcls, 3, &req).await;
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    r.resources
        .iter()
        .flat_map(|res| {
            res.acls.iter().map(move |a| {
                (
                    res.resource_name.to_string(),
                    res.pattern_type,
                    a.principal.to_string(),
                )
            })
        })
        .collect()
}

async fn wait_listed(c: &mut TcpStream, want: &[(String, i8, String)]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = list(c).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{got:?} != {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn acl(name: &str, pt: i8, who: &str) -> (String, i8, String) {
    (name.into(), pt, who.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_go_through_the_controller_to_every_broker_and_survive_a_restart() {
    let dirs = ClusterDirs::new();
    let start = |n: i32| dirs.start(n, SETTINGS);
    let (brokers, mut c0) = two_brokers(start).await;
    let mut c1 = brokers[&1].connect(Duration::from_secs(30)).await;

    // through broker 1, whichever broker is the controller; retried while
    // broker 1 has no controller link yet
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = create(
            &mut c1,
            vec![
                creation("orders", LITERAL, "User:alice", READ, ALLOW),
                creation("orders", PREFIXED, "User:bob", WRITE, DENY),
            ],
        )
        .await;
        if got == [0, 0] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let both = vec![
        acl("orders", LITERAL, "User:alice"),
        acl("orders", PREFIXED, "User:bob"),
    ];
    // the answering broker lists them at once; the other soon
    assert_eq!(list(&mut c1).await, both);
    wait_listed(&mut c0, &both).await;

    // a refusal comes back from the controller's judgement
    assert_eq!(
        create(&mut c0, vec![creation("", LITERAL, "User:a", READ, ALLOW)]).await,
        vec![42]
    );

    // deleted through broker 0: gone on broker 1 too
    let r: DeleteAclsResponse = call(
        &mut c0,
        ApiKey::DeleteAcls,
        3,
        &DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
            .with_resource_type_filter(TOPIC)
            .with_resource_name_filter(Some(s("orders")))
            .with_pattern_type_filter(PREFIXED)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(ANY)
            .with_permission_type(ANY)]),
    )
    .await;
    assert_eq!(r.filter_results.len(), 1);
    assert_eq!(r.filter_results[0].error_code, 0);
    let matched: Vec<String> = r.filter_results[0]
        .matching_acls
        .iter()
        .map(|a| a.principal.to_string())
        .collect();
    assert_eq!(matched, ["User:bob"]);
    let want = vec![acl("orders", LITERAL, "User:alice")];
    assert_eq!(list(&mut c0).await, want);
    wait_listed(&mut c1, &want).await;

    // kept in the controller's cluster record, not in a broker's own file
    let record = std::fs::read_to_string(dirs.shared().join("cluster.json")).unwrap();
    assert!(
        record.contains("\"acls\"") && record.contains("User:alice"),
        "{record}"
    );
    assert!(!record.contains("User:bob"), "{record}");
    for n in 0..2 {
        assert!(!dirs.data(n).join("acls.json").exists());
    }

    // the whole cluster restarts: the cluster record kept them
    drop((c0, c1));
    let brokers = restart_all(brokers, start).await;
    for b in brokers.values() {
        let mut c = b.connect(Duration::from_secs(30)).await;
        wait_listed(&mut c, &want).await;
    }
}
