//! ACLs over the real wire (issue 38): a standalone broker with Kafka's
//! StandardAuthorizer configured takes CreateAcls, lists with DescribeAcls
//! (by exact name and with the MATCH pattern type), removes with DeleteAcls
//! reporting each binding removed, refuses invalid bindings with
//! INVALID_REQUEST and Kafka's messages, and keeps the ACLs across a restart
//! (`acls.json`); a broker without an authorizer answers every ACL API
//! SECURITY_DISABLED, and one with an unknown authorizer class refuses to
//! start.

mod wire_common;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, CreateAclsRequest, CreateAclsResponse,
    DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use wire_common::*;

const STANDARD: &str =
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer";
const TOPIC: i8 = 2;
const CLUSTER: i8 = 4;
const ANY: i8 = 1;
const MATCH: i8 = 2;
const LITERAL: i8 = 3;
const PREFIXED: i8 = 4;
const READ: i8 = 3;
const WRITE: i8 = 4;
const DENY: i8 = 2;
const ALLOW: i8 = 3;
const INVALID_REQUEST: i16 = 42;
const SECURITY_DISABLED: i16 = 54;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// `(resource type, name, pattern type, principal, host, operation, permission)`
type Acl = (i8, String, i8, String, String, i8, i8);

fn creation(rt: i8, name: &str, pt: i8, who: &str, op: i8, perm: i8) -> AclCreation {
    AclCreation::default()
        .with_resource_type(rt)
        .with_resource_name(s(name))
        .with_resource_pattern_type(pt)
        .with_principal(s(who))
        .with_host(s("*"))
        .with_operation(op)
        .with_permission_type(perm)
}

fn acl(rt: i8, name: &str, pt: i8, who: &str, op: i8, perm: i8) -> Acl {
    (rt, name.into(), pt, who.into(), "*".into(), op, perm)
}

async fn create(
    c: &mut TcpStream,
    version: i16,
    creations: Vec<AclCreation>,
) -> Vec<(i16, Option<String>)> {
    let r: CreateAclsResponse = call(
        c,
        ApiKey::CreateAcls,
        version,
        &CreateAclsRequest::default().with_creations(creations),
    )
    .await;
    r.results
        .into_iter()
        .map(|r| (r.error_code, r.error_message.map(|m| m.to_string())))
        .collect()
}

/// Describes topics named `name` with pattern type `pt`; the ACLs, or the
/// error code and message.
async fn describe(
    c: &mut TcpStream,
    version: i16,
    name: Option<&str>,
    pt: i8,
) -> Result<Vec<Acl>, (i16, String)> {
    let req = DescribeAclsRequest::default()
        .with_resource_type_filter(if name.is_some() { TOPIC } else { ANY })
        .with_resource_name_filter(name.map(s))
        .with_pattern_type_filter(pt)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY);
    let r: DescribeAclsResponse = call(c, ApiKey::DescribeAcls, version, &req).await;
    if r.error_code != 0 {
        return Err((
            r.error_code,
            r.error_message.map(|m| m.to_string()).unwrap_or_default(),
        ));
    }
    Ok(r.resources
        .iter()
        .flat_map(|res| {
            res.acls.iter().map(move |a| {
                (
                    res.resource_type,
                    res.resource_name.to_string(),
                    res.pattern_type,
                    a.principal.to_string(),
                    a.host.to_string(),
                    a.operation,
                    a.permission_type,
                )
            })
        })
        .collect())
}

fn filter(name: Option<&str>, pt: i8, who: Option<&str>) -> DeleteAclsFilter {
    DeleteAclsFilter::default()
        .with_resource_type_filter(if name.is_some() { TOPIC } else { ANY })
        .with_resource_name_filter(name.map(s))
        .with_pattern_type_filter(pt)
        .with_principal_filter(who.map(s))
        .with_host_filter(None)
        .with_operation(ANY)
        .with_permission_type(ANY)
}

