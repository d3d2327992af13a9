//! The pure planner of `KafkaQuota`: from every KafkaQuota of one cluster
//! (their specs and their ownership records in `status.applied`) and the
//! quotas the broker reports (DescribeClientQuotas), the AlterClientQuotas
//! operations, and after they ran, each object's new ownership record and
//! refusals.
//!
//! Rules:
//! - A key (e.g. `producer_byte_rate`) of an entity is *desired* when a live
//!   (not deleting) KafkaQuota names the entity and sets the rate.
//! - Two KafkaQuotas desiring the same key of the same entity conflict: the
//!   oldest (creationTimestamp, then name) wins, the other reports the
//!   conflict and owns nothing for that key.
//! - A desired key whose broker value differs is set (drift made behind the
//!   operator's back is brought back on every reconcile).
//! - A key recorded as owned by some KafkaQuota and no longer desired by any
//!   is removed from the broker. Keys nobody here owns or desires (e.g. set
//!   with `kafka-configs`) are never touched.
//! - A key set by hand that a KafkaQuota then claims is overwritten; removing
//!   the KafkaQuota removes it (the hand-set value is not restored).

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;

use crate::crd::{AppliedQuota, KafkaQuota, QuotaEntitySpec, RefusedQuota};
use crate::kafka::quota::{ClientQuotas, EntityName, QuotaAlteration, QuotaEntity};

/// Kafka's quota key of producer byte rates.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// Kafka's quota key of consumer byte rates.
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// Kafka's quota key of request time percentage.
pub const REQUEST_PERCENTAGE: &str = "request_percentage";

/// The broker entity of a spec entity, or why it is not one.
pub fn entity_of_spec(e: &QuotaEntitySpec) -> Result<QuotaEntity, String> {
    let part = |name: &Option<String>, default: bool, what: &str| match (name, default) {
        (Some(_), true) => Err(format!("{what} and default{what} are exclusive")),
        (Some(n), false) if n.is_empty() => Err(format!("{what} is empty")),
        (Some(n), false) => Ok(Some(EntityName::Name(n.clone()))),
        (None, true) => Ok(Some(EntityName::Default)),
        (None, false) => Ok(None),
    };
    let mut entity = QuotaEntity {
        user: part(&e.user, e.default_user, "User")?,
        client_id: part(&e.client_id, e.default_client_id, "ClientId")?,
    };
    match (&e.client_id_prefix, &entity.client_id) {
        (Some(_), Some(_)) => {
            return Err("clientIdPrefix is exclusive with clientId and defaultClientId".into())
        }
        (Some(p), None) if p.is_empty() => return Err("clientIdPrefix is empty".into()),
        (Some(p), None) => entity.client_id = Some(EntityName::Prefix(p.clone())),
        (None, _) => {}
    }
    if entity.user.is_none() && entity.client_id.is_none() {
        return Err("an entity needs a user, a client id, a client-id prefix or a default".into());
    }
    Ok(entity)
}

/// The spec form of a broker entity.
pub fn spec_of_entity(e: &QuotaEntity) -> QuotaEntitySpec {
    let split = |p: &Option<EntityName>| match p {
        Some(EntityName::Name(n)) => (Some(n.clone()), false, None),
        Some(EntityName::Default) => (None, true, None),
        Some(EntityName::Prefix(p)) => (None, false, Some(p.clone())),
        None => (None, false, None),
    };
    let (user, default_user, _) = split(&e.user);
    let (client_id, default_client_id, client_id_prefix) = split(&e.client_id);
    QuotaEntitySpec {
        user,
        default_user,
        client_id,
        default_client_id,
        client_id_prefix,
    }
}

/// The quota keys and values a spec sets.
pub fn desired_values(kq: &KafkaQuota) -> BTreeMap<String, f64> {
    let s = &kq.spec;
    [
        (PRODUCER_BYTE_RATE, s.producer_byte_rate.map(|v| v as f64)),
        (CONSUMER_BYTE_RATE, s.consumer_byte_rate.map(|v| v as f64)),
        (REQUEST_PERCENTAGE, s.request_percentage),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k.to_string(), v?)))
    .collect()
}

/// The entity keys an object's status records as set by it.
fn recorded(kq: &KafkaQuota) -> BTreeMap<QuotaEntity, BTreeMap<String, f64>> {
    let mut out: BTreeMap<QuotaEntity, BTreeMap<String, f64>> = BTreeMap::new();
    for a in kq.status.iter().flat_map(|s| s.applied.iter()) {
        if let Ok(e) = entity_of_spec(&a.entity) {
            out.entry(e).or_default().extend(a.values.clone());
        }
    }
    out
}

