//! Moldau end-to-end test harness.
//!
//! Owns everything under `e2e/` except `e2e/clients/`:
//! - [`paths`]: where the built tools, the state directory and the kubeconfig live;
//! - [`brokers`]: how a Moldau broker in cluster mode `kubernetes` is started
//!   against the control plane (its arguments and environment);
//! - [`cluster`]: starting (or reusing) the real control plane, kube clients,
//!   kubectl/helm runners, per-test namespaces and wait helpers;
//! - [`netns_plane`]: the same plane inside a network namespace the test
//!   creates, where pods have routable addresses and CoreDNS serves
//!   `cluster.local` (Service and per-pod names);
//! - [`runner`]: the pod runner (`moldau-podrunner`), a minimal kubelet that
//!   runs the containers of Pods bound to its Node as host processes;
//! - [`leader`]: Lease-based leader election for tests (a thin wrapper over
//!   the shared elector of `moldau_coordination::lease`);
//! - [`ports`]: loopback ports for the processes tests start, never the
//!   same one twice in a process;
//! - [`layering`]: the module graph of a crate's sources and its loops,
//!   for the broker's and the operator's layering guards (it reads their
//!   source text, nothing else of them).
//!
//! It must not depend on the broker's or the operator's internals: it drives
//! them only as processes and through the Kubernetes API.

pub mod brokers;
pub mod cluster;
pub mod layering;
pub mod leader;
pub mod netns_plane;
pub mod paths;
pub mod ports;
pub mod runner;

pub use cluster::*;
