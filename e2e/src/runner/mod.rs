//! `moldau-podrunner`: a minimal kubelet for the e2e tests.
//!
//! It registers a Node, keeps its status and its Lease fresh, watches the
//! Pods bound to it and runs each container as a host process (see
//! [`pods`]); it provisions PersistentVolumes for pending claims (see
//! [`pvc`]). Every pod gets its own IP in 127.100.0.0/16 (any 127.x address
//! works on Linux loopback); processes are expected to bind it (`POD_IP`
//! through the downward API). Nothing is dialed outside 127.0.0.0/8. Inside a
//! network namespace a test created, pods may get routable addresses instead
//! (`--pod-network`, made local to that namespace) and resolve names through
//! the cluster DNS (`--cluster-dns`, see [`dns`]).
//!
//! Container output goes to `<state>/pods/<ns>_<pod>_<uid>/logs/`, served to
//! `kubectl logs` by a small kubelet API on 127.0.0.1 (see [`kubelet`]).
//!
//! It does not do: images, namespaces/cgroups isolation, resource limits,
//! container ports/hostPorts, Service networking, `kubectl exec/attach`,
//! lifecycle hooks, sidecar (restartable init) containers, ephemeral
//! containers, propagation of ConfigMap/Secret updates into volumes.

pub mod dns;
pub mod envs;
pub mod kubelet;
pub mod node;
pub mod pods;
pub mod probe;
pub mod pvc;
pub mod volumes;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, Config};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use pods::Signal;

/// Current time, RFC 3339 at second precision (as Kubernetes writes it).
pub fn now_rfc3339() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn parse_image(s: &str) -> Result<(String, PathBuf), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected IMAGE=/path/to/binary, got {s:?}"))?;
    let k = k.split('@').next().unwrap_or(k);
    let k = match k.rfind(':') {
        Some(i) if !k[i..].contains('/') => &k[..i],
        _ => k,
    };
    Ok((k.to_string(), PathBuf::from(v)))
}

/// Command-line flags of `moldau-podrunner`.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "moldau-podrunner",
    about = "Runs the Pods bound to one Node as host processes"
)]
pub struct Args {
    /// Kubeconfig with rights to nodes, leases, pods, PVs, PVCs, storage classes,
    /// configmaps, secrets and serviceaccounts/token.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// Name of the Node to register.
    #[arg(long, default_value = "moldau-e2e-node")]
    pub node_name: String,
    /// Directory for pod dirs, volumes and container logs.
    #[arg(long)]
    pub state_dir: PathBuf,
    /// Image to local binary, e.g. `moldau/broker=/path/to/moldau-broker`
    /// (matched as a prefix of the image name, tag and digest ignored). Repeatable.
    #[arg(long = "image", value_parser = parse_image)]
    pub images: Vec<(String, PathBuf)>,
    /// Pod IPs are allocated from this /16 (must be in 127.0.0.0/8, unless
    /// the runner runs in a network namespace a test created).
    #[arg(long, default_value = "127.100.0.0")]
    pub pod_network: Ipv4Addr,
    /// The cluster DNS server pods resolve through (`dnsPolicy:
    /// ClusterFirst`); only inside a network namespace a test created.
    #[arg(long)]
    pub cluster_dns: Option<Ipv4Addr>,
    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Exit (stopping all pods) when this process is gone.
    #[arg(long)]
    pub parent_pid: Option<u32>,
    /// Write our pid here; removed on exit.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Node status and Lease renewal interval, seconds.
    #[arg(long, default_value_t = 10)]
    pub heartbeat_seconds: u64,
}

/// Pod IP allocation from a /16 in 127.0.0.0/8.
pub struct Ipam {
    base: u32,
    next: u32,
    used: HashMap<u32, String>,
    by_uid: HashMap<String, Ipv4Addr>,
}

impl Ipam {
    pub fn new(base: Ipv4Addr, seed: u32) -> Self {
        Ipam {
            base: u32::from(base) & 0xffff_0000,
            next: seed % 0xffff,
            used: HashMap::new(),
            by_uid: HashMap::new(),
        }
    }

    fn usable(off: u32) -> bool {
        let last = off & 0xff;
        off != 0 && last != 0 && last != 255
    }

    /// The pod's IP: kept if already allocated, `preferred` if free and in
    /// range (a pod adopted after a runner restart), else the next free one.
    pub fn allocate(&mut self, uid: &str, preferred: Option<Ipv4Addr>) -> Ipv4Addr {
        if let Some(ip) = self.by_uid.get(uid) {
            return *ip;
        }
        if let Some(p) = preferred {
            let off = u32::from(p).wrapping_sub(self.base);
            if off < 0x1_0000 && Self::usable(off) && !self.used.contains_key(&off) {
                return self.take(uid, off);
            }
        }
        for _ in 0..0x1_0000 {
            self.next = (self.next + 1) & 0xffff;
            let off = self.next;
            if Self::usable(off) && !self.used.contains_key(&off) {
                return self.take(uid, off);
            }
        }
        panic!("pod network exhausted");
    }

