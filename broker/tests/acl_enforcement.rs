//! ACLs enforced over the real wire (issue 38): a standalone broker with
//! Kafka's StandardAuthorizer and a SASL PLAIN listener, a super user who
//! creates topics and ACLs, and two users the ACLs govern. Each API asks
//! Kafka's operation on Kafka's resource and refuses with Kafka's error:
//! topics without DESCRIBE are not listed (named: TOPIC_AUTHORIZATION_FAILED),
//! produce needs WRITE, fetch READ (a DENY wins over a prefixed ALLOW
//! ALL), creating CREATE, deleting DELETE; groups need READ to commit and
//! DESCRIBE to be found and listed; an idempotent producer needs WRITE on
//! some topic, a transactional one WRITE on its id; the cluster's APIs
//! (ACLs, broker configs, the quorum view) need the cluster's operations.

mod wire_common;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, FetchRequest, FetchResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, InitProducerIdRequest,
    InitProducerIdResponse, ListGroupsRequest, ListGroupsResponse, MetadataRequest,
    MetadataResponse, OffsetCommitRequest, OffsetCommitResponse, ProduceRequest, ProduceResponse,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use wire_common::*;

const JAAS: &str = r#"listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";"#;

const TOPIC: i8 = 2;
const GROUP: i8 = 3;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const ALL: i8 = 2;
const READ: i8 = 3;
const DENY: i8 = 2;
const ALLOW: i8 = 3;

const TOPIC_DENIED: i16 = ResponseError::TopicAuthorizationFailed.code();
const GROUP_DENIED: i16 = ResponseError::GroupAuthorizationFailed.code();
const CLUSTER_DENIED: i16 = ResponseError::ClusterAuthorizationFailed.code();

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

async fn broker(dir: &std::path::Path) -> Running {
    start(
        dir,
        &[
            "--set",
            "listeners=SASL_PLAINTEXT://127.0.0.1:0",
            "--set",
            "sasl.enabled.mechanisms=PLAIN",
            "--set",
            JAAS,
            "--set",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "--set",
            "super.users=User:admin",
        ],
    )
    .await
}

async fn login(broker: &Running, user: &str) -> TcpStream {
    broker.login_plain(user, &format!("{user}-secret")).await
}

fn acl(rt: i8, name: &str, pattern: i8, who: &str, op: i8, perm: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rt)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pattern)
        .with_principal(s(who))
        .with_host(s("*"))
        .with_operation(op)
        .with_permission_type(perm)
}

async fn create_acls(c: &mut TcpStream, acls: Vec<AclCreation>) -> Vec<i16> {
    let r: CreateAclsResponse = call(
        c,
        ApiKey::CreateAcls,
        3,
        &CreateAclsRequest::default().with_creations(acls),
    )
    .await;
    r.results.iter().map(|r| r.error_code).collect()
}

async fn create(c: &mut TcpStream, topic: &str) -> i16 {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(60_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(1)]);
    let r: CreateTopicsResponse = call(c, ApiKey::CreateTopics, 7, &req).await;
    r.topics[0].error_code
}

/// Metadata of every topic (`None`) or the named ones: (name, error code,
/// authorized operations) per topic answered.
async fn metadata(c: &mut TcpStream, named: Option<&[&str]>) -> Vec<(String, i16, i32)> {
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_include_topic_authorized_operations(true)
        .with_topics(named.map(|names| {
            names
                .iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(name(n))))
                .collect()
        }));
    let r: MetadataResponse = call(c, ApiKey::Metadata, 12, &req).await;
    r.topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.error_code,
                t.topic_authorized_operations,
            )
        })
        .collect()
}

async fn produce_to(c: &mut TcpStream, topic: &str, transactional_id: Option<&str>) -> i16 {
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_transactional_id(transactional_id.map(|t| TransactionalId(s(t))))
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch(&[b"v".to_vec()])))])]);
    let r: ProduceResponse = call(c, ApiKey::Produce, 9, &req).await;
    r.responses[0].partition_responses[0].error_code
}

