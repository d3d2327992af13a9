//! Shared helpers of the packaging tests (`packaging_*.rs`): the repository's
//! chart and manifests, the workspace binaries the pod runner maps the chart's
//! images to, and the pod runner's view of a pod (directory, kubeconfig, log).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use moldau_e2e::{ensure_pod_runner, paths, run_with_timeout};

/// Image repositories of the chart and the examples, as the pod runner maps them.
pub const OPERATOR_IMAGE: &str = "moldau/operator";
pub const BROKER_IMAGE: &str = "moldau/broker";

/// The repository root.
pub fn repo() -> PathBuf {
    paths::e2e_dir()
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

/// `charts/moldau`.
pub fn chart() -> String {
    repo().join("charts/moldau").to_string_lossy().into_owned()
}

/// Output of a helm/kubectl run as a Result with stdout, stderr in the error.
pub fn ok(what: &str, out: Output) -> Result<String> {
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs the built helm; fails on a non-zero exit.
pub fn helm_ok(args: &[&str]) -> Result<String> {
    ok(&format!("helm {}", args.join(" ")), moldau_e2e::helm(args)?)
}

static BUILD: Mutex<()> = Mutex::new(());

/// `<target>/<profile>` of this test binary.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(PathBuf::from)
        .expect("test binary lives in <target>/<profile>/deps")
}

/// Workspace binary `bin` of `package`, from `MOLDAU_E2E_BIN_DIR` when set,
/// else from this test binary's profile directory (built there when
/// missing; `cargo test --workspace` has built it already).
pub fn workspace_bin(package: &str, bin: &str) -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("MOLDAU_E2E_BIN_DIR").filter(|d| !d.is_empty()) {
        let p = PathBuf::from(dir).join(bin);
        anyhow::ensure!(p.exists(), "MOLDAU_E2E_BIN_DIR has no {bin}");
        return Ok(p);
    }
    let dir = profile_dir();
    let path = dir.join(bin);
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if path.exists() {
        return Ok(path);
    }
    let target = dir.parent().context("target dir")?.to_path_buf();
    let mut cmd = paths::cargo_command();
    cmd.args(["build", "-p", package, "--bin", bin])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(repo());
    if dir.file_name().and_then(|n| n.to_str()) == Some("release") {
        cmd.arg("--release");
    }
    let status = cmd.status().context("running cargo build")?;
    anyhow::ensure!(
        status.success(),
        "cargo build -p {package} --bin {bin} failed"
    );
    Ok(path)
}

/// The pod runner of this test binary, mapping the chart's operator image and
/// the examples' broker image to the workspace binaries.
pub fn pod_runner() -> Result<u32> {
    let operator = workspace_bin("moldau-operator", "moldau-operator")?;
    let broker = workspace_bin("moldau-broker", "moldau-broker")?;
    ensure_pod_runner(
        Path::new(env!("CARGO_BIN_EXE_moldau-podrunner")),
        &[
            (OPERATOR_IMAGE, operator.as_path()),
            (BROKER_IMAGE, broker.as_path()),
        ],
    )
}

/// The pod runner's directory of pod `ns/name` (`<state>/podrunner/pods/<ns>_<name>_<uid>`).
pub fn pod_dir(ns: &str, name: &str, uid: &str) -> PathBuf {
    moldau_e2e::runner_state_dir()
        .join("pods")
        .join(format!("{ns}_{name}_{uid}"))
}

/// The user the pod's process authenticates as, asked of the API server with
/// the kubeconfig the pod runner handed the process (`kubectl auth whoami`).
pub fn pod_identity(ns: &str, name: &str, uid: &str) -> Result<String> {
    let kc = pod_dir(ns, name, uid).join("kubeconfig");
    anyhow::ensure!(
        kc.exists(),
        "no kubeconfig for pod {ns}/{name} at {}",
        kc.display()
    );
    let out = run_with_timeout(
        Command::new(paths::tool("kubectl"))
            .arg("--kubeconfig")
            .arg(&kc)
            .args([
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ]),
        Duration::from_secs(60),
    )?;
    Ok(ok("kubectl auth whoami", out)?.trim().to_string())
}

/// A container's log as the pod runner wrote it.
pub fn container_log(ns: &str, name: &str, uid: &str, container: &str) -> String {
    std::fs::read_to_string(
        pod_dir(ns, name, uid)
            .join("logs")
            .join(format!("{container}.log")),
    )
    .unwrap_or_default()
}

/// Runs kcat with `args`, bounded in time; fails on a non-zero exit.
pub fn kcat(args: &[&str], stdin: Option<&[u8]>) -> Result<String> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning kcat (Debian package kcat)")?;
    if let Some(mut si) = child.stdin.take() {
        if let Some(data) = stdin {
            si.write_all(data)?;
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            bail!("kcat {} timed out", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ok(
        &format!("kcat {}", args.join(" ")),
        child.wait_with_output()?,
    )
}
