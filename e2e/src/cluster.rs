//! Test-side helpers: bring up (or reuse) the control plane once per test
//! process, run one pod runner per test process, give each test its own
//! namespace, run kubectl/helm with the admin kubeconfig, and wait for
//! conditions with a deadline.

use std::future::Future;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::paths;

/// Name of the Node the test pod runner registers.
pub const NODE_NAME: &str = "moldau-e2e-node";

static TOOLS: OnceLock<Result<(), String>> = OnceLock::new();
static CONTROL_PLANE: OnceLock<Result<(), String>> = OnceLock::new();
static POD_RUNNER: OnceLock<Result<u32, String>> = OnceLock::new();

/// Builds the tools unless they are up to date (`build-tools.sh` takes well
/// under a second then; about ten minutes on a machine with empty Go
/// caches). `MOLDAU_E2E_BUILD=0` skips this step.
pub fn ensure_tools() -> Result<()> {
    TOOLS
        .get_or_init(build_tools)
        .clone()
        .map_err(|e| anyhow!(e))
}

fn build_tools() -> Result<(), String> {
    if std::env::var("MOLDAU_E2E_BUILD").as_deref() == Ok("0") {
        return Ok(());
    }
    let script = paths::e2e_dir().join("scripts/build-tools.sh");
    eprintln!(
        "moldau-e2e: running {} (slow only the first time)",
        script.display()
    );
    let out = run_with_timeout(
        Command::new("bash").arg(&script),
        Duration::from_secs(45 * 60),
    )
    .map_err(|e| format!("running {}: {e:#}", script.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Builds the tools if needed and starts the control plane unless it is
/// already running (the up script is idempotent). Runs the scripts at most
/// once per test process.
pub fn ensure_control_plane() -> Result<()> {
    CONTROL_PLANE
        .get_or_init(|| {
            ensure_tools().map_err(|e| format!("{e:#}"))?;
            let script = paths::e2e_dir().join("scripts/controlplane-up.sh");
            let out = run_with_timeout(Command::new("bash").arg(&script), Duration::from_secs(360))
                .map_err(|e| format!("running {}: {e:#}", script.display()))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{} failed ({}):\n{}",
                    script.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ))
            }
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// A kube client authenticated as the admin of the e2e control plane.
pub async fn client() -> Result<Client> {
    ensure_control_plane()?;
    let kc = Kubeconfig::read_from(paths::kubeconfig()).context("reading e2e kubeconfig")?;
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(cfg)?)
}

/// Runs a command, killing it after `timeout`. Captures stdout and stderr.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {cmd:?}"))?;
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut so = child.stdout.take().expect("piped");
    let mut se = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{cmd:?} timed out after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Output {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    })
}

/// Runs the built kubectl with the admin kubeconfig. Returns the output
/// whatever the exit status.
pub fn kubectl(args: &[&str]) -> Result<Output> {
    ensure_control_plane()?;
    run_with_timeout(
        Command::new(paths::tool("kubectl"))
            .arg("--kubeconfig")
            .arg(paths::kubeconfig())
            .args(args),
        Duration::from_secs(120),
    )
}

