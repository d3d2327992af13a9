//! Runs the topic planner against one broker: observe (Metadata +
//! DescribeConfigs + ListPartitionReassignments), plan, execute, observe again. Broker rejections of an
//! action become problems (reported in status); transport failures are
//! errors (retried by the controller).

use crate::cluster::status::Problem;
use crate::crd::KafkaTopicSpec;
use crate::kafka::{codes, AdminClient, KafkaError, OngoingReassignment};

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
    /// The reassignments the controller runs (all topics), as last read.
    pub ongoing: Vec<OngoingReassignment>,
}

/// Reads the topic from Kafka (None when it does not exist), the
/// Metadata response's broker count and the reassignments the controller
/// runs. A failed ListPartitionReassignments is logged and counts as
/// nothing moving.
pub async fn observe(
    admin: &mut AdminClient,
    name: &str,
) -> Result<(Option<ObservedTopic>, usize, Vec<OngoingReassignment>), KafkaError> {
    let md = admin.metadata(Some(&[name.to_string()])).await?;
    let brokers = md.brokers.len();
    let Some(t) = md.topics.into_iter().find(|t| t.name == name) else {
        return Ok((None, brokers, Vec::new()));
    };
    let entries = match admin.describe_topic_config(name).await {
        Ok(e) => e,
        Err(e) if e.code() == Some(codes::UNKNOWN_TOPIC_OR_PARTITION) => {
            return Ok((None, brokers, Vec::new()))
        }
        Err(e) => return Err(e),
    };
    let ongoing = admin
        .list_partition_reassignments()
        .await
        .map_err(|e| tracing::debug!(topic = %name, error = %e, "listing reassignments failed"))
        .unwrap_or_default();
    let observed = ObservedTopic::from_kafka(&t, &ongoing, entries);
    Ok((Some(observed), brokers, ongoing))
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
    let (observed, metadata_brokers, ongoing) = observe(admin, name).await?;
    let brokers = broker_count(registered, metadata_brokers);
    let topic_plan = plan(spec, observed.as_ref(), brokers, default_rf);
    let mut outcome = SyncOutcome {
        problems: topic_plan.problems,
        brokers,
        ongoing,
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
        let (observed, _, ongoing) = observe(admin, name).await?;
        outcome.ongoing = ongoing;
        observed
    };
    Ok(outcome)
}
