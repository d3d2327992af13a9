//! The classic consumer group (`protocol_type` "consumer", JoinGroup /
//! SyncGroup / Heartbeat / LeaveGroup) as pure logic, apart from the
//! coordinator that runs it (`group`).
//!
//! Its parts are children that import one way; this file only declares
//! them and re-exports their items, so callers keep `group::state::…`
//! paths:
//! - `messages`: the settings, the decoded requests and the answers, now
//!   or later ([`Effect`]);
//! - `members`: one group's record ([`Group`], [`Member`], [`GroupState`])
//!   and the bookkeeping of its membership;
//! - `machine`: the state machine's transitions on that record;
//! - `snapshot`: a settled group as stored and restored.

mod machine;
mod members;
mod messages;
mod snapshot;
#[cfg(test)]
mod tests;

pub use self::members::{Group, GroupState, Member};
pub use self::messages::{
    Effect, GroupSettings, JoinMember, JoinRequest, JoinResult, Reply, SyncResult,
};
