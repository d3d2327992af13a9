//! The client suite's cluster and replication checks against three brokers
//! in cluster mode `kubernetes` on the real API server of the test control
//! plane:
//!
//! - `e2e/clients/test_cluster.py`: kcat and confluent-kafka through one
//!   bootstrap address, leaders on every broker and every partition
//!   round-tripping, a consumer group of three that spreads and commits,
//!   coordinators on different brokers, a full-cluster restart that keeps
//!   the cluster id, topic ids, assignments and committed offsets;
//! - `e2e/clients/test_replication.py` (RF=3, `min.insync.replicas=2`): the
//!   leader of each partition killed (-9) in turn under confluent-kafka and
//!   kcat `acks=all` producers, two of three brokers stopped
//!   (NOT_ENOUGH_REPLICAS, consumers still read, ISRs full again), a rolling
//!   restart under load and the Java client through a leader kill — every
//!   acknowledged record consumed exactly once, in order.
//!
//! One copy of the checks: this test brings up the control plane, applies
//! the CRDs and makes a namespace, then runs both modules in one
//! `e2e/clients/run.sh` with `MOLDAU_CLUSTER_BACKEND=kubernetes`,
//! `MOLDAU_CLUSTER_ARGS` (the cluster-mode arguments of
//! [`moldau_e2e::brokers`], as JSON) and the brokers' environment
//! (KUBECONFIG). pytest's broker harness starts, stops, kills and restarts
//! the brokers as in `dir` mode; each module has a Kafka cluster of its own
//! in the namespace (`pyclients`, and `pyclients-repl` for the replication
//! module). Passed means: pytest exited 0, every test of both modules ran
//! (none skipped), and the namespace holds each cluster's controller Lease
//! (taken over at least once: the full restart, the kills and the rolling
//! restart move it) and its metadata objects, the replication module's
//! topics with three replicas per partition and `min.insync.replicas=2` —
//! the brokers really were in `kubernetes` mode.
//!
//! The broker binary is `MOLDAU_BROKER_BIN` when set, else this workspace's
//! (built like the test, debug or release). Needs the client suite's
//! `.venv`, kcat and the Java driver (`scripts/install-test-deps.sh`, the
//! `install` stage of `scripts/test-all.sh`). Bounded: pytest is killed after
//! [`PYTEST_TIMEOUT`] (each of its tests has pytest-timeout's 180 s), and
//! its brokers die with it.

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
/// The replication module's cluster (harness/cluster.py, `cluster_args("repl")`).
const REPL_CLUSTER: &str = "pyclients-repl";
const MODULES: [&str; 2] = ["test_cluster.py", "test_replication.py"];
const PYTEST_TIMEOUT: Duration = Duration::from_secs(900);

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
    // MOLDAU_BROKER_BIN (as for the client suite) pins a binary, e.g. a
    // copy another build cannot replace mid-run; else this workspace's.
    let bin = match std::env::var_os("MOLDAU_BROKER_BIN").filter(|b| !b.is_empty()) {
        Some(b) => std::path::PathBuf::from(b),
        None => paths::workspace_bin("moldau-broker", "moldau-broker"),
    };
    ensure!(bin.exists(), "no broker binary at {}", bin.display());
    let dir = paths::state_dir()
        .join("cluster-kubernetes-clients")
        .join(&ns.name);
    std::fs::create_dir_all(&dir)?;
    let junit = dir.join("junit.xml");
    let args = serde_json::to_string(&kubernetes_cluster_args(CLUSTER, &ns.name))?;

    let mut cmd = Command::new("bash");
    cmd.arg(paths::e2e_dir().join("clients/run.sh"))
        .args(MODULES)
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
        "pytest {} (kubernetes mode, namespace {}) in {:?}:\n{report}",
        MODULES.join(" "),
        ns.name,
        started.elapsed()
    );
    ensure!(out.status.success(), "pytest failed ({})", out.status);

    // Every test of both modules ran, and passed.
    let xml =
        std::fs::read_to_string(&junit).with_context(|| format!("reading {}", junit.display()))?;
    let mut defined = 0;
    for module in MODULES {
        let text = std::fs::read_to_string(paths::e2e_dir().join("clients").join(module))?;
        let tests = text.lines().filter(|l| l.starts_with("def test_")).count() as u64;
        ensure!(tests > 0, "no tests in {module}");
        let ran = xml
            .matches(&format!("classname=\"{}\"", module.trim_end_matches(".py")))
            .count() as u64;
        assert_eq!(ran, tests, "every test of {module} ran");
        defined += tests;
    }
    let count = |attr| suite_attr(&xml, attr).with_context(|| format!("{attr} in {xml}"));
    assert_eq!(count("tests")?, defined, "every test of {MODULES:?} ran");
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

    // The replication module's cluster, apart from the first: its own
    // Lease, taken over at least once (the rolling restart stops every
    // broker, the controller among them), and its topics' objects, with
    // three replicas per partition and min.insync.replicas=2.
    let lease = ns
        .api::<Lease>()
        .get(&format!("{REPL_CLUSTER}-controller"))
        .await
        .context("the replication cluster's controller Lease")?;
    let transitions = lease.spec.and_then(|s| s.lease_transitions);
    assert!(
        transitions.is_some_and(|t| t >= 1),
        "{REPL_CLUSTER}: a controller term after the rolling restart: leaseTransitions {transitions:?}"
    );
    let topics: Vec<_> = ns
        .api::<MetadataShard>()
        .list(&ListParams::default().labels(&format!("moldau.io/cluster={REPL_CLUSTER}")))
        .await?
        .items
        .into_iter()
        .filter_map(|s| s.spec.topic)
        .collect();
    for prefix in ["repl-kill-", "repl-minisr-", "repl-roll-", "repl-java-"] {
        let topic = topics
            .iter()
            .find(|t| t.name.starts_with(prefix))
            .with_context(|| {
                format!("a {prefix}* topic object of {REPL_CLUSTER} in {}", ns.name)
            })?;
        assert_eq!(topic.replication_factor, 3, "{}", topic.name);
        assert_eq!(
            topic.configs.get("min.insync.replicas").map(String::as_str),
            Some("2"),
            "{}",
            topic.name
        );
        assert!(
            topic.partitions.len() == 3 && topic.partitions.iter().all(|p| p.replicas.len() == 3),
            "{}: three partitions of three replicas: {:?}",
            topic.name,
            topic.partitions
        );
    }
    assert!(
        !topics.iter().any(|t| t.name.starts_with("spread-")),
        "the two modules' clusters share no topic"
    );
    Ok(())
}
