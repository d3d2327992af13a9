//! `certs::ensure_cluster_certs` against the real API server of `e2e/`
//! (no operator, no pods: a KafkaCluster object and its Secrets only).
//! Shown: the first call creates the five Secrets, owned by the cluster and
//! carrying its labels; a second call with nothing due writes nothing (every
//! resourceVersion stays); a deleted `<cluster>-broker-certs` comes back
//! with a new certificate signed by the same CA; a cluster CA certificate
//! within its renewal window is renewed on the same key (the key Secret is
//! not written) and the brokers' certificate, signed by that key, is kept;
//! `operator_identity` and `clients_ca` read what was stored. And the
//! API server refuses a tls KafkaUser with a password (the CRD's CEL rule,
//! `manifests/examples/invalid/kafkauser-tls-with-password.yaml`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use moldau_e2e::{paths, TestNamespace};
use moldau_operator::certs::inspect::{cert_info, key_matches, signed_by};
use moldau_operator::certs::issue::renew_ca;
use moldau_operator::certs::{
    broker_certs_secret, clients_ca, clients_ca_cert_secret, clients_ca_key_secret,
    cluster_ca_cert_secret, cluster_ca_key_secret, cluster_ca_name, ensure_cluster_certs,
    operator_identity, operator_principal, CaPolicy, CA_CERT_KEY, CA_KEY_KEY, CLIENTS_CA_CERT_KEY,
    TLS_CERT_KEY, TLS_KEY_KEY,
};
use moldau_operator::crd::KafkaCluster;
use serde_json::json;

const DAY: Duration = Duration::from_secs(86_400);

fn secret_names(cluster: &str) -> [String; 5] {
    [
        cluster_ca_cert_secret(cluster),
        cluster_ca_key_secret(cluster),
        clients_ca_cert_secret(cluster),
        clients_ca_key_secret(cluster),
        broker_certs_secret(cluster),
    ]
}

async fn versions(api: &Api<Secret>, cluster: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for name in secret_names(cluster) {
        let s = api
            .get(&name)
            .await
            .with_context(|| format!("Secret {name}"))?;
        out.insert(name, s.metadata.resource_version.unwrap_or_default());
    }
    Ok(out)
}

