//! A control plane inside a network namespace the test creates, with cluster
//! DNS: the same scripts and pod runner as the loopback plane of [`cluster`],
//! run under `ip netns exec`, where pods get routable addresses
//! ([`POD_NETWORK`]/16, made local to the namespace) and CoreDNS serves
//! `cluster.local` from the API server on [`CLUSTER_DNS`].
//!
//! Why a namespace: the API server refuses loopback addresses in
//! EndpointSlices, so on the loopback plane no Service or per-pod name
//! (`<pod>.<service>.<ns>.svc`) could resolve. Inside the namespace nothing
//! binds or dials an address of the machine's own network.
//!
//! Every process of the plane runs in the namespace and sees
//! `/etc/netns/<name>/resolv.conf` as its resolver (`ip netns exec` mounts
//! it), pointing at the cluster DNS; pods get their own per-namespace search
//! path from the runner. The test process itself stays outside and reaches
//! the plane only through commands it runs in the namespace ([`Self::exec`]).
//! Dropping the plane stops every process in the namespace and deletes it.
//!
//! [`cluster`]: crate::cluster

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use crate::cluster::{ensure_tools, run_with_timeout};
use crate::paths;

/// The cluster DNS server's address (a Service-range address, as a
/// cluster's DNS add-on has). This and [`POD_NETWORK`] are local to the
/// namespace the plane creates: bound and dialed only inside it, never on
/// the machine's own network.
pub const CLUSTER_DNS: &str = "10.96.0.10";
/// Pods' addresses come from this /16.
pub const POD_NETWORK: &str = "10.244.0.0";
const SERVICE_CIDR: &str = "10.96.0.0/16";

/// A running control plane, pod runner and cluster DNS in a namespace of
/// their own.
pub struct NetnsPlane {
    name: String,
    state: PathBuf,
    runner: Option<Child>,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = run_with_timeout(Command::new("ip").args(args), Duration::from_secs(30))?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

impl NetnsPlane {
    /// Creates the namespace and starts the plane in it, with a pod runner
    /// that maps `images` (image name prefix, binary) as the loopback plane's
    /// runner does.
    pub fn up(runner_exe: &Path, images: &[(&str, &Path)]) -> Result<Self> {
        ensure_tools()?;
        let name = format!("moldau-e2e-{}", std::process::id());
        let state = std::env::temp_dir().join(format!("{name}-state"));
        let _ = std::fs::remove_dir_all(&state);
        ip(&["netns", "add", &name])?;
        let mut plane = NetnsPlane {
            name,
            state,
            runner: None,
        };
        plane.configure_network()?;
        let script = paths::e2e_dir().join("scripts/controlplane-up.sh");
        let up = plane.exec(&plane.script(&script), Duration::from_secs(360))?;
        if !up.status.success() {
            bail!(
                "controlplane-up in {} failed: {}",
                plane.name,
                String::from_utf8_lossy(&up.stderr)
            );
        }
        plane.start_runner(runner_exe, images)?;
        Ok(plane)
    }

    fn configure_network(&self) -> Result<()> {
        let n = self.name.as_str();
        ip(&["-n", n, "link", "set", "lo", "up"])?;
        // Whole ranges local to the namespace, as 127.0.0.0/8 is: any pod
        // address binds without an interface per pod.
        ip(&[
            "-n",
            n,
            "route",
            "add",
            "local",
            &format!("{POD_NETWORK}/16"),
            "dev",
            "lo",
        ])?;
        ip(&["-n", n, "route", "add", "local", SERVICE_CIDR, "dev", "lo"])?;
        let etc = self.etc_dir();
        std::fs::create_dir_all(&etc)?;
        std::fs::write(
            etc.join("resolv.conf"),
            format!("nameserver {CLUSTER_DNS}\nsearch svc.cluster.local cluster.local\noptions ndots:5\n"),
        )?;
        Ok(())
    }

    /// A control-plane script run with this plane's state directory, cluster
    /// DNS and Service range.
    fn script(&self, script: &Path) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(script)
            .env("MOLDAU_E2E_STATE", &self.state)
            .env("MOLDAU_E2E_CLUSTER_DNS", CLUSTER_DNS)
            .env("MOLDAU_E2E_SERVICE_CIDR", SERVICE_CIDR);
        cmd
    }

    fn etc_dir(&self) -> PathBuf {
        Path::new("/etc/netns").join(&self.name)
    }

