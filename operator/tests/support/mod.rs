//! Test support: locating (and if needed building) the workspace binaries the
//! integration tests run as processes: `moldau-broker` and `moldau-podrunner`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

static BUILD: Mutex<()> = Mutex::new(());

/// `<target>/<profile>` of this test binary (`<target>/<profile>/deps/<test>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .expect("test binary lives in <target>/<profile>/deps")
}

/// Path of workspace binary `bin` of package `package`, building it when it
/// is missing (`cargo test --workspace` has already built it).
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    let dir = profile_dir();
    let path = dir.join(bin);
    if path.exists() {
        return path;
    }
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if path.exists() {
        return path;
    }
    let target = dir.parent().expect("target dir").to_path_buf();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", package, "--bin", bin])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if dir.file_name().and_then(|n| n.to_str()) == Some("release") {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("running cargo build");
    assert!(
        status.success(),
        "cargo build -p {package} --bin {bin} failed"
    );
    path
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
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
