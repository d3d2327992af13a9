//! The controller as one request sees it: [`Controller`], a view over this
//! broker through which every metadata change goes (standalone: applied to
//! the broker's own metadata and published; cluster mode: forwarded to the
//! active controller). Handlers make one with [`Controller::new`]; the
//! broker itself never does, so the broker does not import this view and
//! the view alone reaches into the broker (issue 42's layering).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::link::ControllerLink;
use super::rpc::pb;
use super::{assignment, cluster, elect, leadership, reassignment, rpc};
use crate::broker::Broker;
use crate::error::TopicError;

/// The controller as seen from one request: a view over the broker.
#[derive(Clone, Copy)]
pub struct Controller<'a> {
    broker: &'a Broker,
}

/// One partition's AlterPartitionReassignments entry: its target
/// replicas, or `None` to cancel its running reassignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignRequest {
    pub topic: String,
    pub partition: i32,
    pub target: Option<Vec<i32>>,
}

/// Explicit `(partition, replicas)` as the controller's RPC carries them.
fn to_pb(assignments: &[(i32, Vec<i32>)]) -> Vec<pb::ManualAssignment> {
    assignments
        .iter()
        .map(|(partition, replicas)| pb::ManualAssignment {
            partition: *partition,
            replicas: replicas.clone(),
        })
        .collect()
}

/// What CreateTopics reports about a created topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTopic {
    pub id: Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
}

impl<'a> Controller<'a> {
    pub fn new(broker: &'a Broker) -> Self {
        Self { broker }
    }

    /// The active controller, when this broker is in cluster mode.
    fn remote(&self) -> Option<&ControllerLink> {
        self.broker.controller_link().map(|l| l.as_ref())
    }

    /// Standalone: explicit assignments checked as the controller checks
    /// them, this broker being the only registered one; the partition
    /// count and replication factor they amount to (or the requested ones
    /// when there are none).
    fn standalone_manual(
        &self,
        partitions: i32,
        replication_factor: i16,
        assignments: &[(i32, Vec<i32>)],
    ) -> Result<(i32, i16), TopicError> {
        if assignments.is_empty() {
            return Ok((partitions, replication_factor));
        }
        cluster::check_manual_counts(partitions, replication_factor)?;
        let me = BTreeSet::from([self.broker.node_id]);
        let replicas =
            assignment::manual_for_create(assignments, &me, &me).map_err(cluster::manual_error)?;
        Ok((
            i32::try_from(replicas.len()).unwrap_or(i32::MAX),
            replicas
                .first()
                .map_or(1, |r| i16::try_from(r.len()).unwrap_or(i16::MAX)),
        ))
    }

    /// Checks what `create_topic` would check, changing nothing.
    pub fn validate_create(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
        assignments: &[(i32, Vec<i32>)],
    ) -> Result<(), TopicError> {
        if let Some(link) = self.remote() {
            let request = pb::CreateTopicRequest {
                name: name.to_string(),
                partitions,
                replication_factor: i32::from(replication_factor),
                configs: configs.clone().into_iter().collect(),
                validate_only: true,
                assignments: to_pb(assignments),
            };
            return link
                .admin(|mut c| async move { c.create_topic(request).await })
                .map(drop);
        }
        let (partitions, replication_factor) =
            self.standalone_manual(partitions, replication_factor, assignments)?;
        self.broker
            .topics
            .validate_create(name, partitions, replication_factor, configs)
    }

