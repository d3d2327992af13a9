//! Brokers that advertise their pods' DNS names (`spec.advertisedAddress:
//! PodDNS`), on the network-namespace plane where cluster DNS serves them
//! ([`moldau_e2e::netns_plane`]): the operator, the brokers and the clients
//! all run in the namespace, and the clients bootstrap by the headless
//! Service's name, as a pod in the cluster would.
//!
//! Three brokers register and replicate over their names; kcat lists each at
//! `<pod>.<cluster>-brokers.<ns>.svc:9092`, produces with `acks=all` and reads
//! back; a broker pod deleted and recreated with another IP keeps its name,
//! and the records written before and after are all read through it.

use std::process::Command;

mod support;
use std::time::Duration;

use anyhow::{bail, Result};
use moldau_e2e::netns_plane::{poll_until, NetnsPlane};
use moldau_e2e::paths;
use serde_json::{json, Value};

const NS: &str = "pod-dns";
const CLUSTER: &str = "named";

fn bootstrap() -> String {
    format!("{CLUSTER}-brokers.{NS}.svc:9092")
}

fn broker_name(id: i64) -> String {
    format!("{CLUSTER}-{id}.{CLUSTER}-brokers.{NS}.svc")
}

fn kcat(plane: &NetnsPlane, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let out = match stdin {
        None => plane.exec(Command::new("kcat").args(args), Duration::from_secs(60))?,
        Some(text) => {
            // kcat reads the records from a file given on its command line.
            let file = plane.logs_dir().join("records.txt");
            std::fs::write(&file, text)?;
            let mut cmd = Command::new("kcat");
            cmd.args(args).arg(&file);
            plane.exec(&cmd, Duration::from_secs(60))?
        }
    };
    if !out.status.success() {
        bail!(
            "kcat {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The brokers kcat finds through the bootstrap name: id → advertised host:port.
fn listed_brokers(plane: &NetnsPlane) -> Result<Vec<(i64, String)>> {
    let meta: Value = serde_json::from_str(&kcat(
        plane,
        &["-b", &bootstrap(), "-L", "-J", "-m", "5"],
        None,
    )?)?;
    let mut brokers: Vec<(i64, String)> = meta["brokers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|b| {
            (
                b["id"].as_i64().unwrap_or(-1),
                b["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    brokers.sort();
    Ok(brokers)
}

fn produce(plane: &NetnsPlane, first: usize, count: usize) -> Result<()> {
    let records: String = (first..first + count)
        .map(|i| format!("record-{i}\n"))
        .collect();
    kcat(
        plane,
        &[
            "-b",
            &bootstrap(),
            "-P",
            "-t",
            "orders",
            "-X",
            "acks=all",
            "-X",
            "message.timeout.ms=30000",
            "-l",
        ],
        Some(&records),
    )?;
    Ok(())
}

fn consumed(plane: &NetnsPlane) -> Result<Vec<String>> {
    let out = kcat(
        plane,
        &[
            "-b",
            &bootstrap(),
            "-C",
            "-t",
            "orders",
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        None,
    )?;
    let mut lines: Vec<String> = out.lines().map(String::from).collect();
    lines.sort();
    Ok(lines)
}

#[test]
fn brokers_advertise_and_follow_their_pods_dns_names() -> Result<()> {
    if !paths::e2e_enabled() {
        return Ok(());
    }
    let (plane, mut operator) = support::netns::plane_with_operator(NS, "op-dns", 18080)?;

    let cluster = json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": CLUSTER, "namespace": NS},
        "spec": {
            "replicas": 3,
            "image": "moldau/broker:e2e",
            "advertisedAddress": "PodDNS",
            "storage": {"size": "1Gi", "deleteClaim": true},
            "config": {
                "default.replication.factor": "3",
                "min.insync.replicas": "2",
                "num.partitions": "3",
                "broker.heartbeat.interval.ms": "200",
                "broker.session.timeout.ms": "6000",
            },
        },
    });
    let file = plane.logs_dir().join("cluster.json");
    std::fs::write(&file, cluster.to_string())?;
    plane.kubectl_ok(&["apply", "-f", &file.to_string_lossy()])?;

    let names: Vec<(i64, String)> = (0..3)
        .map(|id| (id, format!("{}:9092", broker_name(id))))
        .collect();
    poll_until(
        "three brokers listed under their DNS names",
        Duration::from_secs(240),
        || Ok((listed_brokers(&plane).ok().as_ref() == Some(&names)).then_some(())),
    )
    .map_err(|e| {
        let log =
            std::fs::read_to_string(plane.logs_dir().join("operator.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        e.context(format!(
            "operator log tail:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    })?;

    poll_until(
        "the first records acknowledged by all replicas",
        Duration::from_secs(60),
        || Ok(produce(&plane, 0, 100).ok()),
    )?;
    let want: Vec<String> = {
        let mut v: Vec<String> = (0..100).map(|i| format!("record-{i}")).collect();
        v.sort();
        v
    };
    assert_eq!(consumed(&plane)?, want);

    // The pod comes back with another address; its name follows it, and
    // clients and the other brokers find it by that name.
    let old_ip = plane
        .pod_ip(NS, &format!("{CLUSTER}-1"))?
        .expect("named-1 has an address");
    plane.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "pod",
        &format!("{CLUSTER}-1"),
        "--wait=true",
        "--timeout=90s",
    ])?;
    let new_ip = poll_until(
        "named-1 recreated with another address",
        Duration::from_secs(120),
        || {
            Ok(plane
                .pod_ip(NS, &format!("{CLUSTER}-1"))?
                .filter(|ip| *ip != old_ip))
        },
    )?;
    poll_until(
        "named-1 listed again under its name",
        Duration::from_secs(120),
        || Ok((listed_brokers(&plane).ok().as_ref() == Some(&names)).then_some(())),
    )?;
    poll_until(
        "more records acknowledged by all replicas",
        Duration::from_secs(90),
        || Ok(produce(&plane, 100, 100).ok()),
    )?;
    let mut want: Vec<String> = (0..200).map(|i| format!("record-{i}")).collect();
    want.sort();
    assert_eq!(consumed(&plane)?, want);
    eprintln!(
        "named-1 moved from {old_ip} to {new_ip}; still {}:9092",
        broker_name(1)
    );

    let _ = operator.kill();
    let _ = operator.wait();
    Ok(())
}