/// Fetches partition 0 of `topic` from 0: (error code, record bytes).
async fn fetch_from(c: &mut TcpStream, topic: &str) -> (i16, Bytes) {
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let r: FetchResponse = call(c, ApiKey::Fetch, 12, &req).await;
    let p = &r.responses[0].partitions[0];
    (p.error_code, p.records.clone().unwrap_or_default())
}

async fn commit(c: &mut TcpStream, group: &str, topic: &str) -> i16 {
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(s(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(1)])]);
    let r: OffsetCommitResponse = call(c, ApiKey::OffsetCommit, 8, &req).await;
    r.topics[0].partitions[0].error_code
}

async fn find_group(c: &mut TcpStream, group: &str) -> i16 {
    let r: FindCoordinatorResponse = call(
        c,
        ApiKey::FindCoordinator,
        4,
        &FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(vec![s(group)]),
    )
    .await;
    r.coordinators[0].error_code
}

async fn list_groups(c: &mut TcpStream) -> Vec<String> {
    let r: ListGroupsResponse = call(c, ApiKey::ListGroups, 4, &ListGroupsRequest::default()).await;
    assert_eq!(r.error_code, 0);
    r.groups.iter().map(|g| g.group_id.to_string()).collect()
}

async fn init_producer(c: &mut TcpStream, transactional_id: Option<&str>) -> i16 {
    let r: InitProducerIdResponse = call(
        c,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(transactional_id.map(|t| TransactionalId(s(t))))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(kafka_protocol::messages::ProducerId(-1))
            .with_producer_epoch(-1),
    )
    .await;
    r.error_code
}

/// DescribeConfigs of one resource: its error code.
async fn describe_configs(c: &mut TcpStream, resource_type: i8, resource: &str) -> i16 {
    let r: DescribeConfigsResponse = call(
        c,
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(resource))]),
    )
    .await;
    r.results[0].error_code
}

