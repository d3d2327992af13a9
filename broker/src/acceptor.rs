//! The broker's listeners at run time (issue 38): each named listener of
//! `listeners` bound on its own socket, with its own TLS state and its own
//! accept loop, and every connection it accepts told which listener it
//! arrived on (its security, and the endpoints its answers name).
//!
//! What a listener advertises is decided here too ([`advertised_address`],
//! pure): its `advertised.listeners` entry, else — for a broker with one
//! listener — the command line's `--advertised-listener`, else the address
//! it is bound to (Kafka's default: `advertised.listeners` falls back to
//! `listeners`).
//!
//! This module owns sockets and accept loops only; it does not parse
//! configs (`security::listener`) nor serve requests
//! (`protocol::connection`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::metrics::ReasonLabel;
use crate::security::listener::ClientListener;
use crate::security::tls::TlsState;

/// One listener, bound and ready to accept.
pub struct BoundListener {
    pub config: Arc<ClientListener>,
    pub tls: Option<Arc<TlsState>>,
    pub socket: TcpListener,
    pub bound: SocketAddr,
    /// What it advertises: `(host, port)`.
    pub advertised: (String, i32),
}

impl BoundListener {
    /// The endpoint the cluster's metadata carries for this listener.
    pub fn endpoint(&self) -> crate::image::ListenerEndpoint {
        crate::image::ListenerEndpoint {
            name: self.config.name.clone(),
            host: self.advertised.0.clone(),
            port: self.advertised.1,
            security_protocol: self.config.protocol.name().to_string(),
        }
    }
}

/// Splits `host:port`; the port must be a number.
pub fn split_host_port(s: &str) -> anyhow::Result<(String, i32)> {
    let (host, port) = s
        .rsplit_once(':')
        .with_context(|| format!("advertised listener {s:?} is not host:port"))?;
    let port: i32 = port.parse().with_context(|| format!("bad port in {s:?}"))?;
    Ok((host.trim_matches(['[', ']']).to_string(), port))
}

/// What `listener`, bound at `bound`, advertises (see the module doc):
/// `command_line` is `--advertised-listener`, used only when the broker
/// has one listener (`only`): with several it cannot say which it means.
pub fn advertised_address(
    listener: &ClientListener,
    bound: SocketAddr,
    command_line: Option<&str>,
    only: bool,
) -> anyhow::Result<(String, i32)> {
    if let Some(endpoint) = &listener.advertised {
        return Ok((endpoint.host.clone(), i32::from(endpoint.port)));
    }
    match command_line {
        Some(address) if only => split_host_port(address),
        _ => split_host_port(&bound.to_string()),
    }
}

/// Loads each listener's TLS files (a file that does not make a
/// configuration stops the start) and binds it: `default_bind` (the
/// command line's `--listen`) for a listener `listeners` did not give an
/// address (Kafka's default PLAINTEXT one). `inter_broker_dialed`: brokers
/// dial the inter-broker listener (cluster mode), so a TLS one needs a
/// truststore to verify their peers with.
pub async fn bind_all(
    listeners: &crate::security::listener::Listeners,
    default_bind: SocketAddr,
    advertised_on_command_line: Option<&str>,
    inter_broker_dialed: bool,
) -> anyhow::Result<Vec<BoundListener>> {
    let only = listeners.all.len() == 1;
    let mut out = Vec::with_capacity(listeners.all.len());
    for listener in &listeners.all {
        let tls = match &listener.tls {
            None => None,
            Some(settings) => {
                let state = TlsState::load(settings.clone())
                    .map_err(|e| anyhow::anyhow!("listener {}: {e}", listener.name))?;
                if inter_broker_dialed
                    && listener.name == listeners.inter_broker
                    && state.client_config().is_none()
                {
                    anyhow::bail!(
                        "listener {} is {} and the inter-broker listener: brokers dial each other's TLS listener and verify it with the listener's truststore; set ssl.truststore.location or ssl.truststore.certificates",
                        listener.name,
                        listener.protocol.name()
                    );
                }
                Some(Arc::new(state))
            }
        };
        let socket = match &listener.bind {
            Some(endpoint) => {
                let host = if endpoint.host.is_empty() {
                    "0.0.0.0"
                } else {
                    endpoint.host.as_str()
                };
                TcpListener::bind((host, endpoint.port))
                    .await
                    .with_context(|| {
                        format!(
                            "binding the Kafka listener {} on {}",
                            endpoint.name,
                            endpoint.address()
                        )
                    })?
            }
            None => TcpListener::bind(default_bind)
                .await
                .with_context(|| format!("binding the Kafka listener on {default_bind}"))?,
        };
        let bound = socket.local_addr()?;
        let advertised = advertised_address(listener, bound, advertised_on_command_line, only)?;
        out.push(BoundListener {
            config: Arc::new(listener.clone()),
            tls,
            socket,
            bound,
            advertised,
        });
    }
    Ok(out)
}

