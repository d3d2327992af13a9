//! The example manifests deserialize into the operator's types (the API
//! server checks are in the e2e tests), and the invalid ones break a rule the
//! schema states.

use std::path::Path;

use moldau_operator::crd::{
    KafkaCluster, KafkaQuota, KafkaRebalance, KafkaRetentionPolicy, KafkaTopic, KafkaUser,
    RebalanceMode,
};
use serde::Deserialize;

fn docs(file: &str) -> Vec<serde_yaml::Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests/examples")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("example exists");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_yaml::Value::deserialize(d).expect("valid YAML"))
        .collect()
}

#[test]
fn valid_examples_parse() {
    let small: KafkaCluster =
        serde_yaml::from_value(docs("kafkacluster-small.yaml").remove(0)).unwrap();
    assert_eq!(small.spec.replicas, 1);
    let prod: KafkaCluster =
        serde_yaml::from_value(docs("kafkacluster-production.yaml").remove(0)).unwrap();
    assert_eq!(prod.spec.replicas, 3);
    assert!(moldau_operator::cluster::validate::cluster_spec_problem(&prod.spec).is_none());
    let secure: KafkaCluster =
        serde_yaml::from_value(docs("kafkacluster-secure.yaml").remove(0)).unwrap();
    assert!(moldau_operator::cluster::validate::cluster_spec_problem(&secure.spec).is_none());
    let layout = moldau_operator::cluster::listeners::layout(&secure.spec);
    assert!(layout.secured(), "TLS listeners and authorization");
    assert_eq!(layout.inter_broker().name, "REPLICATION");
    let topics: Vec<KafkaTopic> = docs("kafkatopics.yaml")
        .into_iter()
        .map(|d| serde_yaml::from_value(d).unwrap())
        .collect();
    assert_eq!(topics.len(), 2);
    assert_eq!(topics[1].kafka_topic_name(), "customer.state");
    assert_eq!(topics[0].kafka_topic_name(), "orders");
    let drain: KafkaRebalance =
        serde_yaml::from_value(docs("kafkarebalance.yaml").remove(0)).unwrap();
    assert_eq!(drain.spec.mode, RebalanceMode::RemoveBrokers);
    assert_eq!(drain.spec.brokers, vec![3, 4]);
    assert!(!drain.spec.approved);
}

#[test]
fn quota_example_parses_and_plans() {
    let quotas: Vec<KafkaQuota> = docs("kafkaquota.yaml")
        .into_iter()
        .map(|d| serde_yaml::from_value(d).unwrap())
        .collect();
    assert_eq!(quotas.len(), 3);
    assert_eq!(quotas[0].spec.producer_byte_rate, Some(1048576));
    assert_eq!(
        quotas[2].spec.entities[0].client_id_prefix.as_deref(),
        Some("etl-")
    );
    let plan = moldau_operator::quota::plan::plan(&quotas, &Default::default());
    assert_eq!(plan.alterations.len(), 3);
    assert!(plan.objects.values().all(|o| o.refused.is_empty()));
}

#[test]
fn user_example_parses_and_plans() {
    use moldau_operator::crd::UserAuthenticationType;
    use moldau_operator::user::plan::{acl_diff, desired_acls};
    let users: Vec<KafkaUser> = docs("kafkauser.yaml")
        .into_iter()
        .map(|d| serde_yaml::from_value(d).unwrap())
        .collect();
    assert_eq!(users.len(), 2);
    assert_eq!(
        users[0].spec.authentication.type_,
        UserAuthenticationType::ScramSha512
    );
    assert!(users[0].spec.authentication.password.is_none());
    let acls = desired_acls(&users[0], "orders-app").unwrap();
    assert_eq!(acls.len(), 5);
    let (create, delete) = acl_diff("User:orders-app", &acls, &[]);
    assert_eq!((create.len(), delete.len()), (5, 0));
    let auditor = desired_acls(&users[1], "auditor").unwrap();
    assert_eq!(auditor.len(), 3);
    assert_eq!(
        users[1]
            .spec
            .authentication
            .password
            .as_ref()
            .unwrap()
            .value_from
            .secret_key_ref
            .name,
        "auditor-password"
    );
}

#[test]
fn tls_user_example_parses_and_plans_for_its_certificate_principal() {
    use moldau_operator::crd::UserAuthenticationType;
    use moldau_operator::user::plan::{desired_acls, username};
    let u: KafkaUser = serde_yaml::from_value(docs("kafkauser-tls.yaml").remove(0)).unwrap();
    assert_eq!(u.spec.authentication.type_, UserAuthenticationType::Tls);
    assert_eq!(
        username(UserAuthenticationType::Tls, "payments-app"),
        "CN=payments-app"
    );
    let acls = desired_acls(&u, "payments-app").unwrap();
    assert_eq!(acls.len(), 4);
    assert!(acls.iter().all(|a| a.principal == "User:CN=payments-app"));
}

#[test]
fn retention_policy_example_parses_and_resolves() {
    use moldau_operator::retention::resolve::{resolve, validate, TopicFacts};
    let p: KafkaRetentionPolicy =
        serde_yaml::from_value(docs("kafkaretentionpolicy.yaml").remove(0)).unwrap();
    assert!(validate(&p).is_empty(), "{:?}", validate(&p));
    let own = [("retention.ms".to_string(), "60000".to_string())].into();
    let r = resolve(
        &TopicFacts {
            name: "logs-app".into(),
            labels: None,
            own,
        },
        &[&p],
    );
    assert_eq!(r.config["retention.ms"], "3600000", "clamped to the floor");
    assert_eq!(r.config["cleanup.policy"], "delete");
}

#[test]
fn invalid_examples_violate_the_schema_bounds() {
    let zero: KafkaCluster =
        serde_yaml::from_value(docs("invalid/kafkacluster-zero-replicas.yaml").remove(0)).unwrap();
    assert!(zero.spec.replicas < 1);
    let clash: KafkaCluster =
        serde_yaml::from_value(docs("invalid/kafkacluster-port-clash.yaml").remove(0)).unwrap();
    assert_eq!(clash.spec.controller_port, clash.spec.listener_port);
    assert!(moldau_operator::cluster::validate::cluster_spec_problem(&clash.spec).is_some());
    let t: KafkaTopic =
        serde_yaml::from_value(docs("invalid/kafkatopic-zero-partitions.yaml").remove(0)).unwrap();
    assert!(t.spec.partitions < 1);
    let t: KafkaTopic =
        serde_yaml::from_value(docs("invalid/kafkatopic-zero-replication.yaml").remove(0)).unwrap();
    assert!(t.spec.replication_factor.is_some_and(|rf| rf < 1));
    let u: KafkaUser =
        serde_yaml::from_value(docs("invalid/kafkauser-tls-with-password.yaml").remove(0)).unwrap();
    assert_eq!(
        u.spec.authentication.type_,
        moldau_operator::crd::UserAuthenticationType::Tls
    );
    assert!(u.spec.authentication.password.is_some());
}
