//! The `KafkaRebalance` resource: one partition reassignment of a
//! `KafkaCluster` in the same namespace, planned by the operator's own
//! planner, shown as a proposal, executed in batches once approved.
//!
//! Validation the API server enforces (OpenAPI bounds + CEL): `cluster` is
//! immutable and non-empty; `brokers` is required (non-empty) for
//! `add-brokers` and `remove-brokers` and must be empty for `full`;
//! `maxConcurrentMoves >= 1`; `throttleBytesPerSecond >= 1`. The operator
//! checks the same again (a resource applied before the rule existed still
//! gets a `Failed` condition, never a panic), plus what only the cluster can
//! say (the brokers exist, enough brokers stay for every replication factor).
//!
//! Lifecycle (`status.phase`): `ProposalReady` → approved (`spec.approved:
//! true` or the annotation `moldau.io/rebalance-approve: "true"`) →
//! `Rebalancing` → `Ready`; the annotation `moldau.io/rebalance-stop: "true"`
//! cancels the moves in flight and ends in `Stopped`; what cannot be planned
//! or executed is `Failed` with a reason. See `rebalance::lifecycle`.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// Annotation that approves the proposal, like `spec.approved: true`.
pub const APPROVE_ANNOTATION: &str = "moldau.io/rebalance-approve";
/// Annotation that stops the rebalance: moves in flight are cancelled.
pub const STOP_ANNOTATION: &str = "moldau.io/rebalance-stop";

/// Desired rebalance.
// The printer columns repeat `type_ = "string"`, which clippy takes for a
// duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "moldau.io",
    version = "v1alpha1",
    kind = "KafkaRebalance",
    plural = "kafkarebalances",
    shortname = "kr",
    namespaced,
    status = "KafkaRebalanceStatus",
    derive = "PartialEq",
    doc = "A partition reassignment of a Moldau KafkaCluster in the same namespace: a proposal, executed in batches once approved.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Moves",
        type_ = "integer",
        json_path = ".status.proposal.moves"
    ),
    printcolumn(
        name = "Done",
        type_ = "integer",
        json_path = ".status.progress.partitionsDone"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.mode == 'full' || (has(self.brokers) && size(self.brokers) > 0)").message("brokers is required for add-brokers and remove-brokers"))]
#[x_kube(validation = Rule::new("self.mode != 'full' || !has(self.brokers) || size(self.brokers) == 0").message("brokers applies only to add-brokers and remove-brokers"))]
pub struct KafkaRebalanceSpec {
    /// Name of the `KafkaCluster` (same namespace) to rebalance.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("cluster is immutable"))]
    pub cluster: String,
    /// `full` balances replicas, preferred leaders and bytes over all
    /// brokers; `add-brokers` moves load onto `brokers` only (the others
    /// only give); `remove-brokers` moves every replica off `brokers`.
    #[serde(default)]
    pub mode: RebalanceMode,
    /// Broker ids (pod ordinals) for `add-brokers` and `remove-brokers`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub brokers: Vec<i32>,
    /// Replication throttle in bytes per second while moves run, as
    /// `kafka-reassign-partitions --throttle` sets it: the rate
    /// (`leader.replication.throttled.rate` and
    /// `follower.replication.throttled.rate`) on every broker a move of the
    /// batch in flight touches, and the moving replicas listed in their
    /// topics' `leader/follower.replication.throttled.replicas`. Removed
    /// when the rebalance ends (Ready, Stopped, Failed). Unthrottled when
    /// unset. May change while moves run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub throttle_bytes_per_second: Option<i64>,
    /// Only partitions of these topics (exact Kafka topic names) may move;
    /// all topics when unset. Partitions of other topics still count in each
    /// broker's load. Names of topics that do not exist are reported as a
    /// caveat of the proposal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics: Option<Vec<String>>,
    /// Most partition moves in flight at once (one batch); the planner's
    /// default (10) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_concurrent_moves: Option<i32>,
    /// Execute the proposal. Like the `moldau.io/rebalance-approve: "true"`
    /// annotation; an approval is standing: a proposal recomputed because the
    /// cluster changed runs without asking again.
    #[serde(default)]
    pub approved: bool,
}

/// What a rebalance is for.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RebalanceMode {
    /// Balance across all brokers.
    #[default]
    Full,
    /// Move load onto the listed (new) brokers.
    AddBrokers,
    /// Move every replica off the listed brokers.
    RemoveBrokers,
}