/// Like [`kubectl`] but fails on a non-zero exit; returns stdout.
pub fn kubectl_ok(args: &[&str]) -> Result<String> {
    let out = kubectl(args)?;
    if !out.status.success() {
        bail!(
            "kubectl {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs the built helm (with the admin kubeconfig in its environment).
pub fn helm(args: &[&str]) -> Result<Output> {
    ensure_tools()?;
    let home = paths::state_dir().join("helm-home");
    run_with_timeout(
        Command::new(paths::tool("helm"))
            .args(args)
            .env("KUBECONFIG", paths::kubeconfig())
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data")),
        Duration::from_secs(120),
    )
}

/// Polls `f` every 200 ms until it returns `Some`, or fails after `timeout`
/// with the last error (if any) in the message.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match f().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() > deadline {
            match last_err {
                Some(e) => bail!("timed out after {timeout:?} waiting for {what}: {e:#}"),
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether a pod is Running and its Ready condition is True.
pub fn pod_is_ready(pod: &Pod) -> bool {
    let Some(st) = &pod.status else { return false };
    st.phase.as_deref() == Some("Running")
        && st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// A minimal HTTP/1.1 client for talking to test processes (loopback only).
/// Returns the status code and the body.
pub async fn http(
    method: &str,
    addr: std::net::SocketAddr,
    path: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if !addr.ip().is_loopback() {
        bail!("refusing to dial {addr}: tests only dial 127.0.0.0/8");
    }
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await?;
        s.write_all(body).await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        anyhow::Ok(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .map_err(|_| anyhow!("HTTP {method} {addr}{path} timed out"))??;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("malformed HTTP response from {addr}"))?;
    let status_line = String::from_utf8_lossy(&buf[..split]);
    let code = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("malformed HTTP status line {status_line:?}"))?;
    Ok((code, buf[split + 4..].to_vec()))
}

/// Whether a process exists (and is not a zombie).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // state is the field after the parenthesized comm
            let state = stat
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next());
            !matches!(state, Some(Some('Z')) | Some(Some('X')))
        }
        Err(_) => false,
    }
}

/// Applies every CRD in the repository's `crds/` (server-side, so a newer
/// copy wins) and waits until each is Established.
pub fn apply_repo_crds() -> Result<()> {
    let dir = crate::paths::e2e_dir().join("../crds");
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager",
        "moldau-e2e",
        "-f",
        &dir.to_string_lossy(),
    ])?;
    let mut wait = vec![
        "wait".to_string(),
        "--for=condition=Established".to_string(),
        "--timeout=60s".to_string(),
    ];
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().to_string();
        if let Some(crd) = name.strip_suffix(".yaml") {
            wait.push(format!("crd/{crd}"));
        }
    }
    let args: Vec<&str> = wait.iter().map(String::as_str).collect();
    kubectl_ok(&args)?;
    Ok(())
}

/// A namespace of its own for one test. Deleted on drop (waiting up to 60 s
/// for the deletion to finish), unless `MOLDAU_E2E_KEEP=1`.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl TestNamespace {
    /// Creates `<prefix>-<random>` and waits for its default ServiceAccount
    /// (pods are rejected until the controller-manager created it).
    pub async fn new(prefix: &str) -> Result<Self> {
        let client = client().await?;
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..6];
        let name = format!("{prefix}-{suffix}");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("moldau.io/e2e".to_string(), "true".to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let this = TestNamespace { name, client };
        let sa: Api<ServiceAccount> = this.api();
        wait_for(
            Duration::from_secs(60),
            "the default ServiceAccount",
            || {
                let sa = sa.clone();
                async move { Ok(sa.get_opt("default").await?.map(|_| ())) }
            },
        )
        .await?;
        Ok(this)
    }

    /// An `Api` for a namespaced resource in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Runs kubectl in this namespace.
    pub fn kubectl(&self, args: &[&str]) -> Result<Output> {
        let mut a = vec!["-n", &self.name];
        a.extend_from_slice(args);
        kubectl(&a)
    }

    /// Like [`TestNamespace::kubectl`], failing on a non-zero exit.
    pub fn kubectl_ok(&self, args: &[&str]) -> Result<String> {
        let mut a = vec!["-n", &self.name];
        a.extend_from_slice(args);
        kubectl_ok(&a)
    }

    /// Host directory holding the data of a PersistentVolumeClaim of this
    /// namespace (see the pod runner).
    pub fn pvc_dir(&self, claim: &str) -> PathBuf {
        crate::runner::volumes::pvc_dir(&runner_state_dir(), &self.name, claim)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::env::var("MOLDAU_E2E_KEEP").as_deref() == Ok("1") {
            eprintln!("MOLDAU_E2E_KEEP=1: keeping namespace {}", self.name);
            return;
        }
        // Wait (bounded) so the pods' processes are stopped and the objects
        // gone before the test process, and with it the pod runner, exits.
        let _ = kubectl(&[
            "delete",
            "namespace",
            &self.name,
            "--wait=true",
            "--timeout=60s",
        ]);
    }
}

