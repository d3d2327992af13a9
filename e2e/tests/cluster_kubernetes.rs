//! Three broker processes in cluster mode `kubernetes` against the real API
//! server of the test control plane (each on 127.0.0.1, credentials from the
//! admin kubeconfig): they elect a controller through the Lease
//! `<cluster>-controller`, keep the metadata in `MetadataShard` objects and
//! are one Kafka cluster to kcat through one bootstrap address.
//!
//! Then the controller is killed (kill -9) and another takes over within the
//! lease duration; the new one is stopped (SIGSTOP) until a third broker has
//! taken over and changed metadata, and let go again (SIGCONT): it writes
//! nothing more (every object carries the newest epoch and writer), steps
//! down, and no partition's leader epoch goes back. The killed broker
//! restarts and rejoins. Every failover timing is at its default, and both
//! losses of a controller (killed, paused) end with its broker fenced
//! within issue 40's bound (12 s: Kafka's 9 s session and a heartbeat).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use moldau_coordination::shard::MetadataShard;
use moldau_e2e::brokers::{kubernetes_cluster_env, kubernetes_membership_args};
use moldau_e2e::{paths, TestNamespace};
use serde_json::Value;

const CLUSTER: &str = "kc";
/// The default `controller.lease.duration.ms`: the brokers run with every
/// failover timing at its default (lease 8 s, renewal 1 s, heartbeat 2 s,
/// session 9 s), so what this test measures is what a user gets.
const LEASE_MS: u64 = 8_000;
/// Issue 40's bound on losing any one broker with default settings:
/// Kafka's session timeout (9 s) plus a heartbeat (2 s), and a second for
/// the clients to see it.
const FAILOVER_BOUND: Duration = Duration::from_secs(12);

struct Broker {
    node: i32,
    kafka: String,
    child: Child,
    log: PathBuf,
}

impl Drop for Broker {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    moldau_e2e::ports::unused_loopback_port()
}

fn install_crd() -> Result<()> {
    moldau_e2e::apply_repo_crds()
}

