//! The Kubernetes edge of the CAs: reads a cluster's five certificate
//! Secrets, asks `plan` what is due, makes it with `issue`, and writes only
//! the Secrets whose data changed (server-side apply, field manager
//! `moldau-operator`, owned by the KafkaCluster, the cluster's labels), so
//! a call with nothing due writes nothing. Also reads a CA for what it
//! signs elsewhere: the operator's own client certificate (minted in
//! memory, never stored) and the clients CA that tls users' certificates
//! come from.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};

use crate::cluster::builders::{common_labels, owner_reference, Names};
use crate::context::FIELD_MANAGER;
use crate::crd::KafkaCluster;

use super::inspect::cert_info;
use super::issue::{issue_leaf, new_ca, renew_ca, IssueError, LeafSpec, Usage};
use super::plan::{
    ca_decision, digest, leaf_decision, leaf_not_after, needs_write, policy_not_after, CaPolicy,
    Decision, LeafWant,
};
use super::{
    broker_certs_secret, broker_dns_names, broker_name, clients_ca_cert_secret,
    clients_ca_key_secret, clients_ca_name, cluster_ca_cert_secret, cluster_ca_key_secret,
    cluster_ca_name, operator_issued_dn, operator_name, ClusterCerts, OperatorIdentity, Pem,
    CA_CERT_KEY, CA_KEY_KEY, CLIENTS_CA_CERT_KEY, KEYSTORE_KEY, ORGANISATION, TLS_CERT_KEY,
    TLS_KEY_KEY,
};

/// How long the operator's own client certificate is valid (it is minted
/// in memory; a caller may cache it that long, less a margin).
pub const OPERATOR_CERT_VALIDITY: Duration = Duration::from_secs(7 * 86_400);

/// Why the certificates could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The API server failed or refused.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// A Secret the call needs does not exist (yet).
    #[error("Secret {0} does not exist")]
    MissingSecret(String),
    /// A Secret lacks a key or holds something unreadable there.
    #[error("Secret {secret}, key {key}: {problem}")]
    Unreadable {
        /// `<namespace>/<name>`.
        secret: String,
        /// The data key.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// A certificate could not be made.
    #[error("issuing a certificate: {0}")]
    Issue(#[from] IssueError),
    /// The KafkaCluster object lacks what its Secrets need.
    #[error("KafkaCluster: {0}")]
    Cluster(String),
}

type Data = BTreeMap<String, Vec<u8>>;

fn data_of(s: &Secret) -> Data {
    s.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

fn text(data: Option<&Data>, key: &str) -> Option<String> {
    data?
        .get(key)
        .and_then(|b| String::from_utf8(b.clone()).ok())
}

/// The Secrets of one cluster: reads, and writes only what changed.
struct Store {
    api: Api<Secret>,
    namespace: String,
    meta: ObjectMeta,
}

impl Store {
    async fn read(&self, name: &str) -> Result<Option<Data>, CertError> {
        Ok(self.api.get_opt(name).await?.as_ref().map(data_of))
    }

    async fn write_if_changed(
        &self,
        name: &str,
        current: Option<&Data>,
        desired: BTreeMap<String, String>,
    ) -> Result<(), CertError> {
        if !needs_write(current, &desired) {
            return Ok(());
        }
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..self.meta.clone()
            },
            type_: Some("Opaque".into()),
            data: Some(
                desired
                    .into_iter()
                    .map(|(k, v)| (k, ByteString(v.into_bytes())))
                    .collect(),
            ),
            ..Default::default()
        };
        self.api
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&secret),
            )
            .await?;
        tracing::info!(secret = %format!("{}/{name}", self.namespace), "certificate Secret written");
        Ok(())
    }

    /// The CA `name` after creating or renewing what is due.
    async fn ensure_ca(
        &self,
        name: &str,
        cert_secret: &str,
        key_secret: &str,
        now: SystemTime,
        policy: CaPolicy,
    ) -> Result<Pem, CertError> {
        let cert_data = self.read(cert_secret).await?;
        let key_data = self.read(key_secret).await?;
        let cert = text(cert_data.as_ref(), CA_CERT_KEY);
        let key = text(key_data.as_ref(), CA_KEY_KEY);
        let validity = policy.normalized().validity_days;
        let ca = match ca_decision(
            &operator_issued_dn(name),
            cert.as_deref(),
            key.as_deref(),
            now,
            policy,
        ) {
            Decision::Keep => Pem {
                cert: cert.unwrap_or_default(),
                key: key.unwrap_or_default(),
            },
            Decision::Create => {
                tracing::info!(ca = name, "creating a CA (new key)");
                new_ca(name, now, validity)?
            }
            Decision::Renew(reason) => {
                tracing::info!(ca = name, %reason, "renewing the CA certificate on its key");
                let key = key.unwrap_or_default();
                Pem {
                    cert: renew_ca(name, &key, now, validity)?,
                    key,
                }
            }
        };
        // the key first: a failure between the two writes leaves a key whose
        // certificate the next call renews; the other order would leave a
        // certificate whose key is lost
        self.write_if_changed(
            key_secret,
            key_data.as_ref(),
            BTreeMap::from([(CA_KEY_KEY.to_string(), ca.key.clone())]),
        )
        .await?;
        self.write_if_changed(
            cert_secret,
            cert_data.as_ref(),
            BTreeMap::from([(CA_CERT_KEY.to_string(), ca.cert.clone())]),
        )
        .await?;
        Ok(ca)
    }
}

