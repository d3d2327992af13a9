//! A sliver of kubelet's HTTPS API so that `kubectl logs` works: the API
//! server proxies `GET /containerLogs/{ns}/{pod}/{container}` to the Node's
//! InternalIP (127.0.0.1) and `daemonEndpoints.kubeletEndpoint.Port`. The
//! runner listens on an ephemeral 127.0.0.1 port with a self-signed
//! certificate (made with openssl; the API server does not verify kubelet
//! certificates unless told to). Supported query parameters: `tailLines`,
//! `limitBytes`, `follow`. Everything else (exec, attach, port-forward,
//! metrics) answers 404.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// Creates (once) a self-signed serving certificate in `dir`.
fn ensure_cert(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let cert = dir.join("kubelet.crt");
    let key = dir.join("kubelet.key");
    if cert.exists() && key.exists() {
        return Ok((cert, key));
    }
    std::fs::create_dir_all(dir)?;
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
        ])
        .args([
            "-subj",
            "/CN=moldau-podrunner",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("running openssl")?;
    if !out.status.success() {
        bail!("openssl failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok((cert, key))
}

/// Binds 127.0.0.1:0 and returns the listener and the TLS acceptor.
pub async fn bind(state: &Path) -> Result<(TcpListener, TlsAcceptor)> {
    let (cert, key) = ensure_cert(&state.join("pki"))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .context("reading kubelet certificate")?
        .collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_file(&key).context("reading kubelet key")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    Ok((listener, TlsAcceptor::from(Arc::new(config))))
}

/// Serves until the task is aborted.
pub async fn serve(listener: TcpListener, acceptor: TlsAcceptor, state: PathBuf) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let acceptor = acceptor.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let Ok(Ok(tls)) =
                tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
            else {
                return;
            };
            if let Err(e) = handle(tls, &state).await {
                tracing::debug!("kubelet API: {e:#}");
            }
        });
    }
}

struct LogQuery {
    ns: String,
    pod: String,
    container: String,
    tail_lines: Option<usize>,
    limit_bytes: Option<usize>,
    follow: bool,
}

fn parse_target(target: &str) -> Option<LogQuery> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut parts = path.strip_prefix("/containerLogs/")?.split('/');
    let (ns, pod, container) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || [ns, pod, container]
            .iter()
            .any(|s| s.is_empty() || s.contains(".."))
    {
        return None;
    }
    let mut q = LogQuery {
        ns: ns.into(),
        pod: pod.into(),
        container: container.into(),
        tail_lines: None,
        limit_bytes: None,
        follow: false,
    };
    for kv in query.split('&') {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "tailLines" => q.tail_lines = v.parse().ok(),
            "limitBytes" => q.limit_bytes = v.parse().ok(),
            "follow" => q.follow = v == "true" || v == "1",
            _ => {}
        }
    }
    Some(q)
}

/// The newest pod directory of `ns/pod` (a recreated pod has a new uid).
fn pod_dir(state: &Path, ns: &str, pod: &str) -> Option<PathBuf> {
    let prefix = format!("{ns}_{pod}_");
    std::fs::read_dir(state.join("pods"))
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

fn tail(data: &[u8], lines: usize) -> &[u8] {
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == lines {
                return &data[i + 1..];
            }
        }
    }
    if lines == 0 {
        &data[data.len()..]
    } else {
        data
    }
}

async fn respond<S: AsyncWrite + Unpin>(s: &mut S, code: u16, body: &[u8]) -> Result<()> {
    let reason = if code == 200 { "OK" } else { "Not Found" };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    s.shutdown().await?;
    Ok(())
}

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, state: &Path) -> Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
        if n == 0 || head.len() > 16 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let q = match (method, parse_target(target)) {
        ("GET", Some(q)) => q,
        _ => return respond(&mut s, 404, b"not supported by moldau-podrunner\n").await,
    };
    let Some(dir) = pod_dir(state, &q.ns, &q.pod) else {
        return respond(&mut s, 404, b"pod not found on this node\n").await;
    };
    let file = dir.join("logs").join(format!("{}.log", q.container));
    let data = tokio::fs::read(&file).await.unwrap_or_default();
    let mut body: &[u8] = &data;
    if let Some(n) = q.tail_lines {
        body = tail(body, n);
    }
    if let Some(n) = q.limit_bytes {
        body = &body[..body.len().min(n)];
    }
    if !q.follow {
        return respond(&mut s, 200, body).await;
    }
    // Follow: stream what is appended until the client goes away or the pod
    // directory is removed; the body ends when the connection closes.
    s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        .await?;
    s.write_all(body).await?;
    s.flush().await?;
    let mut pos = data.len() as u64;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if !dir.exists() {
            break;
        }
        let Ok(mut f) = tokio::fs::File::open(&file).await else {
            continue;
        };
        let len = f.metadata().await.map(|m| m.len()).unwrap_or(0);
        if len > pos {
            f.seek(std::io::SeekFrom::Start(pos)).await?;
            let mut chunk = vec![0u8; (len - pos) as usize];
            f.read_exact(&mut chunk).await?;
            s.write_all(&chunk).await?;
            s.flush().await?;
            pos = len;
        }
    }
    s.shutdown().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let q = parse_target("/containerLogs/ns/p/c?tailLines=2&follow=true").unwrap();
        assert_eq!(
            (q.ns.as_str(), q.pod.as_str(), q.container.as_str()),
            ("ns", "p", "c")
        );
        assert_eq!(q.tail_lines, Some(2));
        assert!(q.follow);
        assert!(parse_target("/exec/ns/p/c").is_none());
        assert!(parse_target("/containerLogs/ns/../c").is_none());
    }

    #[test]
    fn tails() {
        assert_eq!(tail(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc", 1), b"c");
        assert_eq!(tail(b"a\n", 5), b"a\n");
        assert_eq!(tail(b"a\nb\n", 0), b"");
    }
}
