//! Who is at the other end of a Kafka connection. On a PLAINTEXT listener
//! clients are anonymous; on a SASL_PLAINTEXT or SASL_SSL one they
//! authenticate (PLAIN or SCRAM, see `handlers::sasl`) as a user before
//! anything else; on an SSL one a client certificate's mapped subject is
//! the user from the handshake on (`protocol::connection`), and a client
//! without one is anonymous. A
//! broker of the cluster proves which one it is with the SASL mechanism
//! `MOLDAU-BROKER`, and only then may its fetches carry a replica id — a
//! client setting that field itself is refused, which is what Kafka's
//! CVE-2018-1288 was about.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

/// The authenticated identity of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Anonymous,
    /// Broker `node_id`, as the process registered as `incarnation`.
    Broker {
        node_id: i32,
        incarnation: Uuid,
    },
    /// A client that authenticated with SASL (PLAIN or SCRAM) as this
    /// user, or showed a client certificate on an SSL listener whose
    /// subject `ssl.principal.mapping.rules` maps to it: Kafka's
    /// `User:<name>`.
    User(Arc<str>),
}

impl Principal {
    /// Kafka's text form, as ACLs and logs name it (`User:ANONYMOUS` for
    /// an unauthenticated client, as Kafka's default principal builder).
    pub fn kafka_name(&self) -> String {
        match self {
            Principal::Anonymous => "User:ANONYMOUS".into(),
            Principal::Broker { node_id, .. } => format!("User:moldau-broker-{node_id}"),
            Principal::User(name) => format!("User:{name}"),
        }
    }
}

/// A SASL exchange in progress (a SCRAM server between its messages),
/// owned by `handlers::sasl`, which alone knows its type.
pub struct PendingExchange(pub Box<dyn std::any::Any + Send>);

impl std::fmt::Debug for PendingExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingExchange")
    }
}

/// Where a connection's SASL exchange stands.
#[derive(Debug)]
pub enum SaslStage {
    /// No handshake yet.
    Start,
    /// A handshake chose this mechanism (its name): SaslAuthenticate comes
    /// next.
    Handshaken(&'static str),
    /// An exchange of several SaslAuthenticate rounds is under way.
    Exchanging(PendingExchange),
    /// Authenticated (or failed): no second exchange on one connection.
    Done,
}

impl SaslStage {
    pub fn is_start(&self) -> bool {
        matches!(self, SaslStage::Start)
    }
}

/// The per-connection state handlers may read and change.
#[derive(Debug)]
pub struct ConnectionContext {
    pub peer: SocketAddr,
    /// The listener the connection arrived on: its security, and the
    /// name whose endpoints Metadata, DescribeCluster and FindCoordinator
    /// answer with.
    pub listener: std::sync::Arc<crate::security::listener::ClientListener>,
    pub principal: Principal,
    pub sasl: SaslStage,
    /// Whether the listener requires SASL before any other request
    /// (SASL_PLAINTEXT): until `principal` is a user or a broker, only
    /// ApiVersions, SaslHandshake and SaslAuthenticate are served.
    pub requires_sasl: bool,
    /// The mechanism the client authenticated with (a re-authentication
    /// must use it again).
    pub authenticated_with: Option<&'static str>,
    /// When the authenticated session ends (KIP-368's
    /// `connections.max.reauth.ms`): after it, only a re-authentication
    /// is served, anything else closes the connection.
    pub session_expires_at: Option<std::time::Instant>,
    /// Set by a failed authentication: the connection answers after this
    /// delay (`connection.failed.authentication.delay.ms`) and closes, as
    /// Kafka's does.
    pub close_after_reply: Option<Duration>,
    /// The client id of the request being handled (its header's).
    pub client_id: String,
    /// The client software name and version its ApiVersions named
    /// (KIP-511), for client-metrics `match` selectors (KIP-714); each
    /// cut to 128 bytes.
    pub client_software: (String, String),
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
            listener: Default::default(),
            principal: Principal::Anonymous,
            sasl: SaslStage::Start,
            requires_sasl: false,
            authenticated_with: None,
            session_expires_at: None,
            close_after_reply: None,
            client_id: String::new(),
            client_software: Default::default(),
            request_throttle_ms: 0,
            throttle_ms: 0,
        }
    }

    /// A connection to a listener that requires SASL first.
    pub fn requiring_sasl(peer: SocketAddr) -> Self {
        Self {
            requires_sasl: true,
            ..Self::new(peer)
        }
    }

    /// A new connection on `listener`.
    pub fn on_listener(
        peer: SocketAddr,
        listener: std::sync::Arc<crate::security::listener::ClientListener>,
    ) -> Self {
        Self {
            requires_sasl: listener.requires_sasl(),
            listener,
            ..Self::new(peer)
        }
    }

    /// Whether the connection may send requests beyond the SASL exchange
    /// at `now`: authenticated, and its session (if it has a lifetime) not
    /// over.
    pub fn is_authenticated(&self, now: std::time::Instant) -> bool {
        if !self.requires_sasl {
            return true;
        }
        !matches!(self.principal, Principal::Anonymous)
            && self.session_expires_at.is_none_or(|end| now < end)
    }

    /// Whether client quotas apply to this connection: every connection
    /// but a broker's of the cluster (replication has its own throttles).
    pub fn is_quota_client(&self) -> bool {
        self.broker().is_none()
    }

    /// The user client quotas meter this connection as: its SASL user, or
    /// Kafka's `ANONYMOUS`.
    pub fn quota_user(&self) -> &str {
        match &self.principal {
            Principal::User(name) => name,
            Principal::Anonymous | Principal::Broker { .. } => "ANONYMOUS",
        }
    }

    /// The broker this connection proved to be, if any.
    pub fn broker(&self) -> Option<(i32, Uuid)> {
        match self.principal {
            Principal::Broker {
                node_id,
                incarnation,
            } => Some((node_id, incarnation)),
            Principal::Anonymous | Principal::User(_) => None,
        }
    }
}