async fn delete(
    c: &mut TcpStream,
    version: i16,
    filters: Vec<DeleteAclsFilter>,
) -> Vec<Result<Vec<Acl>, (i16, String)>> {
    let r: DeleteAclsResponse = call(
        c,
        ApiKey::DeleteAcls,
        version,
        &DeleteAclsRequest::default().with_filters(filters),
    )
    .await;
    r.filter_results
        .into_iter()
        .map(|f| {
            if f.error_code != 0 {
                return Err((
                    f.error_code,
                    f.error_message.map(|m| m.to_string()).unwrap_or_default(),
                ));
            }
            Ok(f.matching_acls
                .iter()
                .map(|a| {
                    assert_eq!(a.error_code, 0);
                    (
                        a.resource_type,
                        a.resource_name.to_string(),
                        a.pattern_type,
                        a.principal.to_string(),
                        a.host.to_string(),
                        a.operation,
                        a.permission_type,
                    )
                })
                .collect())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_are_created_listed_deleted_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let settings = [
        "--set",
        STANDARD,
        "--set",
        "super.users=User:ANONYMOUS",
        "--set",
        "allow.everyone.if.no.acl.found=true",
    ];
    let broker = start(dir.path(), &settings).await;
    let mut c = broker.connect().await;

    let versions: ApiVersionsResponse = call(
        &mut c,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    for api in [ApiKey::CreateAcls, ApiKey::DescribeAcls, ApiKey::DeleteAcls] {
        let v = versions
            .api_keys
            .iter()
            .find(|k| k.api_key == api as i16)
            .unwrap_or_else(|| panic!("{api:?} not advertised"));
        assert_eq!((v.min_version, v.max_version), (1, 3));
    }

    assert_eq!(describe(&mut c, 3, None, ANY).await, Ok(vec![]));
    let alice = acl(TOPIC, "orders", LITERAL, "User:alice", READ, ALLOW);
    let bob = acl(TOPIC, "orders", PREFIXED, "User:bob", WRITE, DENY);
    let carol = acl(TOPIC, "payments", LITERAL, "User:carol", READ, ALLOW);
    let got = create(
        &mut c,
        3,
        vec![
            creation(TOPIC, "orders", LITERAL, "User:alice", READ, ALLOW),
            creation(TOPIC, "orders", PREFIXED, "User:bob", WRITE, DENY),
            // refused one by one, the others stored
            creation(CLUSTER, "my-cluster", LITERAL, "User:alice", READ, ALLOW),
            creation(TOPIC, "", LITERAL, "User:alice", READ, ALLOW),
            creation(TOPIC, "t", MATCH, "User:alice", READ, ALLOW),
            creation(TOPIC, "t", LITERAL, "alice", READ, ALLOW),
            creation(TOPIC, "t", LITERAL, "User:alice", ANY, ALLOW),
            creation(TOPIC, "t", LITERAL, "User:alice", 99, ALLOW),
        ],
    )
    .await;
    assert_eq!(got[0], (0, None));
    assert_eq!(got[1], (0, None));
    assert_eq!(
        got[2],
        (
            INVALID_REQUEST,
            Some("The only valid name for the CLUSTER resource is kafka-cluster".into())
        )
    );
    assert_eq!(
        got[3],
        (INVALID_REQUEST, Some("Invalid empty resource name".into()))
    );
    for r in &got[4..] {
        assert_eq!(r.0, INVALID_REQUEST, "{got:?}");
    }
    // v1 and v2 as well; creating an existing ACL succeeds
    assert_eq!(
        create(
            &mut c,
            1,
            vec![creation(
                TOPIC,
                "payments",
                LITERAL,
                "User:carol",
                READ,
                ALLOW
            )]
        )
        .await,
        vec![(0, None)]
    );
    assert_eq!(
        create(
            &mut c,
            2,
            vec![creation(
                TOPIC,
                "orders",
                LITERAL,
                "User:alice",
                READ,
                ALLOW
            )]
        )
        .await,
        vec![(0, None)]
    );

    let all = vec![alice.clone(), carol.clone(), bob.clone()];
    assert_eq!(describe(&mut c, 3, None, ANY).await, Ok(all.clone()));
    assert_eq!(
        describe(&mut c, 1, Some("orders"), ANY).await,
        Ok(vec![alice.clone(), bob.clone()])
    );
    assert_eq!(
        describe(&mut c, 2, Some("orders"), LITERAL).await,
        Ok(vec![alice.clone()])
    );
    // MATCH: every pattern that applies to the name
    assert_eq!(
        describe(&mut c, 3, Some("orders-x"), MATCH).await,
        Ok(vec![bob.clone()])
    );
    assert_eq!(
        describe(&mut c, 3, Some("orders"), 0)
            .await
            .map_err(|e| e.0),
        Err(INVALID_REQUEST)
    );

    drop(c);
    broker.stop().await;
    let file = std::fs::read_to_string(dir.path().join("acls.json")).unwrap();
    assert!(
        file.contains("User:bob") && file.contains("PREFIXED"),
        "{file}"
    );

    // a restart keeps them
    let broker = start(dir.path(), &settings).await;
    let mut c = broker.connect().await;
    assert_eq!(describe(&mut c, 3, None, ANY).await, Ok(all));
    let got = delete(
        &mut c,
        3,
        vec![
            filter(Some("orders"), PREFIXED, None),
            filter(None, ANY, Some("User:carol")),
            filter(None, ANY, Some("User:nobody")),
            filter(None, 0, None),
        ],
    )
    .await;
    assert_eq!(got[0], Ok(vec![bob]));
    assert_eq!(got[1], Ok(vec![carol]));
    assert_eq!(got[2], Ok(vec![]));
    assert_eq!(got[3].as_ref().map_err(|e| e.0), Err(INVALID_REQUEST));
    assert_eq!(
        describe(&mut c, 3, None, ANY).await,
        Ok(vec![alice.clone()])
    );
    let got = delete(&mut c, 1, vec![filter(None, ANY, None)]).await;
    assert_eq!(got, vec![Ok(vec![alice])]);
    assert_eq!(describe(&mut c, 3, None, ANY).await, Ok(vec![]));
    drop(c);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_authorizer_every_acl_api_is_security_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut c = broker.connect().await;
    let message = "No Authorizer is configured.".to_string();
    assert_eq!(
        create(
            &mut c,
            3,
            vec![creation(TOPIC, "t", LITERAL, "User:a", READ, ALLOW)]
        )
        .await,
        vec![(SECURITY_DISABLED, Some(message.clone()))]
    );
    assert_eq!(
        describe(&mut c, 3, None, ANY).await,
        Err((
            SECURITY_DISABLED,
            "No Authorizer is configured on the broker".into()
        ))
    );
    assert_eq!(
        delete(&mut c, 3, vec![filter(None, ANY, None)]).await,
        vec![Err((SECURITY_DISABLED, message))]
    );
    assert!(!dir.path().join("acls.json").exists());
    drop(c);
    broker.stop().await;
}

#[test]
fn an_unknown_authorizer_class_is_a_config_error() {
    let err = moldau_broker::config::BrokerConfig::load(
        None,
        &["authorizer.class.name=kafka.security.authorizer.AclAuthorizer".to_string()],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("authorizer.class.name")
            && err.contains("org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
        "{err}"
    );
}
