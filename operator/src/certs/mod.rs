//! The certificate authorities the operator runs for a TLS cluster (issue
//! 38 item 4), Strimzi's model: a cluster CA signs the brokers' certificate
//! and the operator's client identity, a clients CA signs the certificates
//! of `KafkaUser`s with `authentication.type: tls`. Each CA is a key Secret
//! and a public certificate Secret; everything a broker mounts is one more
//! Secret, `<cluster>-broker-certs`.
//!
//! This module owns the vocabulary the rest of the operator uses: Secret
//! names and keys, subjects and principals, the broker's SANs, and the
//! types handed out. `issue` (make certificates), `inspect` (read them) and
//! `plan` (what is due) are pure; `secrets` is the thin async edge that
//! reads and writes the Secrets.
//!
//! Decisions:
//! - One certificate all brokers of a cluster share, its SANs the headless
//!   Service's wildcard and the bootstrap Service's names, so a scale-out
//!   needs no new certificate and no broker ever waits for one (Strimzi
//!   issues one per broker). The cost: a broker's certificate does not
//!   single it out, which nothing here relies on (brokers authenticate each
//!   other as `User:CN=<cluster>-broker,O=moldau.io`, one principal).
//! - Renewing a CA keeps its key and subject: certificates it signed still
//!   verify against the renewed CA certificate, so a renewal never breaks
//!   a client that holds the old leaf; a new key is made only when there is
//!   none (or it is unreadable).
//! - The `O=moldau.io` in the brokers' and the operator's subjects keeps
//!   their principals apart from any KafkaUser's `CN=<name>`.
//! - Client certificates come from two CAs, each trusted where it belongs
//!   (`cluster::listeners`): the brokers' own `REPLICATION` listener trusts
//!   only the cluster CA (`ca.crt`: brokers and the operator), a client
//!   listener with `authentication: tls` only the clients CA
//!   (`clients-ca.crt`: users). No user certificate passes as a broker's,
//!   and the O= above keeps the principals apart besides.

pub mod inspect;
pub mod issue;
pub mod plan;
pub mod secrets;
#[cfg(test)]
mod tests;

pub use plan::CaPolicy;
pub use secrets::{
    clients_ca, cluster_ca_cert, ensure_cluster_certs, operator_identity, CertError,
};

/// The cluster DNS domain the brokers' certificate names.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The organisation of the subjects the operator issues for itself and the
/// brokers.
pub const ORGANISATION: &str = "moldau.io";

/// Key of a CA certificate in its Secret (and of the cluster CA certificate
/// in the brokers' Secret and in a tls user's Secret).
pub const CA_CERT_KEY: &str = "ca.crt";
/// Key of a CA private key in its Secret.
pub const CA_KEY_KEY: &str = "ca.key";
/// Key of the broker certificate (chain) in `<cluster>-broker-certs`.
pub const TLS_CERT_KEY: &str = "tls.crt";
/// Key of the broker private key in `<cluster>-broker-certs`.
pub const TLS_KEY_KEY: &str = "tls.key";
/// Key of the brokers' keystore in `<cluster>-broker-certs`: the private
/// key, then the certificate, in one PEM file (Kafka's
/// `ssl.keystore.location` with `ssl.keystore.type=PEM`).
pub const KEYSTORE_KEY: &str = "broker.pem";
/// Key of the clients CA certificate in `<cluster>-broker-certs`: the
/// brokers trust it for client certificates.
pub const CLIENTS_CA_CERT_KEY: &str = "clients-ca.crt";

/// A certificate (PEM, may be a chain) and its PKCS#8 private key (PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pem {
    /// Certificate, PEM.
    pub cert: String,
    /// PKCS#8 private key, PEM.
    pub key: String,
}

/// What a TLS cluster's brokers mount, as `ensure_cluster_certs` left it in
/// the Secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCerts {
    /// The cluster CA certificate, PEM.
    pub cluster_ca_cert: String,
    /// The clients CA certificate, PEM.
    pub clients_ca_cert: String,
    /// The certificate all brokers of the cluster share, and its key.
    pub broker: Pem,
    /// sha256 hex over the three certificates (not the keys): in the broker
    /// pod template's annotations, so a renewal rolls the brokers one at a
    /// time.
    pub digest: String,
}

