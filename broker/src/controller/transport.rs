//! The controller's gRPC transport: HTTP/2 in the clear, or TLS with a
//! client certificate required on both ends when the cluster's
//! inter-broker listener uses TLS.
//!
//! Why the inter-broker listener: it is the one listener every broker
//! dials every other broker on, so its key, chain and truststore are the
//! brokers' own identity; the controller endpoint takes them over rather
//! than adding a second set of `ssl.*` configs. The server requires a
//! client certificate that the truststore verifies (whatever the
//! listener's `ssl.client.auth`): the controller takes registrations,
//! heartbeats and admin changes, and on a TLS cluster nothing but a
//! broker may send them. The address a controller publishes says which
//! it serves (`https://` or `http://`), so a broker dials what the
//! controller serves; the TLS configurations are read from the
//! listener's [`TlsState`] at each connection, so rotated certificates
//! apply to new connections without a restart.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::security::tls::TlsState;

/// How long a TLS handshake on the controller endpoint may take before
/// the connection is dropped (a stalled peer holds nothing past it).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Handshakes in progress, at most: the endpoint takes brokers' sessions,
/// not client traffic, so a flood of half-open handshakes is refused.
const MAX_PENDING_HANDSHAKES: usize = 64;

/// The address a controller publishes for `hostport`: `https://` when it
/// serves TLS.
pub fn address(hostport: &str, tls: bool) -> String {
    if tls {
        format!("https://{hostport}")
    } else {
        format!("http://{hostport}")
    }
}

/// Whether `address` asks for TLS.
pub fn is_tls(address: &str) -> bool {
    address.starts_with("https://")
}

/// The TLS connections accepted on `listener`, handshakes done (each in
/// its own task, bounded in time and number, so one slow peer holds up
/// no other). Failed handshakes are logged and dropped.
pub fn tls_incoming(
    listener: TcpListener,
    tls: Arc<TlsState>,
) -> ReceiverStream<std::io::Result<tokio_rustls::server::TlsStream<TcpStream>>> {
    let (tx, rx) = mpsc::channel(16);
    let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "controller endpoint: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                // The server is gone (the term ended).
                _ = tx.closed() => return,
            };
            let Ok(permit) = pending.clone().try_acquire_owned() else {
                tracing::warn!(%peer, "controller endpoint: too many TLS handshakes in progress; connection dropped");
                continue;
            };
            let _ = stream.set_nodelay(true);
            let Some(config) = tls.controller_server_config() else {
                tracing::error!("controller endpoint: the inter-broker listener has no truststore to verify brokers with");
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let acceptor = tokio_rustls::TlsAcceptor::from(config);
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls_stream)) => {
                        let _ = tx.send(Ok(tls_stream)).await;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(%peer, error = %e, "controller endpoint: TLS handshake refused")
                    }
                    Err(_) => {
                        tracing::warn!(%peer, "controller endpoint: TLS handshake timed out")
                    }
                }
                drop(permit);
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Connects `endpoint` (built from `address`): in the clear for
/// `http://`, with TLS and this broker's certificate for `https://`.
pub async fn connect(
    endpoint: Endpoint,
    address: &str,
    tls: Option<&Arc<TlsState>>,
) -> Result<Channel, String> {
    if !is_tls(address) {
        return endpoint.connect().await.map_err(|e| e.to_string());
    }
    let tls = tls.cloned().ok_or_else(|| {
        format!("{address} serves TLS, and this broker's inter-broker listener has none")
    })?;
    let connector = tower::service_fn(move |uri: Uri| {
        let tls = tls.clone();
        async move {
            let host = uri
                .host()
                .ok_or_else(|| std::io::Error::other(format!("{uri} names no host")))?
                .trim_matches(['[', ']'])
                .to_string();
            let port = uri.port_u16().unwrap_or(443);
            let config = tls.controller_client_config().ok_or_else(|| {
                std::io::Error::other(
                    "cannot verify the controller: the inter-broker listener has no ssl.truststore",
                )
            })?;
            let name = ServerName::try_from(host.clone()).map_err(|e| {
                std::io::Error::other(format!("{host} is not a TLS server name: {e}"))
            })?;
            let stream = TcpStream::connect((host.as_str(), port)).await?;
            stream.set_nodelay(true)?;
            let stream = tokio::time::timeout(
                HANDSHAKE_TIMEOUT,
                tokio_rustls::TlsConnector::from(config).connect(name, stream),
            )
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")
            })??;
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    });
    endpoint
        .connect_with_connector(connector)
        .await
        .map_err(|e| format!("{e}: {}", source_chain(&e)))
}

/// The causes under `e`, joined (tonic's own message is only "transport
/// error").
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push(cause.to_string());
        next = cause.source();
    }
    out.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_says_whether_the_controller_serves_tls() {
        assert_eq!(address("b0:9091", true), "https://b0:9091");
        assert_eq!(address("[::1]:9091", false), "http://[::1]:9091");
        assert!(is_tls("https://b0:9091"));
        assert!(!is_tls("http://b0:9091"));
    }
}