/// What one KafkaQuota gets from a plan, before the broker answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectPlan {
    /// Keys this object wins: entity → key → value.
    pub wins: BTreeMap<QuotaEntity, BTreeMap<String, f64>>,
    /// Keys it recorded before: entity → key → value.
    pub previous: BTreeMap<QuotaEntity, BTreeMap<String, f64>>,
    /// Entities refused before reaching the broker (invalid, conflicts).
    pub refused: Vec<RefusedQuota>,
}

/// The plan of one cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuotaPlan {
    /// What to send with AlterClientQuotas (entities in order).
    pub alterations: Vec<QuotaAlteration>,
    /// Per KafkaQuota name.
    pub objects: BTreeMap<String, ObjectPlan>,
}

/// Precedence: oldest creationTimestamp first, then name.
fn precedence(kq: &KafkaQuota) -> (Option<k8s_openapi::jiff::Timestamp>, String) {
    (
        kq.metadata.creation_timestamp.as_ref().map(|t| t.0),
        kq.name_any(),
    )
}

/// Plans the AlterClientQuotas operations of one cluster from all its
/// KafkaQuotas (deleting ones included: they only give up what they own)
/// and the quotas the broker has.
pub fn plan(quotas: &[KafkaQuota], broker: &ClientQuotas) -> QuotaPlan {
    let mut ordered: Vec<&KafkaQuota> = quotas.iter().collect();
    ordered.sort_by_key(|kq| precedence(kq));
    let mut out = QuotaPlan::default();
    // (entity, key) → (owner, value)
    let mut desired: BTreeMap<(QuotaEntity, String), (String, f64)> = BTreeMap::new();
    let mut owned: BTreeSet<(QuotaEntity, String)> = BTreeSet::new();
    for kq in &ordered {
        let name = kq.name_any();
        let obj = out.objects.entry(name.clone()).or_default();
        obj.previous = recorded(kq);
        for (e, values) in &obj.previous {
            owned.extend(values.keys().map(|k| (e.clone(), k.clone())));
        }
        if kq.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let values = desired_values(kq);
        let mut seen = BTreeSet::new();
        for spec_entity in &kq.spec.entities {
            let entity = match entity_of_spec(spec_entity) {
                Ok(e) => e,
                Err(reason) => {
                    obj.refused.push(RefusedQuota {
                        entity: spec_entity.clone(),
                        reason,
                    });
                    continue;
                }
            };
            if !seen.insert(entity.clone()) {
                continue; // listed twice
            }
            let mut lost = Vec::new();
            for (k, v) in &values {
                match desired.get(&(entity.clone(), k.clone())) {
                    Some((owner, _)) => lost.push(format!("{k} is set by KafkaQuota {owner}")),
                    None => {
                        desired.insert((entity.clone(), k.clone()), (name.clone(), *v));
                        obj.wins
                            .entry(entity.clone())
                            .or_default()
                            .insert(k.clone(), *v);
                    }
                }
            }
            if !lost.is_empty() {
                obj.refused.push(RefusedQuota {
                    entity: spec_entity.clone(),
                    reason: format!("Conflict: {}", lost.join("; ")),
                });
            }
        }
    }
    let mut ops: BTreeMap<QuotaEntity, BTreeMap<String, Option<f64>>> = BTreeMap::new();
    for ((e, k), (_, v)) in &desired {
        let current = broker.get(e).and_then(|vals| vals.get(k));
        if current != Some(v) {
            ops.entry(e.clone())
                .or_default()
                .insert(k.clone(), Some(*v));
        }
    }
    for (e, k) in owned {
        let key = (e.clone(), k.clone());
        let present = broker.get(&e).is_some_and(|vals| vals.contains_key(&k));
        if !desired.contains_key(&key) && present {
            ops.entry(e).or_default().insert(k, None);
        }
    }
    out.alterations = ops
        .into_iter()
        .map(|(entity, ops)| QuotaAlteration { entity, ops })
        .collect();
    out
}

