//! What a consumer group keeps for online conversion with the classic
//! protocol: `group.consumer.migration.policy`, and a classic member's
//! metadata (Kafka's `ClassicMemberMetadata`). Data only, so that the
//! state machine ([`super::machine`]), its records ([`super::records`])
//! and the conversion rules ([`super::conversion`]) share it without
//! importing each other.

use bytes::Bytes;

/// `group.consumer.migration.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrationPolicy {
    /// Both ways (Kafka 4.x's default).
    #[default]
    Bidirectional,
    Upgrade,
    Downgrade,
    Disabled,
}

impl MigrationPolicy {
    /// The config value (case-insensitive, as Kafka reads it).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "bidirectional" => Some(Self::Bidirectional),
            "upgrade" => Some(Self::Upgrade),
            "downgrade" => Some(Self::Downgrade),
            "disabled" => Some(Self::Disabled),
            _ => None,
        }
    }
    pub fn upgrade_enabled(self) -> bool {
        matches!(self, Self::Bidirectional | Self::Upgrade)
    }
    pub fn downgrade_enabled(self) -> bool {
        matches!(self, Self::Bidirectional | Self::Downgrade)
    }
}

/// What a consumer group keeps of a member that speaks the classic
/// protocol (Kafka's `ClassicMemberMetadata`, stored in the member's
/// record): its session timeout and the protocols it joined with, in its
/// order of preference.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassicMetadata {
    pub session_timeout_ms: i32,
    pub protocols: Vec<(String, Bytes)>,
}