    /// CreateTopics (`-1`: the broker defaults), with explicit
    /// `(partition, replicas)` assignments or none.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
        assignments: &[(i32, Vec<i32>)],
    ) -> Result<CreatedTopic, TopicError> {
        if let Some(link) = self.remote() {
            let request = pb::CreateTopicRequest {
                name: name.to_string(),
                partitions,
                replication_factor: i32::from(replication_factor),
                configs: configs.into_iter().collect(),
                validate_only: false,
                assignments: to_pb(assignments),
            };
            let id = link.admin(|mut c| async move { c.create_topic(request).await })?;
            if let Some(t) = self.broker.image().topic(name) {
                return Ok(CreatedTopic {
                    id: t.id,
                    partitions: i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
                    replication_factor: t
                        .partitions
                        .first()
                        .map_or(1, |p| i16::try_from(p.replicas.len()).unwrap_or(i16::MAX)),
                });
            }
            // Created, but this broker's image does not show it yet (its
            // session is catching up): answer from the request, as Kafka
            // does; clients find the topic in Metadata shortly.
            let config = self.broker.topics.broker_config();
            if let Some((_, first)) = assignments.first() {
                return Ok(CreatedTopic {
                    id: Uuid::parse_str(&id).unwrap_or(Uuid::nil()),
                    partitions: i32::try_from(assignments.len()).unwrap_or(i32::MAX),
                    replication_factor: i16::try_from(first.len()).unwrap_or(i16::MAX),
                });
            }
            return Ok(CreatedTopic {
                id: Uuid::parse_str(&id).unwrap_or(Uuid::nil()),
                partitions: if partitions == -1 {
                    config.num_partitions
                } else {
                    partitions
                },
                replication_factor: if replication_factor == -1 {
                    config.default_replication_factor
                } else {
                    replication_factor
                },
            });
        }
        let (partitions, replication_factor) =
            self.standalone_manual(partitions, replication_factor, assignments)?;
        let created = self
            .broker
            .topics
            .create(name, partitions, replication_factor, configs);
        self.publish();
        created.map(|t| CreatedTopic {
            id: t.meta.id,
            partitions: t.meta.partitions,
            replication_factor: t.meta.replication_factor,
        })
    }

    /// A topic created because a client named it (`auto.create.topics.enable`).
    pub fn auto_create(&self, name: &str) -> Result<(), TopicError> {
        if self.remote().is_some() {
            if self.broker.image().topic(name).is_some() {
                return Ok(());
            }
            if !self.broker.topics.broker_config().auto_create_topics_enable {
                return Err(TopicError::new(
                    ResponseError::UnknownTopicOrPartition,
                    format!("topic {name} does not exist"),
                ));
            }
            return match self.create_topic(name, -1, -1, BTreeMap::new(), &[]) {
                Err(e) if e.code == ResponseError::TopicAlreadyExists => Ok(()),
                other => other.map(drop),
            };
        }
        let created = self.broker.topics.auto_create(name);
        self.publish();
        created.map(drop)
    }

    /// DeleteTopics; returns the deleted topic's id.
    pub fn delete_topic(&self, name: &str) -> Result<Uuid, TopicError> {
        if let Some(link) = self.remote() {
            let request = pb::DeleteTopicRequest {
                name: name.to_string(),
            };
            let id = link.admin(|mut c| async move { c.delete_topic(request).await })?;
            return Ok(Uuid::parse_str(&id).unwrap_or(Uuid::nil()));
        }
        let deleted = self.broker.topics.delete(name);
        self.publish();
        deleted
    }

    /// CreatePartitions: grows `name` to `count` partitions, the new ones
    /// on the explicit `assignments` (one replica list per added partition)
    /// or placed by the controller (none).
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: &[Vec<i32>],
        validate_only: bool,
    ) -> Result<(), TopicError> {
        if let Some(link) = self.remote() {
            let request = pb::CreatePartitionsRequest {
                name: name.to_string(),
                count,
                validate_only,
                assignments: assignments
                    .iter()
                    .map(|r| pb::ReplicaList {
                        replicas: r.clone(),
                    })
                    .collect(),
            };
            return link
                .admin(|mut c| async move { c.create_partitions(request).await })
                .map(drop);
        }
        // Standalone: the same checks as the controller's, this broker
        // being the only registered one (an unknown topic or a count that
        // does not grow it is refused below first, as Kafka orders them).
        if let Some(current) = self.broker.topics.get(name) {
            let have = current.meta.partitions;
            if !assignments.is_empty() && count > have {
                let me = BTreeSet::from([self.broker.node_id]);
                let added = usize::try_from(count - have).unwrap_or(0);
                let first = usize::try_from(have).unwrap_or(0);
                let factor = usize::try_from(current.meta.replication_factor).unwrap_or(1);
                assignment::manual_for_extend(assignments, first, added, factor, &me, &me)
                    .map_err(cluster::manual_error)?;
            }
        }
        let grown = self
            .broker
            .topics
            .create_partitions(name, count, validate_only);
        if !validate_only {
            self.publish();
        }
        grown
    }

    /// AlterConfigs / IncrementalAlterConfigs of one topic.
    pub fn alter_topic_configs(
        &self,
        name: &str,
        change: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), TopicError>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        if let Some(link) = self.remote() {
            let image = self.broker.image();
            let mut configs = image
                .topic(name)
                .ok_or_else(|| {
                    TopicError::new(
                        ResponseError::UnknownTopicOrPartition,
                        format!("topic {name} does not exist"),
                    )
                })?
                .configs
                .clone();
            change(&mut configs)?;
            let request = pb::AlterTopicConfigsRequest {
                name: name.to_string(),
                configs: configs.into_iter().collect(),
                validate_only,
            };
            return link
                .admin(|mut c| async move { c.alter_topic_configs(request).await })
                .map(drop);
        }
        self.broker
            .topics
            .alter_configs(name, change, validate_only)
    }

    /// AlterConfigs / IncrementalAlterConfigs of a broker entity's dynamic
    /// configs (`""`: the cluster-wide default; see [`crate::dynamic_config`]).
    /// `change` edits the entity's current dynamic configs; the result is
    /// validated whole.
    pub fn alter_broker_configs(
        &self,
        entity: &str,
        change: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), TopicError>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        crate::dynamic_config::validate_entity(entity)?;
        let mut configs = self
            .broker
            .image()
            .broker_configs
            .get(entity)
            .cloned()
            .unwrap_or_default();
        change(&mut configs)?;
        if let Some(link) = self.remote() {
            let request = pb::AlterBrokerConfigsRequest {
                entity: entity.to_string(),
                configs: configs.into_iter().collect(),
                validate_only,
            };
            return link
                .admin(|mut c| async move { c.alter_broker_configs(request).await })
                .map(drop);
        }
        crate::dynamic_config::validate_entity_configs(entity, &configs)?;
        if validate_only {
            return Ok(());
        }
        self.broker.dynamic_configs.update(|all| {
            if configs.is_empty() {
                all.remove(entity);
            } else {
                all.insert(entity.to_string(), configs);
            }
            Ok(())
        })?;
        self.publish();
        Ok(())
    }

    /// AlterClientQuotas of one entity: per key a new value or a removal
    /// (see [`crate::quota`]); validated whole.
    pub fn alter_client_quotas(
        &self,
        entity: &crate::quota::QuotaEntity,
        ops: Vec<(String, Option<f64>)>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        if let Some(link) = self.remote() {
            let (set, remove): (Vec<_>, Vec<_>) = ops.into_iter().partition(|(_, v)| v.is_some());
            let request = pb::AlterClientQuotasRequest {
                user: Some(rpc::quota_part_to_pb(&entity.user)),
                client_id: Some(rpc::quota_part_to_pb(&entity.client_id)),
                set: set.into_iter().filter_map(|(k, v)| Some((k, v?))).collect(),
                remove: remove.into_iter().map(|(k, _)| k).collect(),
                validate_only,
            };
            return link
                .admin(|mut c| async move { c.alter_client_quotas(request).await })
                .map(drop);
        }
        let change = [(entity.clone(), ops)];
        if validate_only {
            let mut scratch = self.broker.image().client_quotas.clone();
            return crate::quota::entity::apply(&mut scratch, &change);
        }
        self.broker.client_quotas.update(|records| {
            let mut quotas = crate::quota::from_records(records);
            crate::quota::entity::apply(&mut quotas, &change)?;
            *records = crate::quota::to_records(&quotas);
            Ok(())
        })?;
        self.publish();
        Ok(())
    }

    /// AlterUserScramCredentials: the request judged against the
    /// credentials of the cluster (see [`crate::security::credentials`])
    /// and its accepted changes stored; one result per user. Standalone:
    /// this broker's `scram-credentials.json`; cluster mode: the
    /// controller's cluster record, the answer given once this broker's
    /// image shows it. Err: the request as a whole failed (the controller
    /// unreachable, the store down).
    pub fn alter_scram_credentials(
        &self,
        deletions: &[crate::security::credentials::Deletion],
        upsertions: &[crate::security::credentials::Upsertion],
    ) -> Result<Vec<crate::security::credentials::UserResult>, TopicError> {
        use crate::security::credentials::{plan_alter, ScramCredentials, UserResult};
        if let Some(link) = self.remote() {
            let r =
                link.alter_scram_credentials(rpc::scram_alterations_to_pb(deletions, upsertions))?;
            if r.error_code != 0 {
                return Err(TopicError::new(kafka_error(r.error_code), r.message));
            }
            return Ok(r
                .results
                .into_iter()
                .map(|u| UserResult {
                    user: u.user,
                    error: (u.error_code != 0).then(|| (kafka_error(u.error_code), u.message)),
                })
                .collect());
        }
        let mut results = Vec::new();
        let mut changed = false;
        self.broker.scram_credentials.update(|records| {
            let (mut credentials, _) = ScramCredentials::from_records(records);
            let plan = plan_alter(&credentials, deletions, upsertions);
            results = plan.results;
            changed = !plan.changes.is_empty();
            credentials.apply(&plan.changes);
            *records = credentials.to_records();
            Ok(())
        })?;
        if changed {
            self.publish();
        }
        Ok(results)
    }

    /// CreateAcls: each creation judged against the cluster's ACLs (see
    /// [`crate::security::acl_admin::create`]) and the accepted ones
    /// stored; one result per creation. Standalone: this broker's
    /// `acls.json`; cluster mode: the controller's cluster record, the
    /// answer given once this broker's image shows it. Err: the request as
    /// a whole failed.
    pub fn create_acls(
        &self,
        creations: &[Result<
            crate::security::acl::AclBinding,
            crate::security::acl_admin::AclFailure,
        >],
    ) -> Result<Vec<Result<(), crate::security::acl_admin::AclFailure>>, TopicError> {
        use crate::security::acl_admin::{self, AclFailure};
        if let Some(link) = self.remote() {
            let request = rpc::pb::CreateAclsRequest {
                // a creation refused here already is sent as an invalid
                // code, which the controller refuses alike; its answer is
                // replaced by this broker's own below
                creations: creations
                    .iter()
                    .map(|c| match c {
                        Ok(b) => rpc::acl_to_pb(b),
                        Err(_) => rpc::pb::Acl {
                            resource_type: -1,
                            ..Default::default()
                        },
                    })
                    .collect(),
            };
            let r = link.create_acls(request)?;
            if r.error_code != 0 {
                return Err(TopicError::new(kafka_error(r.error_code), r.message));
            }
            let mut answers = r.results.into_iter();
            return Ok(creations
                .iter()
                .map(|c| {
                    let answer = answers
                        .next()
                        .map(|o| rpc::acl_outcome_from_pb(o).map(|_| ()));
                    match (c, answer) {
                        (Err(e), _) => Err(e.clone()),
                        (Ok(_), Some(answer)) => answer,
                        (Ok(_), None) => Err(AclFailure {
                            code: kafka_protocol::error::ResponseError::UnknownServerError.code(),
                            message: "the controller gave no answer for this creation".into(),
                        }),
                    }
                })
                .collect());
        }
        let mut results = Vec::new();
        let mut changed = false;
        self.broker.acls.update(|records| {
            let (mut acls, _) = acl_admin::from_records(records);
            (results, changed) = acl_admin::create(&mut acls, creations);
            *records = acl_admin::to_records(&acls);
            Ok(())
        })?;
        if changed {
            self.publish();
        }
        Ok(results)
    }

    /// DeleteAcls: per filter, the bindings it matched, all of them
    /// removed (see [`crate::security::acl_admin::delete`]); stored as
    /// [`Controller::create_acls`] stores.
    #[allow(clippy::type_complexity)]
    pub fn delete_acls(
        &self,
        filters: &[Result<
            crate::security::acl::AclBindingFilter,
            crate::security::acl_admin::AclFailure,
        >],
    ) -> Result<
        Vec<Result<Vec<crate::security::acl::AclBinding>, crate::security::acl_admin::AclFailure>>,
        TopicError,
    > {
        use crate::security::acl_admin::{self, AclFailure};
        if let Some(link) = self.remote() {
            let request = rpc::pb::DeleteAclsRequest {
                filters: filters
                    .iter()
                    .map(|f| match f {
                        Ok(f) => rpc::acl_filter_to_pb(f),
                        // refused by the controller alike (UNKNOWN type)
                        Err(_) => rpc::pb::AclFilter::default(),
                    })
                    .collect(),
            };
            let r = link.delete_acls(request)?;
            if r.error_code != 0 {
                return Err(TopicError::new(kafka_error(r.error_code), r.message));
            }
            let mut answers = r.results.into_iter();
            return Ok(filters
                .iter()
                .map(|f| {
                    let answer = answers.next().map(rpc::acl_outcome_from_pb);
                    match (f, answer) {
                        (Err(e), _) => Err(e.clone()),
                        (Ok(_), Some(answer)) => answer,
                        (Ok(_), None) => Err(AclFailure {
                            code: kafka_protocol::error::ResponseError::UnknownServerError.code(),
                            message: "the controller gave no answer for this filter".into(),
                        }),
                    }
                })
                .collect());
        }
        let mut results = Vec::new();
        let mut changed = false;
        self.broker.acls.update(|records| {
            let (mut acls, _) = acl_admin::from_records(records);
            (results, changed) = acl_admin::delete(&mut acls, filters);
            *records = acl_admin::to_records(&acls);
            Ok(())
        })?;
        if changed {
            self.publish();
        }
        Ok(results)
    }

    /// Cluster mode: creates `__consumer_offsets` if the image has none
    /// (`offsets.topic.num.partitions` partitions of
    /// `offsets.topic.replication.factor` replicas, compacted). Refused
    /// (INVALID_REPLICATION_FACTOR) while fewer brokers are in service.
    pub fn ensure_offsets_topic(&self) -> Result<(), TopicError> {
        use crate::group::offsets::OFFSETS_TOPIC;
        if self.broker.image().topic(OFFSETS_TOPIC).is_some() {
            return Ok(());
        }
        let partitions = self.broker.groups.settings().offsets_partitions;
        let configs = [
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("segment.bytes".to_string(), (100 * 1024 * 1024).to_string()),
        ]
        .into();
        let rf = self
            .broker
            .topics
            .broker_config()
            .offsets_topic_replication_factor
            .max(1);
        match self.create_topic(OFFSETS_TOPIC, partitions, rf, configs, &[]) {
            Err(e) if e.code == ResponseError::TopicAlreadyExists => Ok(()),
            other => other.map(drop),
        }
    }

    /// Creates `__transaction_state` if the image has none:
    /// `transaction.state.log.num.partitions` partitions of
    /// `transaction.state.log.replication.factor` replicas (capped to the
    /// brokers registered, as Kafka caps it to the live brokers), compacted,
    /// `min.insync.replicas` from `transaction.state.log.min.isr` (capped
    /// to the replication factor). Standalone: one replica, every
    /// partition loaded by this broker's coordinator.
    pub fn ensure_transaction_topic(&self) -> Result<(), TopicError> {
        use crate::txn::vocab::TRANSACTION_STATE_TOPIC;
        if self.broker.image().topic(TRANSACTION_STATE_TOPIC).is_some() {
            return Ok(());
        }
        let settings = self.broker.txns.settings();
        let rf = if self.remote().is_some() {
            let brokers = i16::try_from(self.broker.image().brokers.len()).unwrap_or(i16::MAX);
            settings.replication_factor.min(brokers).max(1)
        } else {
            1
        };
        let created = self.create_topic(
            TRANSACTION_STATE_TOPIC,
            settings.partitions,
            rf,
            settings.topic_configs(rf),
            &[],
        );
        match created {
            Err(e) if e.code == ResponseError::TopicAlreadyExists => {}
            other => {
                other?;
            }
        }
        if self.remote().is_none() {
            self.broker.txns.load_all(&self.broker.topics)?;
        }
        Ok(())
    }

    /// A new producer id (InitProducerId), never issued before.
    pub fn allocate_producer_id(&self) -> Result<i64, TopicError> {
        if let Some(link) = self.remote() {
            return link.producer_id();
        }
        self.broker.topics.allocate_producer_id()
    }

    /// Whether `id` was issued by this cluster (in cluster mode: from this
    /// broker's current block; an older id gets a new one, as Kafka does
    /// for ids it cannot vouch for).
    pub fn producer_id_issued(&self, id: i64) -> bool {
        if let Some(link) = self.remote() {
            return link.issued_here(id);
        }
        self.broker.topics.producer_id_issued(id)
    }

    /// AlterPartitionReassignments: starts, replaces or cancels each
    /// partition's reassignment (see [`reassignment`]); per request, `Ok`
    /// when accepted (or already in place) or Kafka's error. A standalone
    /// broker is the only broker, so the only valid target is itself,
    /// which is where every partition already is.
    pub fn alter_reassignments(
        &self,
        requests: &[ReassignRequest],
        allow_replication_factor_change: bool,
    ) -> Result<Vec<Result<(), TopicError>>, TopicError> {
        if let Some(link) = self.remote() {
            let request = pb::AlterReassignmentsRequest {
                reassignments: requests
                    .iter()
                    .map(|r| pb::Reassignment {
                        topic: r.topic.clone(),
                        index: r.partition,
                        target: r.target.clone().unwrap_or_default(),
                        cancel: r.target.is_none(),
                    })
                    .collect(),
                allow_replication_factor_change,
            };
            let results = link.alter_reassignments(request)?;
            return Ok(results
                .into_iter()
                .map(|r| match r.error_code {
                    0 => Ok(()),
                    code => Err(TopicError::new(
                        i16::try_from(code)
                            .ok()
                            .and_then(ResponseError::try_from_code)
                            .unwrap_or(ResponseError::UnknownServerError),
                        r.message,
                    )),
                })
                .collect());
        }
        let image = self.broker.image();
        let node = self.broker.node_id;
        let here = std::collections::BTreeSet::from([node]);
        Ok(requests
            .iter()
            .map(|r| {
                let current = image
                    .topic(&r.topic)
                    .and_then(|t| {
                        let p = t.partition(r.partition)?;
                        Some(leadership::PartitionState::from_image(t, p))
                    })
                    .ok_or_else(|| {
                        TopicError::new(
                            ResponseError::UnknownTopicOrPartition,
                            format!("{}-{} does not exist", r.topic, r.partition),
                        )
                    })?;
                let decided = match &r.target {
                    None => reassignment::cancel(&current, &here).map(drop),
                    Some(target) => reassignment::start(
                        &current,
                        target,
                        &here,
                        &here,
                        allow_replication_factor_change,
                    )
                    .map(drop),
                };
                decided.map_err(|e| TopicError::new(e.code(), e.to_string()))
            })
            .collect())
    }

    /// Rebuilds the image from the metadata and makes it current. Called
    /// after every change, whether it succeeded or not (a failed change may
    /// have done part of its work, and the image must show what is).
    fn publish(&self) {
        self.broker.publish_image();
    }

    /// ElectLeaders for `targets` (topic → partitions; `None`: every
    /// partition): one outcome per partition ([`elect`] has the rules).
    /// A standalone broker is the only replica and leader of everything,
    /// so it decides over its own image and never needs an election.
    pub fn elect_leaders(
        &self,
        kind: elect::ElectionType,
        targets: Option<BTreeMap<String, BTreeSet<i32>>>,
    ) -> Result<Vec<elect::PartitionOutcome>, TopicError> {
        let Some(link) = self.remote() else {
            let image = self.broker.image();
            let live = BTreeSet::from([self.broker.node_id]);
            let decision =
                elect::decide(&elect::image_states(&image), kind, targets.as_ref(), &live);
            return Ok(decision.outcomes);
        };
        let request = pb::ElectLeadersRequest {
            election_type: kind.code(),
            all_partitions: targets.is_none(),
            topics: targets
                .unwrap_or_default()
                .into_iter()
                .map(|(topic, partitions)| pb::ElectTopicPartitions {
                    topic,
                    partitions: partitions.into_iter().collect(),
                })
                .collect(),
        };
        let r = link.elect_leaders(request)?;
        if r.error_code != 0 {
            return Err(TopicError::new(kafka_error(r.error_code), r.message));
        }
        Ok(r.results.into_iter().map(outcome_of).collect())
    }
}

