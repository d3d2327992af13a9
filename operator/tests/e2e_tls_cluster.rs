//! A secured cluster end to end (issue 38), on the network-namespace plane
//! where cluster DNS serves the brokers' names ([`moldau_e2e::netns_plane`]):
//! the operator, three brokers and the clients (confluent-kafka) all run
//! in the namespace.
//!
//! The `KafkaCluster` has a SASL_SSL listener (SCRAM-SHA-512) and an mTLS
//! listener, and ACL authorization. The operator creates the cluster and
//! clients CAs and the broker certificate, the brokers replicate over their
//! own mutual-TLS listener, and the operator manages a topic through it.
//! Then, with the CA certificate from its Secret as the clients' only trust:
//! - `alice` (SCRAM, a `KafkaUser`) writes with `acks=all` and reads back
//!   the topic her ACLs name, and is refused the one they do not;
//! - a wrong password, and a client that does not trust the cluster CA,
//!   are refused;
//! - `bob` (a `KafkaUser` with a certificate the clients CA signs) reads
//!   over mTLS and may not write;
//! - a renewed broker certificate, then a renewed cluster CA certificate
//!   (on its key), each roll the brokers one at a time while alice writes
//!   trusting the CA certificate she read first: every acknowledged record
//!   is read back once;
//! - deleting `alice` removes her credentials: she can no longer log in.

use std::process::Command;

mod support;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use base64::Engine;
use moldau_e2e::netns_plane::{poll_until, NetnsPlane};
use moldau_e2e::paths;
use moldau_operator::certs::inspect::cert_info;
use moldau_operator::certs::issue::{new_ca, renew_ca};
use serde_json::json;

const NS: &str = "tls-e2e";
const CLUSTER: &str = "secure";

/// The headless Service's name: it resolves to the brokers' pod IPs (a
/// ClusterIP Service's address is never dialed in tests) and the broker
/// certificate names it.
fn bootstrap(port: u16) -> String {
    format!("{CLUSTER}-brokers.{NS}.svc:{port}")
}

fn kubectl_json(plane: &NetnsPlane, args: &[&str]) -> Result<serde_json::Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    Ok(serde_json::from_str(&plane.kubectl_ok(&all)?)?)
}

