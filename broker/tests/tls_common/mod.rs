//! Helpers of the wire tests that speak TLS to a broker: a CA made at
//! test time (rcgen) issuing the broker's and clients' certificates, and a
//! rustls client (requests go over its sessions with
//! `wire_common::call_on`).
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::wire_common::Running;

/// A CA that signs the test's certificates.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    /// A leaf certificate for `names` (SANs) with subject `dn` (most
    /// general first, as DER orders it): `(certificate PEM, key PEM)`.
    pub fn issue(&self, names: &[&str], dn: &[(DnType, &str)]) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = DistinguishedName::new();
        for (t, v) in dn {
            params.distinguished_name.push(t.clone(), *v);
        }
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// The broker's keystore file: key and chain in one PEM file (Kafka's
    /// PEM keystore), written atomically (as a Secret volume swaps files).
    pub fn write_keystore(&self, path: &Path) -> String {
        let (cert, key) = self.issue(
            &["localhost", "127.0.0.1"],
            &[(DnType::CommonName, "broker")],
        );
        write_atomically(path, &format!("{key}{cert}"));
        cert
    }
}

pub fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A rustls client trusting `ca`, with a client certificate if given.
pub fn client_config(ca: &str, identity: Option<&(String, String)>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    })
}

pub async fn tls_connect(
    broker: &Running,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    tls_connect_at(broker.addrs.kafka, config).await
}

/// A TLS session with `broker` of a client trusting `ca` (PEM) and
/// presenting `identity` if given; panics if the handshake fails.
pub async fn tls_session(
    broker: &Running,
    ca: &str,
    identity: Option<&(String, String)>,
) -> TlsStream<TcpStream> {
    tls_connect(broker, client_config(ca, identity))
        .await
        .expect("TLS handshake")
}

/// A TLS session with the listener at `addr`, checking the name 127.0.0.1.
pub async fn tls_connect_at(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
}
