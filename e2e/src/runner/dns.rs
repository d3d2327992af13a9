//! Cluster DNS for pod processes, as a kubelet gives it with
//! `dnsPolicy: ClusterFirst`: each pod's own `resolv.conf` (the cluster DNS
//! server, the search path `<ns>.svc.<domain> svc.<domain> <domain>`,
//! `ndots:5`), bind-mounted over `/etc/resolv.conf` in a private mount
//! namespace of each container process, so the resolver of every language
//! (glibc, Go, Java) reads it unchanged.
//!
//! Only used when the runner is given `--cluster-dns`, which it accepts only
//! inside a network namespace a test created (see
//! [`in_own_network_namespace`]): there pods have routable addresses, which
//! the API server accepts in EndpointSlices, so CoreDNS can serve their names.
//! `dnsPolicy: Default` (the node's resolver) and `None` keep the runner's own
//! `/etc/resolv.conf`; `dnsConfig` is not applied.

use std::ffi::CString;
use std::net::Ipv4Addr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Pod;

/// The resolver configuration of a pod in `namespace`.
pub fn resolv_conf(server: Ipv4Addr, namespace: &str, domain: &str) -> String {
    format!("nameserver {server}\nsearch {namespace}.svc.{domain} svc.{domain} {domain}\noptions ndots:5\n")
}

/// Whether `pod` resolves through the cluster DNS (`ClusterFirst`, the
/// default, or `ClusterFirstWithHostNet`).
pub fn uses_cluster_dns(pod: &Pod) -> bool {
    let policy = pod.spec.as_ref().and_then(|s| s.dns_policy.as_deref());
    matches!(
        policy,
        None | Some("ClusterFirst") | Some("ClusterFirstWithHostNet")
    )
}

/// True when this process runs in a network namespace created with `ip
/// netns` (one a test created, listed under `/run/netns`), not the
/// machine's own.
pub fn in_own_network_namespace() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(me) = std::fs::metadata("/proc/self/ns/net") else {
        return false;
    };
    let Ok(named) = std::fs::read_dir("/run/netns") else {
        return false;
    };
    named
        .flatten()
        .filter_map(|e| std::fs::metadata(e.path()).ok())
        .any(|ns| (ns.dev(), ns.ino()) == (me.dev(), me.ino()))
}

/// Makes `cmd`'s process see `file` as `/etc/resolv.conf`, in a mount
/// namespace of its own whose mounts do not propagate back to the machine.
pub fn mount_as_resolv_conf(cmd: &mut tokio::process::Command, file: &Path) -> Result<()> {
    let source = CString::new(file.as_os_str().as_bytes()).context("resolv.conf path")?;
    let target = CString::new("/etc/resolv.conf").expect("no NUL");
    let root = CString::new("/").expect("no NUL");
    // SAFETY: the closure runs in the forked child before exec and only makes
    // raw system calls on strings allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let private = libc::MS_REC | libc::MS_PRIVATE;
            if libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                private,
                std::ptr::null(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_searches_its_namespace_then_the_cluster() {
        assert_eq!(
            resolv_conf(Ipv4Addr::new(10, 96, 0, 10), "team-a", "cluster.local"),
            "nameserver 10.96.0.10\nsearch team-a.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
        );
    }

    #[test]
    fn only_cluster_first_policies_use_the_cluster_dns() {
        let pod = |policy: Option<&str>| Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                dns_policy: policy.map(String::from),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(uses_cluster_dns(&pod(None)));
        assert!(uses_cluster_dns(&pod(Some("ClusterFirst"))));
        assert!(uses_cluster_dns(&pod(Some("ClusterFirstWithHostNet"))));
        assert!(!uses_cluster_dns(&pod(Some("Default"))));
        assert!(!uses_cluster_dns(&pod(Some("None"))));
    }
}
