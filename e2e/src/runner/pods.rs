//! One task per Pod bound to the runner's Node: materialize volumes, start
//! each container's process, probe it, restart it per `restartPolicy`, report
//! the Pod status, and on deletion stop the processes (SIGTERM, SIGKILL after
//! the grace period) and remove the Pod object, as kubelet does.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dns;
use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::Api;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::volumes::{self, mount_env_name, Prepared, Rewriter};
use super::{envs, now_rfc3339, probe, Ctx};

/// What the main loop tells a pod task.
#[derive(Clone, Debug)]
pub enum Signal {
    /// The pod (latest version) should run.
    Run(Arc<Pod>),
    /// The pod is being deleted: stop within the grace period, then remove it.
    Terminate(Arc<Pod>),
    /// The pod object is gone: kill at once.
    Gone,
    /// The runner stops: stop the processes, leave the pod object alone.
    Shutdown,
}

#[derive(Default)]
struct ProbeRt {
    next: Option<Instant>,
    successes: i32,
    failures: i32,
}

#[derive(Clone)]
struct Terminated {
    exit_code: i32,
    signal: Option<i32>,
    started: String,
    finished: String,
    /// `message`: with `terminationMessagePolicy: FallbackToLogsOnError`
    /// and a failure, the log's tail (the runner reads no
    /// `terminationMessagePath` file, so that is the only source).
    message: Option<String>,
}

/// What the kubelet keeps of a failed container's log as its termination
/// message under `FallbackToLogsOnError`: the last 80 lines or 2048 bytes,
/// whichever is smaller.
const FALLBACK_LOG_LINES: usize = 80;
const FALLBACK_LOG_BYTES: u64 = 2048;

/// The tail of `log` as a termination message (see [`FALLBACK_LOG_LINES`]).
fn log_tail(log: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(FALLBACK_LOG_BYTES)))
        .ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let tail = lines[lines.len().saturating_sub(FALLBACK_LOG_LINES)..].join("\n");
    (!tail.is_empty()).then_some(tail)
}

enum State {
    Waiting { reason: String, message: String },
    Running { since: String },
    Terminated(Terminated),
}

struct Ctr {
    spec: Container,
    init: bool,
    /// Binary + argv + env, once resolved (None: waiting with a reason).
    exe: Option<PathBuf>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    workdir: PathBuf,
    log: PathBuf,
    child: Option<tokio::process::Child>,
    pid: Option<u32>,
    started_at: Option<Instant>,
    restart_count: i32,
    state: State,
    last_state: Option<Terminated>,
    next_start: Instant,
    backoff: Duration,
    ready: bool,
    started: bool,
    readiness: ProbeRt,
    liveness: ProbeRt,
    startup: ProbeRt,
    /// SIGTERM sent at, SIGKILL due at.
    stopping: Option<Instant>,
    /// Won't run again.
    done: bool,
}

impl Ctr {
    fn new(spec: Container, init: bool) -> Self {
        Ctr {
            spec,
            init,
            exe: None,
            args: vec![],
            env: vec![],
            workdir: PathBuf::from("/"),
            log: PathBuf::new(),
            child: None,
            pid: None,
            started_at: None,
            restart_count: 0,
            state: State::Waiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
            },
            last_state: None,
            next_start: Instant::now(),
            backoff: Duration::from_secs(1),
            ready: false,
            started: false,
            readiness: ProbeRt::default(),
            liveness: ProbeRt::default(),
            startup: ProbeRt::default(),
            stopping: None,
            done: false,
        }
    }

    fn running(&self) -> bool {
        self.child.is_some()
    }

    fn signal(&self, sig: i32) {
        if let Some(pid) = self.pid {
            // The process leads its own process group; signal the group.
            // SAFETY: plain kill(2).
            unsafe {
                libc::kill(-(pid as libc::pid_t), sig);
            }
        }
    }

    fn status_json(&self) -> Value {
        let term = |t: &Terminated, cid: &Option<u32>| {
            let mut v = json!({
                "exitCode": t.exit_code,
                "reason": if t.exit_code == 0 { "Completed" } else { "Error" },
                "startedAt": t.started,
                "finishedAt": t.finished,
            });
            if let Some(s) = t.signal {
                v["signal"] = json!(s);
            }
            if let Some(m) = &t.message {
                v["message"] = json!(m);
            }
            if let Some(p) = cid {
                v["containerID"] = json!(format!("moldau://{p}"));
            }
            v
        };
        let state = match &self.state {
            State::Waiting { reason, message } => {
                json!({"waiting": {"reason": reason, "message": message}})
            }
            State::Running { since } => json!({"running": {"startedAt": since}}),
            State::Terminated(t) => json!({"terminated": term(t, &self.pid)}),
        };
        let mut v = json!({
            "name": self.spec.name,
            "image": self.spec.image.clone().unwrap_or_default(),
            "imageID": self.exe.as_ref().map(|e| format!("moldau://{}", e.display())).unwrap_or_default(),
            "ready": self.ready && self.running(),
            "started": self.running() && self.started,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": self.last_state.as_ref().map(|t| json!({"terminated": term(t, &None)})).unwrap_or(json!({})),
        });
        if let Some(p) = self.pid {
            v["containerID"] = json!(format!("moldau://{p}"));
        }
        if self.init {
            v["ready"] = json!(matches!(&self.state, State::Terminated(t) if t.exit_code == 0));
        }
        v
    }
}

