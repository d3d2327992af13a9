//! Reading stored certificates and keys (pure): a certificate's subject
//! (as the broker names it), validity, DNS names and public key; whether a
//! key belongs to a certificate; whether a leaf was signed by a CA
//! certificate's key. Anything unreadable is an error the planner turns
//! into "make a new one".

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::KeyPair;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::parse_x509_pem;
use x509_parser::prelude::X509Certificate;

/// ecdsa-with-SHA256, the only signature the operator's CAs make.
const ECDSA_WITH_SHA256: &str = "1.2.840.10045.4.3.2";

/// What the planner needs of a certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// Subject in RFC 2253 form, as the broker's `subject_dn` writes it.
    pub subject: String,
    /// Start of validity.
    pub not_before: SystemTime,
    /// End of validity.
    pub not_after: SystemTime,
    /// DNS subject alternative names, in certificate order.
    pub dns_names: Vec<String>,
    /// The DER SubjectPublicKeyInfo.
    pub public_key: Vec<u8>,
}

/// The DER of the first certificate in a PEM text.
pub fn first_der(pem: &str) -> Result<Vec<u8>, String> {
    let (_, p) = parse_x509_pem(pem.as_bytes()).map_err(|e| format!("not PEM: {e}"))?;
    if p.label != "CERTIFICATE" {
        return Err(format!("PEM block {:?}, not CERTIFICATE", p.label));
    }
    Ok(p.contents)
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, String> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c)
        .map_err(|e| format!("not a certificate: {e}"))
}

fn system_time(unix: i64) -> SystemTime {
    if unix >= 0 {
        UNIX_EPOCH + Duration::from_secs(unix as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(unix.unsigned_abs())
    }
}

/// The first certificate of a PEM text, read.
pub fn cert_info(pem: &str) -> Result<CertInfo, String> {
    let der = first_der(pem)?;
    let cert = parse(&der)?;
    let dns_names = match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(d) => Some(d.to_string()),
                _ => None,
            })
            .collect(),
        Ok(None) => Vec::new(),
        Err(e) => return Err(format!("subjectAltName: {e}")),
    };
    Ok(CertInfo {
        subject: moldau_broker::security::tls::subject_dn(&der)?,
        not_before: system_time(cert.validity().not_before.timestamp()),
        not_after: system_time(cert.validity().not_after.timestamp()),
        dns_names,
        public_key: cert.public_key().raw.to_vec(),
    })
}

/// The DER SubjectPublicKeyInfo of a PKCS#8 private key (PEM).
pub fn key_public_key(key_pem: &str) -> Result<Vec<u8>, String> {
    KeyPair::from_pem(key_pem)
        .map(|k| k.public_key_der())
        .map_err(|e| format!("not a private key: {e}"))
}

/// Whether the private key (PEM) is the key of the certificate (PEM).
pub fn key_matches(key_pem: &str, cert_pem: &str) -> bool {
    match (key_public_key(key_pem), cert_info(cert_pem)) {
        (Ok(k), Ok(c)) => k == c.public_key,
        _ => false,
    }
}

/// Whether the first certificate of `leaf_pem` names the CA's subject as
/// its issuer and carries a signature made by the CA certificate's key.
/// Dates are not looked at (the planner does).
pub fn signed_by(leaf_pem: &str, ca_pem: &str) -> bool {
    let (Ok(leaf_der), Ok(ca_der)) = (first_der(leaf_pem), first_der(ca_pem)) else {
        return false;
    };
    let (Ok(leaf), Ok(ca)) = (parse(&leaf_der), parse(&ca_der)) else {
        return false;
    };
    if leaf.issuer().as_raw() != ca.subject().as_raw()
        || leaf.signature_algorithm.algorithm.to_id_string() != ECDSA_WITH_SHA256
    {
        return false;
    }
    let key = ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P256_SHA256_ASN1,
        &ca.public_key().subject_public_key.data,
    );
    key.verify(leaf.tbs_certificate.as_ref(), &leaf.signature_value.data)
        .is_ok()
}