/// The operator's own client identity on the cluster's internal
/// (REPLICATION) listener.
#[derive(Clone, Debug)]
pub struct OperatorIdentity {
    /// The cluster CA certificate (PEM), to trust the brokers.
    pub cluster_ca_cert: String,
    /// The operator's client certificate and key.
    pub client: Pem,
}

/// `<cluster>-cluster-ca-cert`, key `ca.crt`: public, applications mount it
/// to trust the brokers.
pub fn cluster_ca_cert_secret(cluster: &str) -> String {
    format!("{cluster}-cluster-ca-cert")
}

/// `<cluster>-cluster-ca`, key `ca.key`.
pub fn cluster_ca_key_secret(cluster: &str) -> String {
    format!("{cluster}-cluster-ca")
}

/// `<cluster>-clients-ca-cert`, key `ca.crt`.
pub fn clients_ca_cert_secret(cluster: &str) -> String {
    format!("{cluster}-clients-ca-cert")
}

/// `<cluster>-clients-ca`, key `ca.key`.
pub fn clients_ca_key_secret(cluster: &str) -> String {
    format!("{cluster}-clients-ca")
}

/// `<cluster>-broker-certs`: `tls.crt`, `tls.key`, `ca.crt` (the cluster CA)
/// and `clients-ca.crt`, everything a broker mounts, one volume.
pub fn broker_certs_secret(cluster: &str) -> String {
    format!("{cluster}-broker-certs")
}

/// Common name of the cluster CA.
pub fn cluster_ca_name(cluster: &str) -> String {
    format!("{cluster}-cluster-ca")
}

/// Common name of the clients CA.
pub fn clients_ca_name(cluster: &str) -> String {
    format!("{cluster}-clients-ca")
}

/// Common name of the brokers' certificate.
pub fn broker_name(cluster: &str) -> String {
    format!("{cluster}-broker")
}

/// Common name of the operator's client certificate.
pub fn operator_name(cluster: &str) -> String {
    format!("{cluster}-operator")
}

/// The subject, in the RFC 2253 form the broker reads client certificates
/// with (`moldau_broker::security::tls::subject_dn`), of a certificate the
/// operator issues with `common_name` and `O=moldau.io`.
pub fn operator_issued_dn(common_name: &str) -> String {
    format!("CN={common_name},O={ORGANISATION}")
}

/// The brokers' principal: `User:CN=<cluster>-broker,O=moldau.io`.
pub fn broker_principal(cluster: &str) -> String {
    format!("User:{}", operator_issued_dn(&broker_name(cluster)))
}

/// The operator's principal: `User:CN=<cluster>-operator,O=moldau.io`.
pub fn operator_principal(cluster: &str) -> String {
    format!("User:{}", operator_issued_dn(&operator_name(cluster)))
}

/// The subject of a tls KafkaUser's certificate: `CN=<user>`.
pub fn user_dn(user: &str) -> String {
    format!("CN={user}")
}

/// The DNS names of the brokers' certificate: any broker behind the
/// headless Service `<cluster>-brokers` and the bootstrap Service
/// `<cluster>-bootstrap`, short and qualified.
pub fn broker_dns_names(cluster: &str, namespace: &str) -> Vec<String> {
    let brokers = format!("{cluster}-brokers.{namespace}.svc");
    let bootstrap = format!("{cluster}-bootstrap");
    vec![
        format!("*.{brokers}"),
        format!("*.{brokers}.{CLUSTER_DOMAIN}"),
        // the headless Service's own name resolves to every broker: the
        // bootstrap address of a client that must not use a ClusterIP
        brokers.clone(),
        format!("{brokers}.{CLUSTER_DOMAIN}"),
        bootstrap.clone(),
        format!("{bootstrap}.{namespace}"),
        format!("{bootstrap}.{namespace}.svc"),
        format!("{bootstrap}.{namespace}.svc.{CLUSTER_DOMAIN}"),
    ]
}
