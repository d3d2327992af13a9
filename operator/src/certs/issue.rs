//! Making certificates (pure but for the randomness of keys and serial
//! numbers): a new CA, a CA certificate renewed on its own key, and a leaf
//! signed by a CA. Keys are ECDSA P-256; every certificate gets a random
//! serial number (rcgen's default derives it from the key, which would give
//! a renewed CA and every renewal of a leaf the serial of the one before).
//!
//! A CA here is always `CN=<name>,O=moldau.io`: the issuer of a leaf is
//! rebuilt from that name and the CA's key, so a leaf issued after a
//! restart names exactly the subject the stored CA certificate has (the
//! planner renews a CA certificate whose subject is anything else).

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
    PKCS_ECDSA_P256_SHA256,
};
use time::OffsetDateTime;

use super::{Pem, ORGANISATION};

/// How far back `not_before` is set: a peer whose clock is a little behind
/// must not see a certificate that is not valid yet.
const BACKDATE: Duration = Duration::from_secs(3600);

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// rcgen refused (a bad key PEM, a bad name).
    #[error("{0}")]
    Rcgen(#[from] rcgen::Error),
    /// No randomness for a serial number.
    #[error("no random bytes: {0}")]
    Random(String),
}

/// What a leaf is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// Client authentication only (users, the operator).
    Client,
    /// Server and client authentication (brokers: they dial each other
    /// with the same certificate).
    ServerAndClient,
}

/// The leaf to issue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafSpec {
    /// Common name.
    pub common_name: String,
    /// Organisation (`O=`), if any: users have none.
    pub organisation: Option<String>,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// Extended key usage.
    pub usage: Usage,
    /// End of validity.
    pub not_after: SystemTime,
}

fn serial() -> Result<SerialNumber, IssueError> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(|e| IssueError::Random(e.to_string()))?;
    // positive and never shortened: DER integers are signed
    b[0] = (b[0] & 0x7f) | 0x40;
    Ok(SerialNumber::from_slice(&b))
}

fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 86_400)
}

fn ca_params(
    name: &str,
    now: SystemTime,
    validity_days: u32,
) -> Result<CertificateParams, IssueError> {
    let mut p = CertificateParams::default();
    p.distinguished_name = dn(name, Some(ORGANISATION));
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = OffsetDateTime::from(now - BACKDATE);
    p.not_after = OffsetDateTime::from(now + days(validity_days));
    p.serial_number = Some(serial()?);
    Ok(p)
}

fn dn(common_name: &str, organisation: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    // the broker writes the subject most specific first (RFC 2253), the
    // reverse of the certificate's order: O then CN reads `CN=..,O=..`
    if let Some(o) = organisation {
        dn.push(DnType::OrganizationName, o);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

fn new_key() -> Result<KeyPair, IssueError> {
    Ok(KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?)
}

/// A new CA `CN=<name>,O=moldau.io` with a new key, valid from (a little
/// before) `now` for `validity_days`.
pub fn new_ca(name: &str, now: SystemTime, validity_days: u32) -> Result<Pem, IssueError> {
    let key = new_key()?;
    let cert = ca_params(name, now, validity_days)?.self_signed(&key)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A new certificate for the CA `name` on its existing key (PEM): same
/// subject, same key, so what the CA signed before still verifies.
pub fn renew_ca(
    name: &str,
    key_pem: &str,
    now: SystemTime,
    validity_days: u32,
) -> Result<String, IssueError> {
    let key = KeyPair::from_pem(key_pem)?;
    Ok(ca_params(name, now, validity_days)?
        .self_signed(&key)?
        .pem())
}

/// The CA as rcgen's issuer: its subject rebuilt from the name, its key.
/// The certificate made here is never stored: only its subject and key
/// identifier go into the leaves.
fn issuer(name: &str, key: &KeyPair) -> Result<Certificate, IssueError> {
    let mut p = ca_params(name, SystemTime::now(), 1)?;
    // the key identifier comes from the key, like the stored certificate's
    p.serial_number = None;
    Ok(p.self_signed(key)?)
}

/// A leaf with a new key, signed by the CA `ca_name` whose key is
/// `ca_key_pem`, valid from (a little before) `now` until `spec.not_after`.
pub fn issue_leaf(
    ca_name: &str,
    ca_key_pem: &str,
    spec: &LeafSpec,
    now: SystemTime,
) -> Result<Pem, IssueError> {
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let ca = issuer(ca_name, &ca_key)?;
    let mut p = CertificateParams::default();
    p.distinguished_name = dn(&spec.common_name, spec.organisation.as_deref());
    p.subject_alt_names = spec
        .dns_names
        .iter()
        .map(|n| Ok(SanType::DnsName(n.clone().try_into()?)))
        .collect::<Result<_, rcgen::Error>>()?;
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = match spec.usage {
        Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        Usage::ServerAndClient => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    };
    p.use_authority_key_identifier_extension = true;
    p.not_before = OffsetDateTime::from(now - BACKDATE);
    p.not_after = OffsetDateTime::from(spec.not_after);
    p.serial_number = Some(serial()?);
    let key = new_key()?;
    let cert = p.signed_by(&key, &ca, &ca_key)?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}