/// Each object's ownership record and refusals once the alterations ran;
/// `failed` holds the entities the broker refused, with its reason (an
/// unreachable broker means the plan was not applied: pass every
/// alteration's entity). A refused entity keeps the object's previous
/// record, so a later reconcile still removes what it set.
pub fn settle(
    plan: &QuotaPlan,
    failed: &BTreeMap<QuotaEntity, String>,
) -> BTreeMap<String, (Vec<AppliedQuota>, Vec<RefusedQuota>)> {
    let mut out = BTreeMap::new();
    for (name, obj) in &plan.objects {
        let mut applied: BTreeMap<QuotaEntity, BTreeMap<String, f64>> = BTreeMap::new();
        let mut refused = obj.refused.clone();
        let entities: BTreeSet<&QuotaEntity> = obj.wins.keys().chain(obj.previous.keys()).collect();
        for e in entities {
            match failed.get(e) {
                Some(reason) => {
                    if let Some(prev) = obj.previous.get(e) {
                        applied.insert(e.clone(), prev.clone());
                    }
                    refused.push(RefusedQuota {
                        entity: spec_of_entity(e),
                        reason: reason.clone(),
                    });
                }
                None => {
                    if let Some(w) = obj.wins.get(e) {
                        applied.insert(e.clone(), w.clone());
                    }
                }
            }
        }
        let applied = applied
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(e, values)| AppliedQuota {
                entity: spec_of_entity(&e),
                values,
            })
            .collect();
        out.insert(name.clone(), (applied, refused));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::KafkaQuotaStatus;

    fn kq(name: &str, created: i64, spec: serde_json::Value) -> KafkaQuota {
        let mut spec = spec;
        spec["clusterRef"] = "c".into();
        let mut q = KafkaQuota::new(name, serde_json::from_value(spec).unwrap());
        q.metadata.namespace = Some("ns".into());
        q.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
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

    fn vals(kv: &[(&str, f64)]) -> BTreeMap<String, f64> {
        kv.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// Runs plan + settle with every alteration accepted and writes the
    /// records back, as the controller does.
    fn reconcile(quotas: &mut [KafkaQuota], broker: &mut ClientQuotas) -> QuotaPlan {
        let p = plan(quotas, broker);
        for a in &p.alterations {
            let vals = broker.entry(a.entity.clone()).or_default();
            for (k, v) in &a.ops {
                match v {
                    Some(v) => vals.insert(k.clone(), *v),
                    None => vals.remove(k),
                };
            }
        }
        broker.retain(|_, v| !v.is_empty());
        let settled = settle(&p, &BTreeMap::new());
        for q in quotas.iter_mut() {
            let (applied, refused) = settled[&q.name_any()].clone();
            q.status = Some(KafkaQuotaStatus {
                applied,
                refused,
                ..Default::default()
            });
        }
        p
    }

    #[test]
    fn entities_convert_both_ways() {
        let specs = [
            QuotaEntitySpec {
                user: Some("alice".into()),
                ..Default::default()
            },
            QuotaEntitySpec {
                default_user: true,
                client_id: Some("app".into()),
                ..Default::default()
            },
            QuotaEntitySpec {
                default_client_id: true,
                ..Default::default()
            },
            QuotaEntitySpec {
                client_id_prefix: Some("batch-".into()),
                ..Default::default()
            },
            QuotaEntitySpec {
                user: Some("alice".into()),
                client_id_prefix: Some("batch-".into()),
                ..Default::default()
            },
        ];
        for s in specs {
            assert_eq!(spec_of_entity(&entity_of_spec(&s).unwrap()), s);
        }
        assert!(entity_of_spec(&QuotaEntitySpec::default()).is_err());
        assert!(entity_of_spec(&QuotaEntitySpec {
            user: Some("a".into()),
            default_user: true,
            ..Default::default()
        })
        .is_err());
    }

    #[test]
    fn sets_desired_quotas_and_is_idempotent() {
        let mut qs = vec![kq(
            "a",
            1,
            serde_json::json!({"entities": [{"clientId": "app"}, {"defaultUser": true}],
                "producerByteRate": 1048576, "requestPercentage": 50.0}),
        )];
        let mut broker = ClientQuotas::new();
        let p = reconcile(&mut qs, &mut broker);
        assert_eq!(p.alterations.len(), 2);
        assert_eq!(
            broker[&client("app")],
            vals(&[(PRODUCER_BYTE_RATE, 1048576.0), (REQUEST_PERCENTAGE, 50.0)])
        );
        let applied = &qs[0].status.as_ref().unwrap().applied;
        assert_eq!(applied.len(), 2);
        // second pass: nothing to do
        assert!(reconcile(&mut qs, &mut broker).alterations.is_empty());
    }

    #[test]
    fn drift_is_repaired() {
        let mut qs = vec![kq(
            "a",
            1,
            serde_json::json!({"entities": [{"clientId": "app"}], "consumerByteRate": 1000}),
        )];
        let mut broker = ClientQuotas::new();
        reconcile(&mut qs, &mut broker);
        broker
            .get_mut(&client("app"))
            .unwrap()
            .insert(CONSUMER_BYTE_RATE.into(), 5.0);
        let p = reconcile(&mut qs, &mut broker);
        assert_eq!(
            p.alterations[0].ops,
            BTreeMap::from([(CONSUMER_BYTE_RATE.to_string(), Some(1000.0))])
        );
        assert_eq!(broker[&client("app")][CONSUMER_BYTE_RATE], 1000.0);
    }

    #[test]
    fn removal_removes_exactly_what_it_set() {
        let mut qs = vec![kq(
            "a",
            1,
            serde_json::json!({"entities": [{"clientId": "app"}], "producerByteRate": 1000}),
        )];
        // someone set other quotas by hand, on the same entity and another
        let mut broker = ClientQuotas::from([
            (client("app"), vals(&[(CONSUMER_BYTE_RATE, 7.0)])),
            (client("other"), vals(&[(PRODUCER_BYTE_RATE, 9.0)])),
        ]);
        reconcile(&mut qs, &mut broker);
        assert_eq!(broker[&client("app")].len(), 2);
        // deleting: only producer_byte_rate of app goes
        qs[0].metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(5).unwrap(),
            ));
        let p = reconcile(&mut qs, &mut broker);
        assert_eq!(
            p.alterations,
            vec![QuotaAlteration {
                entity: client("app"),
                ops: BTreeMap::from([(PRODUCER_BYTE_RATE.to_string(), None)])
            }]
        );
        assert_eq!(broker[&client("app")], vals(&[(CONSUMER_BYTE_RATE, 7.0)]));
        assert_eq!(broker[&client("other")], vals(&[(PRODUCER_BYTE_RATE, 9.0)]));
        assert!(qs[0].status.as_ref().unwrap().applied.is_empty());
    }

    #[test]
    fn entity_or_rate_leaving_the_spec_is_removed() {
        let mut qs = vec![kq(
            "a",
            1,
            serde_json::json!({"entities": [{"clientId": "app"}, {"clientId": "b"}],
                "producerByteRate": 1000, "consumerByteRate": 2000}),
        )];
        let mut broker = ClientQuotas::new();
        reconcile(&mut qs, &mut broker);
        qs[0].spec.entities.pop();
        qs[0].spec.consumer_byte_rate = None;
        reconcile(&mut qs, &mut broker);
        assert_eq!(
            broker,
            ClientQuotas::from([(client("app"), vals(&[(PRODUCER_BYTE_RATE, 1000.0)]))])
        );
    }

    #[test]
    fn conflicts_go_to_the_oldest_and_pass_on_deletion() {
        let mut qs = vec![
            kq(
                "young",
                20,
                serde_json::json!({"entities": [{"clientId": "app"}], "producerByteRate": 2000, "consumerByteRate": 3000}),
            ),
            kq(
                "old",
                10,
                serde_json::json!({"entities": [{"clientId": "app"}], "producerByteRate": 1000}),
            ),
        ];
        let mut broker = ClientQuotas::new();
        reconcile(&mut qs, &mut broker);
        assert_eq!(
            broker[&client("app")],
            vals(&[(PRODUCER_BYTE_RATE, 1000.0), (CONSUMER_BYTE_RATE, 3000.0)])
        );
        let young = qs[0].status.clone().unwrap();
        assert_eq!(young.refused.len(), 1);
        assert!(young.refused[0].reason.contains("KafkaQuota old"));
        assert_eq!(
            young.applied[0].values,
            vals(&[(CONSUMER_BYTE_RATE, 3000.0)])
        );
        assert!(qs[1].status.as_ref().unwrap().refused.is_empty());
        // the old one goes: the young one takes the key over
        qs[1].metadata.deletion_timestamp = qs[1].metadata.creation_timestamp.clone();
        reconcile(&mut qs, &mut broker);
        assert_eq!(
            broker[&client("app")],
            vals(&[(PRODUCER_BYTE_RATE, 2000.0), (CONSUMER_BYTE_RATE, 3000.0)])
        );
        assert!(qs[0].status.as_ref().unwrap().refused.is_empty());
        assert!(qs[1].status.as_ref().unwrap().applied.is_empty());
        // same creation time: the name decides
        let a = kq(
            "a",
            1,
            serde_json::json!({"entities": [{"clientId": "x"}], "producerByteRate": 1}),
        );
        let b = kq(
            "b",
            1,
            serde_json::json!({"entities": [{"clientId": "x"}], "producerByteRate": 2}),
        );
        let p = plan(&[b, a], &ClientQuotas::new());
        assert_eq!(p.alterations[0].ops[PRODUCER_BYTE_RATE], Some(1.0));
        assert_eq!(p.objects["b"].refused.len(), 1);
    }

    #[test]
    fn broker_refusal_keeps_the_previous_record() {
        let mut qs = vec![kq(
            "a",
            1,
            serde_json::json!({"entities": [{"clientId": "app"}], "producerByteRate": 1000}),
        )];
        let mut broker = ClientQuotas::new();
        reconcile(&mut qs, &mut broker);
        qs[0].spec.producer_byte_rate = Some(5);
        let p = plan(&qs, &broker);
        let failed = BTreeMap::from([(client("app"), "INVALID_REQUEST: no".to_string())]);
        let (applied, refused) = settle(&p, &failed)["a"].clone();
        assert_eq!(applied[0].values, vals(&[(PRODUCER_BYTE_RATE, 1000.0)]));
        assert_eq!(refused[0].reason, "INVALID_REQUEST: no");
        // a deleting object whose removal failed keeps its record too
        qs[0].metadata.deletion_timestamp = qs[0].metadata.creation_timestamp.clone();
        let p = plan(&qs, &broker);
        let (applied, _) = settle(&p, &failed)["a"].clone();
        assert_eq!(applied.len(), 1);
        let (applied, _) = settle(&p, &BTreeMap::new())["a"].clone();
        assert!(applied.is_empty());
    }

    #[test]
    fn invalid_entities_are_refused_not_sent() {
        let qs = vec![kq(
            "a",
            1,
            serde_json::json!({"entities": [{"clientId": "app", "defaultClientId": true}], "producerByteRate": 1}),
        )];
        let p = plan(&qs, &ClientQuotas::new());
        assert!(p.alterations.is_empty());
        assert!(p.objects["a"].refused[0].reason.contains("exclusive"));
    }

    #[test]
    fn prefix_entities_are_planned_apart_from_exact_client_ids() {
        let mut qs = vec![
            kq(
                "prefix",
                1,
                serde_json::json!({"entities": [{"clientIdPrefix": "batch-"}], "producerByteRate": 100}),
            ),
            kq(
                "exact",
                2,
                serde_json::json!({"entities": [{"clientId": "batch-"}], "producerByteRate": 200}),
            ),
            kq(
                "bad",
                3,
                serde_json::json!({"entities": [{"clientIdPrefix": "x", "clientId": "x"},
                    {"clientIdPrefix": "y", "defaultClientId": true}, {"clientIdPrefix": ""}],
                    "producerByteRate": 1}),
            ),
        ];
        let mut broker = ClientQuotas::new();
        let p = reconcile(&mut qs, &mut broker);
        let prefix = QuotaEntity {
            user: None,
            client_id: Some(EntityName::Prefix("batch-".into())),
        };
        // the same name as a prefix and as a client id: two entities, no conflict
        assert_eq!(
            broker,
            ClientQuotas::from([
                (prefix.clone(), vals(&[(PRODUCER_BYTE_RATE, 100.0)])),
                (client("batch-"), vals(&[(PRODUCER_BYTE_RATE, 200.0)])),
            ])
        );
        assert_eq!(p.objects["prefix"].refused, vec![]);
        assert_eq!(p.objects["exact"].refused, vec![]);
        let reasons: Vec<_> = p.objects["bad"]
            .refused
            .iter()
            .map(|r| r.reason.as_str())
            .collect();
        assert_eq!(
            reasons,
            [
                "clientIdPrefix is exclusive with clientId and defaultClientId",
                "clientIdPrefix is exclusive with clientId and defaultClientId",
                "clientIdPrefix is empty"
            ]
        );
        assert_eq!(
            qs[0].status.as_ref().unwrap().applied[0].entity,
            QuotaEntitySpec {
                client_id_prefix: Some("batch-".into()),
                ..Default::default()
            }
        );
        // deleting the prefix object removes the prefix entity only
        qs[0].metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(5).unwrap(),
            ));
        reconcile(&mut qs, &mut broker);
        assert_eq!(
            broker,
            ClientQuotas::from([(client("batch-"), vals(&[(PRODUCER_BYTE_RATE, 200.0)]))])
        );
    }
}