/// A Kafka error code the controller sent (an unknown one: UNKNOWN_SERVER_ERROR).
fn kafka_error(code: i32) -> ResponseError {
    i16::try_from(code)
        .ok()
        .and_then(ResponseError::try_from_code)
        .unwrap_or(ResponseError::UnknownServerError)
}

fn outcome_of(r: pb::ElectPartitionResult) -> elect::PartitionOutcome {
    elect::PartitionOutcome {
        topic: r.topic,
        index: r.index,
        error: (r.error_code != 0).then(|| (kafka_error(r.error_code), r.message)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use kafka_protocol::error::ResponseError;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::group::{CoordinatorSettings, GroupCoordinator};
    use crate::image::{BrokerImage, MetadataImage, PartitionImage, PartitionRole};
    use crate::protocol::limits::ConnectionLimitSettings;
    use crate::topics::TopicManager;

    fn broker(dir: &std::path::Path) -> Broker {
        let topics = TopicManager::open(dir, BrokerConfig::default()).expect("open");
        Broker::new(
            7,
            "127.0.0.1".into(),
            9092,
            vec![],
            topics,
            GroupCoordinator::new(CoordinatorSettings::default()),
            ConnectionLimitSettings {
                max_connections: 10,
                max_connections_per_ip: 10,
                per_ip_overrides: HashMap::new(),
            },
        )
    }

    #[test]
    fn every_change_through_the_controller_is_in_the_next_image() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = broker(dir.path());
        let c = Controller::new(&b);
        assert!(b.image().topic("t").is_none());
        c.create_topic("t", 2, 1, BTreeMap::new(), &[])
            .expect("create");
        let image = b.image();
        let t = image.topic("t").expect("published");
        assert_eq!(t.partitions.len(), 2);
        assert_eq!(
            image.role("t", 1, 7),
            Some(PartitionRole::Leader { epoch: 0 })
        );
        assert_eq!(image.controller_id, 7);
        c.create_partitions("t", 5, &[], true)
            .expect("validate only");
        assert_eq!(b.image().topic("t").unwrap().partitions.len(), 2);
        c.create_partitions("t", 5, &[], false).expect("grow");
        assert_eq!(b.image().topic("t").unwrap().partitions.len(), 5);
        c.auto_create("auto").expect("auto-create");
        assert!(b.image().topic("auto").is_some());
        let id = c.delete_topic("t").expect("delete");
        assert_eq!(b.image().topic_by_id(id), None);
        assert!(b.image().topic("t").is_none());
        // a failed change publishes what is (nothing changed)
        assert!(c.create_topic("auto", 1, 1, BTreeMap::new(), &[]).is_err());
        assert!(b.image().topic("auto").is_some());
    }

    #[test]
    fn a_standalone_broker_takes_explicit_assignments_naming_itself() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = broker(dir.path());
        let c = Controller::new(&b);
        let mine = [(1, vec![7]), (0, vec![7])];
        c.validate_create("m", -1, -1, &BTreeMap::new(), &mine)
            .expect("valid");
        assert!(b.image().topic("m").is_none(), "validate only");
        let created = c
            .create_topic("m", -1, -1, BTreeMap::new(), &mine)
            .expect("create");
        assert_eq!((created.partitions, created.replication_factor), (2, 1));
        let code = |r: Result<(), TopicError>| r.err().map(|e| e.code);
        assert_eq!(
            code(c.validate_create("x", -1, -1, &BTreeMap::new(), &[(0, vec![8])])),
            Some(ResponseError::InvalidReplicaAssignment)
        );
        assert_eq!(
            code(c.validate_create("x", 1, -1, &BTreeMap::new(), &[(0, vec![7])])),
            Some(ResponseError::InvalidRequest)
        );
        assert_eq!(
            code(c.create_partitions("m", 3, &[vec![8]], false)),
            Some(ResponseError::InvalidReplicaAssignment)
        );
        c.create_partitions("m", 3, &[vec![7]], false)
            .expect("grow");
        assert_eq!(b.image().topic("m").unwrap().partitions.len(), 3);
    }

    #[test]
    fn requests_for_partitions_led_elsewhere_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let b = broker(dir.path());
        Controller::new(&b)
            .create_topic("t", 1, 1, BTreeMap::new(), &[])
            .expect("create");
        let here = crate::handlers::led_partition(&b, &b.image(), "t", 0);
        assert_eq!(here.map(|(p, epoch)| (p.index, epoch)).ok(), Some((0, 0)));
        // The same partition in an image where broker 8 leads it (epoch 3)
        // and this broker follows.
        let elsewhere = MetadataImage::new(
            "c",
            8,
            vec![BrokerImage {
                id: 8,
                host: "127.0.0.2".into(),
                port: 9092,
                rack: None,
                endpoints: vec![],
                incarnation: None,
            }],
            [(
                "t".to_string(),
                b.image().topic("t").unwrap().id,
                vec![PartitionImage {
                    index: 0,
                    replicas: vec![8, 7],
                    leader: 8,
                    leader_epoch: 3,
                    isr: vec![8],
                    partition_epoch: 3,
                    adding_replicas: vec![],
                    removing_replicas: vec![],
                }],
            )],
        );
        let refused = crate::handlers::led_partition(&b, &elsewhere, "t", 0);
        assert_eq!(refused.err(), Some(ResponseError::NotLeaderOrFollower));
        let unknown = crate::handlers::led_partition(&b, &elsewhere, "t", 1);
        assert_eq!(unknown.err(), Some(ResponseError::UnknownTopicOrPartition));
    }
}
