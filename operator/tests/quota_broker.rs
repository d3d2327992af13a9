//! DescribeClientQuotas/AlterClientQuotas through the operator's admin
//! client and the KafkaQuota planner, against a real `moldau-broker`
//! process on 127.0.0.1: quotas are set, drift is repaired, conflicts are
//! resolved by precedence, removal removes exactly what was set, and a
//! broker refusal is reported per entity.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use moldau_operator::crd::{KafkaQuota, KafkaQuotaStatus};
use moldau_operator::kafka::quota::{EntityName, QuotaAlteration, QuotaEntity};
use moldau_operator::kafka::AdminClient;
use moldau_operator::quota::controller::sync_quotas;
use support::start_broker;

const T: Duration = Duration::from_secs(5);

fn kq(name: &str, created: i64, spec: serde_json::Value) -> KafkaQuota {
    let mut spec = spec;
    spec["clusterRef"] = "c".into();
    let mut q = KafkaQuota::new(name, serde_json::from_value(spec).unwrap());
    q.metadata.namespace = Some("ns".into());
    q.metadata.creation_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
    ));
    q
}

fn client(n: &str) -> QuotaEntity {
    QuotaEntity {
        user: None,
        client_id: Some(EntityName::Name(n.into())),
    }
}

/// One reconcile as the controller runs it: sync, then record the statuses.
async fn reconcile(admin: &mut AdminClient, qs: &mut [KafkaQuota]) {
    let settled = sync_quotas(admin, qs).await.unwrap();
    for q in qs.iter_mut() {
        let (applied, refused) = settled[&q.name_any()].clone();
        q.status = Some(KafkaQuotaStatus {
            applied,
            refused,
            ..Default::default()
        });
    }
}

#[tokio::test]
async fn quotas_are_applied_repaired_and_removed_on_a_real_broker() {
    // started outside the time bound: the first run builds the broker
    let broker = start_broker().await;
    tokio::time::timeout(Duration::from_secs(120), async {
        let mut admin = AdminClient::connect(broker.addr, T).await.unwrap();
        assert!(admin.describe_client_quotas().await.unwrap().is_empty());

        // a quota set by hand (kafka-configs) that no KafkaQuota owns
        let results = admin
            .alter_client_quotas(&[QuotaAlteration {
                entity: client("hand"),
                ops: BTreeMap::from([("consumer_byte_rate".to_string(), Some(4096.0))]),
            }])
            .await
            .unwrap();
        assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");

        let mut qs = vec![
            kq(
                "old",
                10,
                serde_json::json!({"entities": [{"clientId": "app"}, {"defaultUser": true}],
                    "producerByteRate": 1048576}),
            ),
            kq(
                "young",
                20,
                serde_json::json!({"entities": [{"clientId": "app"}],
                    "producerByteRate": 1, "consumerByteRate": 2097152, "requestPercentage": 50.0}),
            ),
        ];
        reconcile(&mut admin, &mut qs).await;
        let described = admin.describe_client_quotas().await.unwrap();
        assert_eq!(
            described[&client("app")],
            BTreeMap::from([
                ("producer_byte_rate".to_string(), 1048576.0),
                ("consumer_byte_rate".to_string(), 2097152.0),
                ("request_percentage".to_string(), 50.0),
            ])
        );
        let default_user = QuotaEntity {
            user: Some(EntityName::Default),
            client_id: None,
        };
        assert_eq!(described[&default_user]["producer_byte_rate"], 1048576.0);
        let young = qs[1].status.clone().unwrap();
        assert_eq!(young.refused.len(), 1, "producer_byte_rate conflicts");
        assert!(young.refused[0].reason.contains("KafkaQuota old"));

        // drift behind the operator's back is brought back
        admin
            .alter_client_quotas(&[QuotaAlteration {
                entity: client("app"),
                ops: BTreeMap::from([
                    ("producer_byte_rate".to_string(), Some(5.0)),
                    ("request_percentage".to_string(), None),
                ]),
            }])
            .await
            .unwrap();
        reconcile(&mut admin, &mut qs).await;
        let described = admin.describe_client_quotas().await.unwrap();
        assert_eq!(described[&client("app")]["producer_byte_rate"], 1048576.0);
        assert_eq!(described[&client("app")]["request_percentage"], 50.0);

        // the broker refuses a bad value: reported for that entity only
        let mut bad = kq(
            "bad",
            30,
            serde_json::json!({"entities": [{"clientId": "bad"}], "requestPercentage": 50.0}),
        );
        bad.spec.request_percentage = Some(-3.0);
        qs.push(bad);
        reconcile(&mut admin, &mut qs).await;
        let bad = qs[2].status.clone().unwrap();
        assert!(bad.applied.is_empty());
        assert_eq!(bad.refused.len(), 1, "{bad:?}");
        qs.pop();

        // deleting "old": "young" takes producer_byte_rate over, the default
        // user's quota goes, the hand-set quota stays
        qs[0].metadata.deletion_timestamp = qs[0].metadata.creation_timestamp.clone();
        reconcile(&mut admin, &mut qs).await;
        assert!(qs[0].status.as_ref().unwrap().applied.is_empty());
        let described = admin.describe_client_quotas().await.unwrap();
        assert!(!described.contains_key(&default_user));
        assert_eq!(described[&client("app")]["producer_byte_rate"], 1.0);
        assert_eq!(described[&client("hand")]["consumer_byte_rate"], 4096.0);

        // deleting "young" too: only the hand-set quota is left
        qs[1].metadata.deletion_timestamp = qs[1].metadata.creation_timestamp.clone();
        reconcile(&mut admin, &mut qs).await;
        let described = admin.describe_client_quotas().await.unwrap();
        assert_eq!(described.keys().collect::<Vec<_>>(), vec![&client("hand")]);
    })
    .await
    .expect("test took longer than 120 s");
}