    fn take(&mut self, uid: &str, off: u32) -> Ipv4Addr {
        let ip = Ipv4Addr::from(self.base + off);
        self.used.insert(off, uid.to_string());
        self.by_uid.insert(uid.to_string(), ip);
        ip
    }

    pub fn release(&mut self, uid: &str) {
        if let Some(ip) = self.by_uid.remove(uid) {
            self.used.remove(&(u32::from(ip) - self.base));
        }
    }
}

/// Shared by all pod tasks.
pub struct Ctx {
    pub client: Client,
    pub state: PathBuf,
    pub images: Vec<(String, PathBuf)>,
    pub ipam: Mutex<Ipam>,
    /// API server URL and CA, for pods' kubeconfigs.
    pub server: String,
    pub server_host: String,
    pub server_port: u16,
    pub ca_pem: Vec<u8>,
    /// Cluster DNS server and domain, when pods resolve through one.
    pub cluster_dns: Option<(Ipv4Addr, String)>,
}

struct Task {
    tx: watch::Sender<Signal>,
    handle: JoinHandle<()>,
}

fn parent_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) == 0 };
    // SAFETY: getppid has no preconditions.
    alive && unsafe { libc::getppid() } != 1
}

/// Runs the pod runner until SIGTERM/SIGINT or the parent's exit.
pub async fn run(args: Args) -> Result<()> {
    let own_netns = dns::in_own_network_namespace();
    if args.pod_network.octets()[0] != 127 && !own_netns {
        bail!("--pod-network must be in 127.0.0.0/8 outside a network namespace a test created");
    }
    if args.cluster_dns.is_some() && !own_netns {
        bail!("--cluster-dns is for a network namespace a test created (ip netns exec)");
    }
    let kc = Kubeconfig::read_from(&args.kubeconfig).context("reading kubeconfig")?;
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let server = cfg
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_string();
    let server_host = cfg.cluster_url.host().unwrap_or("127.0.0.1").to_string();
    let server_port = cfg.cluster_url.port_u16().unwrap_or(443);
    let ca_pem = match &cfg.root_cert {
        Some(certs) => certs
            .iter()
            .map(|der| pem_encode(der))
            .collect::<String>()
            .into_bytes(),
        None => vec![],
    };
    let client = Client::try_from(cfg)?;
    std::fs::create_dir_all(&args.state_dir)?;
    // Absolute: the paths under it go to processes that run elsewhere (their
    // working directory is their pod's directory).
    let state_dir = std::path::absolute(&args.state_dir)
        .with_context(|| format!("state dir {}", args.state_dir.display()))?;
    if let Some(p) = &args.pid_file {
        std::fs::write(p, std::process::id().to_string())?;
    }
    let seed = (Timestamp::now().as_second() as u32).wrapping_mul(2654435761);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        state: state_dir.clone(),
        images: args.images.clone(),
        ipam: Mutex::new(Ipam::new(args.pod_network, seed)),
        server,
        server_host,
        server_port,
        ca_pem,
        cluster_dns: args.cluster_dns.map(|ip| (ip, args.cluster_domain.clone())),
    });

    // `kubectl logs` support (see kubelet.rs).
    let (kubelet_listener, acceptor) = kubelet::bind(&state_dir).await?;
    let kubelet_port = kubelet_listener.local_addr()?.port();
    let kubelet_api = tokio::spawn(kubelet::serve(
        kubelet_listener,
        acceptor,
        state_dir.clone(),
    ));

    let node = node::register(&client, &args.node_name).await?;
    let since = super::runner::now_rfc3339();
    node::update_status(&client, &args.node_name, true, &since, kubelet_port).await?;
    let hb = Duration::from_secs(args.heartbeat_seconds.max(1));
    let lease_duration = Duration::from_secs(40);
    if let Err(e) = node::renew_lease(&client, &node, lease_duration).await {
        tracing::warn!("node lease: {e:#}");
    }
    pvc::ensure_storage_class(&client).await?;
    tracing::info!(node = %args.node_name, "registered; pods get IPs in {}/16", args.pod_network);

    let (stop_tx, mut stop_rx) = watch::channel(false);
    // Heartbeats.
    let heartbeat = {
        let client = client.clone();
        let name = args.node_name.clone();
        let since = since.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(hb).await;
                if let Err(e) =
                    node::update_status(&client, &name, true, &since, kubelet_port).await
                {
                    tracing::warn!("node status: {e:#}");
                }
                if let Err(e) = node::renew_lease(&client, &node, lease_duration).await {
                    tracing::warn!("node lease: {e:#}");
                }
            }
        })
    };
    // Volumes.
    let provisioner = {
        let client = client.clone();
        let state = state_dir.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = pvc::sync(&client, &state).await {
                    tracing::warn!("volume provisioning: {e:#}");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    // Stop conditions.
    {
        let stop_tx = stop_tx.clone();
        let parent = args.parent_pid;
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .expect("SIGINT handler");
            loop {
                tokio::select! {
                    _ = term.recv() => break,
                    _ = int.recv() => break,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {
                        if let Some(p) = parent {
                            if !parent_alive(p) {
                                tracing::info!("parent {p} is gone");
                                break;
                            }
                        }
                    }
                }
            }
            let _ = stop_tx.send(true);
        });
    }

    let pods: Api<Pod> = Api::all(client.clone());
    let wc = watcher::Config::default().fields(&format!("spec.nodeName={}", args.node_name));
    let mut stream = watcher::watcher(pods, wc).default_backoff().boxed();
    let mut tasks: HashMap<String, Task> = HashMap::new();
    let mut listing: Option<HashSet<String>> = None;
    loop {
        let ev = tokio::select! {
            ev = stream.next() => ev,
            _ = stop_rx.changed() => break,
        };
        let Some(ev) = ev else { break };
        tasks.retain(|_, t| !t.handle.is_finished());
        match ev {
            Ok(Event::Init) => listing = Some(HashSet::new()),
            Ok(Event::InitApply(p)) | Ok(Event::Apply(p)) => {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if let Some(l) = listing.as_mut() {
                    l.insert(uid.clone());
                }
                let p = Arc::new(p);
                let sig = if p.metadata.deletion_timestamp.is_some() {
                    Signal::Terminate(p.clone())
                } else {
                    Signal::Run(p.clone())
                };
                match tasks.get(&uid) {
                    Some(t) => {
                        let _ = t.tx.send(sig);
                    }
                    None => {
                        let (tx, rx) = watch::channel(sig);
                        let handle = tokio::spawn(pods::run_pod(ctx.clone(), p, rx));
                        tasks.insert(uid, Task { tx, handle });
                    }
                }
            }
            Ok(Event::Delete(p)) => {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if let Some(t) = tasks.remove(&uid) {
                    let _ = t.tx.send(Signal::Gone);
                }
            }
            Ok(Event::InitDone) => {
                if let Some(seen) = listing.take() {
                    tasks.retain(|uid, t| {
                        if seen.contains(uid) {
                            true
                        } else {
                            let _ = t.tx.send(Signal::Gone);
                            false
                        }
                    });
                }
            }
            Err(e) => tracing::warn!("pod watch: {e}"),
        }
    }

    tracing::info!("stopping {} pod(s)", tasks.len());
    heartbeat.abort();
    provisioner.abort();
    kubelet_api.abort();
    let mut handles = vec![];
    for (_, t) in tasks.drain() {
        let _ = t.tx.send(Signal::Shutdown);
        handles.push(t.handle);
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(handles)).await;
    // Pods already being deleted would stay Terminating with nobody to
    // finish them: their processes are stopped, so remove them.
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        remove_terminating(&client, &args.node_name),
    )
    .await;
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        node::update_status(
            &client,
            &args.node_name,
            false,
            &super::runner::now_rfc3339(),
            kubelet_port,
        ),
    )
    .await;
    if let Some(p) = &args.pid_file {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

async fn remove_terminating(client: &Client, node: &str) {
    let api: Api<Pod> = Api::all(client.clone());
    let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
    let Ok(list) = api.list(&lp).await else {
        return;
    };
    for p in list.items {
        if p.metadata.deletion_timestamp.is_none() {
            continue;
        }
        let (Some(ns), Some(name)) = (p.metadata.namespace.clone(), p.metadata.name.clone()) else {
            continue;
        };
        let dp = kube::api::DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(kube::api::Preconditions {
                uid: p.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        let _ = Api::<Pod>::namespaced(client.clone(), &ns)
            .delete(&name, &dp)
            .await;
    }
}

fn pem_encode(der: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk.len();
        let v = (chunk[0] as u32) << 16
            | (*chunk.get(1).unwrap_or(&0) as u32) << 8
            | *chunk.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= n {
                b64.push(T[(v >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("ascii"));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipam_unique_and_stable() {
        let mut ipam = Ipam::new("127.100.0.0".parse().unwrap(), 0xfffe);
        let a = ipam.allocate("a", None);
        let b = ipam.allocate("b", None);
        assert_ne!(a, b);
        assert_eq!(ipam.allocate("a", None), a);
        assert_eq!(a.octets()[..2], [127, 100]);
        assert_ne!(a.octets()[3], 0);
        let c = ipam.allocate("c", Some(b));
        assert_ne!(c, b);
        ipam.release("b");
        assert_eq!(ipam.allocate("d", Some(b)), b);
    }

    #[test]
    fn pem() {
        let p = pem_encode(b"hello");
        assert!(p.contains("aGVsbG8=\n"));
    }

    #[test]
    fn image_flag() {
        assert_eq!(
            parse_image("moldau/broker:latest=/x").unwrap(),
            ("moldau/broker".into(), PathBuf::from("/x"))
        );
        assert_eq!(
            parse_image("localhost:5000/b=/y").unwrap().0,
            "localhost:5000/b"
        );
    }
}