/// Where a rebalance is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RebalancePhase {
    /// A proposal is computed and waits for approval.
    ProposalReady,
    /// Moves are executing, one batch at a time.
    Rebalancing,
    /// Every move is done (or there was nothing to do).
    Ready,
    /// Stopped by annotation; moves in flight were cancelled.
    Stopped,
    /// Cannot be planned or executed; the `Ready` condition says why.
    Failed,
}

/// Load of one broker.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrokerLoadStatus {
    /// Replicas hosted.
    pub replicas: i64,
    /// Partitions whose preferred leader it is.
    pub leaders: i64,
    /// Bytes hosted.
    pub bytes: i64,
}

/// Load of one broker before and after the proposal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrokerBalance {
    /// Broker id.
    pub broker: i32,
    /// Now.
    pub before: BrokerLoadStatus,
    /// After every move.
    pub after: BrokerLoadStatus,
}

/// The proposal: what the planner wants to do.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Proposal {
    /// Partition moves.
    pub moves: i64,
    /// Batches the moves run in.
    pub batches: i64,
    /// Bytes copied by all moves.
    pub bytes_to_move: i64,
    /// Load per broker before and after.
    #[serde(default)]
    pub brokers: Vec<BrokerBalance>,
    /// What the plan could not achieve, and what the request asks for that
    /// is not applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caveats: Vec<String>,
}

/// One planned partition move.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannedMove {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Replicas before.
    pub from: Vec<i32>,
    /// Replicas after; the first is the new preferred leader.
    pub to: Vec<i32>,
    /// Bytes copied.
    #[serde(default)]
    pub bytes: i64,
    /// Batch index (0-based).
    #[serde(default)]
    pub batch: i64,
}

/// Execution progress.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebalanceProgress {
    /// Moves finished.
    pub partitions_done: i64,
    /// Moves in the proposal.
    pub partitions_total: i64,
    /// Bytes copied by finished moves.
    pub bytes_moved: i64,
    /// Bytes the proposal copies.
    pub bytes_total: i64,
    /// The batch in flight (0-based); equals `batches` when done.
    pub current_batch: i64,
    /// Batches in the proposal.
    pub batches: i64,
}

/// Observed state of a rebalance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaRebalanceStatus {
    /// Where the rebalance is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RebalancePhase>,
    /// `Ready` (True only when every move is done; its reason says where the
    /// rebalance is or why it failed) and `Progressing` (True while moves
    /// run).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Identifies the proposal (a hash of the request and the moves); a new
    /// proposal gets a new id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Fingerprint of the spec fields the proposal was computed from; a
    /// change recomputes the proposal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_for: Option<String>,
    /// The proposal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<Proposal>,
    /// The proposal's moves in execution order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<PlannedMove>,
    /// Execution progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<RebalanceProgress>,
    /// The replication throttle the operator has set in Kafka for the
    /// batch in flight (what it removes when the rebalance ends); absent
    /// when none is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<AppliedThrottle>,
}

/// A replication throttle set in Kafka by a rebalance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppliedThrottle {
    /// Bytes per second, per broker and direction.
    pub bytes_per_second: i64,
    /// Brokers whose `leader/follower.replication.throttled.rate` is set.
    #[serde(default)]
    pub brokers: Vec<i32>,
    /// Topics whose throttled-replica lists are set, with their values.
    #[serde(default)]
    pub topics: Vec<ThrottledTopic>,
}

/// The throttled-replica lists set on one topic.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThrottledTopic {
    /// Topic name.
    pub topic: String,
    /// `leader.replication.throttled.replicas`: `partition:broker` of the
    /// replicas the moves copy from.
    pub leader: String,
    /// `follower.replication.throttled.replicas`: `partition:broker` of the
    /// replicas the moves create.
    pub follower: String,
}