/// The pod runner's state directory (pod dirs, volumes, logs).
pub fn runner_state_dir() -> PathBuf {
    paths::state_dir().join("podrunner")
}

fn pid_alive(pid: u32) -> bool {
    process_alive(pid)
}

/// Starts one pod runner for this test process (the first call wins; later
/// calls return its pid). `images` maps image names (prefix, tag ignored) to
/// local binaries. The runner watches this process and exits, stopping its
/// pods, when it is gone. Runners share the Node, so while another test
/// process's runner is alive this waits for it to exit
/// (`MOLDAU_E2E_RUNNER_WAIT` seconds, default 600, then stops it).
pub fn ensure_pod_runner(exe: &Path, images: &[(&str, &Path)]) -> Result<u32> {
    ensure_control_plane()?;
    POD_RUNNER
        .get_or_init(|| start_pod_runner(exe, images).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

fn start_pod_runner(exe: &Path, images: &[(&str, &Path)]) -> Result<u32> {
    let pids = paths::state_dir().join("pids");
    std::fs::create_dir_all(&pids)?;
    for entry in std::fs::read_dir(&pids)? {
        let entry = entry?;
        let fname = entry.file_name().to_string_lossy().into_owned();
        if fname.starts_with("podrunner-") {
            let pid = std::fs::read_to_string(entry.path())
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .unwrap_or(0);
            if pid > 1 && pid_alive(pid) {
                // Another test process is using the Node: wait for it to
                // finish (its runner exits with it), then take over.
                let wait = std::env::var("MOLDAU_E2E_RUNNER_WAIT")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(600);
                eprintln!(
                    "moldau-e2e: pod runner {pid} of another test process is running; \
                     waiting up to {wait}s for it to exit"
                );
                let t = Instant::now();
                while pid_alive(pid) && t.elapsed() < Duration::from_secs(wait) {
                    std::thread::sleep(Duration::from_millis(200));
                }
                if pid_alive(pid) {
                    // SAFETY: plain signal to a process we recorded.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
                    let t = Instant::now();
                    while pid_alive(pid) && t.elapsed() < Duration::from_secs(20) {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
            let _ = std::fs::remove_file(entry.path());
        }
    }
    let logs = paths::state_dir().join("logs");
    std::fs::create_dir_all(&logs)?;
    let me = std::process::id();
    let log = std::fs::File::create(logs.join(format!("podrunner-{me}.log")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--kubeconfig")
        .arg(paths::kubeconfig())
        .arg("--node-name")
        .arg(NODE_NAME)
        .arg("--state-dir")
        .arg(runner_state_dir())
        .arg("--parent-pid")
        .arg(me.to_string())
        .arg("--pid-file")
        .arg(pids.join(format!("podrunner-{me}")))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    for (image, bin) in images {
        cmd.arg("--image").arg(format!("{image}={}", bin.display()));
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("spawning {}", exe.display()))?;
    let pid = child.id();
    // Wait for the Node to be Ready.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = kubectl(&[
            "get",
            "node",
            NODE_NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.spec.taints[*].key}",
        ])?;
        // Ready, and the controller-manager has lifted the not-ready /
        // unreachable taints a previous runner's exit left (else new pods
        // wait for the scheduler's back-off).
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && text.trim() == "True" {
            return Ok(pid);
        }
        if let Some(status) = child.try_wait()? {
            bail!("pod runner exited ({status}); see {}", logs.display());
        }
        if Instant::now() > deadline {
            bail!("node {NODE_NAME} not Ready and untainted after 60s: {text}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The node registered by the pod runner.
pub async fn runner_node(client: &Client) -> Result<Option<Node>> {
    Ok(Api::<Node>::all(client.clone()).get_opt(NODE_NAME).await?)
}