/// A key of a Secret, decoded, once it exists.
fn secret_key(plane: &NetnsPlane, secret: &str, key: &str) -> Result<Option<String>> {
    let out = plane.kubectl(&["-n", NS, "get", "secret", secret, "-o", "json"])?;
    if !out.status.success() {
        return Ok(None);
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let Some(b64) = v["data"][key].as_str() else {
        return Ok(None);
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64)?;
    Ok(Some(String::from_utf8(bytes)?))
}

fn write_file(plane: &NetnsPlane, name: &str, text: &str) -> Result<String> {
    let path = plane.logs_dir().join(name);
    std::fs::write(&path, text)?;
    Ok(path.to_string_lossy().into_owned())
}

/// The client script (confluent-kafka from the repository's venv; see its
/// doc for why not kcat): stdout on success, else its errors.
fn client(plane: &NetnsPlane, config: &serde_json::Value, args: &[&str]) -> Result<String> {
    let out = plane.exec(&client_command(config, args), Duration::from_secs(90))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The command line of the client script.
fn client_command(config: &serde_json::Value, args: &[&str]) -> Command {
    let root = paths::e2e_dir().join("..");
    let mut cmd = Command::new(root.join(".venv/bin/python"));
    cmd.arg(root.join("operator/tests/clients/kafka_client.py"))
        .arg(config.to_string())
        .args(args);
    cmd
}

/// The broker pods' uids, by name.
fn broker_uids(plane: &NetnsPlane) -> Result<Vec<String>> {
    (0..3)
        .map(|i| {
            plane.kubectl_ok(&[
                "-n",
                NS,
                "get",
                "pod",
                &format!("{CLUSTER}-{i}"),
                "-o",
                "jsonpath={.metadata.uid}",
            ])
        })
        .collect()
}

/// Client settings of one identity.
struct Client {
    config: serde_json::Value,
}

impl Client {
    fn scram(ca: &str, user: &str, password: &str) -> Self {
        Client {
            config: json!({
                "bootstrap.servers": bootstrap(9093),
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": "SCRAM-SHA-512",
                "sasl.username": user,
                "sasl.password": password,
                "ssl.ca.location": ca,
            }),
        }
    }

    fn mtls(ca: &str, cert: &str, key: &str) -> Self {
        Client {
            config: json!({
                "bootstrap.servers": bootstrap(9094),
                "security.protocol": "SSL",
                "ssl.ca.location": ca,
                "ssl.certificate.location": cert,
                "ssl.key.location": key,
            }),
        }
    }

    fn produce(&self, plane: &NetnsPlane, topic: &str, records: &str) -> Result<()> {
        let file = write_file(plane, &format!("records-{topic}.txt"), records)?;
        client(plane, &self.config, &["produce", topic, &file])?;
        Ok(())
    }

    fn consume(
        &self,
        plane: &NetnsPlane,
        topic: &str,
        group: &str,
        count: usize,
    ) -> Result<Vec<String>> {
        let out = client(
            plane,
            &self.config,
            &["consume", topic, group, &count.to_string()],
        )?;
        let mut lines: Vec<String> = out.lines().map(String::from).collect();
        lines.sort();
        Ok(lines)
    }

    fn metadata(&self, plane: &NetnsPlane) -> Result<String> {
        client(plane, &self.config, &["metadata"])
    }
}

fn apply(plane: &NetnsPlane, name: &str, object: serde_json::Value) -> Result<()> {
    let file = write_file(plane, &format!("{name}.json"), &object.to_string())?;
    plane.kubectl_ok(&["apply", "-f", &file])?;
    Ok(())
}

fn topic(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "moldau.io/v1alpha1", "kind": "KafkaTopic",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"clusterRef": CLUSTER, "partitions": 3, "replicationFactor": 3},
    })
}

