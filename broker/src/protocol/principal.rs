//! Who is at the other end of a Kafka connection. Clients are anonymous
//! (until client authentication exists); a broker of the cluster proves
//! which one it is with the SASL mechanism `MOLDAU-BROKER` (see
//! `handlers::sasl`), and only then may its fetches carry a replica id —
//! a client setting that field itself is refused, which is what Kafka's
//! CVE-2018-1288 was about.

use std::net::SocketAddr;

use uuid::Uuid;

/// The authenticated identity of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    Anonymous,
    /// Broker `node_id`, as the process registered as `incarnation`.
    Broker {
        node_id: i32,
        incarnation: Uuid,
    },
}

/// Where a connection's SASL exchange stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslStage {
    /// No handshake yet.
    Start,
    /// A handshake chose `MOLDAU-BROKER`: SaslAuthenticate comes next.
    Handshaken,
    /// Authenticated (or failed): no second exchange on one connection.
    Done,
}

/// The per-connection state handlers may read and change.
#[derive(Debug, Clone)]
pub struct ConnectionContext {
    pub peer: SocketAddr,
    pub principal: Principal,
    pub sasl: SaslStage,
    /// The client id of the request being handled (its header's).
    pub client_id: String,
    /// The throttle the client's request quota already had when this
    /// request came (reported in produce and fetch responses).
    pub request_throttle_ms: i32,
    /// How long to mute the connection after this request's response
    /// (KIP-219): the largest throttle any of the client's quotas gave.
    pub throttle_ms: i32,
}

impl ConnectionContext {
    pub fn new(peer: SocketAddr) -> Self {
        Self {
            peer,
            principal: Principal::Anonymous,
            sasl: SaslStage::Start,
            client_id: String::new(),
            request_throttle_ms: 0,
            throttle_ms: 0,
        }
    }

    /// Whether client quotas apply to this connection: every connection
    /// but a broker's of the cluster (replication has its own throttles).
    pub fn is_quota_client(&self) -> bool {
        self.broker().is_none()
    }

    /// The broker this connection proved to be, if any.
    pub fn broker(&self) -> Option<(i32, Uuid)> {
        match self.principal {
            Principal::Broker {
                node_id,
                incarnation,
            } => Some((node_id, incarnation)),
            Principal::Anonymous => None,
        }
    }
}