#[tokio::test]
async fn client_id_prefix_entities_round_trip_on_a_real_broker() {
    let broker = start_broker().await;
    tokio::time::timeout(Duration::from_secs(120), async {
        let mut admin = AdminClient::connect(broker.addr, T).await.unwrap();
        let prefix = |user: Option<EntityName>, p: &str| QuotaEntity {
            user,
            client_id: Some(EntityName::Prefix(p.into())),
        };
        let mut qs = vec![
            kq(
                "tenant",
                10,
                serde_json::json!({"entities": [{"clientIdPrefix": "app"},
                    {"user": "ANONYMOUS", "clientIdPrefix": "app-"}],
                    "producerByteRate": 2048}),
            ),
            // the same name as an exact client id: another entity
            kq(
                "exact",
                20,
                serde_json::json!({"entities": [{"clientId": "app"}], "consumerByteRate": 4096}),
            ),
        ];
        reconcile(&mut admin, &mut qs).await;
        for q in &qs {
            let status = q.status.as_ref().unwrap();
            assert!(status.refused.is_empty(), "{status:?}");
        }
        let described = admin.describe_client_quotas().await.unwrap();
        let anonymous = Some(EntityName::Name("ANONYMOUS".into()));
        assert_eq!(
            described,
            BTreeMap::from([
                (
                    prefix(None, "app"),
                    BTreeMap::from([("producer_byte_rate".to_string(), 2048.0)])
                ),
                (
                    prefix(anonymous.clone(), "app-"),
                    BTreeMap::from([("producer_byte_rate".to_string(), 2048.0)])
                ),
                (
                    client("app"),
                    BTreeMap::from([("consumer_byte_rate".to_string(), 4096.0)])
                ),
            ])
        );
        assert_eq!(prefix(None, "app").to_string(), "client-id-prefix=app");

        // an empty prefix is the broker's INVALID_REQUEST (the CRD and the
        // planner refuse it before it gets there)
        let results = admin
            .alter_client_quotas(&[QuotaAlteration {
                entity: prefix(None, ""),
                ops: BTreeMap::from([("producer_byte_rate".to_string(), Some(1.0))]),
            }])
            .await
            .unwrap();
        assert!(results[0].1.is_err(), "{results:?}");

        // deleting the prefix object removes its two entities only
        qs[0].metadata.deletion_timestamp = qs[0].metadata.creation_timestamp.clone();
        reconcile(&mut admin, &mut qs).await;
        let described = admin.describe_client_quotas().await.unwrap();
        assert_eq!(described.keys().collect::<Vec<_>>(), vec![&client("app")]);
    })
    .await
    .expect("test took longer than 120 s");
}