fn operator_log_tail(plane: &NetnsPlane) -> String {
    let log = std::fs::read_to_string(plane.logs_dir().join("operator.log")).unwrap_or_default();
    let tail: Vec<String> = log
        .lines()
        .rev()
        .take(20)
        .map(|l| l.chars().take(400).collect())
        .collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// Starts alice's idempotent `acks=all` producer (records `<label>-<i>`),
/// runs `trigger`, waits until every broker pod was replaced and the
/// cluster is Ready and up to date, stops the producer and checks that it
/// failed no write for good; returns the records it was told were written.
fn roll_under_load(
    plane: &NetnsPlane,
    alice: &Client,
    label: &str,
    trigger: impl FnOnce() -> Result<()>,
) -> Result<Vec<String>> {
    let stop = plane.logs_dir().join(format!("stop-producing-{label}"));
    let producer_log = plane.logs_dir().join(format!("producer-{label}.log"));
    let mut producer = plane.spawn(
        &client_command(
            &alice.config,
            &["produce-until", "orders", &stop.to_string_lossy(), label],
        ),
        &producer_log,
    )?;
    std::thread::sleep(Duration::from_secs(3));
    let before = broker_uids(plane)?;
    trigger()?;
    poll_until(
        &format!("every broker rolled ({label}) and Ready"),
        Duration::from_secs(300),
        || {
            let now = broker_uids(plane).unwrap_or_default();
            let rolled = now.len() == 3 && now.iter().zip(&before).all(|(a, b)| a != b);
            let kc = kubectl_json(plane, &["-n", NS, "get", "kafkacluster", CLUSTER])?;
            Ok((rolled
                && kc["status"]["readyReplicas"].as_i64() == Some(3)
                && kc["status"]["updatedReplicas"].as_i64() == Some(3))
            .then_some(()))
        },
    )
    .map_err(|e| e.context(format!("operator log tail:\n{}", operator_log_tail(plane))))?;
    std::fs::write(&stop, "")?;
    let status = poll_until("the producer flushed", Duration::from_secs(150), || {
        producer.try_wait().map_err(Into::into)
    })?;
    let log = std::fs::read_to_string(&producer_log)?;
    let report: serde_json::Value = log
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .map(serde_json::from_str)
        .transpose()?
        .with_context(|| format!("the producer's report:\n{log}"))?;
    assert!(status.success(), "the producer failed: {report}");
    let delivered = report["delivered"].as_u64().unwrap_or(0) as usize;
    assert_eq!(
        report["produced"].as_u64(),
        Some(delivered as u64),
        "{report}"
    );
    assert!(delivered > 100, "too few records during the roll: {report}");
    // what the client met on its own: a broker going away and coming back
    // (connections refused or reset, a name briefly unresolved), nothing
    // about credentials, certificates or authorization
    for e in report["errors"].as_array().into_iter().flatten() {
        let e = e.as_str().unwrap_or_default();
        assert!(
            ["code=_TRANSPORT", "code=_ALL_BROKERS_DOWN", "code=_RESOLVE"]
                .iter()
                .any(|c| e.contains(c)),
            "an error beyond a broker restarting: {e}"
        );
    }
    eprintln!(
        "{label}: {delivered} records acknowledged through a roll of three brokers; the client's own errors: {}",
        report["errors"]
    );
    Ok((0..delivered).map(|i| format!("{label}-{i}")).collect())
}

#[test]
fn a_tls_scram_cluster_serves_its_users_as_their_acls_say() -> Result<()> {
    if !paths::e2e_enabled() {
        return Ok(());
    }
    let (plane, mut operator) = support::netns::plane_with_operator(NS, "op-tls", 18081)?;

    apply(
        &plane,
        "cluster",
        json!({
            "apiVersion": "moldau.io/v1alpha1",
            "kind": "KafkaCluster",
            "metadata": {"name": CLUSTER, "namespace": NS},
            "spec": {
                "replicas": 3,
                "image": "moldau/broker:e2e",
                "storage": {"size": "1Gi", "deleteClaim": true},
                "listeners": [
                    {"name": "tls", "port": 9093, "tls": true, "authentication": {"type": "scram-sha-512"}},
                    {"name": "mtls", "port": 9094, "tls": true, "authentication": {"type": "tls"}},
                ],
                "authorization": {"type": "simple"},
                "config": {
                    "min.insync.replicas": "2",
                    "broker.heartbeat.interval.ms": "200",
                    "broker.session.timeout.ms": "6000",
                },
            },
        }),
    )?;
    poll_until("three TLS brokers Ready", Duration::from_secs(240), || {
        let kc = kubectl_json(&plane, &["-n", NS, "get", "kafkacluster", CLUSTER])?;
        Ok((kc["status"]["readyReplicas"].as_i64() == Some(3)).then_some(()))
    })
    .map_err(|e| e.context(format!("operator log tail:\n{}", operator_log_tail(&plane))))?;

    // the operator reaches the brokers over their mutual-TLS listener
    apply(&plane, "orders", topic("orders"))?;
    apply(&plane, "secrets", topic("secrets"))?;
    poll_until("both topics Ready", Duration::from_secs(120), || {
        let mut ready = 0;
        for t in ["orders", "secrets"] {
            let kt = kubectl_json(&plane, &["-n", NS, "get", "kafkatopic", t])?;
            let conditions = kt["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
            {
                ready += 1;
            }
        }
        Ok((ready == 2).then_some(()))
    })
    .map_err(|e| e.context(format!("operator log tail:\n{}", operator_log_tail(&plane))))?;

    let ca_pem = secret_key(&plane, &format!("{CLUSTER}-cluster-ca-cert"), "ca.crt")?
        .context("the cluster CA certificate Secret")?;
    let ca = write_file(&plane, "cluster-ca.crt", &ca_pem)?;

    apply(
        &plane,
        "alice",
        json!({
            "apiVersion": "moldau.io/v1alpha1", "kind": "KafkaUser",
            "metadata": {"name": "alice", "namespace": NS},
            "spec": {
                "clusterRef": CLUSTER,
                "authentication": {"type": "scram-sha-512"},
                "authorization": {"type": "simple", "acls": [
                    {"resource": {"type": "topic", "name": "orders"}, "operations": ["Write", "Read", "Describe"]},
                    {"resource": {"type": "group", "name": "alice-", "patternType": "prefix"}, "operations": ["Read"]},
                ]},
            },
        }),
    )?;
    apply(
        &plane,
        "bob",
        json!({
            "apiVersion": "moldau.io/v1alpha1", "kind": "KafkaUser",
            "metadata": {"name": "bob", "namespace": NS},
            "spec": {
                "clusterRef": CLUSTER,
                "authentication": {"type": "tls"},
                "authorization": {"type": "simple", "acls": [
                    {"resource": {"type": "topic", "name": "orders"}, "operations": ["Read", "Describe"]},
                    {"resource": {"type": "group", "name": "bob-", "patternType": "prefix"}, "operations": ["Read"]},
                ]},
            },
        }),
    )?;
    let password = poll_until("alice's password", Duration::from_secs(60), || {
        secret_key(&plane, "alice", "password")
    })?;
    let alice = Client::scram(&ca, "alice", &password);

    let records: String = (0..100).map(|i| format!("order-{i}\n")).collect();
    let mut last = String::new();
    poll_until(
        "alice's records acknowledged by all replicas",
        Duration::from_secs(90),
        || match alice.produce(&plane, "orders", &records) {
            Ok(()) => Ok(Some(())),
            Err(e) => {
                last = format!("{e:#}");
                Ok(None)
            }
        },
    )
    .map_err(|e| {
        let user = plane
            .kubectl_ok(&[
                "-n",
                NS,
                "get",
                "kafkauser",
                "alice",
                "-o",
                "jsonpath={.status}",
            ])
            .unwrap_or_default();
        let stored = plane
            .kubectl_ok(&[
                "-n",
                NS,
                "get",
                "secret",
                "alice",
                "-o",
                "jsonpath={.metadata.annotations}",
            ])
            .unwrap_or_default();
        let user = format!(
            "{user}\nsecret annotations: {stored}\nfingerprint of the password read: {}",
            moldau_operator::user::plan::password_fingerprint(
                moldau_operator::kafka::scram::ScramMechanism::Sha512,
                &password
            )
        );
        let brokers: String = (0..3)
            .map(|i| {
                let log = plane
                    .kubectl_ok(&["-n", NS, "logs", &format!("{CLUSTER}-{i}")])
                    .unwrap_or_default();
                let lines: Vec<String> = log
                    .lines()
                    .filter(|l| {
                        let l = l.to_ascii_lowercase();
                        l.contains("altered scram") || l.contains("warn") || l.contains("error")
                    })
                    .take(15)
                    .map(|l| l.chars().take(400).collect())
                    .collect();
                format!("broker {i}:\n{}\n", lines.join("\n"))
            })
            .collect();
        e.context(format!(
            "the last attempt: {}\nalice's status: {user}\n{brokers}",
            last.chars().take(1500).collect::<String>(),
        ))
    })?;
    let mut want: Vec<String> = (0..100).map(|i| format!("order-{i}")).collect();
    want.sort();
    assert_eq!(alice.consume(&plane, "orders", "alice-readers", 100)?, want);

    let denied = alice
        .produce(&plane, "secrets", "nope\n")
        .expect_err("alice has no ACL on secrets");
    assert!(
        format!("{denied:#}").contains("TOPIC_AUTHORIZATION_FAILED"),
        "a write without an ACL is refused by the authorizer: {denied:#}"
    );
    let wrong = Client::scram(&ca, "alice", "not-her-password");
    let refused = wrong
        .metadata(&plane)
        .expect_err("a wrong password is refused");
    assert!(
        format!("{refused:#}").contains("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
        "{refused:#}"
    );
    // a client that trusts another CA does not get past the handshake
    let foreign_ca = new_ca("foreign", std::time::SystemTime::now(), 30)?;
    let foreign = write_file(&plane, "foreign-ca.crt", &foreign_ca.cert)?;
    let untrusting = Client::scram(&foreign, "alice", &password);
    let failed = untrusting
        .metadata(&plane)
        .expect_err("the brokers' certificate is not trusted");
    assert!(
        format!("{failed:#}").contains("certificate verify failed"),
        "{failed:#}"
    );

    let bob_cert = poll_until("bob's certificate", Duration::from_secs(60), || {
        secret_key(&plane, "bob", "user.crt")
    })?;
    let bob_key = secret_key(&plane, "bob", "user.key")?.context("bob's key")?;
    let bob = Client::mtls(
        &ca,
        &write_file(&plane, "bob.crt", &bob_cert)?,
        &write_file(&plane, "bob.key", &bob_key)?,
    );
    let read = poll_until("bob reads over mTLS", Duration::from_secs(60), || {
        Ok(bob.consume(&plane, "orders", "bob-readers", 100).ok())
    })?;
    assert_eq!(read, want);
    let denied = bob
        .produce(&plane, "orders", "from-bob\n")
        .expect_err("bob may only read");
    assert!(
        format!("{denied:#}").contains("TOPIC_AUTHORIZATION_FAILED"),
        "{denied:#}"
    );

    // A renewed broker certificate (here: its Secret deleted, so the
    // operator issues a new one from the same CA) rolls the brokers one at
    // a time, while alice writes without a pause: nothing she was told was
    // written is lost, and no write fails for good.
    let mut written = want.clone();
    written.extend(roll_under_load(&plane, &alice, "leaf", || {
        plane.kubectl_ok(&[
            "-n",
            NS,
            "delete",
            "secret",
            &format!("{CLUSTER}-broker-certs"),
        ])?;
        Ok(())
    })?);
    // The cluster CA's certificate nears its end (one made ten days from
    // it, on the CA's key, stands in for a year passing): the operator
    // renews it on the same key and rolls the brokers again. alice still
    // trusts the CA certificate she read at the start, which verifies the
    // brokers all along (same subject, same key).
    written.extend(roll_under_load(&plane, &alice, "ca", || {
        let key = secret_key(&plane, &format!("{CLUSTER}-cluster-ca"), "ca.key")?
            .context("the cluster CA's key")?;
        let day = Duration::from_secs(86_400);
        let ending = renew_ca(
            &format!("{CLUSTER}-cluster-ca"),
            &key,
            std::time::SystemTime::now() - 355 * day,
            365,
        )?;
        let b64 = base64::engine::general_purpose::STANDARD.encode(ending);
        let patch = json!({"data": {"ca.crt": b64}}).to_string();
        plane.kubectl_ok(&[
            "-n",
            NS,
            "patch",
            "secret",
            &format!("{CLUSTER}-cluster-ca-cert"),
            "--type=merge",
            "-p",
            &patch,
        ])?;
        Ok(())
    })?);
    let renewed = secret_key(&plane, &format!("{CLUSTER}-cluster-ca-cert"), "ca.crt")?
        .context("the renewed CA certificate")?;
    assert_ne!(renewed, ca_pem, "the CA certificate was renewed");
    let info = cert_info(&renewed).map_err(anyhow::Error::msg)?;
    assert!(
        info.not_after > std::time::SystemTime::now() + Duration::from_secs(300 * 86_400),
        "renewed for a year"
    );
    written.sort();
    let read = alice.consume(&plane, "orders", "alice-after-rolls", written.len())?;
    assert_eq!(read, written, "every acknowledged record, once");

    plane.kubectl_ok(&[
        "-n",
        NS,
        "delete",
        "kafkauser",
        "alice",
        "--wait=true",
        "--timeout=60s",
    ])?;
    poll_until(
        "alice can no longer log in",
        Duration::from_secs(60),
        || Ok(alice.metadata(&plane).is_err().then_some(())),
    )?;

    let _ = operator.kill();
    let _ = operator.wait();
    Ok(())
}