fn spawn(bin: &Path, ns: &str, node: i32, kafka_port: u16, dir: &Path) -> Result<Broker> {
    let kafka = format!("127.0.0.1:{kafka_port}");
    let data = dir.join(format!("data-{node}"));
    let log = dir.join(format!("broker-{node}-{}.log", free_port()));
    let out = std::fs::File::create(&log)?;
    let child = Command::new(bin)
        .args(kubernetes_membership_args(CLUSTER, ns))
        .args(["--node-id", &node.to_string()])
        .args(["--listen", &kafka])
        .args(["--http-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(&data)
        .args(["--set", "num.partitions=12"])
        .args(["--set", "offsets.topic.num.partitions=3"])
        .envs(kubernetes_cluster_env())
        .stdout(out.try_clone()?)
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .context("spawning moldau-broker")?;
    Ok(Broker {
        node,
        kafka,
        child,
        log,
    })
}

fn kcat(args: &[&str], stdin: &[u8]) -> Result<Vec<u8>> {
    use std::io::Write;
    // bounded: a kcat that cannot finish fails the test instead of hanging it
    let mut child = Command::new("timeout")
        .args(["60", "kcat"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("kcat (Debian package kcat)")?;
    child.stdin.take().unwrap().write_all(stdin)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("kcat {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}

/// `(brokers, controller, {partition: (leader, leader epoch?)})` per kcat -L.
fn view(bootstrap: &str, topic: &str) -> Result<(BTreeSet<i64>, i64, BTreeMap<i64, i64>)> {
    let md: Value = serde_json::from_slice(&kcat(
        &["-L", "-J", "-m", "5", "-b", bootstrap, "-t", topic],
        b"",
    )?)?;
    let brokers = md["brokers"]
        .as_array()
        .map(|b| b.iter().filter_map(|x| x["id"].as_i64()).collect())
        .unwrap_or_default();
    let mut parts = BTreeMap::new();
    for t in md["topics"].as_array().into_iter().flatten() {
        if t["topic"] == topic {
            for p in t["partitions"].as_array().into_iter().flatten() {
                parts.insert(
                    p["partition"].as_i64().unwrap(),
                    p["leader"].as_i64().unwrap(),
                );
            }
        }
    }
    Ok((brokers, md["controllerid"].as_i64().unwrap_or(-1), parts))
}

async fn until<T>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + within;
    let mut last = String::new();
    loop {
        match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() > deadline {
            bail!("never {what} within {within:?}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `(name, epoch, writer, leader epochs by partition)` of every shard.
async fn shards(ns: &TestNamespace) -> Result<Vec<(String, i64, i32, Vec<i32>)>> {
    let list = ns
        .api::<MetadataShard>()
        .list(&ListParams::default().labels(&format!("moldau.io/cluster={CLUSTER}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .map(|s| {
            let epochs = s
                .spec
                .topic
                .as_ref()
                .map(|t| t.partitions.iter().map(|p| p.leader_epoch).collect())
                .unwrap_or_default();
            (
                s.metadata.name.unwrap_or_default(),
                s.spec.epoch,
                s.spec.writer,
                epochs,
            )
        })
        .collect())
}

/// Every topic object's topic id and replica assignment, by topic name.
async fn topic_layout(
    shards: &kube::Api<MetadataShard>,
) -> Result<BTreeMap<String, (String, Vec<Vec<i32>>)>> {
    Ok(shards
        .list(&ListParams::default().labels("moldau.io/shard=topic"))
        .await?
        .items
        .into_iter()
        .filter_map(|s| s.spec.topic)
        .map(|t| {
            let replicas = t.partitions.iter().map(|p| p.replicas.clone()).collect();
            (t.name, (t.topic_id, replicas))
        })
        .collect())
}

fn stop(b: &mut Broker, signal: i32) {
    unsafe { libc::kill(b.child.id() as i32, signal) };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_form_one_cluster_through_kubernetes_and_fence_a_paused_controller() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipped");
        return Ok(());
    }
    moldau_e2e::ensure_control_plane()?;
    install_crd()?;
    let ns = TestNamespace::new("kcluster").await?;
    let bin = paths::workspace_bin("moldau-broker", "moldau-broker");
    let dir = paths::state_dir().join("cluster-kubernetes").join(&ns.name);
    std::fs::create_dir_all(&dir)?;
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut brokers: BTreeMap<i32, Broker> = BTreeMap::new();
    for n in 0..3 {
        brokers.insert(n, spawn(&bin, &ns.name, n, ports[n as usize], &dir)?);
    }
    let logs = |bs: &BTreeMap<i32, Broker>| {
        bs.values()
            .map(|b| {
                format!(
                    "--- broker {} ({})\n{}",
                    b.node,
                    b.log.display(),
                    std::fs::read_to_string(&b.log)
                        .unwrap_or_default()
                        .lines()
                        .rev()
                        .take(15)
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let all: BTreeSet<i64> = [0, 1, 2].into();
    let bootstrap = brokers[&0].kafka.clone();

    // One cluster: every broker lists all three and the same controller.
    let controller = until(
        "three brokers and a controller",
        Duration::from_secs(60),
        || {
            let mut seen = BTreeSet::new();
            for b in brokers.values() {
                let (ids, c, _) = view(&b.kafka, "none")?;
                if ids != all || c < 0 {
                    return Ok(None);
                }
                seen.insert(c);
            }
            Ok((seen.len() == 1).then(|| *seen.iter().next().unwrap()))
        },
    )
    .await
    .with_context(|| logs(&brokers))?;
    let lease = ns
        .api::<Lease>()
        .get(&format!("{CLUSTER}-controller"))
        .await?;
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.contains(&format!("broker-{controller}-")),
        "Lease held by {holder}, controller {controller}"
    );

    // A topic auto-created by kcat: 12 partitions, leaders on all three;
    // records to every partition come back through one bootstrap.
    for p in 0..12 {
        kcat(
            &["-P", "-b", &bootstrap, "-t", "orders", "-p", &p.to_string()],
            format!("r{p}\n").as_bytes(),
        )?;
    }
    let (_, _, leaders) = until("12 led partitions", Duration::from_secs(30), || {
        let v = view(&bootstrap, "orders")?;
        Ok((v.2.len() == 12 && v.2.values().all(|l| *l >= 0)).then_some(v))
    })
    .await?;
    let on: BTreeSet<i64> = leaders.values().copied().collect();
    assert_eq!(on, all, "leaders on every broker: {leaders:?}");
    let consumed = kcat(&["-C", "-b", &bootstrap, "-t", "orders", "-e", "-q"], b"")?;
    let mut got: Vec<String> = String::from_utf8(consumed)?
        .lines()
        .map(str::to_string)
        .collect();
    got.sort();
    let mut want: Vec<String> = (0..12).map(|p| format!("r{p}")).collect();
    want.sort();
    assert_eq!(got, want);
    let first = shards(&ns).await?;
    assert!(first.iter().any(|s| s.0 == format!("{CLUSTER}-cluster")));
    let epoch1 = first.iter().map(|s| s.1).max().unwrap();

    // kill -9 of the controller: another takes over within the lease.
    let mut dead = brokers.remove(&(controller as i32)).unwrap();
    let killed_at = Instant::now();
    stop(&mut dead, libc::SIGKILL);
    let _ = dead.child.wait();
    let survivors: BTreeSet<i64> = brokers.keys().map(|k| *k as i64).collect();
    let some = brokers.values().next().unwrap().kafka.clone();
    let second = until("a new controller", Duration::from_secs(30), || {
        let (_, c, _) = view(&some, "orders")?;
        Ok(survivors.contains(&c).then_some(c))
    })
    .await
    .with_context(|| logs(&brokers))?;
    let elected = killed_at.elapsed();
    until("the dead broker fenced", Duration::from_secs(30), || {
        let (ids, _, _) = view(&some, "orders")?;
        Ok((ids == survivors).then_some(()))
    })
    .await
    .with_context(|| logs(&brokers))?;
    let fenced = killed_at.elapsed();
    eprintln!(
        "controller failover: kill -9 to a new controller in Metadata {elected:?} (lease {LEASE_MS} ms), to the dead broker fenced {fenced:?} (session 9 s)",
    );
    // The previous controller's broker is fenced a short grace after the
    // take-over (issue 40), not a whole session timeout later: within
    // Kafka's bound, which the old rule (lease, then a session) missed.
    assert!(
        fenced < FAILOVER_BOUND,
        "the dead controller's broker fenced only after {fenced:?}"
    );
    let created_at = Instant::now();
    kcat(&["-P", "-b", &some, "-t", "after-kill", "-p", "0"], b"x\n")?;
    until(
        "the topic created after the failover, on every broker",
        Duration::from_secs(30),
        || {
            for b in brokers.values() {
                if view(&b.kafka, "after-kill")?.2.len() != 12 {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    eprintln!(
        "topic create (auto-created by a produce) to every broker's Metadata: {:?}",
        created_at.elapsed()
    );
    let epoch2 = shards(&ns).await?.iter().map(|s| s.1).max().unwrap();
    assert!(epoch2 > epoch1, "a new term: {epoch1} → {epoch2}");

    // SIGSTOP the second controller until the third takes over and writes.
    let before_pause = shards(&ns).await?;
    let mut paused = brokers.remove(&(second as i32)).unwrap();
    stop(&mut paused, libc::SIGSTOP);
    let paused_at = Instant::now();
    let last = brokers.values().next().unwrap();
    let last_bootstrap = last.kafka.clone();
    let third = last.node as i64;
    until(
        "the third controller, the paused one fenced",
        Duration::from_secs(30),
        || {
            let (ids, c, _) = view(&last_bootstrap, "orders")?;
            Ok((c == third && ids == [third].into()).then_some(()))
        },
    )
    .await
    .with_context(|| logs(&brokers))?;
    let replaced = paused_at.elapsed();
    eprintln!("controller paused: a new controller, the paused one fenced after {replaced:?}");
    assert!(
        replaced < FAILOVER_BOUND,
        "the paused controller's broker fenced only after {replaced:?}"
    );
    kcat(
        &["-P", "-b", &last_bootstrap, "-t", "during-pause", "-p", "0"],
        b"y\n",
    )?;
    until(
        "the topic created during the pause",
        Duration::from_secs(30),
        || Ok((view(&last_bootstrap, "during-pause")?.2.len() == 12).then_some(())),
    )
    .await?;
    let after_takeover = shards(&ns).await?;
    stop(&mut paused, libc::SIGCONT);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after_resume = shards(&ns).await?;
    let newest = after_resume.iter().map(|s| s.1).max().unwrap();
    assert!(newest > epoch2);
    for (name, epoch, writer, _) in &after_resume {
        assert_eq!(
            (*epoch, *writer as i64),
            (newest, third),
            "{name} written only by the newest controller"
        );
    }
    assert_eq!(
        after_takeover
            .iter()
            .map(|s| (&s.0, s.1))
            .collect::<Vec<_>>(),
        after_resume.iter().map(|s| (&s.0, s.1)).collect::<Vec<_>>(),
        "the resumed controller wrote nothing"
    );
    for (name, _, _, epochs) in &after_resume {
        if let Some((_, _, _, old)) = before_pause.iter().find(|s| &s.0 == name) {
            for (a, b) in old.iter().zip(epochs) {
                assert!(b >= a, "{name}: a leader epoch went back ({a} → {b})");
            }
        }
    }
    let paused_log = std::fs::read_to_string(&paused.log)?;
    assert!(
        paused_log.contains("controller term ended") || paused_log.contains("Lease is lost"),
        "the paused controller stepped down:\n{paused_log}"
    );
    brokers.insert(paused.node, paused);

    // The killed broker restarts on its data and rejoins.
    brokers.insert(
        dead.node,
        spawn(&bin, &ns.name, dead.node, ports[dead.node as usize], &dir)?,
    );
    until("all three back", Duration::from_secs(60), || {
        let (ids, _, parts) = view(&last_bootstrap, "orders")?;
        Ok((ids == all && parts.values().all(|l| *l >= 0)).then_some(()))
    })
    .await
    .with_context(|| logs(&brokers))?;
    let consumed = kcat(
        &["-C", "-b", &last_bootstrap, "-t", "orders", "-e", "-q"],
        b"",
    )?;
    assert_eq!(
        String::from_utf8(consumed)?.lines().count(),
        12,
        "every record back"
    );

    // The API server stopped (SIGSTOP) for 30 s while a client produces to
    // and consumes from every partition: nothing fails, nothing is lost;
    // metadata changes wait, and resume once it is back.
    let apiserver: i32 = std::fs::read_to_string(paths::state_dir().join("pids/kube-apiserver"))?
        .trim()
        .parse()?;
    unsafe { libc::kill(apiserver, libc::SIGSTOP) };
    let resume = Resume(apiserver);
    let outage = Instant::now();
    let mut sent = 0;
    while outage.elapsed() < Duration::from_secs(30) {
        let p = (sent % 12).to_string();
        kcat(
            &[
                "-P",
                "-b",
                &last_bootstrap,
                "-t",
                "orders",
                "-p",
                &p,
                "-X",
                "message.timeout.ms=10000",
            ],
            format!("outage-{sent}\n").as_bytes(),
        )
        .with_context(|| format!("producing during the outage\n{}", logs(&brokers)))?;
        sent += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let consumed = kcat(
        &["-C", "-b", &last_bootstrap, "-t", "orders", "-e", "-q"],
        b"",
    )?;
    assert_eq!(
        String::from_utf8(consumed)?.lines().count(),
        12 + sent,
        "everything produced during the outage is consumed"
    );
    drop(resume);
    eprintln!("produced and consumed {sent} records while the API server was stopped for 30 s");
    kcat(
        &["-P", "-b", &last_bootstrap, "-t", "after-outage", "-p", "0"],
        b"z\n",
    )?;
    until(
        "a topic created after the outage",
        Duration::from_secs(60),
        || Ok((view(&last_bootstrap, "after-outage")?.2.len() == 12).then_some(())),
    )
    .await
    .with_context(|| logs(&brokers))?;

    // A consumer group reads and commits (kcat -G: the group's coordinator
    // is the leader of its __consumer_offsets partition, on any broker).
    let group_read = |bootstrap: &str| -> Result<usize> {
        let out = kcat(
            &[
                "-b",
                bootstrap,
                "-G",
                "readers",
                "-X",
                "auto.offset.reset=earliest",
                "-e",
                "-q",
                "after-outage",
            ],
            b"",
        )?;
        Ok(String::from_utf8(out)?.lines().count())
    };
    assert_eq!(
        group_read(&last_bootstrap)?,
        1,
        "the group reads the one record"
    );
    assert_eq!(group_read(&last_bootstrap)?, 0, "and has committed it");

    // A topic's object edited by hand into something invalid (a leader
    // that is not a replica; the schema cannot see that): the next
    // controller term reports it (log and Event), leaves it as it is, and
    // no broker deletes that topic's data.
    let shards_api = ns.api::<MetadataShard>();
    let mut broken = shards_api
        .list(&ListParams::default().labels("moldau.io/shard=topic"))
        .await?
        .items
        .into_iter()
        .find(|s| s.spec.topic.as_ref().is_some_and(|t| t.name == "orders"))
        .context("the orders object")?;
    broken.spec.topic.as_mut().unwrap().partitions[0].leader = 99;
    let broken_name = broken.metadata.name.clone().unwrap();
    let broken = shards_api
        .replace(&broken_name, &Default::default(), &broken)
        .await?;
    let broken_version = broken.metadata.resource_version.clone();
    let on_disk = |dir: &Path| -> usize {
        (0..3)
            .map(|n| {
                std::fs::read_dir(dir.join(format!("data-{n}")))
                    .map(|d| {
                        d.filter_map(|e| e.ok())
                            .filter(|e| e.file_name().to_string_lossy().starts_with("orders-"))
                            .count()
                    })
                    .unwrap_or(0)
            })
            .sum()
    };
    assert_eq!(on_disk(&dir), 12, "every orders partition on some broker");

    // A clean stop (SIGTERM) of the controller releases the Lease: another
    // broker takes over sooner than the lease duration.
    let (_, current, _) = view(&last_bootstrap, "orders")?;
    let mut leaving = brokers.remove(&(current as i32)).unwrap();
    let observer = brokers.values().next().unwrap().kafka.clone();
    let stopped_at = Instant::now();
    stop(&mut leaving, libc::SIGTERM);
    let status = leaving.child.wait()?;
    assert!(status.success(), "clean exit: {status:?}");
    let log = std::fs::read_to_string(&leaving.log)?;
    assert!(log.contains("released the controller Lease"), "{log}");
    until(
        "a controller after the clean stop",
        Duration::from_secs(30),
        || {
            let (_, c, _) = view(&observer, "orders")?;
            Ok((c >= 0 && c != current).then_some(()))
        },
    )
    .await?;
    let handover = stopped_at.elapsed();
    eprintln!("controller handover after SIGTERM: {handover:?}");
    assert!(
        handover < Duration::from_millis(LEASE_MS),
        "the Lease was released, not left to expire: {handover:?}"
    );

    // The new term found the hand-edited object invalid.
    let events = until("an InvalidMetadata Event", Duration::from_secs(30), || {
        let out = ns.kubectl_ok(&["get", "events.events.k8s.io", "-o", "json"])?;
        let v: Value = serde_json::from_str(&out)?;
        let n = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                e["reason"] == "InvalidMetadata" && e["regarding"]["name"] == broken_name.as_str()
            })
            .count();
        Ok((n > 0).then_some(n))
    })
    .await?;
    assert!(events > 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = shards_api.get(&broken_name).await?;
    assert_eq!(
        still.metadata.resource_version, broken_version,
        "left as it is"
    );
    assert_eq!(on_disk(&dir), 12, "no broker deleted the topic's data");
    let refused = kcat(
        &[
            "-P",
            "-b",
            &observer,
            "-t",
            "orders",
            "-p",
            "0",
            "-X",
            "message.timeout.ms=3000",
        ],
        b"w\n",
    );
    assert!(
        refused.is_err(),
        "a topic whose object is invalid is not served"
    );

    // Fixed by hand again, then a full-cluster restart: same cluster id,
    // topic ids, assignments and records.
    let mut fixed = shards_api.get(&broken_name).await?;
    let p0 = &mut fixed.spec.topic.as_mut().unwrap().partitions[0];
    p0.leader = p0.replicas[0];
    shards_api
        .replace(&broken_name, &Default::default(), &fixed)
        .await?;
    let cluster_object = format!("{CLUSTER}-cluster");
    let before = shards_api.get(&cluster_object).await?;
    let ids_before = topic_layout(&shards_api).await?;
    brokers.insert(leaving.node, leaving);
    for b in brokers.values_mut() {
        stop(b, libc::SIGTERM);
        let _ = b.child.wait();
    }
    let nodes: Vec<i32> = brokers.keys().copied().collect();
    brokers.clear();
    for n in nodes {
        brokers.insert(n, spawn(&bin, &ns.name, n, ports[n as usize], &dir)?);
    }
    let first = brokers.values().next().unwrap().kafka.clone();
    until(
        "the whole cluster back, orders served",
        Duration::from_secs(60),
        || {
            let (ids, c, parts) = view(&first, "orders")?;
            Ok(
                (ids == all && c >= 0 && parts.len() == 12 && parts.values().all(|l| *l >= 0))
                    .then_some(()),
            )
        },
    )
    .await
    .with_context(|| logs(&brokers))?;
    let after = shards_api.get(&cluster_object).await?;
    assert_eq!(
        after
            .spec
            .cluster_record
            .as_ref()
            .map(|c| c.cluster_id.clone()),
        before
            .spec
            .cluster_record
            .as_ref()
            .map(|c| c.cluster_id.clone()),
        "same cluster id"
    );
    let ids_after = topic_layout(&shards_api).await?;
    assert_eq!(ids_after, ids_before, "same topic ids and assignments");
    assert_eq!(
        group_read(&first)?,
        0,
        "committed offsets survive the full restart"
    );
    let consumed = kcat(&["-C", "-b", &first, "-t", "orders", "-e", "-q"], b"")?;
    assert_eq!(
        String::from_utf8(consumed)?.lines().count(),
        12 + sent,
        "every record after the full restart"
    );
    Ok(())
}

/// Sends SIGCONT to the API server when dropped (also when the test fails).
struct Resume(i32);
impl Drop for Resume {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}
