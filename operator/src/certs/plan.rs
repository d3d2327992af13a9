//! The renewal decisions (pure): given what the Secrets hold and the time,
//! per CA and per leaf Keep, Create or Renew (with the reason), how long a
//! new leaf is valid, whether a Secret's data must be written, and the
//! digest that rolls the brokers when a certificate they mount changes.
//!
//! A CA is renewed on its key (a new certificate, same subject and key)
//! when its certificate is missing, unreadable, not of that key, of another
//! subject, or within the renewal window; it is created anew (new key)
//! only when the key is missing or unreadable. A leaf is reissued when it
//! is missing, unreadable, not of its key, of another subject or other DNS
//! names, not signed by the current CA, or within the renewal window.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::inspect::{cert_info, key_matches, signed_by};
use super::Pem;

/// CA validity and how long before expiry a CA or a leaf is renewed
/// (Strimzi's `validityDays` / `renewalDays`; defaults 365 / 30).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaPolicy {
    /// Days a new CA certificate (and at most a leaf) is valid.
    pub validity_days: u32,
    /// Days before expiry a certificate is renewed.
    pub renewal_days: u32,
}

impl Default for CaPolicy {
    fn default() -> Self {
        CaPolicy {
            validity_days: 365,
            renewal_days: 30,
        }
    }
}

impl CaPolicy {
    /// A CA's policy as its spec (`spec.clusterCa` / `spec.clientsCa`) says;
    /// the defaults without one.
    pub fn of(spec: Option<&crate::crd::CertificateAuthoritySpec>) -> CaPolicy {
        spec.map_or_else(CaPolicy::default, |s| CaPolicy {
            validity_days: s.validity_days,
            renewal_days: s.renewal_days,
        })
    }

    /// The policy as applied: at least one day of validity, and a renewal
    /// window shorter than the validity (otherwise every certificate would
    /// be due the moment it is made, and reissued on every reconcile).
    pub fn normalized(self) -> CaPolicy {
        let validity_days = self.validity_days.max(1);
        CaPolicy {
            validity_days,
            renewal_days: self.renewal_days.min(validity_days / 2),
        }
    }

    fn renewal(&self) -> Duration {
        days(self.normalized().renewal_days)
    }

    /// Whether a certificate ending at `not_after` is within the renewal
    /// window at `now` (or expired).
    pub fn due(&self, not_after: SystemTime, now: SystemTime) -> bool {
        now + self.renewal() >= not_after
    }
}

fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 86_400)
}

/// What to do with one certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing: it is valid and not due.
    Keep,
    /// Make it (for a CA: a new key and certificate).
    Create,
    /// Make a new certificate (for a CA: on the same key), for this reason.
    Renew(String),
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("{secs}s after the epoch"))
}

/// The CA whose subject is `dn` (RFC 2253), from its stored certificate
/// and key (PEM, None when the Secret or key is missing).
pub fn ca_decision(
    dn: &str,
    cert: Option<&str>,
    key: Option<&str>,
    now: SystemTime,
    policy: CaPolicy,
) -> Decision {
    let Some(key) = key.filter(|k| super::inspect::key_public_key(k).is_ok()) else {
        return Decision::Create;
    };
    let Some(cert) = cert else {
        return Decision::Renew("the CA certificate is missing".into());
    };
    let info = match cert_info(cert) {
        Ok(i) => i,
        Err(e) => return Decision::Renew(format!("the CA certificate is unreadable: {e}")),
    };
    if !key_matches(key, cert) {
        return Decision::Renew("the CA certificate is not of the CA key".into());
    }
    if info.subject != dn {
        return Decision::Renew(format!(
            "the CA certificate's subject is {}, not {dn}",
            info.subject
        ));
    }
    if policy.due(info.not_after, now) {
        return Decision::Renew(format!(
            "the CA certificate expires at {}",
            rfc3339(info.not_after)
        ));
    }
    Decision::Keep
}

/// The leaf wanted.
#[derive(Clone, Copy, Debug)]
pub struct LeafWant<'a> {
    /// Subject, RFC 2253.
    pub dn: &'a str,
    /// DNS names (any order).
    pub dns_names: &'a [String],
    /// The certificate of the CA that must have signed it (PEM).
    pub ca_cert: &'a str,
}

/// A leaf, from what is stored (None: missing).
pub fn leaf_decision(
    current: Option<&Pem>,
    want: LeafWant<'_>,
    now: SystemTime,
    policy: CaPolicy,
) -> Decision {
    let Some(current) = current else {
        return Decision::Create;
    };
    let info = match cert_info(&current.cert) {
        Ok(i) => i,
        Err(e) => return Decision::Renew(format!("the certificate is unreadable: {e}")),
    };
    if !key_matches(&current.key, &current.cert) {
        return Decision::Renew("the key is unreadable or not the certificate's".into());
    }
    if info.subject != want.dn {
        return Decision::Renew(format!("the subject is {}, not {}", info.subject, want.dn));
    }
    let mut have = info.dns_names.clone();
    let mut wanted = want.dns_names.to_vec();
    have.sort();
    have.dedup();
    wanted.sort();
    wanted.dedup();
    if have != wanted {
        return Decision::Renew(format!(
            "the DNS names are [{}], not [{}]",
            have.join(", "),
            wanted.join(", ")
        ));
    }
    if !signed_by(&current.cert, want.ca_cert) {
        return Decision::Renew("it is not signed by the current CA".into());
    }
    if policy.due(info.not_after, now) {
        return Decision::Renew(format!("it expires at {}", rfc3339(info.not_after)));
    }
    Decision::Keep
}

/// End of a new leaf's validity: `validity` from `now`, but never past the
/// CA's own end (a client would refuse the chain then).
pub fn leaf_not_after(now: SystemTime, validity: Duration, ca_not_after: SystemTime) -> SystemTime {
    (now + validity).min(ca_not_after)
}

/// [`leaf_not_after`] with the policy's validity.
pub fn policy_not_after(now: SystemTime, policy: CaPolicy, ca_not_after: SystemTime) -> SystemTime {
    leaf_not_after(now, days(policy.normalized().validity_days), ca_not_after)
}

/// Whether a Secret holding `current` (None: missing) must be written to
/// hold `desired`. Keys beyond `desired` do not count: a key someone else
/// added survives the operator's apply anyway, so counting it would write
/// on every call.
pub fn needs_write(
    current: Option<&BTreeMap<String, Vec<u8>>>,
    desired: &BTreeMap<String, String>,
) -> bool {
    match current {
        None => true,
        Some(c) => desired
            .iter()
            .any(|(k, v)| c.get(k).map(Vec::as_slice) != Some(v.as_bytes())),
    }
}

/// sha256 hex over the three certificates the brokers mount (not the keys).
pub fn digest(cluster_ca_cert: &str, clients_ca_cert: &str, broker_cert: &str) -> String {
    let mut h = Sha256::new();
    for part in [cluster_ca_cert, clients_ca_cert, broker_cert] {
        // the length first: no two triples hash the same text
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
