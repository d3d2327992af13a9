//! What the classic group state machine takes and gives: its settings
//! ([`GroupSettings`]), a JoinGroup request as decoded
//! ([`JoinRequest`]), its answers ([`JoinResult`], [`SyncResult`]), and
//! the answers it gives later ([`Reply::Later`], [`Effect`]) for the
//! coordinator to deliver to waiting members.
//!
//! Plain values with their error forms; this module imports nothing of
//! the group coordinator.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

/// Group-wide settings (Kafka broker config names in comments).
#[derive(Debug, Clone)]
pub struct GroupSettings {
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`
    pub initial_rebalance_delay_ms: i64,
    /// `group.max.size`
    pub max_size: usize,
    /// Largest protocol metadata a member may send (bytes).
    pub max_member_metadata_bytes: usize,
}

impl Default for GroupSettings {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: usize::MAX,
            max_member_metadata_bytes: 1024 * 1024,
        }
    }
}

/// A JoinGroup request, decoded.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: an unknown member must first get its id (MEMBER_ID_REQUIRED).
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

/// A JoinGroup response.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinResult {
    pub error: i16,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only.
    pub members: Vec<JoinMember>,
    /// KIP-814: a restarted static leader gets the members but must not
    /// compute a new assignment (the group keeps its generation).
    pub skip_assignment: bool,
}

impl JoinResult {
    /// A JoinGroup refusal with `code` for `member_id`.
    pub fn error(code: ResponseError, member_id: &str) -> Self {
        Self {
            error: code.code(),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup response.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    /// A SyncGroup refusal with `code`.
    pub fn error(code: ResponseError) -> Self {
        Self {
            error: code.code(),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// Either an answer now, or "later, as an [`Effect`]" for the named member.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply<T> {
    Now(T),
    Later(String),
}

/// A delayed response to deliver to a waiting member.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Join {
        member_id: String,
        result: JoinResult,
    },
    Sync {
        member_id: String,
        result: SyncResult,
    },
}