struct PodRt {
    ctx: Arc<Ctx>,
    pod: Arc<Pod>,
    uid: String,
    key: String,
    ip: Ipv4Addr,
    dir: PathBuf,
    prepared: Option<Prepared>,
    prepare_error: Option<String>,
    next_prepare: Instant,
    rewriter: Rewriter,
    inits: Vec<Ctr>,
    ctrs: Vec<Ctr>,
    start_time: String,
    conditions: HashMap<&'static str, (bool, String)>,
    last_report: Option<Value>,
}

fn restart_policy(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.clone())
        .unwrap_or_else(|| "Always".into())
}

fn grace_of(pod: &Pod) -> Duration {
    let secs = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30);
    Duration::from_secs(secs.max(0) as u64)
}

/// Resolves the image to a host binary: the longest `--image` prefix that
/// matches the image name without tag/digest (also after a registry host).
pub fn image_binary(images: &[(String, PathBuf)], image: &str) -> Option<PathBuf> {
    let no_digest = image.split('@').next().unwrap_or(image);
    let name = match no_digest.rfind(':') {
        Some(i) if !no_digest[i..].contains('/') => &no_digest[..i],
        _ => no_digest,
    };
    images
        .iter()
        .filter(|(k, _)| name.starts_with(k.as_str()) || name.contains(&format!("/{k}")))
        .max_by_key(|(k, _)| k.len())
        .map(|(_, p)| p.clone())
}

fn on_path(prog: &str) -> bool {
    if prog.contains('/') {
        return Path::new(prog).is_file();
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}

/// The environment the runner gives every container of a pod, before the
/// pod spec's `env`/`envFrom`: host values, never mapped through a mount.
fn runner_env(
    pod: &Pod,
    pod_dir: &Path,
    server_host: &str,
    server_port: u16,
    kubeconfig: Option<&Path>,
) -> Vec<(String, String)> {
    let mut base: Vec<(String, String)> = vec![];
    for k in ["PATH", "HOME", "LANG", "TMPDIR", "RUST_BACKTRACE"] {
        if let Ok(v) = std::env::var(k) {
            base.push((k.into(), v));
        }
    }
    base.push((
        "HOSTNAME".into(),
        pod.metadata.name.clone().unwrap_or_default(),
    ));
    base.push(("KUBERNETES_SERVICE_HOST".into(), server_host.to_string()));
    base.push(("KUBERNETES_SERVICE_PORT".into(), server_port.to_string()));
    base.push((
        "MOLDAU_POD_DIR".into(),
        pod_dir.to_string_lossy().into_owned(),
    ));
    if let Some(kc) = kubeconfig {
        base.push(("KUBECONFIG".into(), kc.to_string_lossy().into_owned()));
    }
    base
}

/// A container's process in host terms: the spec's mount paths mapped onto
/// the volumes' host directories, `$(VAR)` expanded.
struct Launch {
    rewriter: Rewriter,
    env: Vec<(String, String)>,
    command: Vec<String>,
    args: Vec<String>,
    /// `workingDir`, when the spec sets one.
    workdir: Option<PathBuf>,
}

/// Resolves a container's mounts (creating their host directories), env,
/// command, args and working directory. `base` is [`runner_env`]; `dirs` the
/// pod's volumes' host directories; `state` the runner's state directory,
/// which is never rewritten (it holds the kubeconfig and every volume).
async fn container_launch(
    client: &kube::Client,
    state: &Path,
    pod: &Pod,
    spec: &Container,
    ip: &str,
    base: &[(String, String)],
    dirs: &HashMap<String, PathBuf>,
) -> Result<Launch> {
    let mounts: Vec<(String, PathBuf)> = spec
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            dirs.get(&m.name).map(|d| {
                let d = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                    Some(sp) => d.join(sp),
                    None => d.clone(),
                };
                (m.mount_path.clone(), d)
            })
        })
        .collect();
    for (_, d) in &mounts {
        if !d.exists() {
            std::fs::create_dir_all(d)?;
        }
    }
    let rw = Rewriter::new(mounts.clone()).keep(state);
    let mut cbase = base.to_vec();
    for (mp, d) in &mounts {
        cbase.push((mount_env_name(mp), d.to_string_lossy().into_owned()));
    }
    let env = envs::container_env(client, pod, spec, ip, &cbase, &rw)
        .await
        .with_context(|| format!("container {:?} env", spec.name))?;
    let lookup = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter().flatten().map(|a| rw.expand(a, &lookup)).collect()
    };
    let command = expand_all(&spec.command);
    let args = expand_all(&spec.args);
    let workdir = spec
        .working_dir
        .as_deref()
        .filter(|w| !w.is_empty())
        .map(|w| PathBuf::from(rw.rewrite(w)));
    Ok(Launch {
        rewriter: rw,
        env,
        command,
        args,
        workdir,
    })
}