/// Accepts connections on `listener` until `stop` turns true, each served
/// with the listener's security; then closes the socket and drops the
/// connections still open (after letting them finish briefly).
pub(crate) async fn accept_loop(
    broker: Arc<Broker>,
    listener: BoundListener,
    mut stop: watch::Receiver<bool>,
    refusal_log: Arc<crate::protocol::connection::LogRate>,
) {
    let BoundListener {
        config,
        tls,
        socket,
        ..
    } = listener;
    let mut connections = tokio::task::JoinSet::new();
    let mut accept_backoff = crate::resources::AcceptBackoff::default();
    loop {
        tokio::select! {
            accepted = socket.accept() => match accepted {
                Ok((stream, peer)) => {
                    accept_backoff.on_success();
                    match broker.connection_limits.admit(peer.ip()) {
                        Ok(slot) => {
                            let b = broker.clone();
                            let tls = tls.clone();
                            let config = config.clone();
                            connections.spawn(async move {
                                crate::protocol::connection::serve(b, stream, peer, config, tls).await;
                                drop(slot);
                            });
                        }
                        Err(refusal) => {
                            // Accepted and closed at once, as Kafka does.
                            drop(stream);
                            broker
                                .metrics
                                .connections_refused
                                .get_or_create(&ReasonLabel { reason: refusal.label().into() })
                                .inc();
                            if let Some(suppressed) = refusal_log.admit() {
                                tracing::warn!(%peer, listener = %config.name, limit = refusal.label(), suppressed, "connection refused by a limit");
                            }
                        }
                    }
                }
                Err(e) => tokio::time::sleep(accept_backoff.on_error(&e)).await,
            },
            r = stop.changed() => if r.is_err() || *stop.borrow() { break },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(socket);
    // Let in-flight requests finish briefly, then drop the rest.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::listener::Endpoint;

    #[test]
    fn a_listener_advertises_its_entry_else_the_command_line_else_its_socket() {
        let bound: SocketAddr = "127.0.0.1:40001".parse().unwrap();
        let plain = ClientListener::default();
        assert_eq!(
            advertised_address(&plain, bound, Some("127.0.0.9:9092"), true).unwrap(),
            ("127.0.0.9".to_string(), 9092)
        );
        assert_eq!(
            advertised_address(&plain, bound, Some("127.0.0.9:9092"), false).unwrap(),
            ("127.0.0.1".to_string(), 40001),
            "with several listeners the command line cannot say which it means"
        );
        let named = ClientListener {
            advertised: Some(Endpoint {
                name: "PLAINTEXT".into(),
                host: "broker-0.example".into(),
                port: 9094,
            }),
            ..ClientListener::default()
        };
        assert_eq!(
            advertised_address(&named, bound, Some("127.0.0.9:9092"), true).unwrap(),
            ("broker-0.example".to_string(), 9094)
        );
        assert!(split_host_port("nohost").is_err());
        assert_eq!(
            split_host_port("[::1]:9092").unwrap(),
            ("::1".to_string(), 9092)
        );
    }
}
