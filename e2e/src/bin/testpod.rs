//! `moldau-testpod`: a tiny HTTP server used as the container of e2e test
//! pods. It listens on `--listen` (e.g. `$(POD_IP):8080`), counts its starts
//! in `<data>/boots`, and serves:
//! - `GET /healthz` -> `ok`
//! - `GET /` -> JSON `{pod, namespace, index, kubeconfig, pid, boots, data_dir, files}`
//!   (from env `POD_NAME`, `POD_NAMESPACE`, `POD_INDEX`, `KUBECONFIG`)
//! - `GET /file/NAME` -> the file's content (404 if missing)
//! - `PUT /file/NAME` -> writes the body to `<data>/NAME`
//! - `GET /resolve/NAME` -> JSON list of NAME's addresses, resolved through
//!   the pod's own resolver (the cluster DNS where the runner gives one);
//!   404 with the error when it does not resolve
//! - `GET /peer/HOST:PORT` -> the body of `GET /` from another testpod,
//!   dialed by name (502 with the error when that fails)
//!
//! It exits 0 on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Data directory.
    #[arg(long)]
    data: PathBuf,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn respond(s: &mut TcpStream, code: u16, body: &[u8]) {
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        _ => "Bad Request",
    };
    let _ = write!(
        s,
        "HTTP/1.1 {code} {reason}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = s.write_all(body);
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && n != ".."
        && n != "."
}

fn handle(mut s: TcpStream, data: &Path, boots: u64) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; len.min(1 << 20)];
    r.read_exact(&mut body)?;
    match (method.as_str(), path.as_str()) {
        ("GET", "/healthz") => respond(&mut s, 200, b"ok"),
        ("GET", "/") => {
            let mut files: Vec<String> = std::fs::read_dir(data)?
                .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect();
            files.sort();
            let v = serde_json::json!({
                "pod": std::env::var("POD_NAME").unwrap_or_default(),
                "namespace": std::env::var("POD_NAMESPACE").unwrap_or_default(),
                "index": std::env::var("POD_INDEX").unwrap_or_default(),
                "kubeconfig": std::env::var("KUBECONFIG").unwrap_or_default(),
                "pid": std::process::id(),
                "boots": boots,
                "data_dir": data,
                "files": files,
            });
            respond(&mut s, 200, v.to_string().as_bytes());
        }
        (m, p) if p.starts_with("/file/") && valid_name(&p[6..]) => {
            let f = data.join(&p[6..]);
            if m == "PUT" {
                std::fs::write(&f, &body)?;
                respond(&mut s, 200, b"");
            } else {
                match std::fs::read(&f) {
                    Ok(b) => respond(&mut s, 200, &b),
                    Err(_) => respond(&mut s, 404, b""),
                }
            }
        }
        ("GET", p) if p.starts_with("/resolve/") => match (&p[9..], 0).to_socket_addrs() {
            Ok(addrs) => {
                let ips: Vec<String> = addrs.map(|a| a.ip().to_string()).collect();
                respond(&mut s, 200, serde_json::json!(ips).to_string().as_bytes())
            }
            Err(e) => respond(&mut s, 404, e.to_string().as_bytes()),
        },
        ("GET", p) if p.starts_with("/peer/") => match get_root_of(&p[6..]) {
            Ok(body) => respond(&mut s, 200, &body),
            Err(e) => respond(&mut s, 502, e.to_string().as_bytes()),
        },
        _ => respond(&mut s, 404, b""),
    }
    Ok(())
}

/// `GET /` of the testpod at `host_port`, dialed by name; its body.
fn get_root_of(host_port: &str) -> std::io::Result<Vec<u8>> {
    let addr = host_port
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let mut peer = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    peer.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(peer, "GET / HTTP/1.0\r\nHost: {host_port}\r\n\r\n")?;
    let mut answer = Vec::new();
    peer.read_to_end(&mut answer)?;
    let body = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| answer[i + 4..].to_vec())
        .unwrap_or_default();
    Ok(body)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
    }
    std::fs::create_dir_all(&args.data)?;
    let boots_file = args.data.join("boots");
    let boots = std::fs::read_to_string(&boots_file)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    std::fs::write(&boots_file, boots.to_string())?;
    let listener = TcpListener::bind(&args.listen)?;
    listener.set_nonblocking(true)?;
    eprintln!(
        "moldau-testpod: pid {} listening on {} (boot {boots})",
        std::process::id(),
        args.listen
    );
    while !STOP.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                if let Err(e) = handle(s, &args.data, boots) {
                    eprintln!("moldau-testpod: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
    eprintln!("moldau-testpod: SIGTERM, exiting");
    Ok(())
}
