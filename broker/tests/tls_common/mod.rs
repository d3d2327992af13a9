//! Helpers of the wire tests that speak TLS to a broker: a CA made at
//! test time (rcgen) issuing the broker's and clients' certificates, a
//! rustls client, and one request over any stream.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
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

/// One request and its response over any stream; `Err` if the broker
/// closed the connection instead (or the TLS session failed).
pub async fn try_call<S, Req, Resp>(
    s: &mut S,
    api: ApiKey,
    version: i16,
    req: &Req,
) -> std::io::Result<Resp>
where
    S: AsyncRead + AsyncWrite + Unpin,
    Req: Encodable,
    Resp: Decodable,
{
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(11)
        .with_client_id(Some(StrBytes::from_static_str("tls-test")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);
    s.write_all(&frame).await?;
    s.flush().await?;
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(30), s.read_exact(&mut len))
        .await
        .map_err(|_| std::io::Error::other("response timed out"))??;
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).await?;
    let mut resp = Bytes::from(buf);
    let h = ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 11);
    Ok(Resp::decode(&mut resp, version).unwrap())
}

pub async fn call_on<S, Req, Resp>(s: &mut S, api: ApiKey, version: i16, req: &Req) -> Resp
where
    S: AsyncRead + AsyncWrite + Unpin,
    Req: Encodable,
    Resp: Decodable,
{
    try_call(s, api, version, req).await.expect("answered")
}