fn store(client: &kube::Client, kc: &KafkaCluster) -> Result<(Store, Names), CertError> {
    let names = Names::of(kc).map_err(|e| CertError::Cluster(e.to_string()))?;
    let owner = owner_reference(kc).map_err(|e| CertError::Cluster(e.to_string()))?;
    let store = Store {
        api: Api::namespaced(client.clone(), &names.namespace),
        namespace: names.namespace.clone(),
        meta: ObjectMeta {
            namespace: Some(names.namespace.clone()),
            labels: Some(common_labels(&names.cluster)),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
    };
    Ok((store, names))
}

fn not_after(cert: &str, secret: &str) -> Result<SystemTime, CertError> {
    cert_info(cert)
        .map(|i| i.not_after)
        .map_err(|problem| CertError::Unreadable {
            secret: secret.to_string(),
            key: CA_CERT_KEY.into(),
            problem,
        })
}

/// Reads the five Secrets of `kc` (namespace = kc's), creates what is
/// missing, renews what is due, and returns what brokers mount. `policy`
/// is the cluster CA's (and the broker certificate's); the clients CA's is
/// the spec's `clientsCa`.
pub async fn ensure_cluster_certs(
    client: &kube::Client,
    kc: &KafkaCluster,
    policy: CaPolicy,
    now: SystemTime,
) -> Result<ClusterCerts, CertError> {
    let (store, names) = store(client, kc)?;
    let cluster = &names.cluster;
    let cluster_ca = store
        .ensure_ca(
            &cluster_ca_name(cluster),
            &cluster_ca_cert_secret(cluster),
            &cluster_ca_key_secret(cluster),
            now,
            policy,
        )
        .await?;
    let clients_ca = store
        .ensure_ca(
            &clients_ca_name(cluster),
            &clients_ca_cert_secret(cluster),
            &clients_ca_key_secret(cluster),
            now,
            CaPolicy::of(kc.spec.clients_ca.as_ref()),
        )
        .await?;

    let secret = broker_certs_secret(cluster);
    let data = store.read(&secret).await?;
    let current = text(data.as_ref(), TLS_CERT_KEY)
        .zip(text(data.as_ref(), TLS_KEY_KEY))
        .map(|(cert, key)| Pem { cert, key });
    let dns_names = broker_dns_names(cluster, &names.namespace);
    let dn = operator_issued_dn(&broker_name(cluster));
    let want = LeafWant {
        dn: &dn,
        dns_names: &dns_names,
        ca_cert: &cluster_ca.cert,
    };
    let broker = match (leaf_decision(current.as_ref(), want, now, policy), current) {
        (Decision::Keep, Some(current)) => current,
        (decision, _) => {
            tracing::info!(cluster = %cluster, ?decision, "issuing the brokers' certificate");
            let ca_end = not_after(&cluster_ca.cert, &cluster_ca_cert_secret(cluster))?;
            issue_leaf(
                &cluster_ca_name(cluster),
                &cluster_ca.key,
                &LeafSpec {
                    common_name: broker_name(cluster),
                    organisation: Some(ORGANISATION.into()),
                    dns_names,
                    usage: Usage::ServerAndClient,
                    not_after: policy_not_after(now, policy, ca_end),
                },
                now,
            )?
        }
    };
    store
        .write_if_changed(
            &secret,
            data.as_ref(),
            BTreeMap::from([
                (TLS_CERT_KEY.to_string(), broker.cert.clone()),
                (TLS_KEY_KEY.to_string(), broker.key.clone()),
                (
                    KEYSTORE_KEY.to_string(),
                    format!("{}{}", broker.key, broker.cert),
                ),
                (CA_CERT_KEY.to_string(), cluster_ca.cert.clone()),
                (CLIENTS_CA_CERT_KEY.to_string(), clients_ca.cert.clone()),
            ]),
        )
        .await?;
    Ok(ClusterCerts {
        digest: digest(&cluster_ca.cert, &clients_ca.cert, &broker.cert),
        cluster_ca_cert: cluster_ca.cert,
        clients_ca_cert: clients_ca.cert,
        broker,
    })
}

/// One key of a stored Secret, as text.
async fn read_text(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<String, CertError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let full = format!("{namespace}/{name}");
    let data = api
        .get_opt(name)
        .await?
        .map(|s| data_of(&s))
        .ok_or_else(|| CertError::MissingSecret(full.clone()))?;
    text(Some(&data), key).ok_or(CertError::Unreadable {
        secret: full,
        key: key.into(),
        problem: "missing or not UTF-8".into(),
    })
}

/// A CA as stored: its certificate and key.
async fn read_ca(
    client: &kube::Client,
    namespace: &str,
    cert_secret: &str,
    key_secret: &str,
) -> Result<Pem, CertError> {
    Ok(Pem {
        cert: read_text(client, namespace, cert_secret, CA_CERT_KEY).await?,
        key: read_text(client, namespace, key_secret, CA_KEY_KEY).await?,
    })
}

/// The cluster CA certificate of `cluster` (PEM), as stored: what a client
/// needs to trust the brokers.
pub async fn cluster_ca_cert(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<String, CertError> {
    read_text(
        client,
        namespace,
        &cluster_ca_cert_secret(cluster),
        CA_CERT_KEY,
    )
    .await
}

/// Mints (in memory, never stored) a client certificate for the operator
/// signed by the cluster CA read from its Secrets, valid
/// [`OPERATOR_CERT_VALIDITY`] (never past the CA's end). Err when the CA
/// Secrets do not exist yet.
pub async fn operator_identity(
    client: &kube::Client,
    kc: &KafkaCluster,
    now: SystemTime,
) -> Result<OperatorIdentity, CertError> {
    let names = Names::of(kc).map_err(|e| CertError::Cluster(e.to_string()))?;
    let cluster = &names.cluster;
    let cert_secret = cluster_ca_cert_secret(cluster);
    let ca = read_ca(
        client,
        &names.namespace,
        &cert_secret,
        &cluster_ca_key_secret(cluster),
    )
    .await?;
    let ca_end = not_after(&ca.cert, &format!("{}/{cert_secret}", names.namespace))?;
    let client_pem = issue_leaf(
        &cluster_ca_name(cluster),
        &ca.key,
        &LeafSpec {
            common_name: operator_name(cluster),
            organisation: Some(ORGANISATION.into()),
            dns_names: Vec::new(),
            usage: Usage::Client,
            not_after: leaf_not_after(now, OPERATOR_CERT_VALIDITY, ca_end),
        },
        now,
    )?;
    Ok(OperatorIdentity {
        cluster_ca_cert: ca.cert,
        client: client_pem,
    })
}

/// The clients CA of `cluster` in `namespace` (certificate and key): what
/// signs tls users' certificates. Err when its Secrets do not exist yet.
pub async fn clients_ca(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
) -> Result<Pem, CertError> {
    read_ca(
        client,
        namespace,
        &clients_ca_cert_secret(cluster),
        &clients_ca_key_secret(cluster),
    )
    .await
}
