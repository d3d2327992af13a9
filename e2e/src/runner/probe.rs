//! Container probes: httpGet (plain HTTP/1.1; an HTTPS probe only checks that
//! the port accepts a TCP connection), tcpSocket, exec, and grpc (TCP
//! connect only). Every probe dials the pod's IP (in 127.0.0.0/8) unless the
//! probe names a host, which must then also be a loopback address.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerPort, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::volumes::Rewriter;

/// Everything a probe needs about its container.
pub struct ProbeTarget<'a> {
    pub pod_ip: Ipv4Addr,
    pub ports: &'a [ContainerPort],
    pub env: &'a [(String, String)],
    pub workdir: &'a Path,
    pub rewriter: &'a Rewriter,
}

fn resolve_port(p: &IntOrString, ports: &[ContainerPort]) -> Result<u16, String> {
    match p {
        IntOrString::Int(i) => u16::try_from(*i).map_err(|_| format!("bad port {i}")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            ports
                .iter()
                .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                .and_then(|cp| u16::try_from(cp.container_port).ok())
                .ok_or_else(|| format!("no container port named {name:?}"))
        }
    }
}

fn resolve_host(host: Option<&String>, pod_ip: Ipv4Addr) -> Result<IpAddr, String> {
    match host.filter(|h| !h.is_empty()) {
        None => Ok(IpAddr::V4(pod_ip)),
        Some(h) if h == "localhost" => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        Some(h) => {
            let ip: IpAddr = h
                .parse()
                .map_err(|_| format!("probe host {h:?} is not an IP"))?;
            if !ip.is_loopback() {
                return Err(format!(
                    "probe host {h} is outside the loopback range; refusing to dial"
                ));
            }
            Ok(ip)
        }
    }
}

async fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: moldau-podrunner\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 4096 {
        let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = String::from_utf8_lossy(&buf);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad HTTP response {:?}", line.lines().next().unwrap_or("")))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

/// Runs one probe; `Ok` on success, the failure message otherwise.
pub async fn run(probe: &Probe, t: &ProbeTarget<'_>) -> Result<(), String> {
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    let fut = async {
        if let Some(h) = &probe.http_get {
            let port = resolve_port(&h.port, t.ports)?;
            let host = resolve_host(h.host.as_ref(), t.pod_ip)?;
            let addr = SocketAddr::new(host, port);
            if h.scheme.as_deref() == Some("HTTPS") {
                return TcpStream::connect(addr)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string());
            }
            let headers: Vec<(String, String)> = h
                .http_headers
                .iter()
                .flatten()
                .map(|x| (x.name.clone(), x.value.clone()))
                .collect();
            http_get(addr, h.path.as_deref().unwrap_or("/"), &headers).await
        } else if let Some(s) = &probe.tcp_socket {
            let port = resolve_port(&s.port, t.ports)?;
            let host = resolve_host(s.host.as_ref(), t.pod_ip)?;
            TcpStream::connect(SocketAddr::new(host, port))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        } else if let Some(g) = &probe.grpc {
            let port = u16::try_from(g.port).map_err(|_| "bad grpc port".to_string())?;
            TcpStream::connect(SocketAddr::new(IpAddr::V4(t.pod_ip), port))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        } else if let Some(e) = &probe.exec {
            let argv: Vec<String> = e
                .command
                .iter()
                .flatten()
                .map(|a| t.rewriter.rewrite(a))
                .collect();
            let Some((prog, args)) = argv.split_first() else {
                return Err("exec probe without command".into());
            };
            let status = tokio::process::Command::new(prog)
                .args(args)
                .env_clear()
                .envs(t.env.iter().map(|(k, v)| (k, v)))
                .current_dir(t.workdir)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .status()
                .await
                .map_err(|e| format!("exec probe: {e}"))?;
            if status.success() {
                Ok(())
            } else {
                Err(format!("exec probe exited with {status}"))
            }
        } else {
            Err("probe has no handler".into())
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(format!("probe timed out after {timeout:?}")),
    }
}