async fn key_of(api: &Api<Secret>, name: &str, key: &str) -> Result<String> {
    let s = api.get(name).await?;
    let bytes = s
        .data
        .and_then(|d| d.get(key).cloned())
        .with_context(|| format!("Secret {name} has no key {key}"))?;
    Ok(String::from_utf8(bytes.0)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_certificates_are_created_kept_restored_and_renewed() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipping");
        return Ok(());
    }
    moldau_e2e::apply_repo_crds()?;
    let ns = TestNamespace::new("certs").await?;
    let clusters: Api<KafkaCluster> = ns.api();
    let secrets: Api<Secret> = ns.api();
    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "demo"},
        "spec": {"replicas": 3, "image": "moldau/broker:e2e", "storage": {"size": "1Gi"}},
    }))?;
    let kc = clusters.create(&PostParams::default(), &kc).await?;
    let uid = kc.metadata.uid.clone().context("uid")?;
    let client = ns.client.clone();
    let policy = CaPolicy::default();
    let now = SystemTime::now();

    // created
    let first = ensure_cluster_certs(&client, &kc, policy, now).await?;
    for name in secret_names("demo") {
        let s = secrets.get(&name).await?;
        let owners = s.metadata.owner_references.unwrap_or_default();
        assert!(
            owners
                .iter()
                .any(|o| o.uid == uid && o.kind == "KafkaCluster"),
            "{name} is owned by the cluster: {owners:?}"
        );
        let labels = s.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("app.kubernetes.io/instance").map(String::as_str),
            Some("demo"),
            "{name}: {labels:?}"
        );
    }
    assert_eq!(
        key_of(&secrets, &cluster_ca_cert_secret("demo"), CA_CERT_KEY).await?,
        first.cluster_ca_cert
    );
    let broker_secret = broker_certs_secret("demo");
    assert_eq!(
        key_of(&secrets, &broker_secret, TLS_CERT_KEY).await?,
        first.broker.cert
    );
    assert_eq!(
        key_of(&secrets, &broker_secret, TLS_KEY_KEY).await?,
        first.broker.key
    );
    assert_eq!(
        key_of(&secrets, &broker_secret, CA_CERT_KEY).await?,
        first.cluster_ca_cert
    );
    assert_eq!(
        key_of(&secrets, &broker_secret, CLIENTS_CA_CERT_KEY).await?,
        first.clients_ca_cert
    );
    assert!(signed_by(&first.broker.cert, &first.cluster_ca_cert));
    assert_ne!(first.cluster_ca_cert, first.clients_ca_cert);

    // nothing due: nothing written
    let before = versions(&secrets, "demo").await?;
    let second = ensure_cluster_certs(&client, &kc, policy, now + DAY).await?;
    assert_eq!(second, first);
    assert_eq!(versions(&secrets, "demo").await?, before);

    // the brokers' Secret deleted: a new certificate from the same CA
    secrets
        .delete(&broker_secret, &DeleteParams::default())
        .await?;
    let third = ensure_cluster_certs(&client, &kc, policy, now).await?;
    assert_eq!(third.cluster_ca_cert, first.cluster_ca_cert);
    assert_eq!(third.clients_ca_cert, first.clients_ca_cert);
    assert_ne!(third.broker, first.broker);
    assert_ne!(third.digest, first.digest);
    assert!(signed_by(&third.broker.cert, &first.cluster_ca_cert));
    assert_eq!(
        key_of(&secrets, &broker_secret, TLS_CERT_KEY).await?,
        third.broker.cert
    );

    // a cluster CA certificate ten days from its end: renewed on its key
    let ca_key = key_of(&secrets, &cluster_ca_key_secret("demo"), CA_KEY_KEY).await?;
    let ending = renew_ca(&cluster_ca_name("demo"), &ca_key, now - 355 * DAY, 365)?;
    let patch = json!({"data": {CA_CERT_KEY: ByteString(ending.clone().into_bytes())}});
    secrets
        .patch(
            &cluster_ca_cert_secret("demo"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let before = versions(&secrets, "demo").await?;
    let fourth = ensure_cluster_certs(&client, &kc, policy, now).await?;
    assert_ne!(fourth.cluster_ca_cert, ending);
    assert!(key_matches(&ca_key, &fourth.cluster_ca_cert));
    assert!(
        cert_info(&fourth.cluster_ca_cert)
            .map_err(anyhow::Error::msg)?
            .not_after
            > now + 364 * DAY
    );
    let after = versions(&secrets, "demo").await?;
    let key_secret = cluster_ca_key_secret("demo");
    assert_eq!(
        after[&key_secret], before[&key_secret],
        "the CA key is kept"
    );
    let cert_secret = cluster_ca_cert_secret("demo");
    assert_ne!(after[&cert_secret], before[&cert_secret]);
    // the brokers keep their certificate (same CA key), and mount the new CA
    assert_eq!(fourth.broker, third.broker);
    assert!(signed_by(&fourth.broker.cert, &fourth.cluster_ca_cert));
    assert_eq!(
        key_of(&secrets, &broker_secret, CA_CERT_KEY).await?,
        fourth.cluster_ca_cert
    );
    assert_ne!(fourth.digest, third.digest);

    // what other reconcilers read
    let id = operator_identity(&client, &kc, now).await?;
    assert_eq!(id.cluster_ca_cert, fourth.cluster_ca_cert);
    assert!(signed_by(&id.client.cert, &fourth.cluster_ca_cert));
    assert_eq!(
        format!(
            "User:{}",
            cert_info(&id.client.cert)
                .map_err(anyhow::Error::msg)?
                .subject
        ),
        operator_principal("demo")
    );
    let clients = clients_ca(&client, &ns.name, "demo").await?;
    assert_eq!(clients.cert, fourth.clients_ca_cert);
    assert!(key_matches(&clients.key, &clients.cert));
    assert!(clients_ca(&client, &ns.name, "absent").await.is_err());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_refuses_a_tls_user_with_a_password() -> Result<()> {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipping");
        return Ok(());
    }
    moldau_e2e::apply_repo_crds()?;
    let ns = TestNamespace::new("certs-cel").await?;
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/examples");
    let refused = ns.kubectl(&[
        "apply",
        "--dry-run=server",
        "-f",
        &examples
            .join("invalid/kafkauser-tls-with-password.yaml")
            .to_string_lossy(),
    ])?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("a tls user has no password"),
        "{stderr}"
    );
    ns.kubectl_ok(&[
        "apply",
        "--dry-run=server",
        "-f",
        &examples.join("kafkauser-tls.yaml").to_string_lossy(),
    ])?;
    Ok(())
}
