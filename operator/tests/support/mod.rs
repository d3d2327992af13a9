//! Test support: locating (and if needed building) the workspace binaries the
//! integration tests run as processes: `moldau-broker` and `moldau-podrunner`.

#![allow(dead_code)]

use std::path::PathBuf;

pub mod netns;

/// Path of workspace binary `bin` of package `package`, built when missing
/// or stale (the shared helper of the e2e crate).
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    moldau_e2e::paths::workspace_bin(package, bin)
}

/// A real `moldau-broker` process on 127.0.0.1 with a fresh data directory,
/// killed when dropped.
pub struct Broker {
    child: std::process::Child,
    pub addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    moldau_e2e::ports::unused_loopback_port()
}

/// Starts a broker and waits until it accepts connections.
pub async fn start_broker() -> Broker {
    start_broker_with_env(&[]).await
}

/// [`start_broker`] with extra environment variables (e.g. `MOLDAU_CONFIG_FILE`).
pub async fn start_broker_with_env(env: &[(&str, &std::ffi::OsStr)]) -> Broker {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let bin = workspace_bin("moldau-broker", "moldau-broker");
    let dir = tempfile::tempdir().unwrap();
    let (kafka, http) = (free_port(), free_port());
    let addr: std::net::SocketAddr = format!("127.0.0.1:{kafka}").parse().unwrap();
    let child = Command::new(bin)
        .env("MOLDAU_LISTEN", addr.to_string())
        .env("MOLDAU_ADVERTISED_LISTENER", addr.to_string())
        .env("MOLDAU_HTTP_LISTEN", format!("127.0.0.1:{http}"))
        .env("MOLDAU_DATA_DIR", dir.path())
        .env("MOLDAU_NODE_ID", "0")
        .envs(env.iter().copied())
        .args(["--set", "offsets.topic.num.partitions=1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning moldau-broker");
    let broker = Broker {
        child,
        addr,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "broker did not listen on {addr}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    broker
}
