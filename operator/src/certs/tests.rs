//! Tests of the pure parts of `certs`: certificates made by `issue`,
//! verified by rustls' WebPKI verifiers and read by `inspect` and by the
//! broker's own subject reader; every decision of `plan`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use super::inspect::{cert_info, first_der, key_matches, signed_by};
use super::issue::{issue_leaf, new_ca, renew_ca, LeafSpec, Usage};
use super::plan::{
    ca_decision, digest, leaf_decision, leaf_not_after, needs_write, CaPolicy, Decision, LeafWant,
};
use super::*;

const DAY: Duration = Duration::from_secs(86_400);

fn broker_spec(now: SystemTime) -> LeafSpec {
    LeafSpec {
        common_name: broker_name("demo"),
        organisation: Some(ORGANISATION.into()),
        dns_names: broker_dns_names("demo", "ns"),
        usage: Usage::ServerAndClient,
        not_after: now + 60 * DAY,
    }
}

fn cluster_ca(now: SystemTime) -> Pem {
    new_ca(&cluster_ca_name("demo"), now, 365).unwrap()
}

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from(first_der(pem).unwrap())
}

fn roots(ca_pem: &str) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    roots.add(der(ca_pem)).unwrap();
    Arc::new(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn at(now: SystemTime) -> UnixTime {
    UnixTime::since_unix_epoch(now.duration_since(SystemTime::UNIX_EPOCH).unwrap())
}

/// Whether a server presenting `leaf` as `name` is trusted by a client
/// trusting `ca`.
fn server_ok(ca: &str, leaf: &str, name: &str, now: SystemTime) -> Result<(), rustls::Error> {
    let v = WebPkiServerVerifier::builder_with_provider(roots(ca), provider())
        .build()
        .unwrap();
    v.verify_server_cert(
        &der(leaf),
        &[],
        &ServerName::try_from(name.to_string()).unwrap(),
        &[],
        at(now),
    )
    .map(|_| ())
}

/// Whether a server trusting `ca` for client certificates accepts `leaf`.
fn client_ok(ca: &str, leaf: &str, now: SystemTime) -> Result<(), rustls::Error> {
    let v = WebPkiClientVerifier::builder_with_provider(roots(ca), provider())
        .build()
        .unwrap();
    v.verify_client_cert(&der(leaf), &[], at(now)).map(|_| ())
}

#[test]
fn the_broker_certificate_verifies_for_every_broker_and_the_bootstrap_name() {
    let now = SystemTime::now();
    let ca = cluster_ca(now);
    let leaf = issue_leaf(&cluster_ca_name("demo"), &ca.key, &broker_spec(now), now).unwrap();
    for name in [
        "demo-0.demo-brokers.ns.svc",
        "demo-7.demo-brokers.ns.svc.cluster.local",
        "demo-bootstrap",
        "demo-bootstrap.ns.svc",
        "demo-bootstrap.ns.svc.cluster.local",
    ] {
        server_ok(&ca.cert, &leaf.cert, name, now).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // brokers dial each other with it
    client_ok(&ca.cert, &leaf.cert, now).unwrap();
    assert!(server_ok(&ca.cert, &leaf.cert, "demo-0.other-brokers.ns.svc", now).is_err());
    // a wildcard covers one label only
    assert!(server_ok(&ca.cert, &leaf.cert, "a.demo-0.demo-brokers.ns.svc", now).is_err());
    assert!(key_matches(&leaf.key, &leaf.cert));
    assert!(signed_by(&leaf.cert, &ca.cert));
    let info = cert_info(&leaf.cert).unwrap();
    assert_eq!(info.dns_names, broker_dns_names("demo", "ns"));
    assert_eq!(info.not_after, {
        let secs = (now + 60 * DAY)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    });
}

#[test]
fn a_client_certificate_is_not_a_server_certificate() {
    let now = SystemTime::now();
    let ca = new_ca(&clients_ca_name("demo"), now, 365).unwrap();
    let spec = LeafSpec {
        common_name: "alice".into(),
        organisation: None,
        dns_names: vec!["alice".into()],
        usage: Usage::Client,
        not_after: now + DAY,
    };
    let leaf = issue_leaf(&clients_ca_name("demo"), &ca.key, &spec, now).unwrap();
    client_ok(&ca.cert, &leaf.cert, now).unwrap();
    assert!(server_ok(&ca.cert, &leaf.cert, "alice", now).is_err());
}

#[test]
fn principals_are_what_the_broker_reads_from_the_certificates() {
    let now = SystemTime::now();
    let ca = cluster_ca(now);
    let subject = |cn: &str, o: Option<&str>| {
        let spec = LeafSpec {
            common_name: cn.into(),
            organisation: o.map(String::from),
            dns_names: Vec::new(),
            usage: Usage::Client,
            not_after: now + DAY,
        };
        let leaf = issue_leaf(&cluster_ca_name("demo"), &ca.key, &spec, now).unwrap();
        let dn = moldau_broker::security::tls::subject_dn(&first_der(&leaf.cert).unwrap()).unwrap();
        assert_eq!(cert_info(&leaf.cert).unwrap().subject, dn);
        format!("User:{dn}")
    };
    assert_eq!(
        subject(&broker_name("demo"), Some(ORGANISATION)),
        broker_principal("demo")
    );
    assert_eq!(
        subject(&operator_name("demo"), Some(ORGANISATION)),
        operator_principal("demo")
    );
    assert_eq!(subject("alice", None), format!("User:{}", user_dn("alice")));
    assert_eq!(user_dn("alice"), "CN=alice");
}

#[test]
fn a_renewed_ca_certificate_still_verifies_what_the_old_one_signed() {
    let then = SystemTime::now() - 340 * DAY;
    let ca = new_ca(&cluster_ca_name("demo"), then, 365).unwrap();
    let mut spec = broker_spec(then);
    spec.not_after = SystemTime::now() + 20 * DAY;
    let leaf = issue_leaf(&cluster_ca_name("demo"), &ca.key, &spec, then).unwrap();
    let now = SystemTime::now();
    let renewed = renew_ca(&cluster_ca_name("demo"), &ca.key, now, 365).unwrap();
    assert_ne!(renewed, ca.cert);
    assert!(key_matches(&ca.key, &renewed));
    assert_eq!(
        cert_info(&renewed).unwrap().subject,
        cert_info(&ca.cert).unwrap().subject
    );
    assert!(cert_info(&renewed).unwrap().not_after > now + 364 * DAY);
    server_ok(&renewed, &leaf.cert, "demo-0.demo-brokers.ns.svc", now).unwrap();
    assert!(signed_by(&leaf.cert, &renewed));
    // and what the renewed one signs verifies against the old one
    let fresh = issue_leaf(&cluster_ca_name("demo"), &ca.key, &broker_spec(now), now).unwrap();
    server_ok(&ca.cert, &fresh.cert, "demo-bootstrap", now).unwrap();
}

#[test]
fn a_foreign_ca_s_leaf_is_not_signed_by_this_ca() {
    let now = SystemTime::now();
    let ours = cluster_ca(now);
    // same name, another key: the subject matches, the signature does not
    let theirs = cluster_ca(now);
    let leaf = issue_leaf(
        &cluster_ca_name("demo"),
        &theirs.key,
        &broker_spec(now),
        now,
    )
    .unwrap();
    assert!(signed_by(&leaf.cert, &theirs.cert));
    assert!(!signed_by(&leaf.cert, &ours.cert));
    assert!(server_ok(&ours.cert, &leaf.cert, "demo-bootstrap", now).is_err());
    // another subject
    let other = new_ca("other-cluster-ca", now, 365).unwrap();
    assert!(!signed_by(&leaf.cert, &other.cert));
    assert!(!signed_by("garbage", &ours.cert));
    assert!(!key_matches(&theirs.key, &ours.cert));
}

fn renews(d: Decision, why: &str) {
    match d {
        Decision::Renew(reason) => assert!(reason.contains(why), "{reason:?} ∌ {why:?}"),
        other => panic!("{other:?}, wanted Renew({why})"),
    }
}

#[test]
fn ca_decisions() {
    let now = SystemTime::now();
    let p = CaPolicy::default();
    let dn = operator_issued_dn(&cluster_ca_name("demo"));
    let ca = cluster_ca(now);
    let d = |cert: Option<&str>, key: Option<&str>, now| ca_decision(&dn, cert, key, now, p);
    assert_eq!(d(Some(&ca.cert), Some(&ca.key), now), Decision::Keep);
    assert_eq!(d(Some(&ca.cert), None, now), Decision::Create);
    assert_eq!(d(None, None, now), Decision::Create);
    assert_eq!(d(Some(&ca.cert), Some("not a key"), now), Decision::Create);
    renews(d(None, Some(&ca.key), now), "missing");
    renews(d(Some("junk"), Some(&ca.key), now), "unreadable");
    let other = cluster_ca(now);
    renews(
        d(Some(&other.cert), Some(&ca.key), now),
        "not of the CA key",
    );
    // 31 days before the end: kept; 30: renewed
    assert_eq!(
        d(Some(&ca.cert), Some(&ca.key), now + 333 * DAY),
        Decision::Keep
    );
    renews(
        d(Some(&ca.cert), Some(&ca.key), now + 336 * DAY),
        "expires at",
    );
    renews(
        d(Some(&ca.cert), Some(&ca.key), now + 400 * DAY),
        "expires at",
    );
    let renamed = new_ca("someone-else", now, 365).unwrap();
    renews(
        d(Some(&renamed.cert), Some(&renamed.key), now),
        "subject is CN=someone-else,O=moldau.io",
    );
}

#[test]
fn leaf_decisions() {
    let now = SystemTime::now();
    let p = CaPolicy::default();
    let ca = cluster_ca(now);
    let dns = broker_dns_names("demo", "ns");
    let dn = operator_issued_dn(&broker_name("demo"));
    let want = LeafWant {
        dn: &dn,
        dns_names: &dns,
        ca_cert: &ca.cert,
    };
    let leaf = issue_leaf(&cluster_ca_name("demo"), &ca.key, &broker_spec(now), now).unwrap();
    assert_eq!(leaf_decision(None, want, now, p), Decision::Create);
    assert_eq!(leaf_decision(Some(&leaf), want, now, p), Decision::Keep);
    // the order of the names does not matter
    let mut reversed = dns.clone();
    reversed.reverse();
    assert_eq!(
        leaf_decision(
            Some(&leaf),
            LeafWant {
                dns_names: &reversed,
                ..want
            },
            now,
            p
        ),
        Decision::Keep
    );
    // valid 60 days, renewed 30 days before the end
    assert_eq!(
        leaf_decision(Some(&leaf), want, now + 29 * DAY, p),
        Decision::Keep
    );
    renews(
        leaf_decision(Some(&leaf), want, now + 31 * DAY, p),
        "expires at",
    );
    let moved = broker_dns_names("demo", "other-ns");
    renews(
        leaf_decision(
            Some(&leaf),
            LeafWant {
                dns_names: &moved,
                ..want
            },
            now,
            p,
        ),
        "DNS names",
    );
    let other_dn = operator_issued_dn("x");
    renews(
        leaf_decision(
            Some(&leaf),
            LeafWant {
                dn: &other_dn,
                ..want
            },
            now,
            p,
        ),
        "subject",
    );
    let foreign = cluster_ca(now);
    renews(
        leaf_decision(
            Some(&leaf),
            LeafWant {
                ca_cert: &foreign.cert,
                ..want
            },
            now,
            p,
        ),
        "not signed by the current CA",
    );
    let wrong_key = Pem {
        cert: leaf.cert.clone(),
        key: ca.key.clone(),
    };
    renews(leaf_decision(Some(&wrong_key), want, now, p), "key");
    let junk = Pem {
        cert: "junk".into(),
        key: leaf.key.clone(),
    };
    renews(leaf_decision(Some(&junk), want, now, p), "unreadable");
}

#[test]
fn a_leaf_never_outlives_its_ca_and_the_policy_never_churns() {
    let now = SystemTime::now();
    assert_eq!(
        leaf_not_after(now, 365 * DAY, now + 40 * DAY),
        now + 40 * DAY
    );
    assert_eq!(leaf_not_after(now, 7 * DAY, now + 40 * DAY), now + 7 * DAY);
    assert_eq!(
        CaPolicy {
            validity_days: 10,
            renewal_days: 30
        }
        .normalized(),
        CaPolicy {
            validity_days: 10,
            renewal_days: 5
        }
    );
    assert_eq!(CaPolicy::default().normalized(), CaPolicy::default());
}

#[test]
fn only_changed_data_is_written_and_the_digest_follows_the_certificates() {
    let desired = BTreeMap::from([("a".to_string(), "1".to_string())]);
    let same = BTreeMap::from([("a".to_string(), b"1".to_vec())]);
    assert!(!needs_write(Some(&same), &desired));
    assert!(needs_write(None, &desired));
    let changed = BTreeMap::from([("a".to_string(), b"2".to_vec())]);
    assert!(needs_write(Some(&changed), &desired));
    let more = BTreeMap::from([
        ("a".to_string(), b"1".to_vec()),
        ("b".to_string(), b"1".to_vec()),
    ]);
    assert!(!needs_write(Some(&more), &desired));
    assert!(needs_write(Some(&BTreeMap::new()), &desired));
    let d = digest("a", "b", "c");
    assert_eq!(d.len(), 64);
    assert_eq!(d, digest("a", "b", "c"));
    assert_ne!(d, digest("a", "b", "d"));
    assert_ne!(digest("ab", "", "c"), digest("a", "b", "c"));
}

#[test]
fn names_agree_with_the_cluster_s_services() {
    let mut kc = crate::crd::KafkaCluster::new(
        "demo",
        serde_json::from_value(serde_json::json!({
            "replicas": 1, "image": "i", "storage": {"size": "1Gi"}
        }))
        .unwrap(),
    );
    kc.metadata.namespace = Some("ns".into());
    let names = crate::cluster::builders::Names::of(&kc).unwrap();
    let dns = broker_dns_names("demo", "ns");
    assert_eq!(dns[0], format!("*.{}.ns.svc", names.headless_service()));
    assert_eq!(dns[2], format!("{}.ns.svc", names.headless_service()));
    assert_eq!(dns[4], names.bootstrap_service());
}

#[test]
fn names_follow_strimzi() {
    assert_eq!(cluster_ca_cert_secret("demo"), "demo-cluster-ca-cert");
    assert_eq!(cluster_ca_key_secret("demo"), "demo-cluster-ca");
    assert_eq!(clients_ca_cert_secret("demo"), "demo-clients-ca-cert");
    assert_eq!(clients_ca_key_secret("demo"), "demo-clients-ca");
    assert_eq!(broker_certs_secret("demo"), "demo-broker-certs");
    assert_eq!(broker_principal("demo"), "User:CN=demo-broker,O=moldau.io");
    assert_eq!(
        operator_principal("demo"),
        "User:CN=demo-operator,O=moldau.io"
    );
    assert_eq!(
        broker_dns_names("demo", "ns"),
        [
            "*.demo-brokers.ns.svc",
            "*.demo-brokers.ns.svc.cluster.local",
            "demo-brokers.ns.svc",
            "demo-brokers.ns.svc.cluster.local",
            "demo-bootstrap",
            "demo-bootstrap.ns",
            "demo-bootstrap.ns.svc",
            "demo-bootstrap.ns.svc.cluster.local"
        ]
    );
}
