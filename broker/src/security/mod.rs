//! Security's pure rules (issue 38): who a connection is and what it may
//! do, decided without I/O so that the wire edge (`protocol::connection`,
//! `handlers::sasl`) and the metadata that stores ACLs and credentials stay
//! thin.
//!
//! - [`acl`]: Kafka's authorizer semantics over a set of ACL bindings
//!   (resource patterns, operations and their implications, deny before
//!   allow, super users, `allow.everyone.if.no.acl.found`);
//! - [`scram`] and [`plain`]: the server side of SASL SCRAM-SHA-256/512
//!   (RFC 5802, RFC 7677) and PLAIN (RFC 4616) as state machines over
//!   bytes, with the salted credentials Kafka stores;
//! - [`oauthbearer`]: the server side of SASL OAUTHBEARER (RFC 7628,
//!   KIP-768): the client's message, Kafka's claim rules and settings, and
//!   [`jwks`]: the key set signatures are checked against (read from a
//!   file or fetched over HTTP(S), the other I/O here);
//! - [`listener`]: a listener's security protocol and SASL settings from
//!   Kafka's configs, and [`jaas`]: the JAAS text PLAIN's users are in;
//! - [`acl_admin`]: ACLs as cluster metadata — Kafka's CreateAcls,
//!   DescribeAcls and DeleteAcls decisions, the authorizer's configs;
//! - [`credentials`]: the SCRAM credential store as cluster metadata holds
//!   it, and Kafka's rules for describing and altering it;
//! - [`tls`]: an SSL/SASL_SSL listener's `ssl.*` configs to rustls
//!   configurations (reading the PEM files they name, the one I/O here),
//!   re-read when the files change, and the mTLS principal of a client
//!   certificate (`ssl.principal.mapping.rules`).
//!
//! Everything here is vocabulary: it imports nothing else of the broker.

pub mod acl;
pub mod acl_admin;
pub mod credentials;
pub mod jaas;
pub mod jwks;
pub mod listener;
pub mod oauthbearer;
pub mod plain;
pub mod scram;
pub mod tls;
