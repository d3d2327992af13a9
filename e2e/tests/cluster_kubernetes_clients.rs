//! The client suite's cluster checks (`e2e/clients/test_cluster.py`: kcat
//! and confluent-kafka through one bootstrap address, leaders on every
//! broker and every partition round-tripping, a consumer group of three
//! that spreads and commits, coordinators on different brokers, a
//! full-cluster restart that keeps the cluster id, topic ids, assignments
//! and committed offsets) against three brokers in cluster mode
//! `kubernetes` on the real API server of the test control plane.
//!
//! One copy of the checks: this test brings up the control plane, applies
//! the CRDs and makes a namespace, then runs `e2e/clients/run.sh
//! test_cluster.py` with `MOLDAU_CLUSTER_BACKEND=kubernetes`,
//! `MOLDAU_CLUSTER_ARGS` (the cluster-mode arguments of
//! [`moldau_e2e::brokers`], as JSON) and the brokers' environment
//! (KUBECONFIG). pytest's broker harness starts, stops and restarts the
//! three brokers as in `dir` mode. Passed means: pytest exited 0, every
//! test of the module ran (none skipped), and the namespace holds the
//! cluster's controller Lease (taken over again after the restart) and its
//! metadata objects — the brokers really were in `kubernetes` mode.
//!
//! Needs the client suite's `.venv` and kcat (`scripts/install-test-deps.sh`,
//! the `install` stage of `scripts/test-all.sh`). Bounded: pytest is killed
//! after [`PYTEST_TIMEOUT`] (each of its tests has pytest-timeout's 180 s),
//! and its brokers die with it.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use moldau_coordination::shard::MetadataShard;
use moldau_e2e::brokers::{kubernetes_cluster_args, kubernetes_cluster_env};
use moldau_e2e::{paths, run_with_timeout, TestNamespace};

const CLUSTER: &str = "pyclients";
const PYTEST_TIMEOUT: Duration = Duration::from_secs(600);

/// The value of `attr` on the first `<testsuite ...>` element of a JUnit
/// report (pytest writes one suite).
fn suite_attr(xml: &str, attr: &str) -> Option<u64> {
    let start = xml.find("<testsuite ")?;
    let tag = &xml[start..start + xml[start..].find('>')?];
    let at = tag.find(&format!(" {attr}=\""))? + attr.len() + 3;
    tag[at..at + tag[at..].find('"')?].parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_suite_cluster_checks_pass_against_kubernetes_mode() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    let repo = paths::e2e_dir().join("..");
    let python = repo.join(".venv/bin/python");
    ensure!(
        python.exists(),
        "{} is missing: run scripts/install-test-deps.sh",
        python.display()
    );
    moldau_e2e::ensure_control_plane()?;
    moldau_e2e::apply_repo_crds()?;
    let ns = TestNamespace::new("kclients").await?;
    let bin = paths::workspace_bin("moldau-broker", "moldau-broker");
    let dir = paths::state_dir()
        .join("cluster-kubernetes-clients")
        .join(&ns.name);
    std::fs::create_dir_all(&dir)?;
    let junit = dir.join("junit.xml");
    let args = serde_json::to_string(&kubernetes_cluster_args(CLUSTER, &ns.name))?;

    let mut cmd = Command::new("bash");
    cmd.arg(paths::e2e_dir().join("clients/run.sh"))
        .arg("test_cluster.py")
        .envs(kubernetes_cluster_env())
        .env("MOLDAU_TEST_TARGET", "moldau")
        .env("MOLDAU_BROKER_BIN", &bin)
        .env("MOLDAU_CLUSTER_BACKEND", "kubernetes")
        .env("MOLDAU_CLUSTER_ARGS", &args)
        .env("MOLDAU_CLIENTS_JUNIT", &junit);
    let started = Instant::now();
    let out =
        tokio::task::spawn_blocking(move || run_with_timeout(&mut cmd, PYTEST_TIMEOUT)).await??;
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "pytest test_cluster.py (kubernetes mode, namespace {}) in {:?}:\n{report}",
        ns.name,
        started.elapsed()
    );
    ensure!(out.status.success(), "pytest failed ({})", out.status);

    // Every test of the module ran, and passed.
    let xml =
        std::fs::read_to_string(&junit).with_context(|| format!("reading {}", junit.display()))?;
    let module = std::fs::read_to_string(paths::e2e_dir().join("clients/test_cluster.py"))?;
    let defined = module
        .lines()
        .filter(|l| l.starts_with("def test_"))
        .count() as u64;
    let count = |attr| suite_attr(&xml, attr).with_context(|| format!("{attr} in {xml}"));
    assert_eq!(
        count("tests")?,
        defined,
        "every test of test_cluster.py ran"
    );
    assert_eq!(count("skipped")?, 0, "none skipped");
    assert_eq!(count("failures")? + count("errors")?, 0);

    // The brokers were in kubernetes mode: they elected their controller
    // through the Lease (taken over again after the full restart; the
    // brokers released it when pytest stopped them) and kept the cluster's
    // metadata in this namespace.
    let lease = ns
        .api::<Lease>()
        .get(&format!("{CLUSTER}-controller"))
        .await
        .context("the controller Lease")?;
    let transitions = lease.spec.and_then(|s| s.lease_transitions);
    assert!(
        transitions.is_some_and(|t| t >= 1),
        "a controller term after the full restart: leaseTransitions {transitions:?}"
    );
    let objects = ns
        .api::<MetadataShard>()
        .list(&ListParams::default().labels(&format!("moldau.io/cluster={CLUSTER}")))
        .await?
        .items;
    let cluster_object = format!("{CLUSTER}-cluster");
    assert!(
        objects
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some(cluster_object.as_str())),
        "the cluster object {cluster_object}"
    );
    let shards: BTreeSet<String> = objects
        .into_iter()
        .filter_map(|s| s.spec.topic.map(|t| t.name))
        .collect();
    for prefix in ["spread-", "grouped-"] {
        assert!(
            shards.iter().any(|t| t.starts_with(prefix)),
            "a {prefix}* topic object in {}: {shards:?}",
            ns.name
        );
    }
    Ok(())
}