impl PodRt {
    fn new(ctx: Arc<Ctx>, pod: Arc<Pod>) -> Self {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let preferred = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|s| s.parse().ok());
        let ip = ctx
            .ipam
            .lock()
            .expect("ipam lock")
            .allocate(&uid, preferred);
        let dir = ctx.state.join("pods").join(format!("{ns}_{name}_{uid}"));
        let spec = pod.spec.clone().unwrap_or_default();
        let inits = spec
            .init_containers
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| Ctr::new(c, true))
            .collect();
        let ctrs = spec
            .containers
            .into_iter()
            .map(|c| Ctr::new(c, false))
            .collect();
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(now_rfc3339);
        PodRt {
            ctx,
            pod,
            uid,
            key: format!("{ns}/{name}"),
            ip,
            dir,
            prepared: None,
            prepare_error: None,
            next_prepare: Instant::now(),
            rewriter: Rewriter::default(),
            inits,
            ctrs,
            start_time,
            conditions: HashMap::new(),
            last_report: None,
        }
    }

    fn terminal(&self) -> bool {
        matches!(
            self.pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded") | Some("Failed")
        ) && self.last_report.is_none()
    }

    /// Volumes, env, binaries. Retried every 2s while it fails (a missing
    /// ConfigMap, say).
    async fn prepare(&mut self) {
        if self.prepared.is_some() || Instant::now() < self.next_prepare {
            return;
        }
        match self.try_prepare().await {
            Ok(()) => self.prepare_error = None,
            Err(e) => {
                tracing::warn!(pod = %self.key, "preparing pod: {e:#}");
                self.prepare_error = Some(format!("{e:#}"));
                self.prepared = None;
                self.next_prepare = Instant::now() + Duration::from_secs(2);
            }
        }
    }

    async fn try_prepare(&mut self) -> Result<()> {
        std::fs::create_dir_all(self.dir.join("logs"))?;
        let ip = self.ip.to_string();
        let prepared =
            volumes::prepare(&self.ctx.client, &self.ctx.state, &self.pod, &self.dir, &ip).await?;
        // The pod's kubeconfig, when it has a ServiceAccount token volume
        // mounted at the standard path (or any token volume).
        let token = prepared
            .tokens
            .iter()
            .find(|t| t.audience.is_none())
            .map(|t| t.path.clone());
        let kubeconfig = match token {
            Some(tok) => {
                let ca = self.dir.join("ca.crt");
                std::fs::write(&ca, &self.ctx.ca_pem)?;
                let kc = self.dir.join("kubeconfig");
                let ns = self.pod.metadata.namespace.clone().unwrap_or_default();
                let doc = json!({
                    "apiVersion": "v1", "kind": "Config",
                    "clusters": [{"name": "moldau-e2e", "cluster": {
                        "server": self.ctx.server, "certificate-authority": ca.to_string_lossy()}}],
                    "users": [{"name": "serviceaccount", "user": {"tokenFile": tok.to_string_lossy()}}],
                    "contexts": [{"name": "moldau-e2e", "context": {
                        "cluster": "moldau-e2e", "user": "serviceaccount", "namespace": ns}}],
                    "current-context": "moldau-e2e",
                });
                std::fs::write(&kc, serde_json::to_vec_pretty(&doc)?)?;
                Some(kc)
            }
            None => None,
        };
        let base = runner_env(
            &self.pod,
            &self.dir,
            &self.ctx.server_host,
            self.ctx.server_port,
            kubeconfig.as_deref(),
        );
        let images = self.ctx.images.clone();
        let pod = self.pod.clone();
        for c in self.inits.iter_mut().chain(self.ctrs.iter_mut()) {
            let launch = container_launch(
                &self.ctx.client,
                &self.ctx.state,
                &pod,
                &c.spec,
                &ip,
                &base,
                &prepared.dirs,
            )
            .await?;
            let rw = launch.rewriter;
            let (env, cmd, args) = (launch.env, launch.command, launch.args);
            let image = c.spec.image.clone().unwrap_or_default();
            let mapped = image_binary(&images, &image);
            let Some(mapped) = mapped else {
                c.state = State::Waiting {
                    reason: "ImageNotMapped".into(),
                    message: format!(
                        "image {image:?} has no local binary (start moldau-podrunner with --image {}=/path/to/binary)",
                        image.split(':').next().unwrap_or(&image)
                    ),
                };
                c.exe = None;
                continue;
            };
            let (exe, argv) = match cmd.split_first() {
                None => (mapped, args),
                Some((first, rest)) => {
                    let exe = if on_path(first) {
                        PathBuf::from(first)
                    } else {
                        mapped
                    };
                    (exe, rest.iter().cloned().chain(args).collect())
                }
            };
            c.workdir = launch.workdir.unwrap_or_else(|| self.dir.clone());
            c.exe = Some(exe);
            c.args = argv;
            c.env = env;
            c.log = self.dir.join("logs").join(format!("{}.log", c.spec.name));
            c.state = State::Waiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
            };
            if !c.init {
                self.rewriter = rw;
            }
        }
        self.prepared = Some(prepared);
        Ok(())
    }

    fn start(&mut self, idx: usize, init: bool) {
        let ip = self.ip;
        let key = self.key.clone();
        let c = if init {
            &mut self.inits[idx]
        } else {
            &mut self.ctrs[idx]
        };
        let Some(exe) = c.exe.clone() else { return };
        let log = match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&c.log)
        {
            Ok(f) => f,
            Err(e) => {
                c.state = State::Waiting {
                    reason: "CreateContainerError".into(),
                    message: format!("log file {}: {e}", c.log.display()),
                };
                return;
            }
        };
        let log2 = match log.try_clone() {
            Ok(f) => f,
            Err(_) => return,
        };
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.args(&c.args)
            .env_clear()
            .envs(c.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&c.workdir)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .kill_on_drop(true);
        if let Err(e) = self.use_cluster_dns(&mut cmd) {
            let c = if init {
                &mut self.inits[idx]
            } else {
                &mut self.ctrs[idx]
            };
            c.state = State::Waiting {
                reason: "CreateContainerConfigError".into(),
                message: format!("cluster DNS: {e:#}"),
            };
            return;
        }
        let c = if init {
            &mut self.inits[idx]
        } else {
            &mut self.ctrs[idx]
        };
        match cmd.spawn() {
            Ok(child) => {
                c.pid = child.id();
                tracing::info!(pod = %key, container = %c.spec.name, pid = ?c.pid, ip = %ip, "started {}", exe.display());
                c.child = Some(child);
                c.started_at = Some(Instant::now());
                c.state = State::Running {
                    since: now_rfc3339(),
                };
                c.ready = false;
                c.started = c.spec.startup_probe.is_none();
                let delay = |p: &Option<Probe>| {
                    p.as_ref().map(|p| Instant::now() + Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64))
                };
                c.readiness = ProbeRt {
                    next: delay(&c.spec.readiness_probe),
                    ..Default::default()
                };
                c.liveness = ProbeRt {
                    next: delay(&c.spec.liveness_probe),
                    ..Default::default()
                };
                c.startup = ProbeRt {
                    next: delay(&c.spec.startup_probe),
                    ..Default::default()
                };
                c.stopping = None;
            }
            Err(e) => {
                c.state = State::Waiting {
                    reason: "RunContainerError".into(),
                    message: format!("starting {}: {e}", exe.display()),
                };
                c.next_start = Instant::now() + c.backoff;
                c.backoff = (c.backoff * 2).min(Duration::from_secs(30));
            }
        }
    }

    /// Points `cmd`'s resolver at the cluster DNS when the runner has one and
    /// the pod's `dnsPolicy` asks for it (see [`dns`]).
    fn use_cluster_dns(&self, cmd: &mut tokio::process::Command) -> anyhow::Result<()> {
        let Some((server, domain)) = &self.ctx.cluster_dns else {
            return Ok(());
        };
        if !dns::uses_cluster_dns(&self.pod) {
            return Ok(());
        }
        let namespace = self.pod.metadata.namespace.as_deref().unwrap_or("default");
        let file = self.dir.join("resolv.conf");
        std::fs::write(&file, dns::resolv_conf(*server, namespace, domain))?;
        dns::mount_as_resolv_conf(cmd, &file)
    }

    /// Reaps exited processes; decides restarts.
    fn reap(c: &mut Ctr, policy: &str, grace: Duration) {
        if let Some(at) = c.stopping {
            if at.elapsed() > grace {
                c.signal(libc::SIGKILL);
            }
        }
        let Some(child) = c.child.as_mut() else {
            return;
        };
        let Ok(Some(status)) = child.try_wait() else {
            return;
        };
        let code = status.code().unwrap_or(128 + status.signal().unwrap_or(0));
        // Kill what the process may have left in its group.
        c.signal(libc::SIGKILL);
        let started = match &c.state {
            State::Running { since } => since.clone(),
            _ => now_rfc3339(),
        };
        let fallback_to_logs =
            c.spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
        let t = Terminated {
            exit_code: code,
            signal: status.signal(),
            started,
            finished: now_rfc3339(),
            message: (code != 0 && fallback_to_logs)
                .then(|| log_tail(&c.log))
                .flatten(),
        };
        c.child = None;
        c.ready = false;
        c.started = false;
        let ran = c.started_at.map(|s| s.elapsed()).unwrap_or_default();
        if ran > Duration::from_secs(30) {
            c.backoff = Duration::from_secs(1);
        }
        let restart = if c.init {
            code != 0 && policy != "Never"
        } else {
            match policy {
                "Never" => false,
                "OnFailure" => code != 0,
                _ => true,
            }
        };
        if c.init && code == 0 {
            c.done = true;
        }
        if restart && c.stopping.is_none() {
            c.last_state = Some(t.clone());
            c.state = State::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: format!("back-off {:?} restarting failed container", c.backoff),
            };
            c.next_start = Instant::now() + c.backoff;
            c.backoff = (c.backoff * 2).min(Duration::from_secs(30));
            c.restart_count += 1;
        } else if restart {
            // Stopped by a failed liveness/startup probe: restart promptly.
            c.last_state = Some(t.clone());
            c.state = State::Waiting {
                reason: "ContainerRestarting".into(),
                message: "probe failed".into(),
            };
            c.next_start = Instant::now();
            c.restart_count += 1;
        } else {
            c.state = State::Terminated(t);
            c.done = true;
        }
        c.stopping = None;
    }

    async fn probe(&mut self, idx: usize) {
        let ip = self.ip;
        let c = &mut self.ctrs[idx];
        if !c.running() || c.stopping.is_some() {
            return;
        }
        let now = Instant::now();
        let target = probe::ProbeTarget {
            pod_ip: ip,
            ports: c.spec.ports.as_deref().unwrap_or_default(),
            env: &c.env,
            workdir: &c.workdir,
            rewriter: &self.rewriter,
        };
        let period = |p: &Probe| Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
        let mut kill_reason = None;
        if !c.started {
            if let (Some(p), Some(next)) = (&c.spec.startup_probe, c.startup.next) {
                if now >= next {
                    c.startup.next = Some(now + period(p));
                    match probe::run(p, &target).await {
                        Ok(()) => c.started = true,
                        Err(e) => {
                            c.startup.failures += 1;
                            if c.startup.failures >= p.failure_threshold.unwrap_or(3) {
                                kill_reason = Some(format!("startup probe failed: {e}"));
                            }
                        }
                    }
                }
            }
        }
        if c.started {
            match (&c.spec.readiness_probe, c.readiness.next) {
                (Some(p), Some(next)) if now >= next => {
                    c.readiness.next = Some(now + period(p));
                    match probe::run(p, &target).await {
                        Ok(()) => {
                            c.readiness.failures = 0;
                            c.readiness.successes += 1;
                            if c.readiness.successes >= p.success_threshold.unwrap_or(1) {
                                c.ready = true;
                            }
                        }
                        Err(e) => {
                            c.readiness.successes = 0;
                            c.readiness.failures += 1;
                            if c.readiness.failures >= p.failure_threshold.unwrap_or(3) || !c.ready
                            {
                                if c.ready {
                                    tracing::info!(pod = %self.key, container = %c.spec.name, "readiness probe failed: {e}");
                                }
                                c.ready = false;
                            }
                        }
                    }
                }
                (None, _) => c.ready = true,
                _ => {}
            }
            if let (Some(p), Some(next)) = (&c.spec.liveness_probe, c.liveness.next) {
                if now >= next {
                    c.liveness.next = Some(now + period(p));
                    match probe::run(p, &target).await {
                        Ok(()) => c.liveness.failures = 0,
                        Err(e) => {
                            c.liveness.failures += 1;
                            if c.liveness.failures >= p.failure_threshold.unwrap_or(3) {
                                kill_reason = Some(format!("liveness probe failed: {e}"));
                            }
                        }
                    }
                }
            }
        }
        if let Some(reason) = kill_reason {
            tracing::info!(pod = %self.key, container = %c.spec.name, "{reason}; restarting");
            c.ready = false;
            c.signal(libc::SIGTERM);
            c.stopping = Some(Instant::now());
        }
    }

    async fn refresh_tokens(&mut self) {
        let Some(prepared) = self.prepared.as_mut() else {
            return;
        };
        for tf in prepared.tokens.iter_mut() {
            let lifetime = Duration::from_secs(tf.expiration_seconds.max(600) as u64);
            if tf.fetched.elapsed() > lifetime * 4 / 5 {
                if let Err(e) = volumes::refresh_token(&self.ctx.client, &self.pod, tf).await {
                    tracing::warn!(pod = %self.key, "refreshing token: {e:#}");
                }
            }
        }
    }

    async fn tick(&mut self) {
        self.prepare().await;
        if self.prepared.is_none() {
            return;
        }
        let policy = restart_policy(&self.pod);
        let grace = grace_of(&self.pod);
        // Init containers, in order.
        for i in 0..self.inits.len() {
            Self::reap(&mut self.inits[i], &policy, grace);
            let c = &self.inits[i];
            if c.done {
                continue;
            }
            if !c.running() && c.exe.is_some() && Instant::now() >= c.next_start {
                self.start(i, true);
            }
            return;
        }
        for i in 0..self.ctrs.len() {
            Self::reap(&mut self.ctrs[i], &policy, grace);
            let c = &self.ctrs[i];
            if !c.done && !c.running() && c.exe.is_some() && Instant::now() >= c.next_start {
                self.start(i, false);
            }
            self.probe(i).await;
        }
        self.refresh_tokens().await;
    }

    fn set_cond(&mut self, t: &'static str, v: bool) -> Value {
        let e = self
            .conditions
            .entry(t)
            .or_insert_with(|| (v, now_rfc3339()));
        if e.0 != v {
            *e = (v, now_rfc3339());
        }
        json!({"type": t, "status": if e.0 { "True" } else { "False" }, "lastTransitionTime": e.1})
    }

    fn status(&mut self) -> Value {
        let policy = restart_policy(&self.pod);
        let inits_done = self
            .inits
            .iter()
            .all(|c| c.done && matches!(&c.state, State::Terminated(t) if t.exit_code == 0));
        let init_failed = self
            .inits
            .iter()
            .any(|c| c.done && matches!(&c.state, State::Terminated(t) if t.exit_code != 0));
        let all_started = self
            .ctrs
            .iter()
            .all(|c| c.running() || matches!(c.state, State::Terminated(_)) || c.restart_count > 0);
        let all_done = self.ctrs.iter().all(|c| c.done);
        let all_ok = self
            .ctrs
            .iter()
            .all(|c| matches!(&c.state, State::Terminated(t) if t.exit_code == 0));
        let phase = if init_failed {
            "Failed"
        } else if !inits_done || self.prepared.is_none() || !all_started {
            "Pending"
        } else if all_done && all_ok {
            "Succeeded"
        } else if all_done && policy == "Never" {
            "Failed"
        } else {
            "Running"
        };
        let ready = phase == "Running" && self.ctrs.iter().all(|c| c.running() && c.ready);
        let mut conds = vec![
            self.set_cond("PodReadyToStartContainers", self.prepared.is_some()),
            self.set_cond("Initialized", inits_done),
            self.set_cond("ContainersReady", ready),
            self.set_cond("Ready", ready),
        ];
        if let Some(err) = &self.prepare_error {
            conds[0]["reason"] = json!("CreateContainerConfigError");
            conds[0]["message"] = json!(err);
        }
        if let Some(c) = self.ctrs.iter().find(
            |c| matches!(&c.state, State::Waiting { reason, .. } if reason == "ImageNotMapped"),
        ) {
            if let State::Waiting { reason, message } = &c.state {
                for i in [2, 3] {
                    conds[i]["reason"] = json!(reason);
                    conds[i]["message"] = json!(message);
                }
            }
        }
        let ip = self.ip.to_string();
        let mut st = json!({
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.start_time,
            "conditions": conds,
            "containerStatuses": self.ctrs.iter().map(|c| c.status_json()).collect::<Vec<_>>(),
        });
        if !self.inits.is_empty() {
            st["initContainerStatuses"] = json!(self
                .inits
                .iter()
                .map(|c| c.status_json())
                .collect::<Vec<_>>());
        }
        if let Some(err) = &self.prepare_error {
            for c in st["containerStatuses"].as_array_mut().into_iter().flatten() {
                c["state"] =
                    json!({"waiting": {"reason": "CreateContainerConfigError", "message": err}});
            }
        }
        st
    }

    async fn report(&mut self) {
        let st = self.status();
        if self.last_report.as_ref() == Some(&st) {
            return;
        }
        let ns = self.pod.metadata.namespace.clone().unwrap_or_default();
        let name = self.pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &ns);
        match api
            .patch_status(
                &name,
                &PatchParams::default(),
                // The uid makes the patch fail (uid is immutable) when the
                // name now belongs to a new pod, e.g. a recreated StatefulSet
                // pod while this task still finishes the old one.
                &Patch::Strategic(json!({"metadata": {"uid": self.uid}, "status": st})),
            )
            .await
        {
            Ok(_) => self.last_report = Some(st),
            Err(kube::Error::Api(s))
                if s.code == 404 || (s.code == 422 && s.message.contains("metadata.uid")) =>
            {
                // Gone or replaced: nothing of ours to report to any more.
                self.last_report = Some(st)
            }
            Err(e) => tracing::warn!(pod = %self.key, "status update failed: {e}"),
        }
    }

    /// SIGTERM everything, SIGKILL what is left after `grace`.
    /// A change of `cancel` to `Gone`/`Shutdown` cuts the grace period short.
    async fn stop_all(
        &mut self,
        grace: Duration,
        mut cancel: Option<&mut watch::Receiver<Signal>>,
    ) {
        for c in self.inits.iter().chain(self.ctrs.iter()) {
            if c.running() {
                c.signal(libc::SIGTERM);
            }
        }
        let mut deadline = Instant::now() + grace;
        loop {
            if let Some(rx) = cancel.as_mut() {
                if rx.has_changed().unwrap_or(true)
                    && matches!(*rx.borrow_and_update(), Signal::Gone | Signal::Shutdown)
                {
                    deadline = Instant::now();
                }
            }
            let mut any = false;
            for c in self.inits.iter_mut().chain(self.ctrs.iter_mut()) {
                if let Some(ch) = c.child.as_mut() {
                    if let Ok(Some(_)) = ch.try_wait() {
                        c.signal(libc::SIGKILL);
                        c.child = None;
                        c.done = true;
                        c.ready = false;
                        c.state = State::Terminated(Terminated {
                            exit_code: 143,
                            signal: None,
                            started: now_rfc3339(),
                            finished: now_rfc3339(),
                            message: None,
                        });
                    } else {
                        any = true;
                    }
                }
            }
            if !any {
                break;
            }
            if Instant::now() >= deadline {
                for c in self.inits.iter_mut().chain(self.ctrs.iter_mut()) {
                    if let Some(mut ch) = c.child.take() {
                        c.signal(libc::SIGKILL);
                        let _ = ch.kill().await;
                        c.done = true;
                    }
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn remove_pod(&self) {
        let ns = self.pod.metadata.namespace.clone().unwrap_or_default();
        let name = self.pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&name, &dp).await {
            Ok(_) => tracing::info!(pod = %self.key, "removed"),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => tracing::warn!(pod = %self.key, "deleting pod: {e}"),
        }
    }
}

/// Runs one pod until it is removed or the runner stops.
pub async fn run_pod(ctx: Arc<Ctx>, pod: Arc<Pod>, mut rx: watch::Receiver<Signal>) {
    let mut rt = PodRt::new(ctx.clone(), pod);
    let terminal = rt.terminal();
    loop {
        let sig = rx.borrow_and_update().clone();
        match sig {
            Signal::Run(p) => rt.pod = p,
            Signal::Terminate(p) => {
                rt.pod = p;
                let grace = grace_of(&rt.pod);
                tracing::info!(pod = %rt.key, "terminating (grace {grace:?})");
                rt.stop_all(grace, Some(&mut rx)).await;
                rt.report().await;
                rt.remove_pod().await;
                break;
            }
            Signal::Gone => {
                rt.stop_all(Duration::ZERO, None).await;
                break;
            }
            Signal::Shutdown => {
                rt.stop_all(Duration::from_secs(3), None).await;
                break;
            }
        }
        if !terminal {
            rt.tick().await;
            rt.report().await;
        }
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() {
                    rt.stop_all(Duration::from_secs(3), None).await;
                    break;
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    ctx.ipam.lock().expect("ipam lock").release(&rt.uid);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_containers_message_is_its_logs_last_80_lines_or_2048_bytes() {
        let dir = std::env::temp_dir().join(format!("moldau-log-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("broker.log");
        let _ = std::fs::remove_file(&log);
        assert_eq!(log_tail(&log), None, "no log, no message");
        std::fs::write(&log, "").unwrap();
        assert_eq!(log_tail(&log), None);
        let lines: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, &lines).unwrap();
        let tail = log_tail(&log).unwrap();
        assert_eq!(tail.lines().count(), 80);
        assert!(tail.starts_with("line 20\n") && tail.ends_with("line 99"));
        std::fs::write(&log, format!("{}\nerror: the end", "x".repeat(5000))).unwrap();
        let tail = log_tail(&log).unwrap();
        assert!(tail.len() <= 2048 && tail.ends_with("error: the end"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn image_mapping() {
        let m = vec![
            ("moldau/broker".to_string(), PathBuf::from("/b")),
            ("moldau/broker-debug".to_string(), PathBuf::from("/d")),
            ("python".to_string(), PathBuf::from("/p")),
        ];
        assert_eq!(image_binary(&m, "moldau/broker:0.1"), Some("/b".into()));
        assert_eq!(image_binary(&m, "moldau/broker"), Some("/b".into()));
        assert_eq!(image_binary(&m, "moldau/broker-debug:1"), Some("/d".into()));
        assert_eq!(
            image_binary(&m, "ghcr.io/moldau/broker@sha256:ab"),
            Some("/b".into())
        );
        assert_eq!(
            image_binary(&m, "localhost:5000/moldau/broker:x"),
            Some("/b".into())
        );
        assert_eq!(image_binary(&m, "python:3.12"), Some("/p".into()));
        assert_eq!(image_binary(&m, "nginx:1"), None);
    }

    /// Removes a directory when dropped.
    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Issue 40 item 8: with the runner's state directory under /tmp (a clone
    /// under /tmp keeps it in <clone>/e2e/.state) and a pod with an emptyDir
    /// at /tmp (the broker pod), the runner's own paths were mapped through
    /// the /tmp mount: KUBECONFIG pointed into the emptyDir, where there is
    /// no kubeconfig, and every broker crash-looped without credentials.
    #[tokio::test]
    async fn runner_paths_are_not_mapped_through_mounts() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        let tmp = TempDir(PathBuf::from(format!(
            "/tmp/moldau-runner-test-{}-{nanos}",
            std::process::id()
        )));
        let state = tmp.0.join("e2e/.state/podrunner");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "b-0", "namespace": "ns", "uid": "u1"},
            "spec": {
                "volumes": [
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-b-0"}},
                ],
                "containers": [{
                    "name": "broker",
                    "image": "moldau/broker:0.1",
                    "workingDir": "/tmp",
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "data", "mountPath": "/var/lib/moldau"},
                    ],
                    "env": [
                        {"name": "MOLDAU_DATA_DIR", "value": "/var/lib/moldau/data"},
                        {"name": "SCRATCH", "value": "/tmp/x"},
                        {"name": "KC_COPY", "value": "$(KUBECONFIG)"},
                        {"name": "UNDER_TMP", "value": "$(SCRATCH)/y:/tmp/z"},
                    ],
                    "args": [
                        "--kubeconfig=$(KUBECONFIG)",
                        "--data-dir=$(MOLDAU_DATA_DIR)",
                        "--pod=$(MOLDAU_POD_DIR)/p",
                        "--tmp=/tmp/t",
                    ],
                }],
            },
        }))
        .expect("pod");
        let pod_dir = state.join("pods/ns_b-0_u1");
        // never dialed: only ConfigMap, Secret and token volumes use it
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("url"),
        ))
        .expect("client");
        let prepared = volumes::prepare(&client, &state, &pod, &pod_dir, "127.100.0.2")
            .await
            .expect("volumes");
        let kubeconfig = pod_dir.join("kubeconfig");
        std::fs::write(&kubeconfig, "{}").expect("kubeconfig");
        let base = runner_env(&pod, &pod_dir, "127.0.0.1", 6443, Some(&kubeconfig));
        let spec = &pod.spec.as_ref().expect("spec").containers[0];
        let launch = container_launch(
            &client,
            &state,
            &pod,
            spec,
            "127.100.0.2",
            &base,
            &prepared.dirs,
        )
        .await
        .expect("launch");

        let env = |k: &str| {
            launch
                .env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{k} not set"))
        };
        let host = |p: &Path| p.to_string_lossy().into_owned();
        let kc = host(&kubeconfig);
        assert_eq!(env("KUBECONFIG"), kc);
        assert!(Path::new(&env("KUBECONFIG")).is_file());
        assert_eq!(env("KC_COPY"), kc);
        assert_eq!(env("MOLDAU_POD_DIR"), host(&pod_dir));
        // everything the runner supplies reaches the process unchanged
        for (k, v) in &base {
            assert_eq!(&env(k), v, "{k}");
        }
        // the spec's own paths are still mapped onto the volumes
        let tmp_vol = pod_dir.join("volumes/tmp");
        let data = volumes::pvc_dir(&state, "ns", "data-b-0");
        assert_eq!(env("MOLDAU_MOUNT_TMP"), host(&tmp_vol));
        assert_eq!(env("SCRATCH"), host(&tmp_vol.join("x")));
        assert_eq!(
            env("UNDER_TMP"),
            format!(
                "{}:{}",
                host(&tmp_vol.join("x/y")),
                host(&tmp_vol.join("z"))
            )
        );
        assert_eq!(env("MOLDAU_DATA_DIR"), host(&data.join("data")));
        assert_eq!(
            launch.args,
            vec![
                format!("--kubeconfig={kc}"),
                format!("--data-dir={}", host(&data.join("data"))),
                format!("--pod={}", host(&pod_dir.join("p"))),
                format!("--tmp={}", host(&tmp_vol.join("t"))),
            ]
        );
        assert_eq!(launch.workdir, Some(tmp_vol.clone()));
        // exec probes: the spec's /tmp is mapped, the runner's own files not
        assert_eq!(
            launch.rewriter.rewrite("/tmp/probe"),
            host(&tmp_vol.join("probe"))
        );
        assert_eq!(launch.rewriter.rewrite(&kc), kc);
    }
}
