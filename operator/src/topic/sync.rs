//! Runs the topic planner against one broker: observe (Metadata +
//! DescribeConfigs), plan, execute, observe again. Broker rejections of an
//! action become problems (reported in status); transport failures are
//! errors (retried by the controller).

use crate::cluster::status::Problem;
use crate::crd::KafkaTopicSpec;
use crate::kafka::admin::SOURCE_TOPIC_CONFIG;
use crate::kafka::{codes, AdminClient, KafkaError};

use super::plan::{broker_count, plan, ObservedTopic, TopicAction};

/// What one sync did and saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    /// The topic after the actions (None when it does not exist).
    pub observed: Option<ObservedTopic>,
    /// Why the spec is not (fully) honoured.
    pub problems: Vec<Problem>,
    /// Actions that succeeded.
    pub performed: Vec<TopicAction>,
    /// The broker count the plan used (see [`broker_count`]).
    pub brokers: usize,
}

/// Reads the topic from Kafka; None when it does not exist.
pub async fn observe(
    admin: &mut AdminClient,
    name: &str,
) -> Result<(Option<ObservedTopic>, usize), KafkaError> {
    let md = admin.metadata(Some(&[name.to_string()])).await?;
    let brokers = md.brokers.len();
    let Some(t) = md.topics.into_iter().find(|t| t.name == name) else {
        return Ok((None, brokers));
    };
    let entries = match admin.describe_topic_config(name).await {
        Ok(e) => e,
        Err(e) if e.code() == Some(codes::UNKNOWN_TOPIC_OR_PARTITION) => {
            return Ok((None, brokers))
        }
        Err(e) => return Err(e),
    };
    let mut observed = ObservedTopic {
        topic_id: t.topic_id,
        partitions: t.partitions,
        replication_factor: t.replication_factor,
        replicas: t
            .partition_details
            .iter()
            .map(|p| (p.partition, p.replicas.clone()))
            .collect(),
        ..Default::default()
    };
    for e in entries {
        let Some(value) = e.value else { continue };
        if e.source == SOURCE_TOPIC_CONFIG {
            observed.overrides.insert(e.name.clone(), value.clone());
        }
        observed.effective.insert(e.name, value);
    }
    Ok((Some(observed), brokers))
}

fn rejected(e: &KafkaError) -> Option<Problem> {
    match e {
        KafkaError::Broker {
            api,
            error,
            message,
            ..
        } => Some(Problem {
            reason: "KafkaRejected".into(),
            message: format!(
                "{api} was rejected: {error}{}",
                message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            ),
        }),
        KafkaError::Unsupported(api) => Some(Problem {
            reason: "KafkaUnsupported".into(),
            message: format!("the broker does not support {api}"),
        }),
        _ => None,
    }
}

/// Brings topic `name` to `spec` through `admin`. `registered` is the number
/// of brokers registered with the controller, when the cluster record is
/// known; otherwise the Metadata response's broker count is used.
/// `default_rf` is the cluster's default replication factor (see
/// [`super::plan::default_replication_factor`]), for a spec without one.
pub async fn sync_topic(
    admin: &mut AdminClient,
    name: &str,
    spec: &KafkaTopicSpec,
    registered: Option<usize>,
    default_rf: i32,
) -> Result<SyncOutcome, KafkaError> {
    let (observed, metadata_brokers) = observe(admin, name).await?;
    let brokers = broker_count(registered, metadata_brokers);
    let topic_plan = plan(spec, observed.as_ref(), brokers, default_rf);
    let mut outcome = SyncOutcome {
        problems: topic_plan.problems,
        brokers,
        ..Default::default()
    };
    for action in topic_plan.actions {
        let result = match &action {
            TopicAction::Create {
                partitions,
                replication_factor,
                config,
            } => admin
                .create_topic(name, *partitions, *replication_factor, config)
                .await
                .map(|_| ())
                .or_else(|e| match e.code() {
                    Some(codes::TOPIC_ALREADY_EXISTS) => Ok(()),
                    _ => Err(e),
                }),
            TopicAction::GrowPartitions(n) => admin.create_partitions(name, *n).await,
            TopicAction::AlterConfig(ops) => admin.alter_topic_config(name, ops).await,
        };
        match result {
            Ok(()) => outcome.performed.push(action),
            Err(e) => match rejected(&e) {
                Some(p) => outcome.problems.push(p),
                None => return Err(e),
            },
        }
    }
    outcome.observed = if outcome.performed.is_empty() {
        observed
    } else {
        observe(admin, name).await?.0
    };
    Ok(outcome)
}