    fn start_runner(&mut self, exe: &Path, images: &[(&str, &Path)]) -> Result<()> {
        std::fs::create_dir_all(self.state.join("logs"))?;
        let log = std::fs::File::create(self.state.join("logs/podrunner.log"))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name])
            .arg(exe)
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(["--node-name", crate::NODE_NAME])
            .arg("--state-dir")
            .arg(self.state.join("podrunner"))
            .args(["--parent-pid", &std::process::id().to_string()])
            .args(["--pod-network", POD_NETWORK, "--cluster-dns", CLUSTER_DNS])
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        for (image, bin) in images {
            cmd.arg("--image").arg(format!("{image}={}", bin.display()));
        }
        self.runner = Some(
            cmd.spawn()
                .context("starting the pod runner in the namespace")?,
        );
        poll_until("the node Ready", Duration::from_secs(60), || {
            let out = self.kubectl(&[
                "get",
                "node",
                crate::NODE_NAME,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])?;
            Ok((String::from_utf8_lossy(&out.stdout) == "True").then_some(()))
        })
        .map_err(|e| {
            let log =
                std::fs::read_to_string(self.state.join("logs/podrunner.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            e.context(format!(
                "pod runner log, last lines:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ))
        })
    }

    /// The admin kubeconfig of this plane.
    pub fn kubeconfig(&self) -> PathBuf {
        self.state.join("kubeconfig")
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `cmd` inside the namespace (its resolver is the cluster DNS),
    /// killed after `timeout`.
    pub fn exec(&self, cmd: &Command, timeout: Duration) -> Result<Output> {
        run_with_timeout(&mut self.inside(cmd), timeout)
    }

    /// `cmd` as a command that runs it inside the namespace.
    fn inside(&self, cmd: &Command) -> Command {
        let mut wrapped = Command::new("ip");
        wrapped
            .args(["netns", "exec", &self.name])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => wrapped.env(k, v),
                None => wrapped.env_remove(k),
            };
        }
        wrapped
    }

    /// Starts `cmd` inside the namespace as a long-running process, its
    /// output to `log`. Whatever is still running when the plane drops is
    /// killed with it.
    pub fn spawn(&self, cmd: &Command, log: &Path) -> Result<Child> {
        let file = std::fs::File::create(log)?;
        self.inside(cmd)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {:?} in {}", cmd.get_program(), self.name))
    }

    /// Where logs of processes a test starts in the plane belong.
    pub fn logs_dir(&self) -> PathBuf {
        self.state.join("logs")
    }

    /// Applies the repository's CRDs and waits until they are established.
    pub fn apply_repo_crds(&self) -> Result<()> {
        let crds = paths::e2e_dir().join("../crds");
        self.kubectl_ok(&["apply", "--server-side", "-f", &crds.to_string_lossy()])?;
        self.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ])?;
        Ok(())
    }

    /// The IP of `pod` in `namespace`, once it has one.
    pub fn pod_ip(&self, namespace: &str, pod: &str) -> Result<Option<String>> {
        let ip = self.kubectl_ok(&[
            "-n",
            namespace,
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.status.podIP}",
        ])?;
        Ok(Some(ip).filter(|ip| !ip.is_empty()))
    }

    /// kubectl against this plane; the output whatever the exit status.
    pub fn kubectl(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = Command::new(paths::tool("kubectl"));
        cmd.arg("--kubeconfig").arg(self.kubeconfig()).args(args);
        self.exec(&cmd, Duration::from_secs(120))
    }

    /// Like [`Self::kubectl`] but fails on a non-zero exit; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.kubectl(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Calls `f` every 300 ms until it gives a value; fails with its last error
/// after `timeout`.
pub fn poll_until<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = std::time::Instant::now() + timeout;
    let mut last = None;
    loop {
        match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = Some(e),
        }
        if std::time::Instant::now() > deadline {
            match last {
                Some(e) => bail!("timed out after {timeout:?} waiting for {what}: {e:#}"),
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

impl Drop for NetnsPlane {
    fn drop(&mut self) {
        if let Some(mut runner) = self.runner.take() {
            let _ = runner.kill();
            let _ = runner.wait();
        }
        let down = paths::e2e_dir().join("scripts/controlplane-down.sh");
        let _ = self.exec(&self.script(&down), Duration::from_secs(120));
        // Whatever is left in the namespace (pods of a killed runner) goes
        // with it.
        if let Ok(out) = run_with_timeout(
            Command::new("ip").args(["netns", "pids", &self.name]),
            Duration::from_secs(10),
        ) {
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                if let Ok(pid) = pid.parse::<i32>() {
                    // SAFETY: a plain signal to a process of our namespace.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        let _ = ip(&["netns", "delete", &self.name]);
        let _ = std::fs::remove_dir_all(self.etc_dir());
        let _ = std::fs::remove_dir_all(&self.state);
    }
}
