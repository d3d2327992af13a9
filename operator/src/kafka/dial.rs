//! How the admin client reaches a broker: plain TCP, or TLS presenting the
//! operator's client certificate (a secured cluster's `REPLICATION`
//! listener, which requires one the cluster CA signed). Owns the socket's
//! opening only; framing is `wire`'s and the calls `admin`'s.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::KafkaError;

/// A byte stream to a broker.
pub trait BrokerStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> BrokerStream for T {}

/// How to dial one cluster's brokers.
#[derive(Clone)]
pub struct Dial {
    /// Bounds every network step.
    pub timeout: Duration,
    /// TLS, for a secured cluster.
    pub tls: Option<TlsDial>,
}

impl Dial {
    /// Plain TCP.
    pub fn plain(timeout: Duration) -> Self {
        Dial { timeout, tls: None }
    }
}

/// TLS to a secured cluster: trust its cluster CA, present the operator's
/// certificate, and check the broker's certificate for `server_name` (one
/// the broker certificate names: the bootstrap Service's), whatever pod IP
/// is dialed.
#[derive(Clone)]
pub struct TlsDial {
    config: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
}

impl TlsDial {
    /// From PEM text: the CA certificate(s), the operator's certificate
    /// chain and its private key.
    pub fn new(
        ca_pem: &str,
        cert_pem: &str,
        key_pem: &str,
        server_name: &str,
    ) -> Result<Self, KafkaError> {
        let bad = |what: &str, e: &dyn std::fmt::Display| KafkaError::Tls(format!("{what}: {e}"));
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| bad("the cluster CA certificate", &e))?;
            roots
                .add(cert)
                .map_err(|e| bad("the cluster CA certificate", &e))?;
        }
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("the operator's certificate", &e))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| bad("the operator's key", &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("TLS versions", &e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| bad("the operator's certificate", &e))?;
        let server_name = ServerName::try_from(server_name.to_string())
            .map_err(|e| bad("the broker name", &e))?;
        Ok(TlsDial {
            config: Arc::new(config),
            server_name,
        })
    }
}

/// Connects to `addr` as `dial` says.
pub async fn open(addr: SocketAddr, dial: &Dial) -> Result<Box<dyn BrokerStream>, KafkaError> {
    let name = addr.to_string();
    let work = async {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| KafkaError::Io {
                addr: name.clone(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        match &dial.tls {
            None => Ok::<Box<dyn BrokerStream>, KafkaError>(Box::new(tcp)),
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let stream = connector
                    .connect(tls.server_name.clone(), tcp)
                    .await
                    .map_err(|source| KafkaError::Io {
                        addr: name.clone(),
                        source,
                    })?;
                Ok::<Box<dyn BrokerStream>, KafkaError>(Box::new(stream))
            }
        }
    };
    tokio::time::timeout(dial.timeout, work)
        .await
        .map_err(|_| KafkaError::Timeout(name.clone()))?
}