/// DescribeQuorum of the metadata partition: its top-level error code.
async fn describe_quorum(c: &mut TcpStream) -> i16 {
    use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
    use kafka_protocol::messages::{DescribeQuorumRequest, DescribeQuorumResponse};
    let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(name("__cluster_metadata"))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    let r: DescribeQuorumResponse = call(c, ApiKey::DescribeQuorum, 2, &req).await;
    r.error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_asks_the_authorizer_with_kafkas_rules() {
    let dir = tempfile::tempdir().unwrap();
    let broker = broker(dir.path()).await;
    let mut admin = login(&broker, "admin").await;
    for topic in ["orders", "orders-private", "secret"] {
        assert_eq!(
            create(&mut admin, topic).await,
            0,
            "the super user creates {topic}"
        );
    }
    let granted = create_acls(
        &mut admin,
        vec![
            // everything on the orders* topics but reading orders-private
            acl(TOPIC, "orders", PREFIXED, "User:alice", ALL, ALLOW),
            acl(TOPIC, "orders-private", LITERAL, "User:alice", READ, DENY),
            acl(GROUP, "g-", PREFIXED, "User:alice", READ, ALLOW),
        ],
    )
    .await;
    assert_eq!(granted, vec![0, 0, 0]);
    // the ACLs reach the broker's image
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let mut alice = login(&broker, "alice").await;
    let mut bob = login(&broker, "bob").await;

    // Metadata: only what may be described; a named secret is refused
    let all: Vec<String> = metadata(&mut alice, None)
        .await
        .into_iter()
        .map(|(n, _, _)| n)
        .collect();
    assert_eq!(
        all,
        vec!["orders", "orders-private"],
        "secret is not listed"
    );
    let named = metadata(&mut alice, Some(&["secret", "orders"])).await;
    assert_eq!((named[0].0.as_str(), named[0].1), ("secret", TOPIC_DENIED));
    assert_eq!((named[1].0.as_str(), named[1].1), ("orders", 0));
    let read_write = (1 << 3) | (1 << 4);
    assert_eq!(
        named[1].2 & read_write,
        read_write,
        "ALL on orders: READ and WRITE among its authorized operations"
    );
    assert!(
        metadata(&mut bob, None).await.is_empty(),
        "bob sees nothing"
    );

    // produce needs WRITE, fetch READ; a DENY beats the prefixed ALLOW
    assert_eq!(produce_to(&mut alice, "orders", None).await, 0);
    assert_eq!(produce_to(&mut alice, "orders-private", None).await, 0);
    assert_eq!(produce_to(&mut alice, "secret", None).await, TOPIC_DENIED);
    assert_eq!(produce_to(&mut bob, "orders", None).await, TOPIC_DENIED);
    assert_eq!(
        produce_to(&mut alice, "nonexistent", None).await,
        TOPIC_DENIED
    );
    let (code, records) = fetch_from(&mut alice, "orders").await;
    assert_eq!(code, 0);
    assert!(!records.is_empty(), "alice reads what she wrote");
    assert_eq!(
        fetch_from(&mut alice, "orders-private").await.0,
        TOPIC_DENIED
    );
    assert_eq!(fetch_from(&mut alice, "secret").await.0, TOPIC_DENIED);
    assert_eq!(fetch_from(&mut bob, "orders").await.0, TOPIC_DENIED);

    // creating needs CREATE (ALL on the orders prefix covers it)
    assert_eq!(create(&mut alice, "orders-new").await, 0);
    assert_eq!(create(&mut alice, "elsewhere").await, TOPIC_DENIED);
    assert_eq!(delete_topic(&mut alice, "secret").await, TOPIC_DENIED);
    assert_eq!(delete_topic(&mut bob, "orders").await, TOPIC_DENIED);
    assert_eq!(delete_topic(&mut alice, "orders-new").await, 0);

    // groups: READ to commit (and READ on the topic), DESCRIBE to find
    assert_eq!(commit(&mut alice, "g-1", "orders").await, 0);
    assert_eq!(commit(&mut alice, "other", "orders").await, GROUP_DENIED);
    assert_eq!(commit(&mut alice, "g-1", "secret").await, TOPIC_DENIED);
    assert_eq!(find_group(&mut alice, "g-1").await, 0);
    assert_eq!(find_group(&mut bob, "g-1").await, GROUP_DENIED);
    assert_eq!(list_groups(&mut alice).await, vec!["g-1"]);
    assert!(list_groups(&mut bob).await.is_empty());
    assert_eq!(list_groups(&mut admin).await, vec!["g-1"]);

    // producers: an idempotent one needs WRITE on some topic, a
    // transactional one WRITE on its id
    assert_eq!(init_producer(&mut alice, None).await, 0);
    assert_eq!(init_producer(&mut bob, None).await, CLUSTER_DENIED);
    assert_eq!(
        init_producer(&mut alice, Some("tx-1")).await,
        ResponseError::TransactionalIdAuthorizationFailed.code()
    );
    assert_eq!(
        produce_to(&mut alice, "orders", Some("tx-1")).await,
        ResponseError::TransactionalIdAuthorizationFailed.code()
    );

    // the cluster's APIs
    assert_eq!(
        create_acls(
            &mut alice,
            vec![acl(TOPIC, "secret", LITERAL, "User:alice", READ, ALLOW)]
        )
        .await,
        vec![CLUSTER_DENIED]
    );
    assert_eq!(describe_configs(&mut alice, 4, "0").await, CLUSTER_DENIED);
    assert_eq!(describe_configs(&mut alice, TOPIC, "orders").await, 0);
    assert_eq!(
        describe_configs(&mut alice, TOPIC, "secret").await,
        TOPIC_DENIED
    );
    assert_eq!(describe_configs(&mut admin, 4, "0").await, 0);
    assert_eq!(describe_quorum(&mut alice).await, CLUSTER_DENIED);
    assert_eq!(describe_quorum(&mut admin).await, 0);
    broker.stop().await;
}
